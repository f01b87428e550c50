// tests/data/test_nprand.c: data/nprand.h against numpy 1.24's legacy RandomState (values
// printed by numpy once and kept here: no Python needed), and Megatron-Core's split bounds
// (data_split_bounds_megatron) against its get_split_indices arithmetic.
#include "data/nprand.h"
#include "data/sampler.h"
#include "tests/testing.h"

#include <stdint.h>
#include <string.h>

int main(void) {
    NpRandom r;
    // numpy.random.RandomState(1234)._bit_generator.random_raw(3)
    np_random_seed(&r, 1234);
    EXPECT_EQ_INT((int64_t)np_random_u32(&r), 822569775);
    EXPECT_EQ_INT((int64_t)np_random_u32(&r), 2137449171);
    EXPECT_EQ_INT((int64_t)np_random_u32(&r), 2671936806);
    // a = numpy.arange(10, dtype=int32); RandomState(4321).shuffle(a)
    int32_t a[10];
    const int32_t want10[10] = {0, 5, 6, 1, 3, 7, 4, 9, 8, 2};
    for (int i = 0; i < 10; i++) a[i] = i;
    np_random_seed(&r, 4321);
    np_random_shuffle_i32(&r, a, 10);
    for (int i = 0; i < 10; i++) EXPECT_EQ_INT(a[i], want10[i]);
    // a = numpy.arange(1000); RandomState(7).shuffle(a): its first six, sum of a[i] * i
    static int64_t b[1000];
    for (int i = 0; i < 1000; i++) b[i] = i;
    np_random_seed(&r, 7);
    np_random_shuffle_i64(&r, b, 1000);
    const int64_t want6[6] = {778, 334, 271, 802, 216, 408};
    int64_t dot = 0;
    for (int i = 0; i < 1000; i++) dot += b[i] * i;
    for (int i = 0; i < 6; i++) EXPECT_EQ_INT(b[i], want6[i]);
    EXPECT_EQ_INT(dot, 246202311);
    // RandomState(99).randint(0, 2**33 + 1, size=3, dtype=int64): the same masked 64-bit draws
    np_random_seed(&r, 99);
    EXPECT_EQ_INT((int64_t)np_random_interval(&r, (uint64_t)1 << 33), 7398251555);
    EXPECT_EQ_INT((int64_t)np_random_interval(&r, (uint64_t)1 << 33), 7868157096);
    EXPECT_EQ_INT((int64_t)np_random_interval(&r, (uint64_t)1 << 33), 7447742184);
    // numpy.sum of 20 values where pairwise summation differs from a left-to-right sum
    const double v[20] = {8050029.237453802, 0.8079407897364937, 515325.561042142, 2.858013800881416e-05,
                          5.3930702381656425e-05, 383368.8807855182, 4.084732054199986e-07,
                          4.527519390244516e-09, 4.875771072716806e-05, 99.91761150650714,
                          6.523691115879877e-08, 23451.020166982395, 0.00043494755222514206,
                          9.741861932592552e-06, 0.8976776081085488, 844231.037608741, 392404.66433477815,
                          49302.301873174256, 6.76689351831066e-05, 6.080271295805607e-10};
    EXPECT(np_sum(v, 20) == 10258214.327139145, "numpy.sum: got %.17g", np_sum(v, 20));
    // Python's round: ties to even
    EXPECT(np_py_round(0.5) == 0 && np_py_round(1.5) == 2 && np_py_round(2.5) == 2 && np_py_round(2.4999999) == 2,
           "round half to even");
    // Megatron's split indices (parse_and_normalize_split, split matrix, int(round(e * n)))
    const struct { double w[3]; int64_t n, b[4]; } cases[] = {
        {{98, 1, 1}, 300, {0, 294, 297, 300}}, {{969, 30, 1}, 1000, {0, 969, 999, 1000}},
        {{90, 5, 5}, 7, {0, 6, 7, 7}}, {{1, 1, 1}, 10, {0, 3, 7, 10}}, {{98, 1, 1}, 250, {0, 245, 248, 250}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t got[4];
        data_split_bounds_megatron(cases[c].w, cases[c].n, got);
        for (int k = 0; k < 4; k++) EXPECT_EQ_INT(got[k], cases[c].b[k]);
    }
    return test_result("test_nprand");
}

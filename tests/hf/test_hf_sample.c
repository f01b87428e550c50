// tests/hf/test_hf_sample.c: the decoding step. Greedy is the argmax (lowest id on ties);
// top-k 1 and a tiny top-p are greedy too; a draw depends only on (seed, step); the
// frequencies of 20000 draws match softmax(logits / temperature), and top-k / top-p keep
// exactly the ids they should, renormalised.
#include "hf/hf_sample.h"
#include "tests/testing.h"

#include <math.h>

enum { V = 5, DRAWS = 20000 };

// Frequencies of DRAWS draws into f (V).
static void frequencies(const HfSampler *s, const float *logits, double *f) {
    for (int i = 0; i < V; i++) f[i] = 0;
    for (int d = 0; d < DRAWS; d++) f[hf_sample(s, logits, V, (uint64_t)d)] += 1.0 / DRAWS;
}

int main(void) {
    const float logits[V] = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f};  // ids 1 and 3 tie
    HfSampler greedy = {0, 0, 1, 7};
    EXPECT_EQ_INT(hf_sample(&greedy, logits, V, 0), 1);
    HfSampler k1 = {1.0, 1, 1, 7}, p0 = {1.0, 0, 1e-6, 7};
    for (uint64_t step = 0; step < 50; step++) {
        EXPECT_EQ_INT(hf_sample(&k1, logits, V, step), 1);
        EXPECT_EQ_INT(hf_sample(&p0, logits, V, step), 1);
    }
    HfSampler t = {0.7, 0, 1, 11}, t2 = {0.7, 0, 1, 12};
    int same = 1, differ = 0;
    for (uint64_t step = 0; step < 50; step++) {
        same &= hf_sample(&t, logits, V, step) == hf_sample(&t, logits, V, step);
        differ |= hf_sample(&t, logits, V, step) != hf_sample(&t2, logits, V, step);
    }
    EXPECT(same && differ, "a draw depends on (seed, step) only: same %d, seeds differ %d", same, differ);
    double f[V], z = 0, p[V];
    for (int i = 0; i < V; i++) z += exp(logits[i] / 0.7);
    for (int i = 0; i < V; i++) p[i] = exp(logits[i] / 0.7) / z;
    frequencies(&t, logits, f);
    for (int i = 0; i < V; i++) EXPECT_NEAR(f[i], p[i], 0.015);
    // top-k 3: ids 1, 3 (tied, lower id first) and 2, renormalised
    HfSampler k3 = {0.7, 3, 1, 13};
    frequencies(&k3, logits, f);
    double z3 = p[1] + p[3] + p[2];
    EXPECT(f[0] == 0 && f[4] == 0, "top-k 3 drew ids 0 or 4: %g %g", f[0], f[4]);
    for (int i = 1; i <= 3; i++) EXPECT_NEAR(f[i], p[i] / z3, 0.015);
    // top-p: ids 1 and 3 hold p[1] + p[3]; asking slightly less keeps exactly those two
    HfSampler tp = {0.7, 0, p[1] + p[3] - 1e-3, 14};
    frequencies(&tp, logits, f);
    EXPECT(f[0] == 0 && f[2] == 0 && f[4] == 0, "top-p drew outside the nucleus");
    EXPECT_NEAR(f[1], 0.5, 0.015);
    return test_result("test_hf_sample");
}

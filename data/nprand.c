// data/nprand.c: numpy's legacy RandomState (MT19937) draws and shuffles (see nprand.h).
#include "nprand.h"

#include <math.h>

#define MT_M 397
#define MATRIX_A 0x9908b0dfu
#define UPPER_MASK 0x80000000u
#define LOWER_MASK 0x7fffffffu

void np_random_seed(NpRandom *r, uint32_t seed) {
    for (int i = 0; i < NP_MT_N; i++) {
        r->key[i] = seed;
        seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)i + 1u;
    }
    r->pos = NP_MT_N;
}

// Regenerates the whole state (MT19937's twist).
static void twist(NpRandom *r) {
    uint32_t *k = r->key, y;
    int i;
    for (i = 0; i < NP_MT_N - MT_M; i++) {
        y = (k[i] & UPPER_MASK) | (k[i + 1] & LOWER_MASK);
        k[i] = k[i + MT_M] ^ (y >> 1) ^ (-(y & 1u) & MATRIX_A);
    }
    for (; i < NP_MT_N - 1; i++) {
        y = (k[i] & UPPER_MASK) | (k[i + 1] & LOWER_MASK);
        k[i] = k[i + (MT_M - NP_MT_N)] ^ (y >> 1) ^ (-(y & 1u) & MATRIX_A);
    }
    y = (k[NP_MT_N - 1] & UPPER_MASK) | (k[0] & LOWER_MASK);
    k[NP_MT_N - 1] = k[MT_M - 1] ^ (y >> 1) ^ (-(y & 1u) & MATRIX_A);
    r->pos = 0;
}

uint32_t np_random_u32(NpRandom *r) {
    if (r->pos == NP_MT_N) twist(r);
    uint32_t y = r->key[r->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

uint64_t np_random_interval(NpRandom *r, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    for (int s = 1; s < 64; s <<= 1) mask |= mask >> s;
    if (max <= 0xffffffffu) {
        while ((v = (np_random_u32(r) & mask)) > max) {}
    } else {
        do {
            uint64_t hi = np_random_u32(r);
            v = ((hi << 32) | np_random_u32(r)) & mask;
        } while (v > max);
    }
    return v;
}

void np_random_shuffle_i32(NpRandom *r, int32_t *a, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)np_random_interval(r, (uint64_t)i);
        int32_t t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

void np_random_shuffle_i64(NpRandom *r, int64_t *a, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)np_random_interval(r, (uint64_t)i);
        int64_t t = a[i]; a[i] = a[j]; a[j] = t;
    }
}

double np_sum(const double *a, int64_t n) {
    if (n < 8) {
        double s = 0.;
        for (int64_t i = 0; i < n; i++) s += a[i];
        return s;
    }
    if (n <= 128) {
        double q[8];
        for (int j = 0; j < 8; j++) q[j] = a[j];
        int64_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) q[j] += a[i + j];
        double s = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
        for (; i < n; i++) s += a[i];
        return s;
    }
    int64_t h = n / 2;
    h -= h % 8;
    return np_sum(a, h) + np_sum(a + h, n - h);
}

void np_normalize(double *w, int n) {
    double s = np_sum(w, n);
    for (int k = 0; k < n; k++) w[k] /= s;
}

int64_t np_py_round(double x) {
    return (int64_t)nearbyint(x);  // the default rounding mode: to nearest, ties to even
}

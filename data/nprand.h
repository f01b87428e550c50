// data/nprand.h: the random numbers of numpy's legacy numpy.random.RandomState, exactly, so
// that megac can rebuild Megatron-Core's dataset indices (data/order_megatron.c) bit for bit.
//
//   seeding   RandomState(seed) for an integer seed in [0, 2^32): MT19937's init_genrand
//             (key[0] = seed, key[i] = 1812433253 * (key[i-1] ^ key[i-1] >> 30) + i)
//   words     MT19937's tempered 32-bit outputs; a 64-bit word is (first << 32) | second
//   interval  a uniform integer in [0, max]: mask = the smallest 2^k - 1 >= max, draw words
//             (32-bit when max < 2^32, else 64-bit) and keep the first (word & mask) <= max
//   shuffle   RandomState.shuffle of a 1-D array: for i = n-1 down to 1, swap a[i] with
//             a[interval(i)]
// Plus two of numpy's and Python's arithmetic rules the index building depends on:
// numpy.sum's pairwise summation of float64 and Python's round() (half to even).
#pragma once
#include <stdint.h>

enum { NP_MT_N = 624 };

typedef struct {
    uint32_t key[NP_MT_N];
    int pos;
} NpRandom;

// r = numpy.random.RandomState(seed). Never fails.
void np_random_seed(NpRandom *r, uint32_t seed);
// The next 32-bit output of the generator.
uint32_t np_random_u32(NpRandom *r);
// A uniform integer in [0, max] drawn as numpy's random_interval (masked rejection).
uint64_t np_random_interval(NpRandom *r, uint64_t max);
// r.shuffle(a) for a 1-D array a[0..n) of int32 / int64 (the same draws for either type).
void np_random_shuffle_i32(NpRandom *r, int32_t *a, int64_t n);
void np_random_shuffle_i64(NpRandom *r, int64_t *a, int64_t n);

// numpy.sum(a[0..n)) of float64: numpy's pairwise summation (blocks of 8 accumulators). Pure.
double np_sum(const double *a, int64_t n);
// numpy's normalize of Megatron-Core (datasets/utils.py): w[k] = w[k] / numpy.sum(w). Pure.
void np_normalize(double *w, int n);
// Python's int(round(x)): the nearest integer, ties to the even one. Pure.
int64_t np_py_round(double x);

// core/philox.c: Philox-4x32 with 10 rounds; Box-Muller on top for normals.
#include "philox.h"
#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void core_philox4x32(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t c[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)stream,
                     (uint32_t)(stream >> 32)};
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c[0], &hi0, &lo0);
        mulhilo(PHILOX_M1, c[2], &hi1, &lo1);
        uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

// 53-bit uniform in (0, 1) from two words; never 0, so log() is safe.
static double to_unit(uint32_t a, uint32_t b) {
    uint64_t x = ((uint64_t)a << 21) ^ (uint64_t)(b >> 11);
    x &= (1ull << 53) - 1;
    return ((double)x + 0.5) / 9007199254740992.0;
}

double core_philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t r[4];
    core_philox4x32(seed, stream, index, r);
    double u1 = to_unit(r[0], r[1]), u2 = to_unit(r[2], r[3]);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

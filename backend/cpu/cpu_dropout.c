// backend/cpu/cpu_dropout.c: dropout of a (rows, C) tensor, the mask a pure function of the
// element's global index (dropout.h); the backward is the same call on the gradient.
#include "cpu_backend.h"

#include <string.h>  // defines: memmove

// out (N, C) = inp * dropout_factor(d, dropout_row(d, r) * C + c); out may alias inp.
void cpu_dropout(Backend *be, void *out, const void *inp, const BackendDropout *d, int N, int C) {
    float *y = out;
    const float *x = inp;
    if (!d || d->threshold == 0) {  // identity (same bits)
        if (y != x) memmove(y, x, (size_t)N * C * sizeof(float));
        return;
    }
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > 65536)
    for (int r = 0; r < N; r++) {
        uint64_t idx = (uint64_t)dropout_row(d, r) * (uint64_t)C;
        for (int c = 0; c < C; c++)
            y[(size_t)r * C + c] = x[(size_t)r * C + c] * dropout_factor(d, idx + (uint64_t)c);
    }
}

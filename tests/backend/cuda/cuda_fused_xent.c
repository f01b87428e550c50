// tests/backend/cuda/cuda_fused_xent.c: part of test_cuda_fused (helpers: cuda_half.h): the
// one-pass cross-entropy statistics. xent_stats against the CPU (fp32 outputs: the row max
// exact, sumexp within TOL_F32 of the CPU's from the same rounded logits), the CPU's
// xent_stats against a two-pass double reference (max exact, sum of exponentials from it,
// target logit exact), and the sharded path (shard stats,
// xent_rescale onto the max over shards, sums added) against the one-shard loss.
#include "tests/backend/cuda/cuda_half.h"

#include <float.h>
#include <stdio.h>

// Logits (N, V_local) with columns [V_valid, V_local) padding; targets in [0, V_valid + 3)
// (some outside the shard when vocab_start is 0 and V_valid is small: none here).
static void check_stats(Half *h, int N, int V_local, int V_valid) {
    size_t nv = (size_t)N * V_local;
    float *l = test_floats(nv);
    rng_fill(&h->rng, l, nv, -6, 6);
    if (h->dt != BACKEND_F32) half_round(h, l, nv, h->dt);
    int *tg = malloc(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) tg[i] = (int)rng_uniform(&h->rng, 0, V_valid);
    Backend *cpu = h->cpu, *be = h->be;
    float *r = test_floats(3 * (size_t)N), *u = test_floats(3 * (size_t)N), *g = test_floats(3 * (size_t)N);
    cpu->ops->xent_stats(cpu, r, r + N, r + 2 * N, l, tg, N, V_local, V_valid, 0);
    for (int i = 0; i < N; i++) {  // the two-pass reference: max, then sum of exp from it
        const float *row = l + (size_t)i * V_local;
        float m = -FLT_MAX;
        double s = 0.0;
        for (int j = 0; j < V_valid; j++) m = row[j] > m ? row[j] : m;
        for (int j = 0; j < V_valid; j++) s += exp((double)row[j] - m);
        u[i] = m, u[N + i] = (float)s, u[2 * N + i] = row[tg[i]];
    }
    EXPECT(!memcmp(r, u, 4 * (size_t)N), "cpu xent_stats rowmax is not the row max");
    HALF_CLOSE(h, r + N, u + N, N, TOL_F32, "cpu xent_stats sumexp vs double reference");
    EXPECT(!memcmp(r + 2 * N, u + 2 * N, 4 * (size_t)N), "cpu xent_stats tgt is not the target logit");
    float *d = half_poisoned(h, 3 * (size_t)N, BACKEND_F32);
    be->ops->xent_stats(be, d, d + N, d + 2 * N, half_up(h, l, nv), half_up_int(h, tg, N), N,
                        V_local, V_valid, 0);
    half_down_f32(h, g, d, 3 * (size_t)N);
    half_release(h);
    HALF_CLOSE(h, g, r, N, 0.0, "xent_stats rowmax (exact)");
    HALF_CLOSE(h, g + N, r + N, N, TOL_F32, "xent_stats sumexp (fp32)");
    HALF_CLOSE(h, g + 2 * N, r + 2 * N, N, 0.0, "xent_stats tgt (exact)");
    // two shards of the valid columns: [0, k) and [k, V_valid), on the device
    int k = V_valid / 3;
    float *s0 = test_floats(3 * (size_t)N), *s1 = test_floats(3 * (size_t)N), *want = test_floats(N);
    float *shard[2] = {s0, s1};
    for (int p = 0; p < 2; p++) {
        float *ds = half_poisoned(h, 3 * (size_t)N, BACKEND_F32);
        const char *base = half_up(h, l, nv);
        size_t esz = backend_dtype_size(h->dt);
        be->ops->xent_stats(be, ds, ds + N, ds + 2 * N, base + (p ? (size_t)k * esz : 0),
                            half_up_int(h, tg, N), N, V_local, p ? V_valid - k : k, p ? k : 0);
        half_down_f32(h, shard[p], ds, 3 * (size_t)N);
        half_release(h);
    }
    float *mx = test_floats(N), *se = test_floats(2 * (size_t)N), *loss = test_floats(N);
    for (int i = 0; i < N; i++) mx[i] = s0[i] > s1[i] ? s0[i] : s1[i];  // all-reduce MAX
    float *dse = half_up_f32(h, s0 + N, N), *dse1 = half_up_f32(h, s1 + N, N);
    float *dmx = half_up_f32(h, mx, N);
    be->ops->xent_rescale(be, dse, half_up_f32(h, s0, N), dmx, N);
    be->ops->xent_rescale(be, dse1, half_up_f32(h, s1, N), dmx, N);
    half_down_f32(h, se, dse, N), half_down_f32(h, se + N, dse1, N);
    half_release(h);
    for (int i = 0; i < N; i++) {  // all-reduce SUM, then xent_loss's formula (in double here)
        loss[i] = (float)(log((double)se[i] + se[N + i]) + mx[i] - (s0[2 * N + i] + s1[2 * N + i]));
        want[i] = (float)(log((double)r[N + i]) + r[i] - r[2 * N + i]);
    }
    HALF_CLOSE(h, loss, want, N, TOL_F32, "xent_stats + xent_rescale over 2 shards: loss");
    free(l), free(tg), free(r), free(u), free(g), free(s0), free(s1), free(want), free(mx), free(se), free(loss);
}

int cuda_fused_xent(Half *h) {
    int before = test_failures_;
    check_stats(h, 37, 256, 250);
    if (!h->quick) check_stats(h, 5, 3000, 2999);  // rows longer than a block
    return test_failures_ - before;
}

// bench/bench_ops.c: where a training step's time goes on the CPU backend. Runs the ops of
// one forward + backward + optimizer step of the `medium` GPT (L=6, C=384, NH=6, T=256,
// B=4, V given: 50257 padded to 50304 by default, 256 as bench_train's `medium`; weight-tied
// LM head) in the model's order, timing each call,
// so the costs of switching between OpenMP regions and BLAS threads are included. With
// dropout p > 0: on the attention probabilities, and the (N, C) op at Megatron's hidden places
// (embeddings, attention and MLP outputs; forward and backward), as the model runs them.
#include "bench.h"
#include "core/check.h"
#include "core/timer.h"

#include <stdio.h>
#include <stdlib.h>

enum { L = 6, C = 384, NH = 6, T = 256, B = 4, N = B * T };

typedef enum {
    OP_MM_FWD, OP_MM_BWD, OP_LM_FWD, OP_LM_BWD, OP_ATT_FWD, OP_ATT_BWD, OP_LN_FWD, OP_LN_BWD,
    OP_GELU_FWD, OP_GELU_BWD, OP_ADD, OP_EMB_FWD, OP_EMB_BWD, OP_XENT_FWD, OP_XENT_BWD,
    OP_ADAMW, OP_NORM, OP_DROP, NOPS
} OpId;

static const char *OP_NAMES[NOPS] = {
    "matmul fwd (layers)", "matmul bwd (layers)", "lm head fwd", "lm head bwd",
    "attention fwd", "attention bwd", "layernorm fwd", "layernorm bwd", "fc + gelu fwd (fused)",
    "fc-proj bwd + gelu' (fused)",
    "add (residual)", "embedding+position fwd", "embedding+position bwd",
    "xent stats+loss", "xent bwd", "adamw (all params)", "sum_squares (grad norm)",
    "dropout (hidden, N x C)"};

typedef struct {
    double secs[NOPS], flops[NOPS];
    int calls[NOPS];
} OpStats;

#define TIMED(st, op, fl, call)                 \
    do {                                        \
        double t0_ = core_now();                \
        call;                                   \
        (st)->secs[op] += core_now() - t0_;     \
        (st)->flops[op] += (fl);                \
        (st)->calls[op]++;                      \
    } while (0)

// One layer's weights (shared by all L layers: the values do not matter for timing).
typedef struct {
    float *ln_w, *ln_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *fc_w, *fc_b, *fcp_w, *fcp_b;
} Layer;

static float *buf(Backend *be, size_t n, unsigned seed) {
    float *p = be->ops->alloc(be, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {  // small values in [-0.05, 0.05]
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
    }
    return p;
}

static void layer_init(Backend *be, Layer *w, unsigned s) {
    w->ln_w = buf(be, C, s + 1), w->ln_b = buf(be, C, s + 2);
    w->qkv_w = buf(be, 3 * C * C, s + 3), w->qkv_b = buf(be, 3 * C, s + 4);
    w->proj_w = buf(be, C * C, s + 5), w->proj_b = buf(be, C, s + 6);
    w->fc_w = buf(be, 4 * C * C, s + 7), w->fc_b = buf(be, 4 * C, s + 8);
    w->fcp_w = buf(be, 4 * C * C, s + 9), w->fcp_b = buf(be, C, s + 10);
}

static double mm_flops(int oc, int c) { return 2.0 * N * c * oc; }

// One step: embeddings, L layers forward, LM head + cross-entropy, L layers backward,
// AdamW on every parameter (flat buffers of the medium model's size, one segment: seg).
// dd: dropout (NULL: none).
static void run_step(Backend *be, OpStats *st, Layer *w, Layer *g, float **a, float **d,
                     int *tokens, float *wte, float *dwte, float *wpe, float *dwpe,
                     float *logits, float *opt[4], const BackendSegment *seg, size_t nparams,
                     int V, int VP, int flash, const BackendDropout *dd) {
    const BackendOps *o = be->ops;
    float *x = a[0], *ln = a[1], *mean = a[2], *rstd = a[3], *qkv = a[4], *att = a[5];
    float *y = a[6], *h = a[7], *hg = a[8], *xent = a[9];
    float *dx = d[0], *dln = d[1], *dqkv = d[4], *datt = d[5], *dy = d[6], *dh = d[7];
    double attf = 2.0 * 2.0 * B * NH * (double)T * T * (C / NH);
    TIMED(st, OP_EMB_FWD, 0, (o->embedding_forward(be, x, tokens, wte, N, C, 0, VP),
                              o->position_forward(be, x, wpe, B, T, C, 0, NULL)));
    if (dd) TIMED(st, OP_DROP, 0, o->dropout(be, x, x, dd, N, C));
    for (int l = 0; l < L; l++) {
        TIMED(st, OP_LN_FWD, 0, o->norm_forward(be, ln, mean, rstd, x, w->ln_w, w->ln_b, N, C, BACKEND_LAYERNORM));
        TIMED(st, OP_MM_FWD, mm_flops(3 * C, C), o->matmul_forward(be, qkv, ln, w->qkv_w, w->qkv_b, N, C, 3 * C));
        if (flash)  // lse (B, NH, T) in att's buffer
            TIMED(st, OP_ATT_FWD, attf, o->flash_attention_forward(be, y, att, qkv, B, T, NH, C / NH, dd, NULL));
        else
            TIMED(st, OP_ATT_FWD, attf, o->attention_forward(be, y, att, qkv, B, T, NH, C / NH, dd, NULL));
        TIMED(st, OP_MM_FWD, mm_flops(C, C), o->matmul_forward(be, dy, y, w->proj_w, w->proj_b, N, C, C));
        if (dd) TIMED(st, OP_DROP, 0, o->dropout(be, dy, dy, dd, N, C));
        TIMED(st, OP_ADD, 0, o->add(be, x, x, dy, (size_t)N * C));
        TIMED(st, OP_LN_FWD, 0, o->norm_forward(be, ln, mean, rstd, x, w->ln_w, w->ln_b, N, C, BACKEND_LAYERNORM));
        TIMED(st, OP_GELU_FWD, mm_flops(4 * C, C), o->matmul_act_forward(be, hg, h, ln, w->fc_w, w->fc_b, N, C, 4 * C, BACKEND_ACT_GELU));
        TIMED(st, OP_MM_FWD, mm_flops(C, 4 * C), o->matmul_forward(be, dy, hg, w->fcp_w, w->fcp_b, N, 4 * C, C));
        if (dd) TIMED(st, OP_DROP, 0, o->dropout(be, dy, dy, dd, N, C));
        TIMED(st, OP_ADD, 0, o->add(be, x, x, dy, (size_t)N * C));
    }
    float *rowmax = xent, *stats = xent + N, *loss = xent + 3 * N, *dscale = xent + 4 * N;
    TIMED(st, OP_LN_FWD, 0, o->norm_forward(be, ln, mean, rstd, x, w->ln_w, w->ln_b, N, C, BACKEND_LAYERNORM));
    TIMED(st, OP_LM_FWD, mm_flops(VP, C), o->matmul_forward(be, logits, ln, wte, NULL, N, C, VP));
    TIMED(st, OP_XENT_FWD, 0, (o->xent_stats(be, rowmax, stats, stats + N, logits, tokens, N, VP, V, 0),
                               o->xent_loss(be, loss, stats, rowmax, stats + N, N)));
    TIMED(st, OP_XENT_BWD, 0, o->xent_backward(be, logits, NULL, logits, rowmax, stats, NULL, tokens,
                                               dscale, N, VP, V, 0));
    TIMED(st, OP_LM_BWD, 2 * mm_flops(VP, C), o->matmul_backward(be, dln, dwte, NULL, logits, ln, wte, N, C, VP));
    TIMED(st, OP_LN_BWD, 0, o->norm_backward(be, dx, g->ln_w, g->ln_b, dln, x, w->ln_w, mean, rstd, N, C, BACKEND_LAYERNORM));
    for (int l = L - 1; l >= 0; l--) {
        if (dd) TIMED(st, OP_DROP, 0, o->dropout(be, dy, dx, dd, N, C));  // MLP output's
        TIMED(st, OP_GELU_BWD, 2 * mm_flops(C, 4 * C), o->matmul_act_backward(be, dh, g->fcp_w, g->fcp_b, dx, hg, w->fcp_w, h, N, 4 * C, C, BACKEND_ACT_GELU));
        TIMED(st, OP_MM_BWD, 2 * mm_flops(4 * C, C), o->matmul_backward(be, dln, g->fc_w, g->fc_b, dh, ln, w->fc_w, N, C, 4 * C));
        TIMED(st, OP_LN_BWD, 0, o->norm_backward(be, dx, g->ln_w, g->ln_b, dln, x, w->ln_w, mean, rstd, N, C, BACKEND_LAYERNORM));
        if (dd) TIMED(st, OP_DROP, 0, o->dropout(be, dy, dx, dd, N, C));  // attention output's
        TIMED(st, OP_MM_BWD, 2 * mm_flops(C, C), o->matmul_backward(be, dy, g->proj_w, g->proj_b, dx, y, w->proj_w, N, C, C));
        if (flash)
            TIMED(st, OP_ATT_BWD, 2 * attf, o->flash_attention_backward(be, dqkv, datt, dy, qkv, y, att, B, T, NH, C / NH, dd, NULL));
        else
            TIMED(st, OP_ATT_BWD, 2 * attf, o->attention_backward(be, dqkv, datt, dy, qkv, att, B, T, NH, C / NH, dd));
        TIMED(st, OP_MM_BWD, 2 * mm_flops(3 * C, C), o->matmul_backward(be, dln, g->qkv_w, g->qkv_b, dqkv, ln, w->qkv_w, N, C, 3 * C));
        TIMED(st, OP_LN_BWD, 0, o->norm_backward(be, dx, g->ln_w, g->ln_b, dln, x, w->ln_w, mean, rstd, N, C, BACKEND_LAYERNORM));
    }
    if (dd) TIMED(st, OP_DROP, 0, o->dropout(be, dx, dx, dd, N, C));
    TIMED(st, OP_EMB_BWD, 0, (o->position_backward(be, dwpe, dx, B, T, C, 0, NULL),
                              o->embedding_backward(be, dwte, dx, tokens, N, C, 0, VP)));
    TIMED(st, OP_NORM, 0, o->sum_squares_multi(be, opt[1], seg, 1, nparams));
    TIMED(st, OP_ADAMW, 0, o->adamw_multi(be, opt[0], NULL, opt[1], opt[2], opt[3], seg, 1, nparams,
                                          1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1));
}

// Per op: the fastest of the timed steps (the machine may be shared: the minimum filters
// out other processes), so "step" is the sum of per-op bests.
static void print_stats(const OpStats *st, int steps, double ceiling) {
    double total = 0, gemm_s = 0, gemm_f = 0, secs[NOPS], flops[NOPS];
    int calls[NOPS];
    for (int k = 0; k < NOPS; k++) {
        secs[k] = 1e30, flops[k] = st[0].flops[k], calls[k] = st[0].calls[k];
        for (int s = 0; s < steps; s++) secs[k] = st[s].secs[k] < secs[k] ? st[s].secs[k] : secs[k];
        total += secs[k];
    }
    printf("\n%-26s %7s %9s %9s %6s %9s   (best of %d steps)\n", "op (medium, per step)", "calls",
           "ms/call", "ms/step", "%", "GFLOP/s", steps);
    for (int k = 0; k < NOPS; k++) {
        if (calls[k] == 0) continue;  // dropout off
        printf("%-26s %7d %9.3f %9.2f %5.1f%%", OP_NAMES[k], calls[k], secs[k] / calls[k] * 1e3,
               secs[k] * 1e3, 100 * secs[k] / total);
        if (flops[k] > 0) printf(" %9.1f", flops[k] / secs[k] * 1e-9);
        printf("\n");
        if (flops[k] > 0) gemm_s += secs[k], gemm_f += flops[k];
    }
    printf("step: %.1f ms (%d tokens, %.0f tokens/s); GEMM ops %.1f%% of the time at %.1f GFLOP/s\n",
           total * 1e3, N, N / total, 100 * gemm_s / total, gemm_f / gemm_s * 1e-9);
    if (ceiling > 0)
        printf("model: %.1f GFLOP/s over the whole step = %.0f%% of the sgemm ceiling (%.1f)\n",
               gemm_f / total * 1e-9, 100 * gemm_f / total * 1e-9 / ceiling, ceiling);
}

void bench_ops_medium(Backend *be, int steps, double ceiling, int V, int flash, double drop) {
    int VP = (V + 127) / 128 * 128;  // padded as the model pads it (one rank)
    Layer w, g;
    layer_init(be, &w, 100), layer_init(be, &g, 200);
    // activations a[] and their gradients d[], sized for the largest use of each slot
    size_t sizes[10] = {N * C, N * C, N, N, N * 3 * C, (size_t)B * NH * T * T, N * C,
                        N * 4 * C, N * 4 * C, 5 * N};
    float *a[10], *d[10];
    for (int k = 0; k < 10; k++) a[k] = buf(be, sizes[k], 300 + k), d[k] = buf(be, sizes[k], 400 + k);
    for (int i = 0; i < N; i++) a[9][4 * N + i] = 1.0f / N;  // dscale
    int *tokens = be->ops->alloc(be, N * sizeof(int));
    for (int i = 0; i < N; i++) tokens[i] = (int)((i * 2654435761u) % V);
    float *wte = buf(be, (size_t)VP * C, 500), *dwte = buf(be, (size_t)VP * C, 501);
    float *wpe = buf(be, T * C, 502), *dwpe = buf(be, T * C, 503);
    float *logits = buf(be, (size_t)N * VP, 504);
    size_t nparams = (size_t)L * (12 * C * C + 13 * C) + (size_t)VP * C + T * C + 2 * C;
    float *opt[4];  // params, grads, m, v (m and v start at zero, as in training)
    for (int k = 0; k < 4; k++)
        opt[k] = k < 2 ? buf(be, nparams, 600 + k) : be->ops->alloc(be, nparams * sizeof(float));
    BackendSegment *seg = be->ops->alloc(be, sizeof *seg);  // host memory (CPU backend)
    *seg = (BackendSegment){0, nparams, 1, 0};
    printf("\nmedium: L=%d C=%d NH=%d T=%d B=%d V=%d (padded %d), %.2fM parameters, %s, %s attention, dropout %g\n",
           L, C, NH, T, B, V, VP, nparams / 1e6, be->name, flash ? "fused (flash)" : "materialised", drop);

    if (steps < 1) steps = 1;
    OpStats warm = {0}, *st = core_calloc((size_t)steps, sizeof(OpStats));
    BackendDropout dd = {.key = dropout_key(1234, 1, DROPOUT_SITE_ATTN_PROBS, 0),
                         .threshold = dropout_threshold(drop), .scale = 1.0f / (1.0f - (float)drop),
                         .NH = NH};
    const BackendDropout *dp = drop > 0 ? &dd : NULL;
    run_step(be, &warm, &w, &g, a, d, tokens, wte, dwte, wpe, dwpe, logits, opt, seg, nparams, V, VP, flash, dp);
    for (int s = 0; s < steps; s++)
        run_step(be, &st[s], &w, &g, a, d, tokens, wte, dwte, wpe, dwpe, logits, opt, seg, nparams, V, VP, flash, dp);
    print_stats(st, steps, ceiling);
    free(st);

    float **all[2] = {a, d};
    for (int j = 0; j < 2; j++)
        for (int k = 0; k < 10; k++) be->ops->free(be, all[j][k]);
    float *rest[] = {wte, dwte, wpe, dwpe, logits, opt[0], opt[1], opt[2], opt[3]};
    for (size_t k = 0; k < sizeof rest / sizeof *rest; k++) be->ops->free(be, rest[k]);
    Layer *ls[2] = {&w, &g};
    for (int j = 0; j < 2; j++) {
        float *p[10] = {ls[j]->ln_w, ls[j]->ln_b, ls[j]->qkv_w, ls[j]->qkv_b, ls[j]->proj_w,
                        ls[j]->proj_b, ls[j]->fc_w, ls[j]->fc_b, ls[j]->fcp_w, ls[j]->fcp_b};
        for (int k = 0; k < 10; k++) be->ops->free(be, p[k]);
    }
    be->ops->free(be, tokens), be->ops->free(be, seg);
}

// backend/cpu/cpu_half.c: the CPU backend's ops on 16-bit activations (--bf16 / --fp16).
//
// With be->act BACKEND_BF16 or BACKEND_F16 the `void *` activations and weight copies of
// BackendOps hold 16-bit elements. Each entry here converts its 16-bit inputs to fp32 in
// the backend's scratch (exact: every 16-bit value is an fp32), calls the fp32 op, and rounds
// its 16-bit outputs back to nearest even (core/half.h, as CUDA's __float2bfloat16_rn):
// fp32 arithmetic inside every op, rounding at loads and stores only, the contract of
// backend.h. The rounding points are the CUDA backend's where it has them between ops: a
// fused op that CUDA rounds in the middle of (residual_layernorm_forward: res before the
// statistics; matmul_act_* other than GELU: pre, dinp before the act) is the unfused pair
// here; a GELU linear keeps its fp32 pre-activation as CUDA's GEMM epilogue does. Inside an
// op (attention's scores and probabilities) CUDA rounds more often than this; that is the
// difference left between the two backends' bf16 runs.
// Entries that are elementwise (add, cast, embedding_forward) and the optimizer's weight
// copy work on the 16-bit elements directly, without scratch. OpenBLAS's bf16 GEMM
// (cblas_sbgemm) is not used: Debian's OpenBLAS 0.3.21 is built without it (no symbol), so
// every product converts its operands and calls sgemm.
// The scratch grows to the largest call's need (the output layer's logits, with its input
// and weight: N*V_local + V_local*C + N*C floats) and is kept until the backend is destroyed.
#include "core/check.h"  // defines: core_fatal
#include "cpu_backend.h"

#include <stdlib.h>  // defines: free

// Floats of a scratch slice of n elements: 64-byte multiples keep every slice aligned.
static size_t pad(size_t n) { return (n + 15) / 16 * 16; }

typedef struct {
    Backend *be;
    float *cur;  // the next free float of the scratch
} Arena;

// The backend's scratch, grown to at least nfloats (its contents are not kept). Never fails.
static Arena arena(Backend *be, size_t nfloats) {
    if (nfloats * sizeof(float) > be->u.cpu.half_bytes) {
        free(be->u.cpu.half_scratch);
        be->u.cpu.half_scratch = cpu_alloc(be, nfloats * sizeof(float));
        be->u.cpu.half_bytes = nfloats * sizeof(float);
    }
    return (Arena){be, be->u.cpu.half_scratch};
}

static float *take(Arena *a, size_t n) {
    float *p = a->cur;
    a->cur += pad(n);
    return p;
}

// n elements of the 16-bit buffer p (NULL: NULL) as fp32 in the scratch.
static float *in(Arena *a, const void *p, size_t n) {
    if (!p) return NULL;
    float *f = take(a, n);
    cpu_cast(a->be, f, BACKEND_F32, p, a->be->act, n);
    return f;
}

// dst (n, be->act) = f (n) rounded.
static void out(Backend *be, void *dst, const float *f, size_t n) {
    cpu_cast(be, dst, be->act, f, BACKEND_F32, n);
}

#define N_(x) ((size_t)(x))

static void h_matmul_forward(Backend *be, void *o, const void *inp, const void *weight,
                             const void *bias, int N, int C, int OC) {
    Arena a = arena(be, pad(N_(N) * C) + pad(N_(OC) * C) + pad(OC) + pad(N_(N) * OC));
    const float *fi = in(&a, inp, N_(N) * C), *fw = in(&a, weight, N_(OC) * C);
    const float *fb = in(&a, bias, OC);
    float *fo = take(&a, N_(N) * OC);
    cpu_matmul_forward(be, fo, fi, fw, fb, N, C, OC);
    out(be, o, fo, N_(N) * OC);
}

static void h_matmul_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                              const void *dout, const void *inp, const void *weight, int N, int C,
                              int OC) {
    Arena a = arena(be, pad(N_(N) * OC) + 2 * pad(N_(N) * C) + pad(N_(OC) * C));
    const float *fd = in(&a, dout, N_(N) * OC);
    const float *fi = dweight ? in(&a, inp, N_(N) * C) : NULL;
    const float *fw = dinp ? in(&a, weight, N_(OC) * C) : NULL;
    float *fdi = dinp ? take(&a, N_(N) * C) : NULL;
    cpu_matmul_backward(be, fdi, dweight, dbias, fd, fi, fw, N, C, OC);
    if (dinp) out(be, dinp, fdi, N_(N) * C);
}

static void h_norm_forward(Backend *be, void *o, float *mean, float *rstd, const void *inp,
                           const void *weight, const void *bias, int N, int C, BackendNorm kind) {
    Arena a = arena(be, 2 * pad(N_(N) * C) + 2 * pad(C));
    const float *fi = in(&a, inp, N_(N) * C), *fw = in(&a, weight, C);
    const float *fb = kind == BACKEND_LAYERNORM ? in(&a, bias, C) : NULL;
    float *fo = take(&a, N_(N) * C);
    cpu_norm_forward(be, fo, mean, rstd, fi, fw, fb, N, C, kind);
    out(be, o, fo, N_(N) * C);
}

static void h_norm_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                            const void *dout, const void *inp, const void *weight,
                            const float *mean, const float *rstd, int N, int C, BackendNorm kind) {
    Arena a = arena(be, 3 * pad(N_(N) * C) + pad(C));
    float *fdi = in(&a, dinp, N_(N) * C);  // accumulated into
    const float *fd = in(&a, dout, N_(N) * C), *fi = in(&a, inp, N_(N) * C);
    const float *fw = in(&a, weight, C);
    cpu_norm_backward(be, fdi, dweight, dbias, fd, fi, fw, mean, rstd, N, C, kind);
    out(be, dinp, fdi, N_(N) * C);
}

// out (n) = a + b on the 16-bit elements, one rounding (out may alias a or b).
static void h_add(Backend *be, void *o, const void *x, const void *y, size_t n) {
    BackendDType t = be->act;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) cpu_store(o, t, i, cpu_load(x, t, i) + cpu_load(y, t, i));
}

// res rounded before the statistics, as CUDA's fused kernel: add, then norm_forward.
static void h_residual_layernorm_forward(Backend *be, void *res, void *ln, float *mean,
                                         float *rstd, const void *x, const void *y,
                                         const void *weight, const void *bias, int N, int C) {
    h_add(be, res, x, y, N_(N) * C);
    h_norm_forward(be, ln, mean, rstd, res, weight, bias, N, C, BACKEND_LAYERNORM);
}

static void h_act_forward(Backend *be, void *o, const void *inp, int N, int F, BackendAct act) {
    size_t ni = N_(N) * F * (backend_act_gated(act) ? 2 : 1);
    Arena a = arena(be, pad(ni) + pad(N_(N) * F));
    const float *fi = in(&a, inp, ni);
    float *fo = take(&a, N_(N) * F);
    cpu_act_forward(be, fo, fi, N, F, act);
    out(be, o, fo, N_(N) * F);
}

static void h_act_backward(Backend *be, void *dinp, const void *inp, const void *dout, int N,
                           int F, BackendAct act) {
    size_t ni = N_(N) * F * (backend_act_gated(act) ? 2 : 1);
    Arena a = arena(be, 2 * pad(ni) + pad(N_(N) * F));
    const float *fi = in(&a, inp, ni), *fd = in(&a, dout, N_(N) * F);
    float *fdi = take(&a, ni);
    cpu_act_backward(be, fdi, fi, fd, N, F, act);
    out(be, dinp, fdi, ni);
}

// GELU: pre and out from the fp32 product (CUDA's GELU epilogue); other acts: pre rounded,
// then the act of the rounded pre (CUDA's unfused pair).
static void h_matmul_act_forward(Backend *be, void *o, void *pre, const void *inp,
                                 const void *weight, const void *bias, int N, int C, int OC,
                                 BackendAct act) {
    if (act != BACKEND_ACT_GELU) {
        h_matmul_forward(be, pre, inp, weight, bias, N, C, OC);
        h_act_forward(be, o, pre, N, backend_act_gated(act) ? OC / 2 : OC, act);
        return;
    }
    Arena a = arena(be, pad(N_(N) * C) + pad(N_(OC) * C) + pad(OC) + 2 * pad(N_(N) * OC));
    const float *fi = in(&a, inp, N_(N) * C), *fw = in(&a, weight, N_(OC) * C);
    const float *fb = in(&a, bias, OC);
    float *fo = take(&a, N_(N) * OC), *fp = take(&a, N_(N) * OC);
    cpu_matmul_act_forward(be, fo, fp, fi, fw, fb, N, C, OC, act);
    out(be, pre, fp, N_(N) * OC);
    out(be, o, fo, N_(N) * OC);
}

// GELU: dinp = round(product * gelu'(pre)) (CUDA's DGELU epilogue); others: the product
// rounded, then the act's gradient of it (the unfused pair).
static void h_matmul_act_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                                  const void *dout, const void *inp, const void *weight,
                                  const void *pre, int N, int C, int OC, BackendAct act) {
    if (backend_act_gated(act)) core_fatal("matmul_act_backward: a gated activation");
    if (act != BACKEND_ACT_GELU) {
        h_matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        h_act_backward(be, dinp, pre, dinp, N, C, act);
        return;
    }
    Arena a = arena(be, pad(N_(N) * OC) + 3 * pad(N_(N) * C) + pad(N_(OC) * C));
    const float *fd = in(&a, dout, N_(N) * OC), *fi = dweight ? in(&a, inp, N_(N) * C) : NULL;
    const float *fw = in(&a, weight, N_(OC) * C), *fp = in(&a, pre, N_(N) * C);
    float *fdi = take(&a, N_(N) * C);
    cpu_matmul_act_backward(be, fdi, dweight, dbias, fd, fi, fw, fp, N, C, OC, act);
    out(be, dinp, fdi, N_(N) * C);
}

static void h_dropout(Backend *be, void *o, const void *inp, const BackendDropout *d, int N,
                      int C) {
    if (!d || !d->threshold) {
        if (o != inp) cpu_copy(be, o, inp, N_(N) * C * 2, BACKEND_D2D);
        return;
    }
    Arena a = arena(be, pad(N_(N) * C));
    float *f = in(&a, inp, N_(N) * C);
    cpu_dropout(be, f, f, d, N, C);
    out(be, o, f, N_(N) * C);
}

// Elements of a window's kv row: 3C, or 2*G*hs packed (w->kv_heads = G).
static size_t kv_row(const BackendAttnWindow *w, int NH, int hs) {
    return w && w->kv_heads ? 2 * N_(w->kv_heads) * hs : 3 * N_(NH) * hs;
}

// A window's kv in the scratch (w NULL: NULL); *fw the window the fp32 op gets.
static const BackendAttnWindow *win_in(Arena *a, const BackendAttnWindow *w,
                                       BackendAttnWindow *fw, int B, size_t row) {
    if (!w) return NULL;
    *fw = *w;
    fw->kv = in(a, w->kv, N_(B) * w->Tk * row);
    return fw;
}

static void h_attention_forward(Backend *be, void *o, void *att, const void *qkv, int B, int T,
                                int NH, int hs, const BackendDropout *d,
                                const BackendAttnWindow *w) {
    int C = NH * hs, Tk = w ? w->Tk : T;
    Arena a = arena(be, pad(N_(B) * T * 3 * C) + pad(N_(B) * Tk * 3 * C) + pad(N_(B) * T * C) +
                            pad(N_(B) * NH * T * Tk));
    BackendAttnWindow fwin;
    const float *fq = in(&a, qkv, N_(B) * T * 3 * C);
    const BackendAttnWindow *fw = win_in(&a, w, &fwin, B, 3 * N_(C));
    float *fo = take(&a, N_(B) * T * C), *fa = take(&a, N_(B) * NH * T * Tk);
    cpu_attention_forward(be, fo, fa, fq, B, T, NH, hs, d, fw);
    out(be, o, fo, N_(B) * T * C);
    out(be, att, fa, N_(B) * NH * T * Tk);
}

static void h_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                                 const void *qkv, const void *att, int B, int T, int NH, int hs,
                                 const BackendDropout *d) {
    int C = NH * hs;
    Arena a = arena(be, 2 * pad(N_(B) * T * 3 * C) + pad(N_(B) * T * C) + pad(N_(B) * NH * T * T));
    const float *fd = in(&a, dout, N_(B) * T * C), *fq = in(&a, qkv, N_(B) * T * 3 * C);
    const float *fa = in(&a, att, N_(B) * NH * T * T);
    float *fdq = take(&a, N_(B) * T * 3 * C);
    cpu_attention_backward(be, fdq, scratch, fd, fq, fa, B, T, NH, hs, d);
    out(be, dqkv, fdq, N_(B) * T * 3 * C);
}

static void h_flash_forward(Backend *be, void *o, float *lse, const void *qkv, int B, int T,
                            int NH, int hs, const BackendDropout *d, const BackendAttnWindow *w) {
    int C = NH * hs, Tk = w ? w->Tk : T;
    size_t row = kv_row(w, NH, hs);
    Arena a = arena(be, pad(N_(B) * T * 3 * C) + pad(N_(B) * Tk * row) + pad(N_(B) * T * C));
    BackendAttnWindow fwin;
    const float *fq = in(&a, qkv, N_(B) * T * 3 * C);
    const BackendAttnWindow *fw = win_in(&a, w, &fwin, B, row);
    float *fo = w && w->accumulate ? in(&a, o, N_(B) * T * C) : take(&a, N_(B) * T * C);
    cpu_flash_attention_forward(be, fo, lse, fq, B, T, NH, hs, d, fw);
    out(be, o, fo, N_(B) * T * C);
}

// With a window dq (and dk, dv into w->dkv) are added: those buffers are loaded first.
static void h_flash_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                             const void *qkv, const void *o, const float *lse, int B, int T,
                             int NH, int hs, const BackendDropout *d, const BackendAttnWindow *w) {
    int C = NH * hs, Tk = w ? w->Tk : T;
    size_t nq = N_(B) * T * 3 * C, row = kv_row(w, NH, hs), nk = N_(B) * Tk * row;
    int own_dkv = w && w->dkv && w->dkv != dqkv;
    Arena a = arena(be, 2 * pad(nq) + 2 * pad(nk) + 2 * pad(N_(B) * T * C));
    BackendAttnWindow fwin;
    const float *fq = in(&a, qkv, nq), *fd = in(&a, dout, N_(B) * T * C);
    const float *fo = in(&a, o, N_(B) * T * C);
    const BackendAttnWindow *fw = win_in(&a, w, &fwin, B, row);
    float *fdq = w ? in(&a, dqkv, nq) : take(&a, nq);
    if (w) fwin.dkv = own_dkv ? in(&a, w->dkv, nk) : w->dkv ? fdq : NULL;
    cpu_flash_attention_backward(be, fdq, scratch, fd, fq, fo, lse, B, T, NH, hs, d, fw);
    out(be, dqkv, fdq, nq);
    if (own_dkv) out(be, w->dkv, fwin.dkv, nk);
}

// Rows of the table copied as they are (no arithmetic: the same 16-bit elements).
static void h_embedding_forward(Backend *be, void *o, const int *tokens, const void *table,
                                int N, int C, int vocab_start, int V_local) {
    size_t row = N_(C) * 2;
    for (int i = 0; i < N; i++) {
        int t = tokens[i] - vocab_start;
        char *dst = (char *)o + (size_t)i * row;
        if (t >= 0 && t < V_local) cpu_copy(be, dst, (const char *)table + (size_t)t * row, row, BACKEND_D2D);
        else cpu_zero(be, dst, row);
    }
}

static void h_embedding_backward(Backend *be, float *dtable, const void *dout, const int *tokens,
                                 int N, int C, int vocab_start, int V_local) {
    Arena a = arena(be, pad(N_(N) * C));
    cpu_embedding_backward(be, dtable, in(&a, dout, N_(N) * C), tokens, N, C, vocab_start, V_local);
}

// out += rows [pos0, pos0 + T) of wpe: only those rows are converted; with pos (host ints on
// this backend) rows [0, 1 + max pos), read as rows pos[r].
static void h_position_forward(Backend *be, void *o, const void *wpe, int B, int T, int C,
                               int pos0, const int *pos) {
    int n = T;
    if (pos) {
        n = 1, pos0 = 0;
        for (size_t r = 0; r < N_(B) * T; r++) n = pos[r] + 1 > n ? pos[r] + 1 : n;
    }
    Arena a = arena(be, pad(N_(B) * T * C) + pad(N_(n) * C));
    float *fo = in(&a, o, N_(B) * T * C);
    const float *fw = in(&a, (const char *)wpe + N_(pos0) * C * 2, N_(n) * C);
    cpu_position_forward(be, fo, fw, B, T, C, 0, pos);
    out(be, o, fo, N_(B) * T * C);
}

static void h_position_backward(Backend *be, float *dwpe, const void *dout, int B, int T, int C,
                                int pos0, const int *pos) {
    Arena a = arena(be, pad(N_(B) * T * C));
    cpu_position_backward(be, dwpe, in(&a, dout, N_(B) * T * C), B, T, C, pos0, pos);
}

static void h_xent_stats(Backend *be, float *rowmax, float *sumexp, float *tgt,
                         const void *logits, const int *targets, int N, int V_local, int V_valid,
                         int vocab_start) {
    Arena a = arena(be, pad(N_(N) * V_local));
    cpu_xent_stats(be, rowmax, sumexp, tgt, in(&a, logits, N_(N) * V_local), targets, N, V_local,
                   V_valid, vocab_start);
}

static void h_xent_backward(Backend *be, void *dlogits, float *loss, const void *logits,
                            const float *rowmax, const float *sumexp, const float *tgt,
                            const int *targets, const float *dscale, int N, int V_local,
                            int V_valid, int vocab_start) {
    Arena a = arena(be, pad(N_(N) * V_local));
    float *f = in(&a, logits, N_(N) * V_local);
    cpu_xent_backward(be, f, loss, f, rowmax, sumexp, tgt, targets, dscale, N, V_local, V_valid,
                      vocab_start);
    out(be, dlogits, f, N_(N) * V_local);
}

static void h_rope_forward(Backend *be, void *o, const void *inp, int B, int T, int NH, int G,
                           int hs, int rot, float base, int pos0, const int *pos) {
    size_t ni = N_(B) * T * (NH + 2 * G) * hs, no = N_(B) * T * 3 * NH * hs;
    Arena a = arena(be, pad(ni) + pad(no));
    const float *fi = in(&a, inp, ni);
    float *fo = take(&a, no);
    cpu_rope_gqa_forward(be, fo, fi, B, T, NH, G, hs, rot, base, pos0, pos);
    out(be, o, fo, no);
}

static void h_rope_backward(Backend *be, void *dinp, const void *dout, int B, int T, int NH,
                            int G, int hs, int rot, float base, int pos0, const int *pos) {
    size_t ni = N_(B) * T * (NH + 2 * G) * hs, no = N_(B) * T * 3 * NH * hs;
    Arena a = arena(be, pad(ni) + pad(no));
    const float *fd = in(&a, dout, no);
    float *fdi = take(&a, ni);
    cpu_rope_gqa_backward(be, fdi, fd, B, T, NH, G, hs, rot, base, pos0, pos);
    out(be, dinp, fdi, ni);
}

static const BackendOps CPU_HALF_OPS = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    .matmul_forward = h_matmul_forward,
    .matmul_backward = h_matmul_backward,
    .norm_forward = h_norm_forward,
    .norm_backward = h_norm_backward,
    .residual_layernorm_forward = h_residual_layernorm_forward,
    .matmul_act_forward = h_matmul_act_forward,
    .matmul_act_backward = h_matmul_act_backward,
    .act_forward = h_act_forward,
    .act_backward = h_act_backward,
    .add = h_add,
    .add_f32 = cpu_add,
    .scale_f32 = cpu_scale,
    .cast = cpu_cast,
    .copy_row_blocks = cpu_copy_row_blocks,
    .dropout = h_dropout,
    .attention_forward = h_attention_forward,
    .attention_backward = h_attention_backward,
    .flash_attention_forward = h_flash_forward,
    .flash_attention_backward = h_flash_backward,
    .embedding_forward = h_embedding_forward,
    .embedding_backward = h_embedding_backward,
    .position_forward = h_position_forward,
    .position_backward = h_position_backward,
    .xent_stats = h_xent_stats,
    .xent_rescale = cpu_xent_rescale,
    .xent_loss = cpu_xent_loss,
    .xent_backward = h_xent_backward,
    .adamw_multi = cpu_adamw_multi,  // rounds its weight copy to be->act itself
    .sum_squares_multi = cpu_sum_squares_multi,
    .sum = cpu_sum,
    .rope_gqa_forward = h_rope_forward,
    .rope_gqa_backward = h_rope_backward,
    .moe_router_forward = cpu_moe_router_forward,
    .moe_router_backward = cpu_moe_router_backward,
    .moe_router_loss = cpu_moe_router_loss,
    // the rows ops load and store be->act themselves (cpu_moe.c): no wrapper
    .rows_gather = cpu_rows_gather,
    .rows_combine = cpu_rows_combine,
    .rows_dot = cpu_rows_dot,
};

const BackendOps *cpu_half_ops_table(void) { return &CPU_HALF_OPS; }

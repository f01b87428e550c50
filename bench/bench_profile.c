// bench/bench_profile.c: the per-op profile of bench_train --profile (bench_profile.h). Each
// wrapper times one call of the backend's own entry and adds its FLOPs (GEMMs, attention:
// Megatron's count, full T x T) or its minimum bytes (every operand read or written once;
// activations at the backend's element size, fp32 statistics, gradients and optimizer state
// at 4) to its row.
#include "bench_profile.h"
#include "core/check.h"
#include "core/timer.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum {
    R_QKV_F, R_QKV_B, R_PROJ_F, R_PROJ_B, R_FC_F, R_FC_B, R_FCP_F, R_FCP_B, R_LM_F, R_LM_B,
    R_GEMM_F, R_GEMM_B, R_ATT_F, R_ATT_B, R_LN_F, R_LN_B, R_ACT_F, R_ACT_B, R_ADD, R_DROP,
    R_EMB_F, R_EMB_B, R_XENT_F, R_XENT_B, R_ADAMW, R_GNORM, R_MOE, R_ROPE, R_MEM, NROWS
} Row;

// Row names; "(+act)": the GEMM panels also apply the bias and the activation (fc forward)
// or its derivative (fc-proj backward) while the rows are in cache (cpu_gemm_fused).
static const char *ROW_NAMES[NROWS] = {
    "gemm qkv fwd", "gemm qkv bwd", "gemm attn-proj fwd", "gemm attn-proj bwd",
    "gemm fc fwd (+act)", "gemm fc bwd", "gemm fc-proj fwd", "gemm fc-proj bwd (+act')",
    "gemm lm-head fwd", "gemm lm-head bwd", "gemm other fwd", "gemm other bwd",
    "attention fwd", "attention bwd", "layernorm fwd", "layernorm bwd", "act fwd (unfused)",
    "act bwd (unfused)", "residual add", "dropout", "embedding+pos fwd", "embedding+pos bwd",
    "cross-entropy fwd", "cross-entropy bwd", "adamw", "grad norm (sum sq)", "moe routing",
    "rope", "zero/copy/cast"};

static struct {
    double secs, flops, bytes;
    long calls;
} rows[NROWS];
static BackendOps inner;  // the backend's own entries
static int pC, pF, pVp;   // the model's widths (bench_profile_start)
static int paused;        // bench_profile_pause: the ops run, the rows stay as they are

static void add_row(Row r, double t0, double flops, double bytes) {
    if (paused) return;
    rows[r].secs += core_now() - t0, rows[r].flops += flops, rows[r].bytes += bytes;
    rows[r].calls++;
}
#define PROF(row, flops, bytes, call)          \
    do {                                       \
        double t0_ = core_now();               \
        call;                                  \
        add_row((row), t0_, (flops), (bytes)); \
    } while (0)

// The row of a GEMM of C inputs, OC outputs (bwd: 1 the backward's row); lm: no bias.
static Row gemm_row(int C, int OC, int nobias, int bwd) {
    Row r = R_GEMM_F;
    if (C == pC && OC == pVp && nobias) r = R_LM_F;
    else if (C == pC && OC == 3 * pC) r = R_QKV_F;
    else if (C == pC && OC == pC) r = R_PROJ_F;
    else if (C == pC && (OC == pF || OC == 2 * pF)) r = R_FC_F;
    else if (C == pF && OC == pC) r = R_FCP_F;
    return (Row)(r + bwd);
}

static double asz(Backend *be) { return (double)backend_dtype_size(be->act); }

static void w_matmul_forward(Backend *be, void *out, const void *inp, const void *weight,
                             const void *bias, int N, int C, int OC) {
    PROF(gemm_row(C, OC, !bias, 0), 2.0 * N * C * OC, 0,
         inner.matmul_forward(be, out, inp, weight, bias, N, C, OC));
}
static void w_matmul_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                              const void *dout, const void *inp, const void *weight, int N, int C,
                              int OC) {
    double f = 2.0 * N * C * OC * ((dinp != NULL) + (dweight != NULL));
    PROF(gemm_row(C, OC, !dbias, 1), f, 0,
         inner.matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC));
}
// The grouped products (--moe-grouped-gemm): FLOPs over every group's rows.
static void w_matmul_grouped_forward(Backend *be, void *out, void *pre, const void *inp,
                                     const void *weight, const void *bias, const int *rows, int G,
                                     int C, int OC, BackendAct act) {
    PROF(gemm_row(C, OC, !bias, 0), 2.0 * (double)backend_rows_total(rows, G) * C * OC, 0,
         inner.matmul_grouped_forward(be, out, pre, inp, weight, bias, rows, G, C, OC, act));
}
static void w_matmul_grouped_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                                      const void *dout, const void *inp, const void *weight,
                                      const void *pre, const int *rows, int G, int C, int OC,
                                      BackendAct act) {
    double f = 2.0 * (double)backend_rows_total(rows, G) * C * OC * ((dinp != NULL) + (dweight != NULL));
    PROF(gemm_row(C, OC, !dbias, 1), f, 0,
         inner.matmul_grouped_backward(be, dinp, dweight, dbias, dout, inp, weight, pre, rows, G,
                                       C, OC, act));
}
static void w_matmul_act_forward(Backend *be, void *out, void *pre, const void *inp,
                                 const void *weight, const void *bias, int N, int C, int OC,
                                 BackendAct act) {
    PROF(gemm_row(C, OC, !bias, 0), 2.0 * N * C * OC, 0,
         inner.matmul_act_forward(be, out, pre, inp, weight, bias, N, C, OC, act));
}
static void w_matmul_act_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                                  const void *dout, const void *inp, const void *weight,
                                  const void *pre, int N, int C, int OC, BackendAct act) {
    double f = 2.0 * N * C * OC * ((dinp != NULL) + (dweight != NULL));
    PROF(gemm_row(C, OC, !dbias, 1), f, 0,
         inner.matmul_act_backward(be, dinp, dweight, dbias, dout, inp, weight, pre, N, C, OC, act));
}
static void w_norm_forward(Backend *be, void *out, float *mean, float *rstd, const void *inp,
                           const void *weight, const void *bias, int N, int C, BackendNorm kind) {
    PROF(R_LN_F, 0, 2.0 * N * C * asz(be) + 8.0 * N,
         inner.norm_forward(be, out, mean, rstd, inp, weight, bias, N, C, kind));
}
static void w_norm_backward(Backend *be, void *dinp, float *dweight, float *dbias, const void *dout,
                            const void *inp, const void *weight, const float *mean,
                            const float *rstd, int N, int C, BackendNorm kind) {
    PROF(R_LN_B, 0, 4.0 * N * C * asz(be) + 8.0 * N,  // dout, inp; dinp read and written
         inner.norm_backward(be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, kind));
}
static void w_residual_layernorm_forward(Backend *be, void *res, void *ln, float *mean, float *rstd,
                                         const void *a, const void *b, const void *weight,
                                         const void *bias, int N, int C) {
    PROF(R_LN_F, 0, 4.0 * N * C * asz(be) + 8.0 * N,
         inner.residual_layernorm_forward(be, res, ln, mean, rstd, a, b, weight, bias, N, C));
}
static void w_act_forward(Backend *be, void *out, const void *inp, int N, int F, BackendAct act) {
    double in = backend_act_gated(act) ? 2.0 * F : F;
    PROF(R_ACT_F, 0, (in + F) * N * asz(be), inner.act_forward(be, out, inp, N, F, act));
}
static void w_act_backward(Backend *be, void *dinp, const void *inp, const void *dout, int N, int F,
                           BackendAct act) {
    double in = backend_act_gated(act) ? 2.0 * F : F;
    PROF(R_ACT_B, 0, (2 * in + F) * N * asz(be), inner.act_backward(be, dinp, inp, dout, N, F, act));
}
static void w_add(Backend *be, void *out, const void *a, const void *b, size_t n) {
    PROF(R_ADD, 0, 3.0 * n * asz(be), inner.add(be, out, a, b, n));
}
static void w_add_f32(Backend *be, float *out, const float *a, const float *b, size_t n) {
    PROF(R_ADD, 0, 12.0 * n, inner.add_f32(be, out, a, b, n));
}
static void w_scale_f32(Backend *be, float *x, float alpha, size_t n) {
    PROF(R_MEM, 0, 8.0 * n, inner.scale_f32(be, x, alpha, n));
}
static void w_cast(Backend *be, void *dst, BackendDType dt, const void *src, BackendDType st, size_t n) {
    double b = (double)n * (double)(backend_dtype_size(dt) + backend_dtype_size(st));
    PROF(R_MEM, 0, b, inner.cast(be, dst, dt, src, st, n));
}
static void w_copy_row_blocks(Backend *be, void *dst, size_t ldd, size_t dbs, const void *src,
                              size_t lds, size_t sbs, int rows_, int nb, int width, int add) {
    PROF(R_MEM, 0, (2.0 + (add != 0)) * rows_ * nb * width * asz(be),
         inner.copy_row_blocks(be, dst, ldd, dbs, src, lds, sbs, rows_, nb, width, add));
}
static void w_zero(Backend *be, void *p, size_t bytes) {
    PROF(R_MEM, 0, (double)bytes, inner.zero(be, p, bytes));
}
static void w_copy(Backend *be, void *dst, const void *src, size_t bytes, BackendCopyKind kind) {
    PROF(R_MEM, 0, 2.0 * bytes, inner.copy(be, dst, src, bytes, kind));
}
static void w_dropout(Backend *be, void *out, const void *inp, const BackendDropout *d, int N, int C) {
    PROF(R_DROP, 0, 2.0 * N * C * asz(be), inner.dropout(be, out, inp, d, N, C));
}

// Megatron's attention FLOPs: Q K^T and P V, 2 x 2 B NH T Tk hs, the full T x Tk.
static double att_flops(int B, int T, int Tk, int NH, int hs) {
    return 4.0 * B * NH * (double)T * Tk * hs;
}
static void w_attention_forward(Backend *be, void *out, void *att, const void *qkv, int B, int T,
                                int NH, int hs, const BackendDropout *d, const BackendAttnWindow *w) {
    PROF(R_ATT_F, att_flops(B, T, w ? w->Tk : T, NH, hs), 0,
         inner.attention_forward(be, out, att, qkv, B, T, NH, hs, d, w));
}
static void w_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                                 const void *qkv, const void *att, int B, int T, int NH, int hs,
                                 const BackendDropout *d) {
    PROF(R_ATT_B, 2 * att_flops(B, T, T, NH, hs), 0,
         inner.attention_backward(be, dqkv, scratch, dout, qkv, att, B, T, NH, hs, d));
}
static void w_flash_forward(Backend *be, void *out, float *lse, const void *qkv, int B, int T,
                            int NH, int hs, const BackendDropout *d, const BackendAttnWindow *w) {
    PROF(R_ATT_F, att_flops(B, T, w ? w->Tk : T, NH, hs), 0,
         inner.flash_attention_forward(be, out, lse, qkv, B, T, NH, hs, d, w));
}
static void w_flash_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                             const void *qkv, const void *out, const float *lse, int B, int T,
                             int NH, int hs, const BackendDropout *d, const BackendAttnWindow *w) {
    PROF(R_ATT_B, 2 * att_flops(B, T, w ? w->Tk : T, NH, hs), 0,
         inner.flash_attention_backward(be, dqkv, scratch, dout, qkv, out, lse, B, T, NH, hs, d, w));
}
static void w_embedding_forward(Backend *be, void *out, const int *tokens, const void *table, int N,
                                int C, int vocab_start, int V_local) {
    PROF(R_EMB_F, 0, 2.0 * N * C * asz(be) + 4.0 * N,
         inner.embedding_forward(be, out, tokens, table, N, C, vocab_start, V_local));
}
static void w_embedding_backward(Backend *be, float *dtable, const void *dout, const int *tokens,
                                 int N, int C, int vocab_start, int V_local) {
    PROF(R_EMB_B, 0, N * C * (asz(be) + 8.0) + 4.0 * N,
         inner.embedding_backward(be, dtable, dout, tokens, N, C, vocab_start, V_local));
}
static void w_position_forward(Backend *be, void *out, const void *wpe, int B, int T, int C,
                               int pos0, const int *pos) {
    PROF(R_EMB_F, 0, 2.0 * B * T * C * asz(be) + (double)T * C * asz(be),
         inner.position_forward(be, out, wpe, B, T, C, pos0, pos));
}
static void w_position_backward(Backend *be, float *dwpe, const void *dout, int B, int T, int C,
                                int pos0, const int *pos) {
    PROF(R_EMB_B, 0, (double)B * T * C * asz(be) + 8.0 * T * C,
         inner.position_backward(be, dwpe, dout, B, T, C, pos0, pos));
}
static void w_xent_stats(Backend *be, float *rowmax, float *sumexp, float *tgt, const void *logits,
                         const int *targets, int N, int V_local, int V_valid, int vocab_start) {
    PROF(R_XENT_F, 0, (double)N * V_local * asz(be) + 16.0 * N,
         inner.xent_stats(be, rowmax, sumexp, tgt, logits, targets, N, V_local, V_valid, vocab_start));
}
static void w_xent_rescale(Backend *be, float *sumexp, const float *shard_max, const float *rowmax,
                           int N) {
    PROF(R_XENT_F, 0, 16.0 * N, inner.xent_rescale(be, sumexp, shard_max, rowmax, N));
}
static void w_xent_loss(Backend *be, float *loss, const float *sumexp, const float *rowmax,
                        const float *tgt, int N) {
    PROF(R_XENT_F, 0, 16.0 * N, inner.xent_loss(be, loss, sumexp, rowmax, tgt, N));
}
static void w_xent_backward(Backend *be, void *dlogits, float *loss, const void *logits,
                            const float *rowmax, const float *sumexp, const float *tgt,
                            const int *targets, const float *dscale, int N, int V_local,
                            int V_valid, int vocab_start) {
    PROF(R_XENT_B, 0, 2.0 * N * V_local * asz(be) + 16.0 * N,
         inner.xent_backward(be, dlogits, loss, logits, rowmax, sumexp, tgt, targets, dscale, N,
                             V_local, V_valid, vocab_start));
}

// Elements of a segment table (host memory on the CPU backend).
static double seg_elems(const BackendSegment *segs, int nseg) {
    double n = 0;
    for (int i = 0; i < nseg; i++) n += (double)segs[i].len;
    return n;
}
static void w_adamw_multi(Backend *be, float *param, void *copy, const float *grad, float *m,
                          float *v, const BackendSegment *segs, int nseg, size_t max_len, float lr,
                          float beta1, float beta2, float eps, float wd, float grad_scale, int step) {
    double n = seg_elems(segs, nseg);  // param, grad, m, v read; param, m, v written (+ copy)
    PROF(R_ADAMW, 0, n * (28.0 + (copy ? asz(be) : 0)),
         inner.adamw_multi(be, param, copy, grad, m, v, segs, nseg, max_len, lr, beta1, beta2,
                           eps, wd, grad_scale, step));
}
static double w_sum_squares_multi(Backend *be, const float *x, const BackendSegment *segs, int nseg,
                                  size_t max_len) {
    double r = 0;
    PROF(R_GNORM, 0, 4.0 * seg_elems(segs, nseg), r = inner.sum_squares_multi(be, x, segs, nseg, max_len));
    return r;
}
static double w_sum(Backend *be, double *acc, const float *x, size_t n) {
    double r = 0;
    PROF(R_GNORM, 0, 4.0 * n, r = inner.sum(be, acc, x, n));
    return r;
}
static void w_rope_forward(Backend *be, void *out, const void *inp, int B, int T, int NH, int G,
                           int hs, int rot, float base, int pos0, const int *pos) {
    PROF(R_ROPE, 0, 2.0 * B * T * (NH + 2.0 * G) * hs * asz(be),
         inner.rope_gqa_forward(be, out, inp, B, T, NH, G, hs, rot, base, pos0, pos));
}
static void w_rope_backward(Backend *be, void *dinp, const void *dout, int B, int T, int NH, int G,
                            int hs, int rot, float base, int pos0, const int *pos) {
    PROF(R_ROPE, 0, 2.0 * B * T * (NH + 2.0 * G) * hs * asz(be),
         inner.rope_gqa_backward(be, dinp, dout, B, T, NH, G, hs, rot, base, pos0, pos));
}
static void w_router_forward(Backend *be, int *idx, float *probs, const float *logits, int N,
                             const BackendMoERouter *r) {
    PROF(R_MOE, 0, 4.0 * N * (r->E + 2.0 * r->K),
         inner.moe_router_forward(be, idx, probs, logits, N, r));
}
static void w_router_backward(Backend *be, float *dlogits, const float *dprobs, const float *logits,
                              const int *idx, int N, const BackendMoERouter *r) {
    PROF(R_MOE, 0, 4.0 * N * (2.0 * r->E + 2.0 * r->K),
         inner.moe_router_backward(be, dlogits, dprobs, logits, idx, N, r));
}
static void w_router_loss(Backend *be, float *dlogits, float *loss, const float *logits,
                          const float *coef, const int *row_group, float z_coef, float grad_scale,
                          int N, const BackendMoERouter *r) {
    PROF(R_MOE, 0, 12.0 * N * r->E,
         inner.moe_router_loss(be, dlogits, loss, logits, coef, row_group, z_coef, grad_scale, N, r));
}
static void w_rows_gather(Backend *be, void *out, const void *in, const int *idx,
                          const float *scale, int M, int C) {
    PROF(R_MOE, 0, 2.0 * M * C * asz(be), inner.rows_gather(be, out, in, idx, scale, M, C));
}
static void w_rows_combine(Backend *be, void *out, const void *in, const int *slot, const float *w,
                           int N, int K, int C) {
    PROF(R_MOE, 0, (K + 1.0) * N * C * asz(be), inner.rows_combine(be, out, in, slot, w, N, K, C));
}
static void w_rows_dot(Backend *be, float *dw, const void *dy, const void *in, const int *slot,
                       int N, int K, int C) {
    PROF(R_MOE, 0, (K + 1.0) * N * C * asz(be), inner.rows_dot(be, dw, dy, in, slot, N, K, C));
}

void bench_profile_start(Backend *be, int C, int F, int Vp) {
    if (be->kind != BACKEND_CPU || be->ops != &be->table)
        core_usage_error("--profile: the CPU backend only (its ops are synchronous)");
    inner = be->table, pC = C, pF = F, pVp = Vp;
    bench_profile_reset();
    BackendOps *t = &be->table;
    t->matmul_forward = w_matmul_forward, t->matmul_backward = w_matmul_backward;
    t->matmul_act_forward = w_matmul_act_forward, t->matmul_act_backward = w_matmul_act_backward;
    t->matmul_grouped_forward = w_matmul_grouped_forward;
    t->matmul_grouped_backward = w_matmul_grouped_backward;
    t->norm_forward = w_norm_forward, t->norm_backward = w_norm_backward;
    t->residual_layernorm_forward = w_residual_layernorm_forward;
    t->act_forward = w_act_forward, t->act_backward = w_act_backward;
    t->add = w_add, t->add_f32 = w_add_f32, t->scale_f32 = w_scale_f32, t->cast = w_cast;
    t->copy_row_blocks = w_copy_row_blocks, t->zero = w_zero, t->copy = w_copy;
    t->dropout = w_dropout;
    t->attention_forward = w_attention_forward, t->attention_backward = w_attention_backward;
    t->flash_attention_forward = w_flash_forward, t->flash_attention_backward = w_flash_backward;
    t->embedding_forward = w_embedding_forward, t->embedding_backward = w_embedding_backward;
    t->position_forward = w_position_forward, t->position_backward = w_position_backward;
    t->xent_stats = w_xent_stats, t->xent_rescale = w_xent_rescale, t->xent_loss = w_xent_loss;
    t->xent_backward = w_xent_backward;
    t->adamw_multi = w_adamw_multi, t->sum_squares_multi = w_sum_squares_multi, t->sum = w_sum;
    t->rope_gqa_forward = w_rope_forward, t->rope_gqa_backward = w_rope_backward;
    t->moe_router_forward = w_router_forward, t->moe_router_backward = w_router_backward;
    t->moe_router_loss = w_router_loss;
    t->rows_gather = w_rows_gather, t->rows_combine = w_rows_combine, t->rows_dot = w_rows_dot;
}

void bench_profile_reset(void) {
    for (int r = 0; r < NROWS; r++) rows[r].secs = rows[r].flops = rows[r].bytes = 0, rows[r].calls = 0;
}

void bench_profile_pause(int on) { paused = on; }

void bench_profile_stop(Backend *be) { be->table = inner, paused = 0; }

// One row of the table: rate against its bound (GFLOP/s or GB/s; bound 0: no fraction).
static void print_row(const char *name, double calls, double ms, double step_ms, double rate,
                      const char *unit, double bound) {
    printf("  %-26s %7.1f %9.2f %6.1f%%", name, calls, ms, 100 * ms / step_ms);
    if (rate > 0) printf(" %9.1f %-6s", rate, unit);
    else printf(" %9s %-6s", "-", "");
    if (rate > 0 && bound > 0) printf(" %5.0f%%", 100 * rate / bound);
    printf("\n");
}

void bench_profile_print(const char *config, int steps, double step_ms, double gemm_ceiling,
                         double mem_gbs) {
    printf("\nprofile of %s, per step (mean of %d steps; %.1f ms): GEMMs and attention against the "
           "sgemm ceiling %.1f GFLOP/s, the rest against the stream copy %.1f GB/s\n", config,
           steps, step_ms, gemm_ceiling, mem_gbs);
    printf("  %-26s %7s %9s %7s %16s %6s\n", "op", "calls", "ms", "share", "rate", "bound");
    double in_ops = 0, gemm_ms = 0, gemm_f = 0, mem_ms = 0;
    for (int r = 0; r < NROWS; r++) {
        if (!rows[r].calls) continue;
        double ms = rows[r].secs * 1e3 / steps, s = rows[r].secs;
        int fl = rows[r].flops > 0;
        double rate = fl ? rows[r].flops / s * 1e-9 : rows[r].bytes / s * 1e-9;
        print_row(ROW_NAMES[r], (double)rows[r].calls / steps, ms, step_ms, s > 0 ? rate : 0,
                  fl ? "GFLOP/s" : "GB/s", fl ? gemm_ceiling : mem_gbs);
        in_ops += ms;
        if (r <= R_GEMM_B) gemm_ms += ms, gemm_f += rows[r].flops / steps;
        else if (!fl) mem_ms += ms;
    }
    print_row("outside the ops", 0, step_ms - in_ops, step_ms, 0, "", 0);
    printf("  GEMMs %.1f%% of the step at %.1f GFLOP/s (%.0f%% of the ceiling); memory-bound ops "
           "%.1f%%\n", 100 * gemm_ms / step_ms, gemm_ms > 0 ? gemm_f / gemm_ms * 1e-6 : 0,
           gemm_ceiling > 0 && gemm_ms > 0 ? 100 * gemm_f / gemm_ms * 1e-6 / gemm_ceiling : 0,
           100 * mem_ms / step_ms);
}

double bench_stream_copy_gbs(int threads, int reps) {
    size_t n = (size_t)64 << 20;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    if (!a || !b) core_fatal("out of memory");
#pragma omp parallel for num_threads(threads) schedule(static)  // first touch by the copiers
    for (size_t i = 0; i < n; i++) a[i] = (float)(i & 255), b[i] = 0.0f;
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {  // the first run untimed
        double t0 = core_now();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = a[i];
        double t = core_now() - t0;
        if (r && t < best) best = t;
    }
    free(a), free(b);
    return 8.0 * (double)n / best * 1e-9;
}

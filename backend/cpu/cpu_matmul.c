// backend/cpu/cpu_matmul.c: the linear layer (llm.c layout: weight is (OC, C)) on OpenBLAS
// (cpu_gemm: one panel per thread), and the column sums used for bias gradients.
#include "cpu_backend.h"
#include "cpu_gemm.h"
#include "core/check.h"  // defines: core_fatal, core_calloc
#include "cpu_math.h"   // defines: CPU_SIMD_CLONES

#include <cblas.h>   // defines: cblas_sgemm
#include <stdlib.h>  // defines: free
#include <string.h>  // defines: memset

// Row-major sgemm with BLAS's alpha/beta meaning, safe for empty sizes (see cpu_backend.h).
// beta 0 is passed to OpenBLAS as beta 1 onto a C cleared by memset: OpenBLAS clears C with
// its own pass first (sgemm_beta), which took 2.7 % of a `small` step's samples and ~20 % of
// an attention head's 256 x 256 x 64 product on AMD Zen 3; memset does it in a fraction of
// that. The kernel adds alpha * op(A) op(B) onto the zeros either way: the same values (a
// product that is exactly -0 comes out +0, where OpenBLAS's small-matrix beta-0 kernels, on
// AVX-512 only, would keep the sign).
void cpu_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *Cm, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {  // C = beta * C, with beta = 0 meaning "overwrite" as in BLAS
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float *c = Cm + (size_t)i * ldc + j;
                *c = beta == 0.0f ? 0.0f : *c * beta;
            }
        return;
    }
    if (beta == 0.0f) {  // clear C here and accumulate onto it: see above
        for (int i = 0; i < M; i++) memset(Cm + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
}

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC): the bias is copied into every
// row first, then the GEMM accumulates onto it (beta = 1).
void cpu_matmul_forward(Backend *be, void *out_, const void *inp_, const void *weight_,
                        const void *bias_, int N, int C, int OC) {
    float *out = out_;
    const float *inp = inp_, *weight = weight_, *bias = bias_;
    CpuGemmEpilogue epi = {.bias = bias};  // each panel's rows start as the bias (beta 1)
    cpu_gemm_fused(be, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC, &epi);
}

// pre (N, OC) = inp @ weight^T + bias, out = act(pre): a pointwise act panel by panel, a
// gated one after the product.
void cpu_matmul_act_forward(Backend *be, void *out, void *pre, const void *inp,
                            const void *weight, const void *bias, int N, int C, int OC,
                            BackendAct act) {
    if (backend_act_gated(act)) {
        cpu_matmul_forward(be, pre, inp, weight, bias, N, C, OC);
        cpu_act_forward(be, out, pre, N, backend_act_width(act, OC), act);
        return;
    }
    CpuGemmEpilogue epi = {.bias = bias, .act_out = out, .act = act};
    cpu_gemm_fused(be, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, pre, OC, &epi);
}

// dinp (N, C) = dout (N, OC) @ weight (OC, C); dweight (OC, C) += dout^T @ inp (N, C);
// dbias (OC) += column sums of dout.
void cpu_matmul_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                         const void *dout, const void *inp, const void *weight,
                         int N, int C, int OC) {
    cpu_matmul_act_backward(be, dinp, dweight, dbias, dout, inp, weight, NULL, N, C, OC,
                            BACKEND_ACT_GELU);
}

// cpu_matmul_backward, dinp (N, C) then *= act'(pre (N, C)) inside its panels (pre NULL: no
// act). dinp's product comes first; dweight and dbias read only dout and inp.
void cpu_matmul_act_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                             const void *dout, const void *inp, const void *weight,
                             const void *pre, int N, int C, int OC, BackendAct act) {
    if (pre && backend_act_gated(act)) core_fatal("matmul_act_backward: a gated activation");
    CpuGemmEpilogue epi = {.dact_pre = pre, .act = act};
    if (dinp) cpu_gemm_fused(be, 0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C, &epi);
    if (dweight) cpu_gemm(be, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) cpu_colsum_acc(be, dbias, dout, N, OC);
}

// Group g's rows (rows[g] of them, after the groups before it) = inp_g @ weight_g (OC, C)^T +
// bias_g: one cpu_gemm_grouped job per group (weight (G, OC, C), bias (G, OC) or NULL), into
// out (R, OC), or with pre into pre (R, OC) and out = act(pre): a pointwise act in each job's
// panels, a gated one after the products.
void cpu_matmul_grouped_forward(Backend *be, void *out, void *pre, const void *inp,
                                const void *weight, const void *bias, const int *rows, int G,
                                int C, int OC, BackendAct act) {
    int gated = pre && backend_act_gated(act);
    float *prod = pre ? pre : out;  // (R, OC)
    CpuGemmJob *jobs = core_calloc((size_t)G + 1, sizeof *jobs);
    const float *w = weight, *b = bias;
    size_t off = 0;
    for (int g = 0; g < G; off += (size_t)rows[g++]) {
        const float *in = (const float *)inp + off * C;
        CpuGemmEpilogue epi = {.bias = b ? b + (size_t)g * OC : NULL, .act = act};
        if (pre && !gated) epi.act_out = (float *)out + off * OC;
        jobs[g] = (CpuGemmJob){0, 1, rows[g], OC, C, 1.0f, in, C, w + (size_t)g * OC * C, C, 0.0f,
                               prod + off * OC, OC, epi};
    }
    cpu_gemm_grouped(be, jobs, G);
    free(jobs);
    if (gated)
        cpu_act_forward(be, out, pre, (int)backend_rows_total(rows, G),
                        backend_act_width(act, OC), act);
}

// Per group g: dinp_g = dout_g @ weight_g (overwritten; skipped if dinp is NULL; with pre,
// then *= act'(pre_g) in its panels), dweight_g (OC, C) += dout_g^T @ inp_g, dbias_g (OC) +=
// column sums of dout_g (if not NULL). The input-gradient and weight-gradient products of
// every group are the jobs of one cpu_gemm_grouped; the bias sums follow, group by group.
void cpu_matmul_grouped_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                                 const void *dout, const void *inp, const void *weight,
                                 const void *pre, const int *rows, int G, int C, int OC,
                                 BackendAct act) {
    backend_check_grouped_pre(pre, dinp, act);
    CpuGemmJob *jobs = core_calloc(2 * (size_t)G + 1, sizeof *jobs);
    const float *d = dout, *x = inp, *w = weight, *p = pre;
    int n = 0;
    size_t off = 0;
    for (int g = 0; g < G; off += (size_t)rows[g++]) {
        if (!rows[g]) continue;  // nothing to write or add
        const float *dg = d + off * OC;
        if (dinp)
            jobs[n++] = (CpuGemmJob){0, 0, rows[g], C, OC, 1.0f, dg, OC, w + (size_t)g * OC * C, C,
                                     0.0f, (float *)dinp + off * C, C,
                                     {.dact_pre = p ? p + off * C : NULL, .act = act}};
        jobs[n++] = (CpuGemmJob){1, 0, OC, C, rows[g], 1.0f, dg, OC, x + off * C, C, 1.0f,
                                 dweight + (size_t)g * OC * C, C, {0}};
    }
    cpu_gemm_grouped(be, jobs, n);
    free(jobs);
    off = 0;
    for (int g = 0; dbias && g < G; off += (size_t)rows[g++])
        if (rows[g]) cpu_colsum_acc(be, dbias + (size_t)g * OC, d + off * OC, rows[g], OC);
}

// part (C) = the column sums of rows (n, C), rows in order.
CPU_SIMD_CLONES static void colsum_rows(float *part, const float *rows, int n, int C) {
    for (int i = 0; i < n; i++) {
        const float *row = rows + (size_t)i * C;
#pragma omp simd
        for (int j = 0; j < C; j++) part[j] += row[j];
    }
}

void cpu_colsum_acc(Backend *be, float *acc, const float *x, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int nck = cpu_rowchunks(N), nt = cpu_nt(be);
    float *part = core_calloc((size_t)nck * C, sizeof *part);  // (nck, C): chunk sums
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * C > CPU_PAR_MIN)
    for (int k = 0; k < nck; k++) {
        int i0 = k * CPU_ROWCHUNK;
        colsum_rows(part + (size_t)k * C, x + (size_t)i0 * C, cpu_rowchunk_end(N, k) - i0, C);
    }
    cpu_chunks_acc(be, acc, part, nck, C);
    free(part);
}

void cpu_chunks_acc(Backend *be, float *acc, const float *part, int nck, int C) {
    int nt = cpu_nt(be);
    if (nck <= 0) return;
#pragma omp parallel for simd num_threads(nt) schedule(static) if ((size_t)nck * C > CPU_PAR_MIN)
    for (int j = 0; j < C; j++) {
        float s = part[j];
        for (int k = 1; k < nck; k++) s += part[(size_t)k * C + j];
        acc[j] += s;
    }
}

// --- 16-bit activations (--bf16 / --fp16): fp32 arithmetic between rounded loads and stores
// (cpu_half.c's helpers: the rules there) -------------------------------------------------

static void h_matmul_forward(Backend *be, void *o, const void *inp, const void *weight,
                             const void *bias, int N, int C, int OC) {
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(N) * C) + cpu_pad(CPU_SZ(OC) * C) + cpu_pad(OC) + cpu_pad(CPU_SZ(N) * OC));
    const float *fi = cpu_in(&a, inp, CPU_SZ(N) * C), *fw = cpu_in(&a, weight, CPU_SZ(OC) * C);
    const float *fb = cpu_in(&a, bias, OC);
    float *fo = cpu_take(&a, CPU_SZ(N) * OC);
    cpu_matmul_forward(be, fo, fi, fw, fb, N, C, OC);
    cpu_out(be, o, fo, CPU_SZ(N) * OC);
}

static void h_matmul_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                              const void *dout, const void *inp, const void *weight, int N, int C,
                              int OC) {
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(N) * OC) + 2 * cpu_pad(CPU_SZ(N) * C) + cpu_pad(CPU_SZ(OC) * C));
    const float *fd = cpu_in(&a, dout, CPU_SZ(N) * OC);
    const float *fi = dweight ? cpu_in(&a, inp, CPU_SZ(N) * C) : NULL;
    const float *fw = dinp ? cpu_in(&a, weight, CPU_SZ(OC) * C) : NULL;
    float *fdi = dinp ? cpu_take(&a, CPU_SZ(N) * C) : NULL;
    cpu_matmul_backward(be, fdi, dweight, dbias, fd, fi, fw, N, C, OC);
    if (dinp) cpu_out(be, dinp, fdi, CPU_SZ(N) * C);
}

// The products rounded to be->act (into pre, or out without one), then the act of the rounded
// pre (CUDA's pair: its grouped GEMM has no epilogue).
static void h_matmul_grouped_forward(Backend *be, void *o, void *pre, const void *inp,
                                     const void *weight, const void *bias, const int *rows, int G,
                                     int C, int OC, BackendAct act) {
    size_t R = backend_rows_total(rows, G), nw = (size_t)G * OC * C;
    CpuArena a = cpu_arena(be, cpu_pad(R * C) + cpu_pad(nw) + cpu_pad((size_t)G * OC) + cpu_pad(R * OC));
    const float *fi = cpu_in(&a, inp, R * C), *fw = cpu_in(&a, weight, nw);
    const float *fb = cpu_in(&a, bias, (size_t)G * OC);
    float *fo = cpu_take(&a, R * OC);
    cpu_matmul_grouped_forward(be, fo, NULL, fi, fw, fb, rows, G, C, OC, act);
    cpu_out(be, pre ? pre : o, fo, R * OC);
    if (pre) be->ops->act_forward(be, o, pre, (int)R, backend_act_width(act, OC), act);
}

// The products rounded to be->act, then (pre) the act's gradient of the rounded dinp.
static void h_matmul_grouped_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                                      const void *dout, const void *inp, const void *weight,
                                      const void *pre, const int *rows, int G, int C, int OC,
                                      BackendAct act) {
    backend_check_grouped_pre(pre, dinp, act);
    size_t R = backend_rows_total(rows, G), nw = (size_t)G * OC * C;
    CpuArena a = cpu_arena(be, cpu_pad(R * OC) + 2 * cpu_pad(R * C) + cpu_pad(nw));
    const float *fd = cpu_in(&a, dout, R * OC), *fi = cpu_in(&a, inp, R * C);
    const float *fw = dinp ? cpu_in(&a, weight, nw) : NULL;
    float *fdi = dinp ? cpu_take(&a, R * C) : NULL;
    cpu_matmul_grouped_backward(be, fdi, dweight, dbias, fd, fi, fw, NULL, rows, G, C, OC, act);
    if (dinp) cpu_out(be, dinp, fdi, R * C);
    if (pre) be->ops->act_backward(be, dinp, pre, dinp, (int)R, C, act);
}

// GELU: pre and out from the fp32 product (CUDA's GELU epilogue); other acts: pre rounded,
// then the act of the rounded pre (CUDA's unfused pair).
static void h_matmul_act_forward(Backend *be, void *o, void *pre, const void *inp,
                                 const void *weight, const void *bias, int N, int C, int OC,
                                 BackendAct act) {
    if (act != BACKEND_ACT_GELU) {
        h_matmul_forward(be, pre, inp, weight, bias, N, C, OC);
        be->ops->act_forward(be, o, pre, N, backend_act_width(act, OC), act);
        return;
    }
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(N) * C) + cpu_pad(CPU_SZ(OC) * C) + cpu_pad(OC) + 2 * cpu_pad(CPU_SZ(N) * OC));
    const float *fi = cpu_in(&a, inp, CPU_SZ(N) * C), *fw = cpu_in(&a, weight, CPU_SZ(OC) * C);
    const float *fb = cpu_in(&a, bias, OC);
    float *fo = cpu_take(&a, CPU_SZ(N) * OC), *fp = cpu_take(&a, CPU_SZ(N) * OC);
    cpu_matmul_act_forward(be, fo, fp, fi, fw, fb, N, C, OC, act);
    cpu_out(be, pre, fp, CPU_SZ(N) * OC);
    cpu_out(be, o, fo, CPU_SZ(N) * OC);
}

// GELU: dinp = round(product * gelu'(pre)) (CUDA's DGELU epilogue); others: the product
// rounded, then the act's gradient of it (the unfused pair).
static void h_matmul_act_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                                  const void *dout, const void *inp, const void *weight,
                                  const void *pre, int N, int C, int OC, BackendAct act) {
    if (backend_act_gated(act)) core_fatal("matmul_act_backward: a gated activation");
    if (act != BACKEND_ACT_GELU) {
        h_matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        be->ops->act_backward(be, dinp, pre, dinp, N, C, act);
        return;
    }
    CpuArena a = cpu_arena(be, cpu_pad(CPU_SZ(N) * OC) + 3 * cpu_pad(CPU_SZ(N) * C) + cpu_pad(CPU_SZ(OC) * C));
    const float *fd = cpu_in(&a, dout, CPU_SZ(N) * OC), *fi = dweight ? cpu_in(&a, inp, CPU_SZ(N) * C) : NULL;
    const float *fw = cpu_in(&a, weight, CPU_SZ(OC) * C), *fp = cpu_in(&a, pre, CPU_SZ(N) * C);
    float *fdi = cpu_take(&a, CPU_SZ(N) * C);
    cpu_matmul_act_backward(be, fdi, dweight, dbias, fd, fi, fw, fp, N, C, OC, act);
    cpu_out(be, dinp, fdi, CPU_SZ(N) * C);
}

void cpu_matmul_ops(BackendOps *t, BackendDType act) {
    int f32 = act == BACKEND_F32;
    t->matmul_forward = f32 ? cpu_matmul_forward : h_matmul_forward;
    t->matmul_backward = f32 ? cpu_matmul_backward : h_matmul_backward;
    t->matmul_act_forward = f32 ? cpu_matmul_act_forward : h_matmul_act_forward;
    t->matmul_act_backward = f32 ? cpu_matmul_act_backward : h_matmul_act_backward;
    t->matmul_grouped_forward = f32 ? cpu_matmul_grouped_forward : h_matmul_grouped_forward;
    t->matmul_grouped_backward = f32 ? cpu_matmul_grouped_backward : h_matmul_grouped_backward;
}

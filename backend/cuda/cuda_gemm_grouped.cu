// backend/cuda/cuda_gemm_grouped.cu: the grouped linear (--moe-grouped-gemm) through cuBLAS's
// grouped GEMM (cublasGemmGroupedBatchedEx): G products of one shape but their row counts
// (rows[g] rows of inp, out, dout for group g, contiguous in group order) in one call.
//
// cuBLASLt has no grouped GEMM; cuBLAS has (opened with dlopen: cuda_cublas_dl.c). Its
// problems are column-major like cuBLASLt's, so the row-major trick of cuda_gemm.cu holds:
// each problem is the column-major transpose of megac's product. The m/n/k/ld/alpha/beta
// arrays live on the host; the A, B, C pointer arrays must be in device memory: a tiny kernel
// writes them into CudaState.grouped_ptrs from the kernel's by-value arguments (the groups'
// row offsets), so nothing is staged through host memory and the host never waits. Groups of
// 0 rows are left out; more than CUDA_GROUPED_CHUNK non-empty groups take several calls.
//
//   forward  out_g (R_g, OC) = inp_g @ W_g^T + b_g: the bias rows are written into out first
//            (a broadcast kernel) and the GEMM adds to them (beta 1): one rounding of
//            product + bias, as cuBLASLt's bias epilogue does (under the emulator the same bits)
//   backward dinp_g = dout_g @ W_g (beta 0): one grouped call. dweight_g += dout_g^T @ inp_g
//            (beta 1, fp32): one grouped call for fp32 activations; cuBLAS's grouped GEMM
//            takes no bf16/fp16 operands into an fp32 C (its type table: A, B and C of one
//            type), so for those it stays one cuBLASLt GEMM per group. dbias_g: per group,
//            the deterministic column-sum kernel (cuda_colsum_acc).
// Types: fp32 with CUBLAS_COMPUTE_32F_FAST_TF32 or _32F (the backend's math), bf16 / fp16 with
// CUBLAS_COMPUTE_32F, as cuda_gemm.cu. Without libcublas or its grouped GEMM the entries run
// one cuda_matmul_forward / _backward per group; a grouped call cuBLAS refuses (NOT_SUPPORTED,
// ARCH_MISMATCH) runs as one cuBLASLt GEMM per problem (each said once on stderr).
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, cuda_internal.h

#include <stdio.h>  // defines: fprintf

#define GROUPED_THREADS 256
#define GROUPED_GRID_CAP 1024

// Up to CUDA_GROUPED_CHUNK non-empty groups: their index, first row and row count. Passed to
// kernels by value (about 1.5 KB of the 4 KB of kernel arguments).
typedef struct {
    int n;
    int group[CUDA_GROUPED_CHUNK], off[CUDA_GROUPED_CHUNK], rows[CUDA_GROUPED_CHUNK];
} GroupedChunk;

// Where one operand of problem j starts: base + group * gstride + first row * rstride (bytes).
typedef struct {
    const char *base;
    long long gstride, rstride;
} GroupedOperand;

// ptrs (3, CUDA_GROUPED_CHUNK): the A, B and C pointers of the chunk's problems.
__global__ void grouped_ptrs_kernel(void **ptrs, GroupedChunk c, GroupedOperand a,
                                    GroupedOperand b, GroupedOperand d) {
    int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= c.n) return;
    const GroupedOperand *op[3] = {&a, &b, &d};
    for (int i = 0; i < 3; i++)
        ptrs[i * CUDA_GROUPED_CHUNK + j] =
            (void *)(op[i]->base + c.group[j] * op[i]->gstride + c.off[j] * op[i]->rstride);
}

// out (rows, OC) of each problem = its group's bias row (bias (G, OC)); T: the element's bits.
template <typename T>
__global__ void grouped_bias_rows_kernel(T *out, const T *bias, GroupedChunk c, int OC) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (int j = 0; j < c.n; j++) {
        size_t n = (size_t)c.rows[j] * OC;
        T *o = out + (size_t)c.off[j] * OC;
        const T *b = bias + (size_t)c.group[j] * OC;
        for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride)
            o[i] = b[i % OC];
    }
}

void cuda_grouped_free(CudaState *st) {
    if (st->blas) cublasDestroy_v2(st->blas);
    if (st->grouped_ptrs) cudaFree(st->grouped_ptrs);
    st->blas = NULL, st->grouped_ptrs = NULL, st->blas_state = 0;
}

// 1 when cuBLAS's grouped GEMM can be used: the handle (on the backend's stream, with its
// workspace) and the pointer arrays are made on the first call; 0 (the per-group loop) when
// cuBLAS is missing, said once per process on rank 0.
static int grouped_ready(Backend *be) {
    CudaState *st = cuda_state(be);
    if (st->blas_state) return st->blas_state > 0;
    if (cublasCreate_v2(&st->blas) != CUBLAS_STATUS_SUCCESS) {
        static int said = 0;  // once per process (every backend falls back alike)
        st->blas = NULL, st->blas_state = -1;
        if (!said++ && core_world_rank() <= 0)
            fprintf(stderr, "grouped GEMM: libcublas or its cublasGemmGroupedBatchedEx is missing: "
                    "one cuBLASLt GEMM per group instead\n");
        return 0;
    }
    CUBLAS_CHECK(cublasSetStream_v2(st->blas, st->stream));
    CUBLAS_CHECK(cublasSetWorkspace_v2(st->blas, st->workspace, CUDA_WORKSPACE_BYTES));
    CUDA_CHECK(cudaMalloc((void **)&st->grouped_ptrs, 3 * CUDA_GROUPED_CHUNK * sizeof(void *)));
    st->blas_state = 1;
    return 1;
}

// The next chunk of non-empty groups from group *g (row offset *off), both advanced past it.
// Returns the number of problems (0: none left).
static int next_chunk(GroupedChunk *c, const int *rows, int G, int *g, size_t *off) {
    c->n = 0;
    for (; *g < G && c->n < CUDA_GROUPED_CHUNK; *off += (size_t)rows[(*g)++]) {
        if (!rows[*g]) continue;
        c->group[c->n] = *g, c->off[c->n] = (int)*off, c->rows[c->n] = rows[*g], c->n++;
    }
    return c->n;
}

// One problem shape of a grouped call (column-major, as cuBLAS): a dimension of -1 is the
// problem's row count; A, B, C are located per problem by their GroupedOperand.
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc;
    float beta;
    BackendDType ab, c;  // the types of A and B, and of C
} GroupedShape;

// The cuBLAS type of a BackendDType. Pure.
static cudaDataType_t blas_type(BackendDType t) {
    return t == BACKEND_BF16 ? CUDA_R_16BF : t == BACKEND_F16 ? CUDA_R_16F : CUDA_R_32F;
}

// Operand o of problem j of chunk c. Pure.
static const char *operand_at(const GroupedOperand *o, const GroupedChunk *c, int j) {
    return o->base + c->group[j] * o->gstride + c->off[j] * o->rstride;
}

// The problems of chunk c one cuBLASLt GEMM each (cuda_gemm, row-major: the column-major
// C = op(A) op(B) is the row-major C^T = op(B)^T op(A)^T): when cuBLAS refuses the call.
static void grouped_gemm_loop(Backend *be, const GroupedChunk *c, const GroupedShape *s,
                              const GroupedOperand *a, const GroupedOperand *b,
                              const GroupedOperand *d) {
    for (int j = 0; j < c->n; j++) {
        int m = s->m < 0 ? c->rows[j] : s->m, n = s->n < 0 ? c->rows[j] : s->n;
        int k = s->k < 0 ? c->rows[j] : s->k;
        cuda_gemm(be, s->tb, s->ta, n, m, k, 1.0f, operand_at(b, c, j), s->ldb, 0,
                  operand_at(a, c, j), s->lda, 0, s->beta, (void *)operand_at(d, c, j), s->ldc, 0,
                  1, NULL, s->ab, s->c);
    }
}

// C_j = op(A_j) op(B_j) + beta C_j for every problem of chunk c: one cublasGemmGroupedBatchedEx.
static void grouped_gemm(Backend *be, const GroupedChunk *c, const GroupedShape *s,
                         GroupedOperand a, GroupedOperand b, GroupedOperand d) {
    CudaState *st = cuda_state(be);
    CUDA_LAUNCH(grouped_ptrs_kernel, 1, CUDA_GROUPED_CHUNK, 0, st->stream, st->grouped_ptrs, *c,
                a, b, d);
    cublasOperation_t ta[CUDA_GROUPED_CHUNK], tb[CUDA_GROUPED_CHUNK];
    int m[CUDA_GROUPED_CHUNK], n[CUDA_GROUPED_CHUNK], k[CUDA_GROUPED_CHUNK], size[CUDA_GROUPED_CHUNK];
    int lda[CUDA_GROUPED_CHUNK], ldb[CUDA_GROUPED_CHUNK], ldc[CUDA_GROUPED_CHUNK];
    float alpha[CUDA_GROUPED_CHUNK], beta[CUDA_GROUPED_CHUNK];
    for (int j = 0; j < c->n; j++) {
        ta[j] = s->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb[j] = s->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        m[j] = s->m < 0 ? c->rows[j] : s->m, n[j] = s->n < 0 ? c->rows[j] : s->n;
        k[j] = s->k < 0 ? c->rows[j] : s->k, size[j] = 1;
        lda[j] = s->lda, ldb[j] = s->ldb, ldc[j] = s->ldc, alpha[j] = 1.0f, beta[j] = s->beta;
    }
    cublasComputeType_t ct = s->ab == BACKEND_F32 && st->math == BACKEND_MATH_TF32
                                 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    void **p = st->grouped_ptrs;
    cudaDataType_t tab = blas_type(s->ab);
    cublasStatus_t r = cublasGemmGroupedBatchedEx(
        st->blas, ta, tb, m, n, k, alpha, (const void *const *)p, tab, lda,
        (const void *const *)(p + CUDA_GROUPED_CHUNK), tab, ldb, beta, p + 2 * CUDA_GROUPED_CHUNK,
        blas_type(s->c), ldc, c->n, size, ct);
    if (r == CUBLAS_STATUS_NOT_SUPPORTED || r == CUBLAS_STATUS_ARCH_MISMATCH) {
        static int said = 0;  // a cuBLAS release or GPU without this case: once per process
        if (!said++ && core_world_rank() <= 0)
            fprintf(stderr, "grouped GEMM: cuBLAS refuses %s operands into %s (status %d): one "
                    "cuBLASLt GEMM per group for it\n", backend_dtype_name(s->ab),
                    backend_dtype_name(s->c), (int)r);
        grouped_gemm_loop(be, c, s, &a, &b, &d);
        return;
    }
    CUBLAS_CHECK(r);
}


// Each problem's out rows = its group's bias row (the forward's C before beta = 1).
static void bias_rows(Backend *be, void *out, const void *bias, const GroupedChunk *c, int OC) {
    size_t most = 0;
    for (int j = 0; j < c->n; j++)
        if ((size_t)c->rows[j] * OC > most) most = (size_t)c->rows[j] * OC;
    unsigned nb = cuda_blocks(most, GROUPED_THREADS, GROUPED_GRID_CAP);
    if (backend_dtype_size(be->act) == 4)
        CUDA_LAUNCH(grouped_bias_rows_kernel<float>, nb, GROUPED_THREADS, 0, cuda_stream(be),
                    (float *)out, (const float *)bias, *c, OC);
    else
        CUDA_LAUNCH(grouped_bias_rows_kernel<uint16_t>, nb, GROUPED_THREADS, 0, cuda_stream(be),
                    (uint16_t *)out, (const uint16_t *)bias, *c, OC);
}

// The fallback: one cuda_matmul_forward / _backward per non-empty group.
static void forward_loop(Backend *be, void *out, const void *inp, const void *weight,
                         const void *bias, const int *rows, int G, int C, int OC) {
    size_t es = backend_dtype_size(be->act), off = 0;
    for (int g = 0; g < G; off += (size_t)rows[g++]) {
        if (!rows[g]) continue;
        const char *b = bias ? (const char *)bias + (size_t)g * OC * es : NULL;
        cuda_matmul_forward(be, (char *)out + off * OC * es, (const char *)inp + off * C * es,
                            (const char *)weight + (size_t)g * OC * C * es, b, rows[g], C, OC);
    }
}

static void backward_loop(Backend *be, void *dinp, float *dweight, float *dbias,
                          const void *dout, const void *inp, const void *weight,
                          const int *rows, int G, int C, int OC) {
    size_t es = backend_dtype_size(be->act), off = 0;
    for (int g = 0; g < G; off += (size_t)rows[g++]) {
        if (!rows[g]) continue;
        cuda_matmul_backward(be, dinp ? (char *)dinp + off * C * es : NULL,
                             dweight ? dweight + (size_t)g * OC * C : NULL,
                             dbias ? dbias + (size_t)g * OC : NULL,
                             (const char *)dout + off * OC * es, (const char *)inp + off * C * es,
                             (const char *)weight + (size_t)g * OC * C * es, rows[g], C, OC);
    }
}

// out (R, OC) = inp (R, C) @ weight_g (OC, C)^T + bias_g (OC) for the rows of each group g
// (R = sum of rows; weight (G, OC, C), bias (G, OC) or NULL; all of type be->act).
static void grouped_forward(Backend *be, void *out, const void *inp, const void *weight,
                            const void *bias, const int *rows, int G, int C, int OC) {
    if (!grouped_ready(be)) {
        forward_loop(be, out, inp, weight, bias, rows, G, C, OC);
        return;
    }
    long long es = (long long)backend_dtype_size(be->act);
    BackendDType t = be->act;
    // column-major: out_g^T (OC, R_g) = W_g^T (stored (C, OC), op T) @ inp_g^T (C, R_g)
    GroupedShape s = {1, 0, OC, -1, C, C, C, OC, bias ? 1.0f : 0.0f, t, t};
    GroupedOperand a = {(const char *)weight, OC * C * es, 0}, b = {(const char *)inp, 0, C * es};
    GroupedOperand d = {(const char *)out, 0, OC * es};
    GroupedChunk c;
    int g = 0;
    size_t off = 0;
    while (next_chunk(&c, rows, G, &g, &off)) {
        if (bias) bias_rows(be, out, bias, &c, OC);
        grouped_gemm(be, &c, &s, a, b, d);
    }
}

// dweight_g += dout_g^T @ inp_g for bf16 / fp16 operands: one cuBLASLt GEMM per problem.
static void dweight_loop(Backend *be, float *dweight, const void *dout, const void *inp,
                         const GroupedChunk *c, int C, int OC) {
    size_t es = backend_dtype_size(be->act);
    for (int j = 0; j < c->n; j++)
        cuda_gemm(be, 1, 0, OC, C, c->rows[j], 1.0f, (const char *)dout + (size_t)c->off[j] * OC * es,
                  OC, 0, (const char *)inp + (size_t)c->off[j] * C * es, C, 0, 1.0f,
                  dweight + (size_t)c->group[j] * OC * C, C, 0, 1, NULL, be->act, BACKEND_F32);
}

// Per group g: dinp_g (R_g, C) = dout_g @ weight_g (overwritten; NULL: skipped), dweight_g
// (OC, C, fp32) += dout_g^T @ inp_g, dbias_g (OC, fp32) += column sums of dout_g (NULL:
// skipped). dout (R, OC), inp (R, C), weight (G, OC, C) of type be->act.
static void grouped_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                             const void *dout, const void *inp, const void *weight,
                             const int *rows, int G, int C, int OC) {
    if (!grouped_ready(be)) {
        backward_loop(be, dinp, dweight, dbias, dout, inp, weight, rows, G, C, OC);
        return;
    }
    long long es = (long long)backend_dtype_size(be->act);
    BackendDType t = be->act;
    // dinp_g^T (C, R_g) = W_g^T (stored (C, OC)) @ dout_g^T (OC, R_g)
    GroupedShape si = {0, 0, C, -1, OC, C, OC, C, 0.0f, t, t};
    GroupedOperand wi = {(const char *)weight, OC * C * es, 0}, gi = {(const char *)dout, 0, OC * es};
    GroupedOperand di = {(const char *)dinp, 0, C * es};
    // dweight_g^T (C, OC) += inp_g^T (C, R_g) @ dout_g (stored (OC, R_g), op T); fp32 only
    GroupedShape sw = {0, 1, C, OC, -1, C, OC, C, 1.0f, t, BACKEND_F32};
    GroupedOperand xw = {(const char *)inp, 0, C * es}, dw = {(const char *)dweight, OC * C * 4LL, 0};
    GroupedChunk c;
    int g = 0;
    size_t off = 0;
    while (next_chunk(&c, rows, G, &g, &off)) {
        if (dinp) grouped_gemm(be, &c, &si, wi, gi, di);
        if (dweight && be->act == BACKEND_F32) grouped_gemm(be, &c, &sw, xw, gi, dw);
        else if (dweight) dweight_loop(be, dweight, dout, inp, &c, C, OC);
        for (int j = 0; dbias && j < c.n; j++)
            cuda_colsum_acc(be, dbias + (size_t)c.group[j] * OC,
                            (const char *)dout + (size_t)c.off[j] * OC * es, c.rows[j], OC);
    }
}

// grouped_forward into pre (R, OC) when given, then out = act(pre): the products, then
// act_forward (no epilogue in cuBLAS's grouped GEMM).
void cuda_matmul_grouped_forward(Backend *be, void *out, void *pre, const void *inp,
                                 const void *weight, const void *bias, const int *rows, int G,
                                 int C, int OC, BackendAct act) {
    grouped_forward(be, pre ? pre : out, inp, weight, bias, rows, G, C, OC);
    if (pre)
        be->ops->act_forward(be, out, pre, (int)backend_rows_total(rows, G),
                             backend_act_width(act, OC), act);
}

// grouped_backward, then with pre (R, C) dinp *= act'(pre) (act_backward in place).
void cuda_matmul_grouped_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                                  const void *dout, const void *inp, const void *weight,
                                  const void *pre, const int *rows, int G, int C, int OC,
                                  BackendAct act) {
    backend_check_grouped_pre(pre, dinp, act);
    grouped_backward(be, dinp, dweight, dbias, dout, inp, weight, rows, G, C, OC);
    if (pre) be->ops->act_backward(be, dinp, pre, dinp, (int)backend_rows_total(rows, G), C, act);
}

// backend/cuda/cuda_gemm.cu: GEMMs through cuBLASLt, and the linear layer on top of them.
//
// megac is row-major; cuBLASLt is column-major. A row-major (R, C) matrix is the same memory
// as a column-major (C, R) one, so the row-major product C = op(A) op(B) is computed as the
// column-major product C^T = op(B)^T op(A)^T: the operands swap places and keep their
// transpose flags. Bias (one value per output column) rides in the BIAS epilogue.
//
// Precision: fp32 operands use TF32 tensor cores or strict fp32 (the backend's math); bf16 and
// fp16 operands (be->act) use their tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F),
// the result rounded once to C's type (the act type, or fp32 for weight gradients).
//
// Determinism: the algorithm for a GEMM shape is chosen once by cuBLASLt's heuristic (which
// depends only on the shape, the alignments, the math mode and the fixed workspace size) and
// cached, so a run reuses the same algorithms every step and two runs choose the same ones.
#include "backend/cuda/cuda_internal.h"

#include <stdint.h>  // defines: uintptr_t, uint32_t
#include <string.h>  // defines: memcmp

// The cuBLASLt element type of a BackendDType. Pure.
static cudaDataType_t lt_type(BackendDType t) {
    return t == BACKEND_BF16 ? CUDA_R_16BF : t == BACKEND_F16 ? CUDA_R_16F : CUDA_R_32F;
}

// Largest power of two (<= 256) dividing the address: cuBLASLt picks algorithms that assume
// this alignment (its default assumption is 256 bytes, which strided views do not have).
static uint32_t alignment(const void *p) {
    uint32_t a = 256;
    while (a > 2 && ((uintptr_t)p % a) != 0) a /= 2;
    return a;
}

// Column-major layout of a stored matrix (rows, cols, ld) of elements `type` with `batch`
// copies `stride` elements apart.
static cublasLtMatrixLayout_t layout(cudaDataType_t type, int rows, int cols, int ld, int batch,
                                     long long stride) {
    cublasLtMatrixLayout_t l;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t b = batch;
        int64_t s = stride;
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s));
    }
    return l;
}

// The cached algorithm for `key` (its algo field ignored), choosing it on first use.
static const cublasLtMatmulAlgo_t *cached_algo(CudaState *st, CudaGemmAlgo *key, uint32_t align[4],
                                               cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                               cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc) {
    for (int i = 0; i < CUDA_GEMM_CACHE && st->cache[i].used; i++) {
        CudaGemmAlgo *c = &st->cache[i];
        CudaGemmAlgo probe = *key;
        probe.algo = c->algo;
        if (!memcmp(&probe, c, sizeof probe)) return &c->algo;
    }
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = CUDA_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(st->lt, desc, la, lb, lc, lc, pref, 1, &res, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found < 1)
        core_fatal("cuBLASLt has no algorithm for a %dx%dx%d GEMM (transposes %d%d, batch %d)",
                   key->m, key->n, key->k, key->ta, key->tb, key->batch);
    key->algo = res.algo;
    key->used = 1;
    for (int i = 0; i < CUDA_GEMM_CACHE; i++)
        if (!st->cache[i].used) {
            st->cache[i] = *key;
            return &st->cache[i].algo;
        }
    st->cache[CUDA_GEMM_CACHE - 1] = *key;  // full (more shapes than expected): reuse the last
    return &st->cache[CUDA_GEMM_CACHE - 1].algo;
}

void cuda_gemm(Backend *be, int ta, int tb, int M, int N, int K, float alpha,
               const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
               float beta, void *C, int ldc, long long sc, int batch, const void *bias,
               BackendDType ab, BackendDType cd) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    if (K <= 0) core_fatal("cuda_gemm: inner dimension K = %d (M %d, N %d)", K, M, N);
    if (bias && beta != 0.0f) core_fatal("cuda_gemm: a bias epilogue needs beta = 0");
    if (cd != ab && cd != BACKEND_F32)
        core_fatal("cuda_gemm: %s operands into a %s result", backend_dtype_name(ab),
                   backend_dtype_name(cd));
    CudaState *st = cuda_state(be);
    // column-major: D (N, M) = op_b(B') (N, K) @ op_a(A') (K, M), with A' = B and B' = A
    cublasOperation_t op1 = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op2 = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDesc_t desc;
    cublasComputeType_t ct = ab == BACKEND_F32 && st->math == BACKEND_MATH_TF32
                                 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, ct, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2));
    if (bias) {  // bias of D's type (cuBLASLt's default bias type)
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    // stored shapes (column-major): B' = B is (tb ? K : N) x (tb ? N : K); A' likewise
    cudaDataType_t tab = lt_type(ab), tcd = lt_type(cd);
    cublasLtMatrixLayout_t l1 = layout(tab, tb ? K : N, tb ? N : K, ldb, batch, sb);
    cublasLtMatrixLayout_t l2 = layout(tab, ta ? M : K, ta ? K : M, lda, batch, sa);
    cublasLtMatrixLayout_t lc = layout(tcd, N, M, ldc, batch, sc);
    uint32_t align[4] = {alignment(B), alignment(A), alignment(C), alignment(C)};
    CudaGemmAlgo key;
    memset(&key, 0, sizeof key);
    key.ta = ta, key.tb = tb, key.m = M, key.n = N, key.k = K;
    key.lda = lda, key.ldb = ldb, key.ldc = ldc, key.batch = batch;
    key.epilogue = (bias != NULL) | (int)(alignment(A) << 1) | (int)(alignment(B) << 10) |
                   (int)(alignment(C) << 19);
    key.ab = (int)ab, key.cd = (int)cd;
    key.sa = sa, key.sb = sb, key.sc = sc;
    const cublasLtMatmulAlgo_t *algo = cached_algo(st, &key, align, desc, l1, l2, lc);
    CUBLAS_CHECK(cublasLtMatmul(st->lt, desc, &alpha, B, l1, A, l2, &beta, C, lc, C, lc, algo,
                                st->workspace, CUDA_WORKSPACE_BYTES, st->stream));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l1));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l2));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
}

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), the bias in the epilogue; all of
// type be->act.
void cuda_matmul_forward(Backend *be, void *out, const void *inp, const void *weight,
                         const void *bias, int N, int C, int OC) {
    cuda_gemm(be, 0, 1, N, OC, C, 1.0f, inp, C, 0, weight, C, 0, 0.0f, out, OC, 0, 1, bias,
              be->act, be->act);
}

// dinp (N, C, act) = dout (N, OC, act) @ weight (OC, C, act); dweight (OC, C, fp32) +=
// dout^T @ inp (beta = 1: act operands, fp32 result); dbias (OC, fp32) += column sums of dout
// (a deterministic reduction kernel: the BGRADB epilogue would overwrite, not accumulate).
void cuda_matmul_backward(Backend *be, void *dinp, float *dweight, float *dbias,
                          const void *dout, const void *inp, const void *weight,
                          int N, int C, int OC) {
    if (dinp) cuda_gemm(be, 0, 0, N, C, OC, 1.0f, dout, OC, 0, weight, C, 0, 0.0f, dinp, C, 0,
                        1, NULL, be->act, be->act);
    if (dweight) cuda_gemm(be, 1, 0, OC, C, N, 1.0f, dout, OC, 0, inp, C, 0, 1.0f, dweight, C, 0,
                           1, NULL, be->act, BACKEND_F32);
    if (dbias) cuda_colsum_acc(be, dbias, dout, N, OC);
}

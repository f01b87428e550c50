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
// The cache (CudaState.cache, keyed by CudaGemmKey) also keeps the matmul descriptor and the
// layouts, so a repeated GEMM creates nothing and asks no heuristic: it sets its bias/aux
// pointers on the cached descriptor and calls cublasLtMatmul.
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

// Builds entry e for e->key: the matmul descriptor (compute type, transposes, epilogue, aux
// leading dimension; pointers set per call), the layouts and cuBLASLt's algorithm for them.
static void cache_build(CudaState *st, CudaGemmAlgo *e, const void *bias, const void *aux) {
    const CudaGemmKey *k = &e->key;
    BackendDType ab = (BackendDType)k->ab, cd = (BackendDType)k->cd;
    // column-major: D (N, M) = op_b(B') (N, K) @ op_a(A') (K, M), with A' = B and B' = A
    cublasOperation_t op1 = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, op2 = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasComputeType_t ct = ab == BACKEND_F32 && st->math == BACKEND_MATH_TF32
                                 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&e->desc, ct, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2));
    if (k->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {  // bias and aux of D's type (the defaults)
        cublasLtEpilogue_t epi = (cublasLtEpilogue_t)k->epilogue;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    }
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (k->aux_ld) {
        int64_t ld = k->aux_ld;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    }
    // stored shapes (column-major): B' = B is (tb ? K : N) x (tb ? N : K); A' likewise
    cudaDataType_t tab = lt_type(ab), tcd = lt_type(cd);
    e->la = layout(tab, k->tb ? k->k : k->n, k->tb ? k->n : k->k, k->ldb, k->batch, k->sb);
    e->lb = layout(tab, k->ta ? k->m : k->k, k->ta ? k->k : k->m, k->lda, k->batch, k->sa);
    e->lc = layout(tcd, k->n, k->m, k->ldc, k->batch, k->sc);
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = CUDA_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    uint32_t align[4] = {(uint32_t)k->align_b, (uint32_t)k->align_a, (uint32_t)k->align_c,
                         (uint32_t)k->align_c};
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    int optional = k->epilogue != CUBLASLT_EPILOGUE_DEFAULT && k->epilogue != CUBLASLT_EPILOGUE_BIAS;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(st->lt, e->desc, e->la, e->lb, e->lc, e->lc,
                                                       pref, 1, &res, &found);
    if (hs != CUBLAS_STATUS_SUCCESS && optional) found = 0;  // e.g. NOT_SUPPORTED: run unfused
    else CUBLAS_CHECK(hs);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found < 1 && !optional)
        core_fatal("cuBLASLt has no algorithm for a %dx%dx%d GEMM (transposes %d%d, batch %d, "
                   "epilogue %d)", k->m, k->n, k->k, k->ta, k->tb, k->batch, k->epilogue);
    e->algo = res.algo;
    e->found = found >= 1;  // a GELU epilogue without an algorithm: the caller runs unfused
    e->used = 1;
}

// Destroys entry e's descriptors (it becomes unused).
static void cache_drop(CudaGemmAlgo *e) {
    if (!e->used) return;
    cublasLtMatrixLayoutDestroy(e->la);
    cublasLtMatrixLayoutDestroy(e->lb);
    cublasLtMatrixLayoutDestroy(e->lc);
    cublasLtMatmulDescDestroy(e->desc);
    e->used = 0;
}

void cuda_gemm_cache_free(CudaState *st) {
    for (int i = 0; i < CUDA_GEMM_CACHE; i++) cache_drop(&st->cache[i]);
}

// The cache entry of `key`, built on first use (the descriptor's bias/aux pointers are set to
// this call's). A full cache (more shapes than any model has) replaces its last entry.
static CudaGemmAlgo *cache_get(CudaState *st, const CudaGemmKey *key, const void *bias,
                               const void *aux) {
    int i = 0;
    for (; i < CUDA_GEMM_CACHE && st->cache[i].used; i++) {
        CudaGemmAlgo *c = &st->cache[i];
        if (memcmp(&c->key, key, sizeof *key)) continue;
        if (bias)
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        if (key->aux_ld)
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        return c;
    }
    if (i == CUDA_GEMM_CACHE) cache_drop(&st->cache[--i]);
    st->cache[i].key = *key;
    cache_build(st, &st->cache[i], bias, aux);
    return &st->cache[i];
}

int cuda_gelu_epilogue_ok(const void *bias, const void *aux, int aux_ld) {
    return (!bias || alignment(bias) >= 16) && alignment(aux) >= 16 && aux_ld % 8 == 0;
}

int cuda_gemm_ex(Backend *be, int ta, int tb, int M, int N, int K, float alpha,
                 const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
                 float beta, void *C, int ldc, long long sc, int batch, int epilogue,
                 const void *bias, const void *aux, int aux_ld, BackendDType ab, BackendDType cd) {
    if (M <= 0 || N <= 0 || batch <= 0) return 1;
    if (K <= 0) core_fatal("cuda_gemm: inner dimension K = %d (M %d, N %d)", K, M, N);
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && beta != 0.0f)
        core_fatal("cuda_gemm: epilogue %d needs beta = 0", epilogue);
    int gelu = epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
               epilogue == CUBLASLT_EPILOGUE_DGELU;
    int bias_epi = epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (!gelu && epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_BIAS)
        core_fatal("cuda_gemm: epilogue %d is not used by megac", epilogue);
    if (bias_epi != (bias != NULL) || (gelu && (!aux || batch != 1 || !cuda_gelu_epilogue_ok(bias, aux, aux_ld))))
        core_fatal("cuda_gemm: epilogue %d with bias %p, aux %p (ld %d, batch %d): not allowed",
                   epilogue, bias, aux, aux_ld, batch);
    if (cd != ab && cd != BACKEND_F32)
        core_fatal("cuda_gemm: %s operands into a %s result", backend_dtype_name(ab),
                   backend_dtype_name(cd));
    CudaState *st = cuda_state(be);
    CudaGemmKey key;
    memset(&key, 0, sizeof key);
    key.ta = ta, key.tb = tb, key.m = M, key.n = N, key.k = K;
    key.lda = lda, key.ldb = ldb, key.ldc = ldc, key.batch = batch;
    key.epilogue = epilogue, key.aux_ld = gelu ? aux_ld : 0;
    key.ab = (int)ab, key.cd = (int)cd;
    key.align_a = (int)alignment(A), key.align_b = (int)alignment(B), key.align_c = (int)alignment(C);
    key.align_bias = bias ? (int)alignment(bias) : 0;
    key.align_aux = gelu ? (int)alignment(aux) : 0;
    key.sa = sa, key.sb = sb, key.sc = sc;
    const CudaGemmAlgo *e = cache_get(st, &key, bias, aux);
    if (!e->found) return 0;
    CUBLAS_CHECK(cublasLtMatmul(st->lt, e->desc, &alpha, B, e->la, A, e->lb, &beta, C, e->lc, C,
                                e->lc, &e->algo, st->workspace, CUDA_WORKSPACE_BYTES, st->stream));
    return 1;
}

void cuda_gemm(Backend *be, int ta, int tb, int M, int N, int K, float alpha,
               const void *A, int lda, long long sa, const void *B, int ldb, long long sb,
               float beta, void *C, int ldc, long long sc, int batch, const void *bias,
               BackendDType ab, BackendDType cd) {
    if (bias && beta != 0.0f) core_fatal("cuda_gemm: a bias epilogue needs beta = 0");
    cuda_gemm_ex(be, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch,
                 bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, NULL, 0, ab, cd);
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

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_gemm_ops(BackendOps *t) {
    t->matmul_forward = cuda_matmul_forward;
    t->matmul_backward = cuda_matmul_backward;
    t->matmul_grouped_forward = cuda_matmul_grouped_forward;
    t->matmul_grouped_backward = cuda_matmul_grouped_backward;
}

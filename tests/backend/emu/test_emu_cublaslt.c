// tests/backend/emu/test_emu_cublaslt.c: the emulator's cuBLASLt GEMM against OpenBLAS
// cblas_sgemm (column-major): the 4 transpose combinations at an awkward size with ld > rows,
// strided batches accumulating onto C in place (beta 1), the bias epilogue, TF32 rounding
// (exact against pre-rounded inputs, ~1e-3 away from fp32), thread-count independence, and
// the refusals (bad layouts, unsupported epilogue, NULL handle, foreign algo, GELU epilogues
// without a usable aux matrix). The GELU epilogues' values: tests/backend/cuda/test_cuda_fused.
#include <cublasLt.h>
#include <cblas.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testing.h"  // defines: EXPECT, test_failures_

static cublasLtHandle_t lt;

// One GEMM as the CUDA backend would set it up. (Column-major; s* are batch strides.)
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, batch, arows;  // arows: 0 = the right rows of A
    long long sa, sb, sc;
    cublasComputeType_t compute;
    cublasLtEpilogue_t epilogue;
    const float *bias;
} Shape;

static cublasLtMatrixLayout_t layout(uint64_t rows, uint64_t cols, int64_t ld, int batch,
                                     long long stride) {
    cublasLtMatrixLayout_t l;
    int32_t b = batch;
    int64_t s = stride;
    cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, rows, cols, ld);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s);
    return l;
}

// D (= C, in place) = alpha op(A) op(B) + beta C through heuristic + matmul.
static cublasStatus_t lt_gemm(const Shape *g, float alpha, const float *A, const float *B,
                              float beta, float *C) {
    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, g->compute, CUDA_R_32F);
    int32_t ta = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint32_t ep = g->epilogue ? (uint32_t)g->epilogue : CUBLASLT_EPILOGUE_DEFAULT;
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
    if (g->bias)
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                       sizeof g->bias);
    int ar = g->arows ? g->arows : g->ta ? g->k : g->m;
    cublasLtMatrixLayout_t la = layout(ar, g->ta ? g->m : g->k, g->lda, g->batch, g->sa);
    cublasLtMatrixLayout_t lb =
        layout(g->tb ? g->n : g->k, g->tb ? g->k : g->n, g->ldb, g->batch, g->sb);
    cublasLtMatrixLayout_t lc = layout(g->m, g->n, g->ldc, g->batch, g->sc);
    cublasLtMatmulPreference_t pref;
    uint64_t ws = 1 << 20;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    uint32_t align = 4;  // the test's pointers are offset into malloc'd arrays
    for (int i = 0; i < 4; i++)
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i,
                                             &align, sizeof align);
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, 1, &h, &found);
    if (s == CUBLAS_STATUS_SUCCESS) {
        EXPECT(found == 1 && h.workspaceSize == 0, "heuristic: %d results", found);
        s = cublasLtMatmul(lt, d, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &h.algo, NULL, 0, 0);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(d);
    return s;
}

static float *randoms(size_t n, unsigned seed) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    return x;
}

// Max |x - y| / (1 + |y|) over n.
static double max_rel(const float *x, const float *y, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - y[i]) / (1.0 + fabs((double)y[i]));
        if (d != d) return d;  // NaN
        if (d > e) e = d;
    }
    return e;
}

static void ref_gemm(const Shape *g, float alpha, const float *A, const float *B, float beta,
                     float *C) {
    for (int b = 0; b < g->batch; b++)
        cblas_sgemm(CblasColMajor, g->ta ? CblasTrans : CblasNoTrans,
                    g->tb ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, alpha, A + b * g->sa,
                    g->lda, B + b * g->sb, g->ldb, beta, C + b * g->sc, g->ldc);
}

static void test_against_blas(void) {
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            Shape g = {ta, tb, 37, 67, 100, 0, 0, 40, 3, 0, 0, 0, 0, CUBLAS_COMPUTE_32F, 0, NULL};
            g.lda = (ta ? g.k : g.m) + 3, g.ldb = (tb ? g.n : g.k) + 5;
            g.sa = (long long)g.lda * (ta ? g.m : g.k) + 7;
            g.sb = (long long)g.ldb * (tb ? g.k : g.n) + 1;
            g.sc = (long long)g.ldc * g.n + 11;
            size_t nc = (size_t)g.sc * 3;
            float *A = randoms((size_t)g.sa * 3, 1), *B = randoms((size_t)g.sb * 3, 2);
            float *C = randoms(nc, 3), *R = malloc(nc * sizeof *R);
            memcpy(R, C, nc * sizeof *R);
            EXPECT(lt_gemm(&g, 0.75f, A, B, 1.0f, C) == CUBLAS_STATUS_SUCCESS, "gemm %d%d", ta, tb);
            ref_gemm(&g, 0.75f, A, B, 1.0f, R);
            double e = max_rel(C, R, nc);
            EXPECT(e < 1e-5, "op %c%c batch 3, beta 1: max rel diff %g", "NT"[ta], "NT"[tb], e);
            g.batch = 1;  // beta 0: C is not read (NaN there must not leak in)
            for (size_t i = 0; i < nc; i++) C[i] = R[i] = NAN;
            EXPECT(lt_gemm(&g, -1.5f, A, B, 0.0f, C) == CUBLAS_STATUS_SUCCESS, "beta 0");
            ref_gemm(&g, -1.5f, A, B, 0.0f, R);
            e = 0;
            for (int j = 0; j < g.n; j++) {
                double ej = max_rel(C + (size_t)j * g.ldc, R + (size_t)j * g.ldc, (size_t)g.m);
                e = ej > e || ej != ej ? ej : e;
            }
            EXPECT(e < 1e-5, "op %c%c beta 0: max rel diff %g", "NT"[ta], "NT"[tb], e);
            free(A), free(B), free(C), free(R);
        }
    }
}

static void test_bias_and_threads(void) {
    Shape g = {1, 0, 64, 300, 96, 96, 96, 64, 1, 0, 0, 0, 0, CUBLAS_COMPUTE_32F,
               CUBLASLT_EPILOGUE_BIAS, NULL};
    float *A = randoms(96 * 64, 4), *B = randoms(96 * 300, 5), *bias = randoms(64, 6);
    float *C = calloc(64 * 300, sizeof *C), *R = calloc(64 * 300, sizeof *R);
    float *C1 = calloc(64 * 300, sizeof *C);
    g.bias = bias;
    EXPECT(lt_gemm(&g, 1.0f, A, B, 0.0f, C) == CUBLAS_STATUS_SUCCESS, "bias gemm");
    ref_gemm(&g, 1.0f, A, B, 0.0f, R);
    for (int j = 0; j < 300; j++)
        for (int i = 0; i < 64; i++) R[i + 64 * j] += bias[i];
    EXPECT(max_rel(C, R, 64 * 300) < 1e-5, "bias epilogue: %g", max_rel(C, R, 64 * 300));
    g.bias = NULL;
    EXPECT(lt_gemm(&g, 1.0f, A, B, 0.0f, C) == CUBLAS_STATUS_INVALID_VALUE, "bias without pointer");
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;  // 64*300*96 > 2^20: the parallel path
    setenv("MEGAC_EMU_GEMM_THREADS", "1", 1);
    lt_gemm(&g, 1.0f, A, B, 0.0f, C1);
    setenv("MEGAC_EMU_GEMM_THREADS", "3", 1);
    lt_gemm(&g, 1.0f, A, B, 0.0f, C);
    unsetenv("MEGAC_EMU_GEMM_THREADS");
    EXPECT(memcmp(C, C1, 64 * 300 * sizeof *C) == 0, "1 and 3 threads differ");
    free(A), free(B), free(bias), free(C), free(R), free(C1);
}

// x rounded to 10 mantissa bits, to nearest even (finite x).
static float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t low = u & 0x1fff, keep = u & ~0x1fffu;
    if (low > 0x1000 || (low == 0x1000 && (keep & 0x2000))) keep += 0x2000;
    memcpy(&x, &keep, 4);
    return x;
}

static void test_tf32(void) {
    Shape g = {0, 1, 48, 40, 200, 48, 40, 48, 1, 0, 0, 0, 0, CUBLAS_COMPUTE_32F, 0, NULL};
    float *A = randoms(48 * 200, 7), *B = randoms(40 * 200, 8);
    float *Ar = malloc(48 * 200 * sizeof *A), *Br = malloc(40 * 200 * sizeof *B);
    for (int i = 0; i < 48 * 200; i++) Ar[i] = tf32(A[i]);
    for (int i = 0; i < 40 * 200; i++) Br[i] = tf32(B[i]);
    float *D32 = calloc(48 * 40, 4), *Dtf = calloc(48 * 40, 4), *Dpre = calloc(48 * 40, 4);
    lt_gemm(&g, 1.0f, A, B, 0.0f, D32);
    lt_gemm(&g, 1.0f, Ar, Br, 0.0f, Dpre);
    g.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    EXPECT(lt_gemm(&g, 1.0f, A, B, 0.0f, Dtf) == CUBLAS_STATUS_SUCCESS, "tf32 gemm");
    EXPECT(memcmp(Dtf, Dpre, 48 * 40 * 4) == 0, "TF32 mode != fp32 on TF32-rounded inputs");
    double e = 0, mag = 0;
    for (int i = 0; i < 48 * 40; i++) {
        e = fmax(e, fabs((double)Dtf[i] - D32[i]));
        mag = fmax(mag, fabs((double)D32[i]));
    }
    EXPECT(e / mag > 1e-5 && e / mag < 5e-3, "TF32 vs fp32: rel diff %g (want ~1e-3, not 0)",
           e / mag);
    printf("TF32 vs fp32 on k=200: max diff / max |D| = %.2e\n", e / mag);
    // ties to even: 1 + 2^-11 -> 1, 1 + 3*2^-11 -> 1 + 2^-9
    Shape one = {0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, CUBLAS_COMPUTE_32F_FAST_TF32, 0, NULL};
    float a[2] = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f}, b = 1.0f, d = 0;
    lt_gemm(&one, 1.0f, &a[0], &b, 0.0f, &d);
    EXPECT(d == 1.0f, "1 + 2^-11 -> %a", d);
    lt_gemm(&one, 1.0f, &a[1], &b, 0.0f, &d);
    EXPECT(d == 1.0f + 0x1p-9f, "1 + 3*2^-11 -> %a", d);
    free(A), free(B), free(Ar), free(Br), free(D32), free(Dtf), free(Dpre);
}

static void test_refusals(void) {
    float A[64] = {0}, B[64] = {0}, C[64] = {0}, one = 1.0f;
    Shape g = {0, 0, 4, 4, 4, 4, 4, 4, 1, 0, 0, 0, 0, CUBLAS_COMPUTE_32F, 0, NULL};
    Shape bad = g;
    bad.arows = 5;  // A has 5 rows but op(A) must be 4 x 4
    bad.lda = 5;
    EXPECT(lt_gemm(&bad, 1, A, B, 0, C) == CUBLAS_STATUS_INVALID_VALUE, "A rows mismatch");
    bad = g, bad.ldb = 3;
    EXPECT(lt_gemm(&bad, 1, A, B, 0, C) == CUBLAS_STATUS_INVALID_VALUE, "ld < rows");
    bad = g, bad.epilogue = (cublasLtEpilogue_t)2;  // RELU
    EXPECT(lt_gemm(&bad, 1, A, B, 0, C) == CUBLAS_STATUS_NOT_SUPPORTED, "RELU epilogue");
    bad = g, bad.compute = (cublasComputeType_t)64;  // CUBLAS_COMPUTE_16F
    EXPECT(lt_gemm(&bad, 1, A, B, 0, C) == CUBLAS_STATUS_NOT_SUPPORTED, "16F compute");

    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayout_t l4 = layout(4, 4, 4, 1, 0), l4b2 = layout(4, 4, 4, 2, 16);
    cublasLtMatmulAlgo_t zero_algo;
    memset(&zero_algo, 0, sizeof zero_algo);
    EXPECT(cublasLtMatmul(NULL, d, &one, A, l4, B, l4, &one, C, l4, C, l4, NULL, NULL, 0, 0) ==
           CUBLAS_STATUS_NOT_INITIALIZED, "NULL handle");
    EXPECT(cublasLtMatmul(lt, d, &one, A, l4b2, B, l4, &one, C, l4, C, l4, NULL, NULL, 0, 0) ==
           CUBLAS_STATUS_INVALID_VALUE, "batch counts differ");
    EXPECT(cublasLtMatmul(lt, d, &one, A, l4, B, l4, &one, C, l4, C, l4, &zero_algo, NULL, 0, 0) ==
           CUBLAS_STATUS_INVALID_VALUE, "algo not from the heuristic");
    EXPECT(cublasLtMatmul(lt, d, &one, A, l4, B, l4, &one, C, l4, C, l4, NULL, NULL, 0, 0) ==
           CUBLAS_STATUS_SUCCESS, "NULL algo is fine");
    // GELU epilogues: an aux matrix is required, its leading dimension a multiple of 8 (and
    // >= rows of D), its pointer 16-byte aligned; A = B = 0 gives D = gelu(0) = 0, aux = 0
    static float aux[40] __attribute__((aligned(16)));
    const struct { const float *p; int64_t ld; cublasStatus_t want; const char *what; } gc[] = {
        {NULL, 8, CUBLAS_STATUS_INVALID_VALUE, "GELU_AUX without aux"},
        {aux, 4, CUBLAS_STATUS_INVALID_VALUE, "GELU_AUX with aux ld 4"},
        {aux + 1, 8, CUBLAS_STATUS_INVALID_VALUE, "GELU_AUX with aux 4-byte aligned"},
        {aux, 8, CUBLAS_STATUS_SUCCESS, "GELU_AUX"}};
    float fzero = 0.0f;
    for (int i = 0; i < 4; i++) {
        cublasLtMatmulDesc_t dg;
        uint32_t ep = CUBLASLT_EPILOGUE_GELU_AUX;
        cublasLtMatmulDescCreate(&dg, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatmulDescSetAttribute(dg, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
        cublasLtMatmulDescSetAttribute(dg, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gc[i].p,
                                       sizeof gc[i].p);
        cublasLtMatmulDescSetAttribute(dg, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &gc[i].ld,
                                       sizeof gc[i].ld);
        for (int j = 0; j < 40; j++) aux[j] = 7.0f;
        C[0] = 7.0f;
        EXPECT(cublasLtMatmul(lt, dg, &one, A, l4, B, l4, &fzero, C, l4, C, l4, NULL, NULL, 0, 0) ==
               gc[i].want, "%s", gc[i].what);
        if (gc[i].want == CUBLAS_STATUS_SUCCESS)
            EXPECT(C[0] == 0.0f && aux[0] == 0.0f && aux[4] == 7.0f, "GELU_AUX: D %g aux %g, %g",
                   C[0], aux[0], aux[4]);
        cublasLtMatmulDescDestroy(dg);
    }
    // an algo chosen for the default 256-byte alignment, used with a 4-byte aligned A
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t h256;
    int n256 = 0;
    static float big[64 + 64] __attribute__((aligned(256)));
    EXPECT(cublasLtMatmulAlgoGetHeuristic(lt, d, l4, l4, l4, l4, pref, 1, &h256, &n256) ==
           CUBLAS_STATUS_SUCCESS && n256 == 1, "heuristic with default alignment");
    EXPECT(cublasLtMatmul(lt, d, &one, big + 1, l4, big, l4, &one, big + 64, l4, big + 64, l4,
                          &h256.algo, NULL, 0, 0) == CUBLAS_STATUS_INVALID_VALUE, "misaligned A");
    EXPECT(cublasLtMatmul(lt, d, &one, big, l4, big, l4, &one, big + 64, l4, big + 64, l4,
                          &h256.algo, NULL, 0, 0) == CUBLAS_STATUS_SUCCESS, "aligned");
    cublasLtMatmulPreferenceDestroy(pref);
    int32_t t = CUBLAS_OP_T;
    EXPECT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, 8) ==
           CUBLAS_STATUS_INVALID_VALUE, "wrong attribute size");
    int32_t zero = 0;
    EXPECT(cublasLtMatrixLayoutSetAttribute(l4, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &zero, 4) ==
           CUBLAS_STATUS_INVALID_VALUE, "batch count 0");
    cublasLtMatmulHeuristicResult_t h;
    int found = 5;
    EXPECT(cublasLtMatmulAlgoGetHeuristic(lt, d, l4b2, l4, l4, l4, NULL, 1, &h, &found) ==
           CUBLAS_STATUS_INVALID_VALUE && found == 0, "heuristic on bad layouts");
    EXPECT(strcmp(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
                  "CUBLAS_STATUS_NOT_SUPPORTED") == 0, "status name");
    cublasLtMatrixLayoutDestroy(l4), cublasLtMatrixLayoutDestroy(l4b2);
    cublasLtMatmulDescDestroy(d);
}

int main(void) {
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
    fprintf(stderr, "(emu: lines on stderr are the refusals under test)\n");
    test_against_blas();
    test_bias_and_threads();
    test_tf32();
    test_refusals();
    cublasLtDestroy(lt);
    if (test_failures_) {
        fprintf(stderr, "%d failure(s)\n", test_failures_);
        return 1;
    }
    printf("emu cuBLASLt tests passed\n");
    return 0;
}

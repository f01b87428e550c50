// tests/backend/emu/test_emu_cublaslt_half.c: the emulator's cuBLASLt with bf16 and fp16 data
// (CUBLAS_COMPUTE_32F): A = B = 16BF or 16F into D of the same type (with the bias epilogue,
// bias of D's type) or into fp32 D accumulated with beta = 1 (weight gradients), strided
// batches; each against a double-precision reference of the same 16-bit inputs (the result
// rounded once: within half an ulp of the type, 2^-8 / 2^-11 relative). And the combinations
// cuBLASLt refuses: mixed A/B types, 16-bit inputs into the other 16-bit type, C and D of
// different types, TF32 compute on 16-bit data, a bias of another type than D.
#include <cublasLt.h>
#include <emu_half.h>  // defines: emu_f32_to_bf16, emu_bf16_to_f32, emu_f32_to_f16, ...

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testing.h"  // defines: EXPECT, test_failures_

static cublasLtHandle_t lt;

// Types and shape of one GEMM: D (m, n) = alpha op(A) op(B) + beta C, column-major, packed
// (ld = rows), `batch` copies back to back; C is D.
typedef struct {
    cudaDataType_t ta, tb, tc, td;
    cublasComputeType_t compute;
    int opa, opb, m, n, k, batch;
    const void *bias;
    int32_t bias_type;  // -1: not set
} G;

static cublasLtMatrixLayout_t layout(cudaDataType_t t, int rows, int cols, int batch) {
    cublasLtMatrixLayout_t l;
    int32_t b = batch;
    int64_t s = (int64_t)rows * cols;
    cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, rows);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s);
    return l;
}

static cublasStatus_t run(const G *g, float alpha, const void *A, const void *B, float beta, void *D) {
    cublasLtMatmulDesc_t d;
    cublasLtMatmulDescCreate(&d, g->compute, CUDA_R_32F);
    int32_t oa = g->opa ? CUBLAS_OP_T : CUBLAS_OP_N, ob = g->opb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob);
    if (g->bias) {
        uint32_t ep = CUBLASLT_EPILOGUE_BIAS;
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
        cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
        if (g->bias_type != -1)
            cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &g->bias_type, 4);
    }
    cublasLtMatrixLayout_t la = layout(g->ta, g->opa ? g->k : g->m, g->opa ? g->m : g->k, g->batch);
    cublasLtMatrixLayout_t lb = layout(g->tb, g->opb ? g->n : g->k, g->opb ? g->k : g->n, g->batch);
    cublasLtMatrixLayout_t lc = layout(g->tc, g->m, g->n, g->batch);
    cublasLtMatrixLayout_t ld = layout(g->td, g->m, g->n, g->batch);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, ld, NULL, 1, &res, &found);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(lt, d, &alpha, A, la, B, lb, &beta, D, lc, D, ld, &res.algo, NULL, 0, 0);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc), cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(d);
    return s;
}

static float get(const void *p, size_t i, cudaDataType_t t) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == CUDA_R_16BF ? emu_bf16_to_f32(h) : emu_f16_to_f32(h);
}
static void put(void *p, size_t i, cudaDataType_t t, float v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = t == CUDA_R_16BF ? emu_f32_to_bf16(v) : emu_f32_to_f16(v);
}

// n random values in [-1, 1) stored as t (4 bytes per element allocated whatever t; 256-byte
// aligned, as the heuristic assumes without a preference).
static void *randoms(size_t n, cudaDataType_t t, unsigned *seed) {
    void *p = aligned_alloc(256, (4 * n + 255) / 256 * 256);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        put(p, i, t, (float)((*seed >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0));
    }
    return p;
}

// Runs g on random inputs (D starts random: accumulated when beta = 1) and checks every
// element against the double reference within tol relative to max(1, |ref|).
static void check(const char *what, G g, float beta, double tol) {
    unsigned seed = 12345;
    size_t na = (size_t)g.m * g.k * g.batch, nb = (size_t)g.k * g.n * g.batch;
    size_t nd = (size_t)g.m * g.n * g.batch;
    void *A = randoms(na, g.ta, &seed), *B = randoms(nb, g.tb, &seed), *D = randoms(nd, g.td, &seed);
    void *bias = randoms((size_t)g.m, g.td, &seed);
    double *ref = malloc(sizeof(double) * nd);
    if (g.bias) g.bias = bias;
    float alpha = 0.75f;
    for (int bt = 0; bt < g.batch; bt++)
        for (int j = 0; j < g.n; j++)
            for (int i = 0; i < g.m; i++) {
                double s = 0;
                for (int p = 0; p < g.k; p++) {
                    size_t ia = (size_t)bt * g.m * g.k + (g.opa ? p + (size_t)i * g.k : i + (size_t)p * g.m);
                    size_t ib = (size_t)bt * g.k * g.n + (g.opb ? j + (size_t)p * g.n : p + (size_t)j * g.k);
                    s += (double)get(A, ia, g.ta) * get(B, ib, g.tb);
                }
                size_t id = (size_t)bt * g.m * g.n + i + (size_t)j * g.m;
                ref[id] = alpha * s + beta * get(D, id, g.td) + (g.bias ? get(bias, i, g.td) : 0);
            }
    cublasStatus_t s = run(&g, alpha, A, B, beta, D);
    EXPECT(s == CUBLAS_STATUS_SUCCESS, "%s: status %d", what, (int)s);
    double worst = 0;
    for (size_t i = 0; i < nd; i++) {
        double e = fabs(get(D, i, g.td) - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (!(e <= worst)) worst = e;
    }
    EXPECT(worst <= tol, "%s: worst relative error %.3g > %.3g", what, worst, tol);
    free(A), free(B), free(D), free(bias), free(ref);
}

static void test_half_gemms(void) {
    G bf = {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 1, 0, 37, 29, 50, 1, NULL, -1};
    check("bf16 -> bf16, op T N", bf, 0.0f, 0x1p-8);
    bf.bias = (void *)1, bf.opa = 0, bf.opb = 1;  // (the check supplies the bias)
    check("bf16 -> bf16 + bf16 bias, op N T", bf, 0.0f, 0x1p-8);
    G bfw = {CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, 0, 1, 24, 33, 70, 1, NULL, -1};
    check("bf16 -> fp32, beta 1", bfw, 1.0f, 1e-6);
    G hf = {CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 0, 0, 17, 19, 23, 3, NULL, -1};
    check("fp16 -> fp16, 3 batches", hf, 0.0f, 0x1p-11);
    hf.td = hf.tc = CUDA_R_32F;
    check("fp16 -> fp32, 3 batches, beta 1", hf, 1.0f, 1e-6);
}

static void test_refusals(void) {
    _Alignas(256) uint16_t A[64] = {0}, B[64] = {0}, D[64] = {0}, bias[128] = {0};
    G g = {CUDA_R_16BF, CUDA_R_16F, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 0, 0, 4, 4, 4, 1, NULL, -1};
    EXPECT(run(&g, 1, A, B, 0, D) == CUBLAS_STATUS_NOT_SUPPORTED, "A bf16, B fp16");
    g.tb = CUDA_R_16BF, g.tc = g.td = CUDA_R_16F;
    EXPECT(run(&g, 1, A, B, 0, D) == CUBLAS_STATUS_NOT_SUPPORTED, "bf16 into fp16");
    g.tc = CUDA_R_32F, g.td = CUDA_R_16BF;
    EXPECT(run(&g, 1, A, B, 0, D) == CUBLAS_STATUS_NOT_SUPPORTED, "C fp32, D bf16");
    g.tc = g.td = CUDA_R_16BF, g.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    EXPECT(run(&g, 1, A, B, 0, D) == CUBLAS_STATUS_NOT_SUPPORTED, "TF32 compute on bf16");
    g.ta = g.tb = CUDA_R_32F, g.compute = CUBLAS_COMPUTE_32F;
    EXPECT(run(&g, 1, A, B, 0, D) == CUBLAS_STATUS_NOT_SUPPORTED, "fp32 into bf16");
    g.ta = g.tb = CUDA_R_16BF, g.bias = bias, g.bias_type = CUDA_R_16F;
    EXPECT(run(&g, 1, A, B, 0, D) == CUBLAS_STATUS_INVALID_VALUE, "fp16 bias, bf16 D");
    g.bias_type = CUDA_R_16BF;
    EXPECT(run(&g, 1, A, B, 0, D) == CUBLAS_STATUS_SUCCESS, "bf16 bias type set explicitly");
}

int main(void) {
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) return 1;
    test_half_gemms();
    fprintf(stderr, "(the emu: lines below are the refusals under test)\n");
    test_refusals();
    cublasLtDestroy(lt);
    return test_result("emu_cublaslt_half");
}

// backend/cuda/emu/emu_cublaslt.c: the CPU emulator's cuBLASLt: a reference GEMM for exactly
// what the CUDA backend asks of cuBLASLt.
//
//   D = alpha * op(A) @ op(B) + beta * C (+ bias)    column-major, as cuBLAS
//   op(A) (m, k), op(B) (k, n), C and D (m, n); op N or T; C may be D (same layout).
//   Scale (alpha, beta) CUDA_R_32F. Data types, as cuBLASLt's table for these compute types:
//     CUBLAS_COMPUTE_32F:  A = B = 32F, C = D = 32F;  A = B = 16BF, C = D = 16BF or 32F;
//                          A = B = 16F, C = D = 16F or 32F
//     CUBLAS_COMPUTE_32F_FAST_TF32 / _FAST_16BF: all 32F; they round each element of A and B
//     to 10 / 7 mantissa bits (round to nearest even) before multiplying, so emulated TF32
//     runs carry TF32-like error.
//   16-bit elements are read exactly (as fp32). Products are accumulated in DOUBLE (exact
//   products, one rounding at the end, to D's type: round to nearest even, emu_half.h): this
//   is a reference, not a model of GPU rounding.
//   Strided batches (BATCH_COUNT, STRIDED_BATCH_OFFSET on every layout; counts must agree);
//   epilogue DEFAULT, or BIAS: bias (m) added to every column (every batch); the bias is of
//   D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE unset or equal to it; others refused).
//   GELU epilogues (batch 1 only), with the aux matrix (m, n) of D's type at
//   EPILOGUE_AUX_POINTER, leading dimension EPILOGUE_AUX_LD (>= m, a multiple of 8, as
//   cublasLt.h requires) and 16-byte aligned (megac's conservative reading of cuBLASLt's
//   rules): GELU_AUX(_BIAS): p = float(alpha AB (+ bias)); aux = p, D = gelu(p), both rounded
//   once to D's type; DGELU: D = float(alpha AB) * gelu'(aux). gelu is the tanh form in the
//   same fp32 expression as the CUDA backend's gelu kernels (backend/cuda/norm.cuh), so fp32
//   results are the bits of the unfused GEMM + kernel.
// Layouts that do not fit the ops and m/n/k give CUBLAS_STATUS_INVALID_VALUE with one stderr
// line saying what; anything outside the list above gives CUBLAS_STATUS_NOT_SUPPORTED.
// The heuristic's one algo records a marker and the alignments of A, B, C, D the preference
// promised (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256, as cuBLASLt assumes):
// cublasLtMatmul refuses (INVALID_VALUE) pointers less aligned than their algo was chosen for,
// the failure a cached algo reused with other pointers can meet on a GPU.
// Columns of D are split over up to 8 threads for large GEMMs (env MEGAC_EMU_GEMM_THREADS,
// default the online CPUs); each element is the same dot product in the same order whatever
// the thread count, so results do not depend on it.
#include "emu_cublaslt_types.h"  // defines: the descriptor structs
#include "emu_internal.h"        // defines: emu_trace, emu_stream_id
#include "emu_half.h"            // defines: emu_f32_to_bf16, emu_bf16_to_f32, ... (fp16 too)

#include <math.h>  // defines: expf
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALGO_MARKER 0x454d55414c474f31ull  // "EMUALGO1": the only algorithm there is
#define MAX_THREADS 8
#define PARALLEL_WORK (1 << 20)            // multiply-adds below which one thread is used
#define IB 64                              // rows of op(A) packed at a time
#define JB 256                             // columns of op(B) packed at a time

// One validated GEMM (all sizes in elements).
typedef struct {
    int ta, tb, keep_bits, batch;
    int gelu;         // 0 none, 1 GELU_AUX(_BIAS) (aux written), 2 DGELU (aux read)
    void *aux;        // (m, n) column-major, leading dimension aux_ld, type tcd
    int64_t aux_ld;
    int64_t m, n, k, lda, ldb, ldc, ldd, sa, sb, sc, sd;
    float alpha, beta;
    cudaDataType_t tab, tcd;  // element types of A and B, of C, D and the bias
    const void *A, *B, *C, *bias;
    void *D;
} Gemm;

// Element i of an array of `t` (32F, 16BF or 16F), as float (exact).
static float load(const void *p, int64_t i, cudaDataType_t t) {
    switch (t) {
    case CUDA_R_16BF: return emu_bf16_to_f32(((const uint16_t *)p)[i]);
    case CUDA_R_16F: return emu_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

// Element i of an array of `t` = v, rounded once (double -> t, to nearest even; through
// float for the 16-bit types, exact unless v lies within half a float ulp of a 16-bit tie).
static void store(void *p, int64_t i, cudaDataType_t t, double v) {
    switch (t) {
    case CUDA_R_16BF: ((uint16_t *)p)[i] = emu_f32_to_bf16((float)v); break;
    case CUDA_R_16F: ((uint16_t *)p)[i] = emu_f32_to_f16((float)v); break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

static cublasStatus_t bad(cublasStatus_t s, const char *what) {
    fprintf(stderr, "emu: cublasLtMatmul: %s\n", what);
    return s;
}

// Checks desc and the four layouts against each other; fills g's shape fields.
// The compute, scale and data types of one GEMM against the table above.
static cublasStatus_t check_types(const struct emu_lt_matmul_desc *d, const struct emu_lt_layout *a,
                                  const struct emu_lt_layout *b, const struct emu_lt_layout *c,
                                  const struct emu_lt_layout *dl) {
    char msg[200];
    if (d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_FAST_TF32 &&
        d->compute != CUBLAS_COMPUTE_32F_FAST_16BF)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "compute type not emulated");
    if (d->scale != CUDA_R_32F) return bad(CUBLAS_STATUS_NOT_SUPPORTED, "scale type not CUDA_R_32F");
    cudaDataType_t tab = a->type, tcd = dl->type;
    int half_in = tab == CUDA_R_16BF || tab == CUDA_R_16F;
    int types_ok = b->type == tab && c->type == tcd &&
                   (tab == CUDA_R_32F ? tcd == CUDA_R_32F
                                      : half_in && d->compute == CUBLAS_COMPUTE_32F &&
                                            (tcd == tab || tcd == CUDA_R_32F));
    if (!types_ok) {
        snprintf(msg, sizeof msg, "data types A %d, B %d, C %d, D %d not supported with compute "
                 "type %d (see the table in emu_cublaslt.c)", (int)a->type, (int)b->type,
                 (int)c->type, (int)dl->type, (int)d->compute);
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, msg);
    }
    if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) ||
        (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "only CUBLAS_OP_N and CUBLAS_OP_T are emulated");
    return CUBLAS_STATUS_SUCCESS;
}

// The epilogue and its aux buffer: *gelu = 1 (GELU_AUX, GELU_AUX_BIAS), 2 (DGELU) or 0.
static cublasStatus_t check_epilogue(const struct emu_lt_matmul_desc *d,
                                     const struct emu_lt_layout *dl, int *gelu) {
    *gelu = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                ? 1 : d->epilogue == CUBLASLT_EPILOGUE_DGELU ? 2 : 0;
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS && !*gelu)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "only epilogues DEFAULT, BIAS, GELU_AUX, "
                   "GELU_AUX_BIAS and DGELU are emulated");
    if (*gelu && (!d->aux || d->aux_ld < (int64_t)dl->rows || d->aux_ld % 8 ||
                  (uintptr_t)d->aux % 16 || (d->aux_type != -1 && d->aux_type != (int32_t)dl->type) ||
                  dl->batch != 1))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "GELU epilogue: aux pointer NULL or not 16-byte "
                   "aligned, EPILOGUE_AUX_LD < rows of D or not a multiple of 8, aux type not D's, "
                   "or batch > 1");
    return CUBLAS_STATUS_SUCCESS;
}

// The four layouts fit one (m, n, k) product (sets g's transposes and sizes), their leading
// dimensions hold their rows, and their batch counts agree.
static cublasStatus_t check_shapes(const struct emu_lt_matmul_desc *d, const struct emu_lt_layout *a,
                                   const struct emu_lt_layout *b, const struct emu_lt_layout *c,
                                   const struct emu_lt_layout *dl, Gemm *g) {
    char msg[200];
    g->ta = d->transa == CUBLAS_OP_T;
    g->tb = d->transb == CUBLAS_OP_T;
    g->m = (int64_t)dl->rows;
    g->n = (int64_t)dl->cols;
    g->k = (int64_t)(g->ta ? a->rows : a->cols);
    uint64_t am = g->ta ? a->cols : a->rows;
    uint64_t bk = g->tb ? b->cols : b->rows, bn = g->tb ? b->rows : b->cols;
    if (am != dl->rows || bk != (uint64_t)g->k || bn != dl->cols || c->rows != dl->rows ||
        c->cols != dl->cols) {
        snprintf(msg, sizeof msg, "layouts do not fit: op%s(A) is %llux%llu, op%s(B) %llux%llu, "
                 "C %llux%llu, D %llux%llu (want (m,k) (k,n) (m,n) (m,n))",
                 g->ta ? "T" : "N", (unsigned long long)am, (unsigned long long)g->k,
                 g->tb ? "T" : "N", (unsigned long long)bk, (unsigned long long)bn,
                 (unsigned long long)c->rows, (unsigned long long)c->cols,
                 (unsigned long long)dl->rows, (unsigned long long)dl->cols);
        return bad(CUBLAS_STATUS_INVALID_VALUE, msg);
    }
    const struct emu_lt_layout *all[4] = {a, b, c, dl};
    for (int i = 0; i < 4; i++) {
        int64_t need = all[i]->rows > 1 ? (int64_t)all[i]->rows : 1;
        if (all[i]->ld < need) {
            snprintf(msg, sizeof msg, "%c layout: ld %lld < rows %lld", "ABCD"[i],
                     (long long)all[i]->ld, (long long)need);
            return bad(CUBLAS_STATUS_INVALID_VALUE, msg);
        }
        if (all[i]->batch != dl->batch) {
            snprintf(msg, sizeof msg, "batch counts differ: A %d, B %d, C %d, D %d", a->batch,
                     b->batch, c->batch, dl->batch);
            return bad(CUBLAS_STATUS_INVALID_VALUE, msg);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t validate(const struct emu_lt_matmul_desc *d, const struct emu_lt_layout *a,
                               const struct emu_lt_layout *b, const struct emu_lt_layout *c,
                               const struct emu_lt_layout *dl, Gemm *g) {
    if (!d || !a || !b || !c || !dl) return bad(CUBLAS_STATUS_INVALID_VALUE, "NULL descriptor");
    int gelu = 0;
    cublasStatus_t st = check_types(d, a, b, c, dl);
    if (st == CUBLAS_STATUS_SUCCESS) st = check_epilogue(d, dl, &gelu);
    if (st == CUBLAS_STATUS_SUCCESS) st = check_shapes(d, a, b, c, dl, g);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    cudaDataType_t tab = a->type, tcd = dl->type;
    int biased = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (biased && (!d->bias || (d->bias_type != -1 && d->bias_type != (int32_t)tcd)))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "BIAS epilogue needs a bias pointer of D's type");
    g->tab = tab, g->tcd = tcd;
    g->keep_bits = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32   ? 10
                   : d->compute == CUBLAS_COMPUTE_32F_FAST_16BF ? 7
                                                                : 23;
    g->batch = dl->batch;
    g->lda = a->ld, g->ldb = b->ld, g->ldc = c->ld, g->ldd = dl->ld;
    g->sa = a->stride, g->sb = b->stride, g->sc = c->stride, g->sd = dl->stride;
    g->bias = biased ? d->bias : NULL;
    g->gelu = gelu;
    g->aux = gelu ? (void *)d->aux : NULL;
    g->aux_ld = d->aux_ld;
    return CUBLAS_STATUS_SUCCESS;
}

// x rounded to `keep` explicit mantissa bits, to nearest even (Inf and NaN unchanged).
static float round_mantissa(float x, int keep) {
    if (keep >= 23) return x;
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    int drop = 23 - keep;
    u += (1u << (drop - 1)) - 1 + ((u >> drop) & 1);
    u &= ~((1u << drop) - 1);
    memcpy(&x, &u, 4);
    return x;
}

static double dot(const float *a, const float *b, int64_t k) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
        s0 += (double)a[p] * b[p];
        s1 += (double)a[p + 1] * b[p + 1];
        s2 += (double)a[p + 2] * b[p + 2];
        s3 += (double)a[p + 3] * b[p + 3];
    }
    for (; p < k; p++) s0 += (double)a[p] * b[p];
    return (s0 + s1) + (s2 + s3);
}

// GELU (tanh form) and its derivative: the expressions of backend/cuda/norm.cuh's kernels.
#define EMU_GELU_K 0.7978845608028654f
#define EMU_GELU_A 0.044715f
static float gelu_f(float x) {
    float u = EMU_GELU_K * (x + EMU_GELU_A * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}
static float dgelu_f(float x, float dy) {
    float u = EMU_GELU_K * (x + EMU_GELU_A * x * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    float du = EMU_GELU_K * (1.0f + 3.0f * EMU_GELU_A * x * x);
    return (s + x * s * (1.0f - s) * 2.0f * du) * dy;
}

// Element (i, j) of D from its value v before rounding: the epilogue's GELU part, then store.
static void store_d(const Gemm *g, int64_t od, int64_t i, int64_t j, double v) {
    if (g->gelu == 1) {
        float p = (float)v;
        store(g->aux, i + j * g->aux_ld, g->tcd, p);
        v = gelu_f(p);
    } else if (g->gelu == 2) {
        v = dgelu_f(load(g->aux, i + j * g->aux_ld, g->tcd), (float)v);
    }
    store(g->D, od + i + j * g->ldd, g->tcd, v);
}

typedef struct {
    const Gemm *g;
    int64_t j0, j1;  // this thread's columns of D
    int status;      // 0, or 1 when out of memory
} Part;

// Columns [j0, j1) of D for every batch: packs JB columns of op(B) and IB rows of op(A)
// (rounded) contiguously in k, then one dot product per element.
static void *gemm_part(void *arg) {
    Part *pt = arg;
    const Gemm *g = pt->g;
    const int64_t k = g->k;
    float *Ap = malloc(sizeof(float) * (size_t)(IB * k + 1));  // (IB, k)
    float *Bp = malloc(sizeof(float) * (size_t)(JB * k + 1));  // (JB, k)
    if (!Ap || !Bp) pt->status = 1;
    for (int64_t bt = 0; bt < g->batch && !pt->status; bt++) {
        int64_t oa = bt * g->sa, ob = bt * g->sb, oc = bt * g->sc, od = bt * g->sd;
        for (int64_t jc = pt->j0; jc < pt->j1; jc += JB) {
            int64_t jn = pt->j1 - jc < JB ? pt->j1 - jc : JB;
            for (int64_t j = 0; j < jn; j++)
                for (int64_t p = 0; p < k; p++)
                    Bp[j * k + p] = round_mantissa(
                        load(g->B, ob + (g->tb ? (jc + j) + p * g->ldb : p + (jc + j) * g->ldb),
                             g->tab),
                        g->keep_bits);
            for (int64_t ic = 0; ic < g->m; ic += IB) {
                int64_t in = g->m - ic < IB ? g->m - ic : IB;
                for (int64_t i = 0; i < in; i++)
                    for (int64_t p = 0; p < k; p++)
                        Ap[i * k + p] = round_mantissa(
                            load(g->A, oa + (g->ta ? p + (ic + i) * g->lda : (ic + i) + p * g->lda),
                                 g->tab),
                            g->keep_bits);
                for (int64_t j = 0; j < jn; j++) {
                    for (int64_t i = 0; i < in; i++) {
                        double v = (double)g->alpha * dot(Ap + i * k, Bp + j * k, k);
                        if (g->beta != 0.0f)
                            v += (double)g->beta * load(g->C, oc + (ic + i) + (jc + j) * g->ldc, g->tcd);
                        if (g->bias) v += load(g->bias, ic + i, g->tcd);
                        store_d(g, od, ic + i, jc + j, v);
                    }
                }
            }
        }
    }
    free(Ap);
    free(Bp);
    return NULL;
}

// Runs the GEMM over up to MAX_THREADS threads (split by columns of D).
static cublasStatus_t gemm_run(const Gemm *g) {
    double work = (double)g->m * (double)g->n * (double)g->k * g->batch;
    const char *env = getenv("MEGAC_EMU_GEMM_THREADS");
    long ncpu = env && *env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    int nt = work < PARALLEL_WORK || ncpu < 2 ? 1 : ncpu > MAX_THREADS ? MAX_THREADS : (int)ncpu;
    if (nt > g->n) nt = g->n > 0 ? (int)g->n : 1;
    Part parts[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int t = 0; t < nt; t++) parts[t] = (Part){g, g->n * t / nt, g->n * (t + 1) / nt, 0};
    for (int t = 1; t < nt; t++)
        started[t] = pthread_create(&tids[t], NULL, gemm_part, &parts[t]) == 0;
    gemm_part(&parts[0]);
    int failed = parts[0].status;
    for (int t = 1; t < nt; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        else gemm_part(&parts[t]);  // no thread: do it here
        failed |= parts[t].status;
    }
    return failed ? bad(CUBLAS_STATUS_ALLOC_FAILED, "out of host memory") : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_gemm_plain(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                              const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                              void *C, int64_t ldc, cudaDataType_t tab, cudaDataType_t tcd,
                              int keep_bits) {
    Gemm g;
    memset(&g, 0, sizeof g);
    g.ta = ta, g.tb = tb, g.keep_bits = keep_bits, g.batch = 1;
    g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.ldd = ldc;
    g.alpha = alpha, g.beta = beta, g.tab = tab, g.tcd = tcd;
    g.A = A, g.B = B, g.C = C, g.D = C;
    return gemm_run(&g);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
    (void)workspace, (void)workspaceSizeInBytes;
    emu_trace(emu_stream_id(stream), "kernel", "cublasLtMatmul");
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    Gemm g;
    cublasStatus_t s = validate(desc, Adesc, Bdesc, Cdesc, Ddesc, &g);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (algo && algo->data[0] != ALGO_MARKER)
        return bad(CUBLAS_STATUS_INVALID_VALUE, "algo not from cublasLtMatmulAlgoGetHeuristic");
    if (!alpha || !beta || !D || (g.k > 0 && (!A || !B)))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "NULL alpha, beta, A, B or D");
    g.alpha = *(const float *)alpha;
    g.beta = *(const float *)beta;
    if (g.beta != 0.0f && !C) return bad(CUBLAS_STATUS_INVALID_VALUE, "NULL C with beta != 0");
    if (C == D && (Cdesc->ld != Ddesc->ld || Cdesc->stride != Ddesc->stride))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "C is D but their layouts differ");
    const void *ptrs[4] = {A, B, C, D};
    for (int i = 0; algo && i < 4; i++) {
        if (ptrs[i] && algo->data[1 + i] && (uintptr_t)ptrs[i] % algo->data[1 + i]) {
            char msg[160];
            snprintf(msg, sizeof msg, "%c (%p) is not aligned to the %llu bytes its algo was "
                     "chosen for (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)", "ABCD"[i],
                     ptrs[i], (unsigned long long)algo->data[1 + i], "ABCD"[i]);
            return bad(CUBLAS_STATUS_INVALID_VALUE, msg);
        }
    }
    g.A = A, g.B = B, g.C = C, g.D = D;
    return gemm_run(&g);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int *returned) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested < 1 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    Gemm g;
    cublasStatus_t s = validate(desc, Adesc, Bdesc, Cdesc, Ddesc, &g);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = ALGO_MARKER;
    for (int i = 0; i < 4; i++)  // the algo needs what the caller promised (256 by default)
        results[0].algo.data[1 + i] = preference ? preference->align[i] : 256;
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// The descriptor objects and their attributes are in emu_cublaslt_desc.c.

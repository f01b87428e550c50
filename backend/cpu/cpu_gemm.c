// backend/cpu/cpu_gemm.c: GEMMs cut into panels taken by the OpenMP threads, each a one-thread
// OpenBLAS call (the threading plan is in cpu_gemm.h).
#include "cpu_gemm.h"

#include <cblas.h>   // defines: openblas_get_num_threads, openblas_set_num_threads
#include <stdlib.h>  // defines: qsort, free
#include <string.h>  // defines: memcpy

#include "core/check.h"  // defines: core_calloc

// Panels are multiples of this many rows/columns (a multiple of every sgemm kernel's tile).
#define CPU_GEMM_ALIGN 64
// Below this many FLOPs a product runs on the calling thread (a region costs ~10-20 us).
#define CPU_GEMM_SPLIT_MIN (4.0 * 1024 * 1024)
// Rows per thread from which the rows are cut whatever the shape.
#define CPU_GEMM_ROWS_MIN 256
// Panels per thread by default.
#define CPU_GEMM_PANELS_PER_THREAD 1

int cpu_blas_single_begin(void) {
    int prev = openblas_get_num_threads();
    if (prev != 1) openblas_set_num_threads(1);
    return prev;
}

void cpu_blas_single_end(int prev) {
    if (prev != 1) openblas_set_num_threads(prev);
}

// One panel: rows r0..r1 and columns c0..c1 of C, with the epilogue's work around the product
// (op(A)'s rows r0..r1 and op(B)'s columns c0..c1).
static void gemm_panel(int ta, int tb, int r0, int r1, int c0, int c1, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *Cm,
                       int ldc, const CpuGemmEpilogue *epi) {
    int m = r1 - r0, n = c1 - c0;
    if (epi && epi->bias) {
        for (int i = r0; i < r1; i++)
            memcpy(Cm + (size_t)i * ldc + c0, epi->bias + c0, (size_t)n * sizeof(float));
        beta = 1.0f;
    }
    cpu_sgemm(ta, tb, m, n, K, alpha, ta ? A + r0 : A + (size_t)r0 * lda, lda,
              tb ? B + (size_t)c0 * ldb : B + c0, ldb, beta, Cm + (size_t)r0 * ldc + c0, ldc);
    if (!epi) return;
    for (int i = r0; i < r1; i++) {
        size_t o = (size_t)i * ldc + c0;
        if (epi->act_out) cpu_act_span(epi->act, epi->act_out + o, Cm + o, (size_t)n);
        if (epi->dact_pre) cpu_act_grad_span(epi->act, Cm + o, epi->dact_pre + o, Cm + o, (size_t)n);
    }
}

void cpu_gemm(Backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *Cm, int ldc) {
    cpu_gemm_fused(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc, NULL);
}

// Row-major C (M, N) = alpha * op(A) @ op(B) + beta * C in panels of rows or columns.
//
// The rule, from `bench_gemm --policies 21` on a 2-core AVX-512 box (medians, GFLOP/s, at
// M = 1024 tokens, C = 384): cut the rows (M: the tokens of forward and input-gradient
// products) when each thread gets at least CPU_GEMM_ROWS_MIN of them, else the larger
// dimension; one panel per thread. Rows against columns, one panel each: qkv forward
// (N = 3C) 206.8 vs 199.7, fc forward (N = 4C) 206.3 vs 185.7, output layer forward
// (N = V = 50304) 231.8 vs 135.0; 2 or 4 dynamically taken panels per thread were no better
// (191.0 and 181.9 for qkv). The old rule cut the larger of M and N, i.e. the columns of
// every forward product with N > M.
// How cpu_gemm_fused cuts C (M, N) on nt threads: returns the panel count (1: the whole
// product on the calling thread), with *split_m (rows, else columns) and *chunk (a panel's
// rows or columns; the last is short). Pure.
static int gemm_cut(const Backend *be, int M, int N, int K, int nt, int *split_m, int *chunk) {
    int split = be->u.cpu.gemm_split, per = be->u.cpu.gemm_panels;
    if (split == CPU_GEMM_SPLIT_RULE)
        split = M >= CPU_GEMM_ROWS_MIN * nt || M >= N ? CPU_GEMM_SPLIT_M : CPU_GEMM_SPLIT_N;
    if (per <= 0) per = CPU_GEMM_PANELS_PER_THREAD;
    *split_m = split == CPU_GEMM_SPLIT_M;
    int len = *split_m ? M : N;
    *chunk = len;
    if (nt <= 1 || 2.0 * M * N * K < CPU_GEMM_SPLIT_MIN || len < 2 * CPU_GEMM_ALIGN) return 1;
    int np = nt * per;  // np panels of `chunk` (a multiple of CPU_GEMM_ALIGN) rows or columns
    *chunk = ((len + np - 1) / np + CPU_GEMM_ALIGN - 1) / CPU_GEMM_ALIGN * CPU_GEMM_ALIGN;
    return (len + *chunk - 1) / *chunk;
}

// Panel p of a product cut as gemm_cut said (p = 0 and chunk = the length: the whole).
static void gemm_panel_of(const CpuGemmJob *j, int split_m, int chunk, int p) {
    int len = split_m ? j->M : j->N, i0 = p * chunk, i1 = i0 + chunk < len ? i0 + chunk : len;
    const CpuGemmEpilogue *epi = j->epi.bias || j->epi.act_out || j->epi.dact_pre ? &j->epi : NULL;
    if (split_m)
        gemm_panel(j->ta, j->tb, i0, i1, 0, j->N, j->K, j->alpha, j->A, j->lda, j->B, j->ldb,
                   j->beta, j->C, j->ldc, epi);
    else
        gemm_panel(j->ta, j->tb, 0, j->M, i0, i1, j->K, j->alpha, j->A, j->lda, j->B, j->ldb,
                   j->beta, j->C, j->ldc, epi);
}

void cpu_gemm_fused(Backend *be, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *Cm,
                    int ldc, const CpuGemmEpilogue *epi) {
    CpuGemmJob j = {ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc, {0}};
    if (epi) j.epi = *epi;
    int nt = cpu_nt(be), split_m, chunk;
    int np = gemm_cut(be, M, N, K, nt, &split_m, &chunk);
    int prev = cpu_blas_single_begin();
    if (np == 1) {
        gemm_panel_of(&j, split_m, chunk, 0);
    } else {
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (int p = 0; p < np; p++) gemm_panel_of(&j, split_m, chunk, p);
    }
    cpu_blas_single_end(prev);
}

// A task of cpu_gemm_grouped: panel p of job j, cut by (split_m, chunk); flops for the order.
typedef struct {
    int j, p, split_m, chunk;
    double flops;
} GemmTask;

static int by_flops_desc(const void *a, const void *b) {
    const GemmTask *x = a, *y = b;
    if (x->flops != y->flops) return x->flops < y->flops ? 1 : -1;
    return x->j != y->j ? x->j - y->j : x->p - y->p;
}

// With at least as many non-empty jobs as threads, each job is one task (the whole product
// on one thread: its bits are one thread's, whatever the thread count); else each job is cut
// as cpu_gemm_fused cuts it. Tasks are taken largest first by the threads as they come free.
void cpu_gemm_grouped(Backend *be, const CpuGemmJob *jobs, int n) {
    int nt = cpu_nt(be), live = 0, nk = 0;
    for (int j = 0; j < n; j++) live += jobs[j].M > 0 && jobs[j].N > 0;
    int nt_cut = live >= nt ? 1 : nt;
    GemmTask *cut = core_calloc((size_t)n + 1, sizeof *cut);  // job j's cut, p its panels (0: empty)
    for (int j = 0; j < n; j++) {
        const CpuGemmJob *g = &jobs[j];
        if (g->M <= 0 || g->N <= 0) continue;
        cut[j].p = gemm_cut(be, g->M, g->N, g->K, nt_cut, &cut[j].split_m, &cut[j].chunk);
        nk += cut[j].p;
    }
    GemmTask *t = core_calloc((size_t)nk + 1, sizeof *t);
    for (int j = 0, k = 0; j < n; j++)
        for (int p = 0; p < cut[j].p; p++, k++)
            t[k] = (GemmTask){j, p, cut[j].split_m, cut[j].chunk,
                              2.0 * jobs[j].M * jobs[j].N * jobs[j].K / cut[j].p};
    free(cut);
    qsort(t, (size_t)nk, sizeof *t, by_flops_desc);
    int prev = cpu_blas_single_begin();
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1) if (nk > 1)
    for (int k = 0; k < nk; k++) gemm_panel_of(&jobs[t[k].j], t[k].split_m, t[k].chunk, t[k].p);
    cpu_blas_single_end(prev);
    free(t);
}

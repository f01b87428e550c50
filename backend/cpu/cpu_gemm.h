// backend/cpu/cpu_gemm.h: GEMMs on the backend's own threads.
//
// The CPU backend's threading plan: one pool of threads, OpenMP's, does all the work.
// Debian's OpenBLAS is the pthreads build: left to thread its own GEMMs it keeps a second
// pool whose idle workers spin (sched_yield) for ~0.1 s after every call, on the very cores
// the OpenMP regions between two GEMMs need, so every pointwise op, softmax and optimizer
// loop ran on a shared core. Instead OpenBLAS runs one thread per call here, and the
// backend cuts each GEMM into panels, one per OpenMP thread (cpu_gemm), or calls it from
// inside its own regions, one call per thread (the per-head products of attention).
// Neither OpenBLAS nor this ever splits K, but a panel's edge can still change an element's
// bits: OpenBLAS's Haswell kernels (AMD Zen) accumulate tile edges differently, so results
// may depend on the panel cut (SkylakeX kernels: almost never). The cut depends only on the
// shape and the thread count, never on timing, so every run gives the same bits.
#pragma once
#include "cpu_backend.h"

// Which dimension cpu_gemm cuts into panels (Backend.u.cpu.gemm_split).
enum { CPU_GEMM_SPLIT_RULE = 0, CPU_GEMM_SPLIT_M = 1, CPU_GEMM_SPLIT_N = 2 };

// Row-major C (M, N) = alpha * op(A) @ op(B) + beta * C on cpu_nt(be) threads (see
// cpu_sgemm for the arguments): M or N is cut into panels (the rule in cpu_gemm.c, or
// Backend.u.cpu.gemm_split/gemm_panels when set), each a one-thread OpenBLAS call, taken by
// the threads as they come free. Small products run on the calling thread. Call from the
// main thread, outside OpenMP regions. Never fails.
void cpu_gemm(Backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *Cm, int ldc);

// What each panel of cpu_gemm_fused does around its product, on its own rows or columns of
// C while they are still in the core's cache (one region instead of three passes over C).
// Elementwise, so the bits equal the unfused sequence.
typedef struct {
    const float *bias;      // (N): before the product, each row of C = bias, and beta = 1
    float *act_out;         // (M, ldc): after it, act_out = act(C)
    const float *dact_pre;  // (M, ldc): after it, C *= act'(dact_pre) (in place)
    BackendAct act;         // the pointwise activation of act_out and dact_pre
} CpuGemmEpilogue;

// cpu_gemm with the per-panel work of `epi` (NULL or all-NULL members: plain cpu_gemm).
// Same panels as cpu_gemm, so the same bits. Main thread, outside regions. Never fails.
void cpu_gemm_fused(Backend *be, int ta, int tb, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *Cm,
                    int ldc, const CpuGemmEpilogue *epi);

// One product of cpu_gemm_grouped: C (M, N) = alpha op(A) op(B) + beta C, then epi's work
// (as cpu_gemm_fused's arguments; an empty product, M or N 0, is skipped).
typedef struct {
    int ta, tb, M, N, K;
    float alpha;
    const float *A;
    int lda;
    const float *B;
    int ldb;
    float beta;
    float *C;
    int ldc;
    CpuGemmEpilogue epi;
} CpuGemmJob;

// The products jobs[0..n), whose C do not overlap, in one OpenMP region: when at least
// cpu_nt(be) of them are non-empty each runs whole on one thread (its bits then are
// cpu_gemm_fused's on one thread, at any thread count), else each is cut as cpu_gemm_fused
// cuts it (the same bits as n cpu_gemm_fused calls). Largest first, taken by the threads as
// they come free. Main thread, outside regions. Never fails.
void cpu_gemm_grouped(Backend *be, const CpuGemmJob *jobs, int n);

// Makes every OpenBLAS call run on its calling thread until cpu_blas_single_end(returned
// value) restores the previous (process-wide) thread count. cpu_sgemm may be called from
// inside an OpenMP region only between the two. Main thread only, outside regions.
int cpu_blas_single_begin(void);
void cpu_blas_single_end(int prev);

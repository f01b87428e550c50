// backend/cpu/cpu_gemm.c: GEMMs cut into one panel per OpenMP thread, each a one-thread
// OpenBLAS call (the threading plan is in cpu_gemm.h).
#include "cpu_gemm.h"

#include <cblas.h>  // defines: openblas_get_num_threads, openblas_set_num_threads

// Panels are multiples of this many rows/columns (a multiple of every sgemm kernel's tile).
#define CPU_GEMM_ALIGN 64
// Below this many FLOPs a product runs on the calling thread (a region costs ~10-20 us).
#define CPU_GEMM_SPLIT_MIN (4.0 * 1024 * 1024)

int cpu_blas_single_begin(void) {
    int prev = openblas_get_num_threads();
    if (prev != 1) openblas_set_num_threads(1);
    return prev;
}

void cpu_blas_single_end(int prev) {
    if (prev != 1) openblas_set_num_threads(prev);
}

// Row-major C (M, N) = alpha * op(A) @ op(B) + beta * C, panels of the larger of M and N.
void cpu_gemm(Backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *Cm, int ldc) {
    int nt = cpu_nt(be), split_m = M >= N, len = split_m ? M : N;
    int prev = cpu_blas_single_begin();
    if (nt <= 1 || 2.0 * M * N * K < CPU_GEMM_SPLIT_MIN || len < 2 * CPU_GEMM_ALIGN) {
        cpu_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
        cpu_blas_single_end(prev);
        return;
    }
    int chunk = ((len + nt - 1) / nt + CPU_GEMM_ALIGN - 1) / CPU_GEMM_ALIGN * CPU_GEMM_ALIGN;
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int p = 0; p < nt; p++) {
        int i0 = p * chunk < len ? p * chunk : len, i1 = i0 + chunk < len ? i0 + chunk : len;
        if (i0 == i1) continue;
        if (split_m)  // rows i0..i1 of op(A) and C
            cpu_sgemm(ta, tb, i1 - i0, N, K, alpha, ta ? A + i0 : A + (size_t)i0 * lda, lda, B,
                      ldb, beta, Cm + (size_t)i0 * ldc, ldc);
        else  // columns i0..i1 of op(B) and C
            cpu_sgemm(ta, tb, M, i1 - i0, K, alpha, A, lda, tb ? B + (size_t)i0 * ldb : B + i0,
                      ldb, beta, Cm + i0, ldc);
    }
    cpu_blas_single_end(prev);
}

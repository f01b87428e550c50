// backend/cuda/emu/include/cublas_api.h: the CPU emulator's stand-in for the cuBLAS (not Lt)
// calls megac makes: a handle on a stream with a workspace, and the grouped GEMM (names,
// values and signatures as in CUDA 13's cublas_api.h). Implemented by emu_cublas.c.
// C11 and C++20.
#pragma once
#include <cublasLt.h>  // defines: cublasStatus_t, cublasOperation_t, cublasComputeType_t, ...

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cublasContext *cublasHandle_t;

// Contracts: cuBLAS's; a NULL handle gives NOT_INITIALIZED.
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId);
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes);

// For each group i and each of its group_size[i] problems j (pointer arrays indexed by the
// running problem number, in device memory; the other arrays per group, on the host):
// C_j = alpha_i op_i(A_j) op_i(B_j) + beta_i C_j, column-major, synchronously, each problem
// the emulated cublasLtMatmul's math (emu_cublaslt.c): the same bits as one cublasLtMatmul
// per problem. Types as cuBLAS documents for this call: compute 32F with A = B = C of 32F,
// 16BF or 16F, or compute 32F_FAST_TF32 with all 32F; scale (alpha, beta) float. Others:
// NOT_SUPPORTED (bf16 / fp16 operands into an fp32 C among them; every call with
// MEGAC_EMU_NO_CUBLAS=grouped, see emu_cublas.c).
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t handle,
                                          const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[],
                                          const int m_array[], const int n_array[],
                                          const int k_array[], const void *alpha_array,
                                          const void *const Aarray[], cudaDataType_t Atype,
                                          const int lda_array[], const void *const Barray[],
                                          cudaDataType_t Btype, const int ldb_array[],
                                          const void *beta_array, void *const Carray[],
                                          cudaDataType_t Ctype, const int ldc_array[],
                                          int group_count, const int group_size[],
                                          cublasComputeType_t computeType);

#ifdef __cplusplus
}
#endif

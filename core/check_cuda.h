// core/check_cuda.h: check macros for CUDA, cuBLAS(Lt) and NCCL (only built with -Dcuda).
// Same contract as core/check.h: print "[rank r] <lib> error in <call> at file:line: <msg>",
// then MPI_Abort the whole job.
#pragma once
#include <cuda_runtime.h>  // defines: cudaError_t, cudaGetErrorString
#include <cublasLt.h>      // defines: cublasStatus_t
#include <nccl.h>          // defines: ncclResult_t
#include "check.h"

#ifdef __cplusplus
extern "C" {
#endif
void core_die_cuda(cudaError_t e, const char *call, const char *file, int line);
void core_die_cublas(cublasStatus_t s, const char *call, const char *file, int line);
void core_die_nccl(ncclResult_t r, const char *call, const char *file, int line);
#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(call)                                                            \
    do {                                                                            \
        cudaError_t mc_e_ = (call);                                                 \
        if (mc_e_ != cudaSuccess) core_die_cuda(mc_e_, #call, __FILE__, __LINE__);  \
    } while (0)
#define CUBLAS_CHECK(call)                                                          \
    do {                                                                            \
        cublasStatus_t mc_s_ = (call);                                              \
        if (mc_s_ != CUBLAS_STATUS_SUCCESS) core_die_cublas(mc_s_, #call, __FILE__, __LINE__); \
    } while (0)
#define NCCL_CHECK(call)                                                            \
    do {                                                                            \
        ncclResult_t mc_r_ = (call);                                                \
        if (mc_r_ != ncclSuccess) core_die_nccl(mc_r_, #call, __FILE__, __LINE__);  \
    } while (0)

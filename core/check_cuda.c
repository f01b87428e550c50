// core/check_cuda.c: slow path of CUDA_CHECK, CUBLAS_CHECK and NCCL_CHECK.
#include "check_cuda.h"
#include <stdio.h>

void core_die_cuda(cudaError_t e, const char *call, const char *file, int line) {
    core_die("CUDA", call, file, line, cudaGetErrorString(e));
}

void core_die_cublas(cublasStatus_t s, const char *call, const char *file, int line) {
    char msg[64];
    snprintf(msg, sizeof msg, "cublasStatus_t %d", (int)s);
    core_die("cuBLAS", call, file, line, msg);
}

void core_die_nccl(ncclResult_t r, const char *call, const char *file, int line) {
    core_die("NCCL", call, file, line, ncclGetErrorString(r));
}

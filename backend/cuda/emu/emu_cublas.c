// backend/cuda/emu/emu_cublas.c: the CPU emulator's cuBLAS handle and grouped GEMM
// (include/cublas_api.h). Each problem of a grouped call runs through emu_gemm_plain, the
// element math of the emulated cublasLtMatmul, so a grouped call gives the bits of one
// cuBLASLt GEMM per problem (what tests/backend/cuda/test_cuda_grouped.c checks).
// MEGAC_EMU_NO_CUBLAS=1 makes cublasCreate_v2 fail as a missing libcublas (or one without
// the grouped GEMM) does on a GPU; MEGAC_EMU_NO_CUBLAS=grouped makes every grouped GEMM return
// CUBLAS_STATUS_NOT_SUPPORTED, as a cuBLAS that refuses a type case would: so the backend's
// two fallbacks run under the emulator too.
#include "emu_cublaslt_types.h"  // defines: emu_gemm_plain

#include <cublas_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cublasContext {
    cudaStream_t stream;
    void *workspace;
    size_t workspace_bytes;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    const char *off = getenv("MEGAC_EMU_NO_CUBLAS");
    if (off && *off && *off != '0' && strcmp(off, "grouped")) return CUBLAS_STATUS_NOT_INITIALIZED;
    *handle = calloc(1, sizeof **handle);
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = streamId;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !workspace) return CUBLAS_STATUS_INVALID_VALUE;
    handle->workspace = workspace, handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t bad(cublasStatus_t s, const char *what) {
    fprintf(stderr, "emu: cublasGemmGroupedBatchedEx: %s\n", what);
    return s;
}

// The types against cuBLAS's table for the grouped GEMM; *keep_bits from the compute type.
static cublasStatus_t check_types(cudaDataType_t ta, cudaDataType_t tb, cudaDataType_t tc,
                                  cublasComputeType_t ct, int *keep_bits) {
    *keep_bits = ct == CUBLAS_COMPUTE_32F_FAST_TF32 ? 10 : 23;
    int known = ta == CUDA_R_32F || ta == CUDA_R_16BF || ta == CUDA_R_16F;
    if (!known || tb != ta || tc != ta)
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "A, B and C must be of one type (32F, 16BF or 16F)");
    if (ct != CUBLAS_COMPUTE_32F && !(ct == CUBLAS_COMPUTE_32F_FAST_TF32 && ta == CUDA_R_32F))
        return bad(CUBLAS_STATUS_NOT_SUPPORTED, "compute type not 32F (or 32F_FAST_TF32 on 32F data)");
    return CUBLAS_STATUS_SUCCESS;
}

// One group's shape against its leading dimensions (column-major, as cublasLtMatmul checks).
static int shape_ok(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda,
                    int ldb, int ldc) {
    if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)) return 0;
    if (m < 0 || n < 0 || k < 0) return 0;
    int ra = ta == CUBLAS_OP_N ? m : k, rb = tb == CUBLAS_OP_N ? k : n;
    return lda >= (ra > 1 ? ra : 1) && ldb >= (rb > 1 ? rb : 1) && ldc >= (m > 1 ? m : 1);
}

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
                                          cublasComputeType_t computeType) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    const char *off = getenv("MEGAC_EMU_NO_CUBLAS");
    if (off && !strcmp(off, "grouped")) return CUBLAS_STATUS_NOT_SUPPORTED;
    int keep = 23;
    cublasStatus_t s = check_types(Atype, Btype, Ctype, computeType, &keep);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    if (group_count < 0 || (group_count > 0 && (!group_size || !alpha_array || !beta_array ||
                                                !Aarray || !Barray || !Carray)))
        return bad(CUBLAS_STATUS_INVALID_VALUE, "negative group count or a NULL array");
    const float *alpha = alpha_array, *beta = beta_array;
    for (int i = 0; i < group_count; i++)
        if (group_size[i] < 0 || !shape_ok(transa_array[i], transb_array[i], m_array[i], n_array[i],
                                           k_array[i], lda_array[i], ldb_array[i], ldc_array[i]))
            return bad(CUBLAS_STATUS_INVALID_VALUE, "a group's size, ops, m/n/k or leading dimensions");
    for (int i = 0, p = 0; i < group_count; i++) {
        for (int j = 0; j < group_size[i]; j++, p++) {
            if (m_array[i] == 0 || n_array[i] == 0) continue;
            if (!Carray[p] || (k_array[i] > 0 && (!Aarray[p] || !Barray[p])))
                return bad(CUBLAS_STATUS_INVALID_VALUE, "a NULL matrix pointer");
            s = emu_gemm_plain(transa_array[i] == CUBLAS_OP_T, transb_array[i] == CUBLAS_OP_T,
                               m_array[i], n_array[i], k_array[i], alpha[i], Aarray[p], lda_array[i],
                               Barray[p], ldb_array[i], beta[i], Carray[p], ldc_array[i], Atype,
                               Ctype, keep);
            if (s != CUBLAS_STATUS_SUCCESS) return s;
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

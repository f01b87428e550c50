// backend/cuda/emu/emu_cublaslt_desc.c: the emulated cuBLASLt's handle, descriptors, layouts,
// preferences and status strings (the GEMM itself is in emu_cublaslt.c). Attributes are
// checked for the size of their documented type; attributes megac does not use give
// CUBLAS_STATUS_NOT_SUPPORTED with a stderr line.
#include "emu_cublaslt_types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cublasStatus_t unsupported(const char *call, int attr) {
    fprintf(stderr, "emu: %s: attribute %d is not emulated\n", call, attr);
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

// Copies sizeInBytes of buf into dst if that is the attribute's size.
static cublasStatus_t set(void *dst, size_t size, const void *buf, size_t sizeInBytes) {
    if (!buf || sizeInBytes != size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(dst, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
    if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
    *lightHandle = calloc(1, sizeof **lightHandle);
    return *lightHandle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
    if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(lightHandle);
    return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion(void) { return 130000; }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
    struct emu_lt_matmul_desc *d = calloc(1, sizeof *d);
    if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
    d->compute = computeType;
    d->scale = scaleType;
    d->transa = d->transb = CUBLAS_OP_N;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->bias_type = -1;
    d->aux_type = -1;
    *matmulDesc = d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    free(matmulDesc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(&d->transa, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(&d->transb, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(&d->epilogue, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(&d->bias, sizeof(void *), buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(&d->bias_type, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(&d->aux, sizeof(void *), buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(&d->aux_ld, 8, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return set(&d->aux_type, 4, buf, sizeInBytes);
    }
    return unsupported("cublasLtMatmulDescSetAttribute", (int)attr);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
    struct emu_lt_layout *l = calloc(1, sizeof *l);
    if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
    *l = (struct emu_lt_layout){type, rows, cols, ld, 1, 0};
    *matLayout = l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    free(matLayout);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes) {
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
        int32_t n;
        cublasStatus_t s = set(&n, 4, buf, sizeInBytes);
        if (s == CUBLAS_STATUS_SUCCESS && n < 1) return CUBLAS_STATUS_INVALID_VALUE;
        if (s == CUBLAS_STATUS_SUCCESS) l->batch = n;
        return s;
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return set(&l->stride, 8, buf, sizeInBytes);
    }
    return unsupported("cublasLtMatrixLayoutSetAttribute", (int)attr);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    struct emu_lt_preference *p = calloc(1, sizeof *p);
    if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
    for (int i = 0; i < 4; i++) p->align[i] = 256;
    *pref = p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    free(pref);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return set(&pref->max_workspace, 8, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        return set(&pref->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], 4, buf,
                   sizeInBytes);
    }
    return unsupported("cublasLtMatmulPreferenceSetAttribute", (int)attr);
}

const char *cublasLtGetStatusName(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasLtGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown status";
}

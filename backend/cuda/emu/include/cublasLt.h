// backend/cuda/emu/include/cublasLt.h: the CPU emulator's stand-in for cuBLASLt (only what
// megac uses; names, values and signatures as in CUDA 13's cublasLt.h / cublas_api.h /
// library_types.h). Implemented by emu_cublaslt.c: a reference GEMM (column-major, op N/T,
// strided batches, bias epilogue, optional TF32 rounding of the inputs) on fp32 data, or bf16 /
// fp16 A and B into D of the same type or fp32, as cuBLASLt's type table allows.
// C11 and C++20.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>  // defines: cudaStream_t

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum {
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
} cublasOperation_t;

typedef enum {
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14,
} cudaDataType;
typedef enum cudaDataType_t cudaDataType_t;

typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,          // int32_t (cublasOperation_t)
    CUBLASLT_MATMUL_DESC_TRANSB = 4,          // int32_t (cublasOperation_t)
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,        // uint32_t (cublasLtEpilogue_t)
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,    // const void *
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,    // void * (GELU epilogues)
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,         // int64_t elements, multiple of 8
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,  // int32_t (cudaDataType), -1: D's
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26, // int32_t (cudaDataType)
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX = 160,       // D = gelu(AB), aux = AB
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,  // D = gelu(AB + bias), aux = AB + bias
    CUBLASLT_EPILOGUE_DGELU = 192,          // D = AB * gelu'(aux)
} cublasLtEpilogue_t;

typedef enum {
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,           // int32_t, default 1
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,  // int64_t elements, default 0
} cublasLtMatrixLayoutAttribute_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,    // uint64_t
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t, default 256
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct emu_lt_matmul_desc *cublasLtMatmulDesc_t;
typedef struct emu_lt_layout *cublasLtMatrixLayout_t;
typedef struct emu_lt_preference *cublasLtMatmulPreference_t;

typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

// Contracts: cuBLASLt's, for what megac uses; a NULL handle gives NOT_INITIALIZED.
cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
size_t cublasLtGetVersion(void);  // 130000
const char *cublasLtGetStatusString(cublasStatus_t status);
const char *cublasLtGetStatusName(cublasStatus_t status);

// Defaults: OP_N, OP_N, EPILOGUE_DEFAULT. Setters check the attribute's size (INVALID_VALUE)
// and refuse attributes not listed above (NOT_SUPPORTED).
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes);

// Column-major; batch count 1 and stride 0 until set.
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes);

// Alignments default to 256 bytes, as cuBLASLt's.
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes);

// One result (workspaceSize 0): the emulator's only algo, valid for pointers as aligned as
// the preference promised. The layouts are checked as cublasLtMatmul checks them.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
    cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference,
    int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    int *returnAlgoCount);

// D = alpha op(A) op(B) + beta C (+ bias), synchronously (emu_cublaslt.c: fp32, bf16, fp16
// data, op N/T, strided batches, DEFAULT/BIAS, TF32 rounding); INVALID_VALUE when the layouts
// do not fit, NOT_SUPPORTED for type combinations cuBLASLt refuses.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

// backend/cuda/emu/emu_cublaslt_types.h: the emulated cuBLASLt's descriptor objects, shared
// by emu_cublaslt_desc.c (create, set attributes, destroy) and emu_cublaslt.c (the GEMM).
#pragma once
#include <cublasLt.h>

#include <stdint.h>

struct cublasLtContext {
    int unused;
};
struct emu_lt_matmul_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type;  // -1: not set (the type of D)
    const void *aux;    // GELU epilogues: the pre-activation matrix (written or read)
    int64_t aux_ld;     // its leading dimension (elements), 0: not set
    int32_t aux_type;   // -1: not set (the type of D)
};
struct emu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;     // elements between batches
};
struct emu_lt_preference {
    uint64_t max_workspace;
    uint32_t align[4];  // minimum alignment of A, B, C, D the caller promises (default 256)
};

// D = C = alpha op(A) op(B) + beta C for one column-major product (no epilogue, batch 1):
// the element math of cublasLtMatmul (emu_cublaslt.c), so the same bits. keep_bits: the
// mantissa bits A and B are rounded to (23 none, 10 TF32). For emu_cublas.c's grouped GEMM;
// the caller checked the types and shapes.
cublasStatus_t emu_gemm_plain(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                              const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                              void *C, int64_t ldc, cudaDataType_t tab, cudaDataType_t tcd,
                              int keep_bits);

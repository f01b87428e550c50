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

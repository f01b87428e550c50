// backend/cuda/cuda_cublas_dl.c: cuBLAS (not Lt) loaded on first use, for its grouped GEMM.
//
// Like cuBLASLt (cuda_cublaslt_dl.c, which says why megac does not link these libraries),
// libcublas is opened with dlopen, here on the first cublasCreate_v2: the first grouped
// linear (--moe-grouped-gemm) of a backend. Unlike cuBLASLt it is optional: a missing library
// or a release without one of the functions below makes cublasCreate_v2 return
// CUBLAS_STATUS_NOT_INITIALIZED (and every other forwarder too), and the backend runs the
// grouped linear as one cuBLASLt GEMM per group instead (cuda_gemm_grouped.cu says so once).
// Only the GPU build compiles this file (the emulator has its own, emu/emu_cublas.c).
//
// The table of function pointers is process-global, written once by the first call.
#include "core/check_cuda.h"  // defines: the cuBLAS types (through cublasLt.h)

#include <cublas_api.h>  // defines: cublasHandle_t, CUBLAS_VER_MAJOR
#include <dlfcn.h>       // defines: dlopen, dlsym

#define STR_(x) #x
#define STR(x) STR_(x)
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

// Every function the backend uses: X(name, (parameters), (arguments)).
#define CUBLAS_FUNCTIONS(X)                                                                      \
    X(cublasCreate_v2, (cublasHandle_t * h), (h))                                                \
    X(cublasDestroy_v2, (cublasHandle_t h), (h))                                                 \
    X(cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s))                            \
    X(cublasSetWorkspace_v2, (cublasHandle_t h, void *w, size_t n), (h, w, n))                   \
    X(cublasGemmGroupedBatchedEx,                                                                \
      (cublasHandle_t h, const cublasOperation_t ta[], const cublasOperation_t tb[],            \
       const int m[], const int n[], const int k[], const void *alpha, const void *const A[],   \
       cudaDataType_t at, const int lda[], const void *const B[], cudaDataType_t bt,            \
       const int ldb[], const void *beta, void *const C[], cudaDataType_t ct, const int ldc[],  \
       int groups, const int size[], cublasComputeType_t compute),                              \
      (h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, groups, size, compute))

#define DECLARE_POINTER(name, params, args) static cublasStatus_t(*p_##name) params;
CUBLAS_FUNCTIONS(DECLARE_POINTER)

// Opens the library and resolves every function, once. Returns 1 when all are there.
static int load(void) {
    static int state = 0;  // 0 not tried, 1 loaded, -1 unavailable
    if (state) return state > 0;
    state = -1;
    void *lib = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
#define RESOLVE(name, params, args) \
    *(void **)&p_##name = dlsym(lib, #name); \
    if (!p_##name) return 0;
    CUBLAS_FUNCTIONS(RESOLVE)
    state = 1;
    return 1;
}

#define DEFINE_FORWARDER(name, params, args)                           \
    cublasStatus_t CUBLASWINAPI name params {                          \
        return load() ? p_##name args : CUBLAS_STATUS_NOT_INITIALIZED; \
    }
CUBLAS_FUNCTIONS(DEFINE_FORWARDER)

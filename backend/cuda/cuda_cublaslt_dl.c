// backend/cuda/cuda_cublaslt_dl.c: cuBLASLt loaded on first use instead of at start-up.
//
// Linking libcublasLt makes every process pay ~94 MB of private memory when the library is
// loaded (its constructors register thousands of kernels), whether it uses the GPU or not:
// 128 CPU ranks of the tests would need 12 GB more. So the real build does not link it:
// these definitions of the cuBLASLt functions the backend calls forward to the library,
// opened with dlopen on the first call (cublasLtCreate, when a CUDA backend is created).
// Only the GPU build compiles this file (the emulator has its own cuBLASLt).
//
// The table of function pointers is process-global, written once by the first call, like
// the dynamic linker's own tables.
#include "core/check_cuda.h"  // defines: the cuBLASLt types, core_fatal

#include <cublas_api.h>  // defines: CUBLAS_VER_MAJOR
#include <dlfcn.h>       // defines: dlopen, dlsym, dlerror

#define STR_(x) #x
#define STR(x) STR_(x)
#define CUBLASLT_SONAME "libcublasLt.so." STR(CUBLAS_VER_MAJOR)

// Every function the backend uses: X(name, return type, (parameters), (arguments)).
#define CUBLASLT_FUNCTIONS(X)                                                                     \
    X(cublasLtCreate, (cublasLtHandle_t * h), (h))                                                \
    X(cublasLtDestroy, (cublasLtHandle_t h), (h))                                                 \
    X(cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t * d, cublasComputeType_t c, cudaDataType_t s), \
      (d, c, s))                                                                                  \
    X(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t d), (d))                                   \
    X(cublasLtMatmulDescSetAttribute,                                                             \
      (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *b, size_t n), (d, a, b, n)) \
    X(cublasLtMatrixLayoutCreate,                                                                 \
      (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld), (l, t, r, c, ld)) \
    X(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t l), (l))                               \
    X(cublasLtMatrixLayoutSetAttribute,                                                           \
      (cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *b, size_t n), (l, a, b, n)) \
    X(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * p), (p))                      \
    X(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t p), (p))                       \
    X(cublasLtMatmulPreferenceSetAttribute,                                                       \
      (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *b, size_t n), \
      (p, a, b, n))                                                                               \
    X(cublasLtMatmulAlgoGetHeuristic,                                                             \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, \
       cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int n,  \
       cublasLtMatmulHeuristicResult_t *r, int *found),                                           \
      (h, d, a, b, c, dd, p, n, r, found))                                                        \
    X(cublasLtMatmul,                                                                             \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,              \
       cublasLtMatrixLayout_t la, const void *B, cublasLtMatrixLayout_t lb, const void *beta,     \
       const void *C, cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,              \
       const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsn, cudaStream_t s),                   \
      (h, d, alpha, A, la, B, lb, beta, C, lc, D, ld, algo, ws, wsn, s))

#define DECLARE_POINTER(name, params, args) static cublasStatus_t(*p_##name) params;
CUBLASLT_FUNCTIONS(DECLARE_POINTER)

// Opens the library and resolves every function, once; a failure ends the job naming the
// library and what to put on LD_LIBRARY_PATH.
static void load(void) {
    static int loaded = 0;
    if (loaded) return;
    void *lib = dlopen(CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        core_fatal("cannot load %s (%s): put the CUDA toolkit's lib64, or the lib folder of "
                   "NVIDIA's cuBLAS wheel, on LD_LIBRARY_PATH", CUBLASLT_SONAME, dlerror());
#define RESOLVE(name, params, args)                                                       \
    *(void **)&p_##name = dlsym(lib, #name);                                              \
    if (!p_##name) core_fatal("%s has no %s: a cuBLAS %d release is needed", CUBLASLT_SONAME, #name, \
                              CUBLAS_VER_MAJOR);
    CUBLASLT_FUNCTIONS(RESOLVE)
    loaded = 1;
}

#define DEFINE_FORWARDER(name, params, args) \
    cublasStatus_t CUBLASWINAPI name params { \
        load();                              \
        return p_##name args;                \
    }
CUBLASLT_FUNCTIONS(DEFINE_FORWARDER)

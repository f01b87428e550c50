// backend/cuda/cuda_cudnn.h: cuDNN's graph API (the C backend API of cudnn_graph.h), opened
// with dlopen on first use, and the small graph builder the fused attention uses
// (cuda_cudnn_attn.c). Only the GPU build with cuDNN's headers compiles these files
// (MEGAC_HAVE_CUDNN; meson checks for cudnn_graph.h beside the CUDA toolkit).
//
// Why the backend API and not cuDNN's C++ frontend: megac is C11; the backend API is the
// stable C interface under the frontend (the frontend builds the same descriptors), and
// opening it with dlopen keeps libcudnn's ~1 GB of engine libraries out of every process
// that never asks for it (CPU runs, the tests), as cuda_cublaslt_dl.c does for cuBLASLt.
#pragma once
#include <cudnn_graph.h>  // defines: cudnnBackend*, the descriptor and attribute enums
#include <stdbool.h>  // defines: bool (CUDNN_TYPE_BOOLEAN values)
#include <stddef.h>
#include <stdint.h>

// The cuDNN functions megac calls, resolved from libcudnn.so.<major>.
typedef struct {
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(cudnnStatus_t);
    cudnnStatus_t (*Create)(cudnnHandle_t *);
    cudnnStatus_t (*Destroy)(cudnnHandle_t);
    cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*CreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*DestroyDescriptor)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*SetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                  cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*GetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                  cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} CudnnApi;

// Opens libcudnn.so.<major> and resolves every function of `api`; returns 0, or -1 with the
// reason in why (n bytes) and *lib NULL. Never aborts.
int cudnn_api_open(CudnnApi *api, void **lib, char *why, size_t n);

// A graph under construction: every descriptor made is kept to be destroyed together, the
// operations in order; the first failing call is remembered (later calls do nothing).
#define CUDNN_GRAPH_MAX_DESC 128
#define CUDNN_GRAPH_MAX_OPS 40
typedef struct {
    const CudnnApi *api;
    cudnnBackendDescriptor_t desc[CUDNN_GRAPH_MAX_DESC];
    int ndesc;
    cudnnBackendDescriptor_t ops[CUDNN_GRAPH_MAX_OPS];
    int nops;
    int64_t next_virtual_uid;  // unique ids of virtual tensors count up from here
    cudnnStatus_t status;      // CUDNN_STATUS_SUCCESS until a call fails
    char failed[96];           // what failed first
} CudnnGraph;

void cudnn_graph_init(CudnnGraph *g, const CudnnApi *api, int64_t first_virtual_uid);
// Destroys every descriptor the graph made. Never fails.
void cudnn_graph_free(CudnnGraph *g);
// A 4-d tensor: uid 0 makes a virtual tensor with the next virtual uid; byval 1: a host
// scalar passed by value (dims and strides all 1). Returns NULL after a failure.
cudnnBackendDescriptor_t cudnn_tensor(CudnnGraph *g, int64_t uid, cudnnDataType_t t,
                                      const int64_t dims[4], const int64_t strides[4], int byval);
// Row-major strides of dims (the layout of a virtual tensor). Pure.
void cudnn_packed_strides(const int64_t dims[4], int64_t strides[4]);
// Operations, appended to the graph. Pointwise: y = mode(x[, b[, t]]) computed in prec;
// axis >= 0 for GEN_INDEX. Matmul: c = a @ b in fp32. Reduction: y = op over the dims
// where y is 1. Reshape: y is x seen with y's dims and strides.
void cudnn_pointwise(CudnnGraph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                     cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis);
void cudnn_matmul(CudnnGraph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                  cudnnBackendDescriptor_t c);
void cudnn_reduction(CudnnGraph *g, cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                     cudnnBackendDescriptor_t y);
void cudnn_reshape(CudnnGraph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

// The operation graph of the graph's operations, finalized (h NULL: without a device, where
// the cuDNN release allows it); NULL with the reason in g->failed.
cudnnBackendDescriptor_t cudnn_graph_finalize(CudnnGraph *g, cudnnHandle_t h);
// The execution plan of the graph's operations on handle h: the first engine of cuDNN's
// heuristic (mode A) that finalizes and is not marked non-deterministic. Returns the plan
// (the caller destroys it) and its workspace bytes, or NULL with the reason in g->failed.
cudnnBackendDescriptor_t cudnn_graph_plan(CudnnGraph *g, cudnnHandle_t h, int64_t *workspace);
// Runs plan on h with the tensors uids[i] at ptrs[i] (n of them) and workspace ws; returns
// the status (CUDNN_STATUS_SUCCESS when queued).
cudnnStatus_t cudnn_plan_execute(const CudnnApi *api, cudnnHandle_t h,
                                 cudnnBackendDescriptor_t plan, const int64_t *uids,
                                 void *const *ptrs, int n, void *ws);

// cuda_cudnn_attn.c: builds the fused attention's forward (bwd 0) or backward graph for these
// sizes and finalizes the operation graph without a device (no plan, nothing run): 0, or -1
// with the first failure in why. For tests/backend/test_cudnn_graph.c (runs without a GPU).
#include "backend/backend.h"  // defines: BackendDType
int cuda_cudnn_attn_graph_check(const CudnnApi *api, int bwd, BackendDType act, int B, int T,
                                int NH, int hs, char *why, size_t n);

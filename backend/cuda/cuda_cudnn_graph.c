// backend/cuda/cuda_cudnn_graph.c: cuDNN's graph API opened with dlopen, and the graph
// builder of cuda_cudnn.h (descriptors, operations, the execution plan, running it).
// Failures are returned, never fatal here: the caller falls back to megac's kernels.
#include "backend/cuda/cuda_cudnn.h"

#include <dlfcn.h>   // defines: dlopen, dlsym, dlerror, dlclose
#include <stdio.h>   // defines: snprintf
#include <string.h>  // defines: memset

#define STR_(x) #x
#define STR(x) STR_(x)
#define CUDNN_SONAME "libcudnn.so." STR(CUDNN_MAJOR)

int cudnn_api_open(CudnnApi *api, void **lib, char *why, size_t n) {
    memset(api, 0, sizeof *api);
    *lib = dlopen(CUDNN_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!*lib) {
        snprintf(why, n, "cannot load %s (%s): put the lib folder of NVIDIA's cuDNN wheel or "
                 "the toolkit's on LD_LIBRARY_PATH", CUDNN_SONAME, dlerror());
        return -1;
    }
#define RESOLVE(field, name)                                                             \
    *(void **)&api->field = dlsym(*lib, #name);                                          \
    if (!api->field) {                                                                   \
        snprintf(why, n, "%s has no %s: cuDNN %d is needed", CUDNN_SONAME, #name, CUDNN_MAJOR); \
        dlclose(*lib);                                                                   \
        *lib = NULL;                                                                     \
        return -1;                                                                       \
    }
    RESOLVE(GetVersion, cudnnGetVersion)
    RESOLVE(GetErrorString, cudnnGetErrorString)
    RESOLVE(Create, cudnnCreate)
    RESOLVE(Destroy, cudnnDestroy)
    RESOLVE(SetStream, cudnnSetStream)
    RESOLVE(CreateDescriptor, cudnnBackendCreateDescriptor)
    RESOLVE(DestroyDescriptor, cudnnBackendDestroyDescriptor)
    RESOLVE(Finalize, cudnnBackendFinalize)
    RESOLVE(SetAttribute, cudnnBackendSetAttribute)
    RESOLVE(GetAttribute, cudnnBackendGetAttribute)
    RESOLVE(Execute, cudnnBackendExecute)
#undef RESOLVE
    return 0;
}

void cudnn_graph_init(CudnnGraph *g, const CudnnApi *api, int64_t first_virtual_uid) {
    memset(g, 0, sizeof *g);
    g->api = api;
    g->next_virtual_uid = first_virtual_uid;
    g->status = CUDNN_STATUS_SUCCESS;
}

void cudnn_graph_free(CudnnGraph *g) {
    for (int i = g->ndesc - 1; i >= 0; i--) g->api->DestroyDescriptor(g->desc[i]);
    g->ndesc = g->nops = 0;
}

// Records the first failure: what (a short name) and the status. Returns 1 if s failed.
static int fail(CudnnGraph *g, cudnnStatus_t s, const char *what) {
    if (s == CUDNN_STATUS_SUCCESS) return 0;
    if (g->status == CUDNN_STATUS_SUCCESS) {
        g->status = s;
        snprintf(g->failed, sizeof g->failed, "%s: %s", what, g->api->GetErrorString(s));
    }
    return 1;
}

// A new descriptor of type t kept by the graph; NULL after a failure.
static cudnnBackendDescriptor_t make(CudnnGraph *g, cudnnBackendDescriptorType_t t, const char *what) {
    if (g->status != CUDNN_STATUS_SUCCESS) return NULL;
    if (g->ndesc == CUDNN_GRAPH_MAX_DESC) {
        fail(g, CUDNN_STATUS_INTERNAL_ERROR, "too many descriptors");
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    if (fail(g, g->api->CreateDescriptor(t, &d), what)) return NULL;
    g->desc[g->ndesc++] = d;
    return d;
}

// Sets one attribute (n values of type t at v) unless the graph already failed.
static void set(CudnnGraph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what) {
    if (g->status != CUDNN_STATUS_SUCCESS || !d) return;
    fail(g, g->api->SetAttribute(d, a, t, n, v), what);
}

static void finalize(CudnnGraph *g, cudnnBackendDescriptor_t d, const char *what) {
    if (g->status != CUDNN_STATUS_SUCCESS || !d) return;
    fail(g, g->api->Finalize(d), what);
}

static void add_op(CudnnGraph *g, cudnnBackendDescriptor_t op) {
    if (g->status != CUDNN_STATUS_SUCCESS || !op) return;
    if (g->nops == CUDNN_GRAPH_MAX_OPS) {
        fail(g, CUDNN_STATUS_INTERNAL_ERROR, "too many operations");
        return;
    }
    g->ops[g->nops++] = op;
}

void cudnn_packed_strides(const int64_t dims[4], int64_t strides[4]) {
    strides[3] = 1;
    for (int i = 2; i >= 0; i--) strides[i] = strides[i + 1] * dims[i + 1];
}

cudnnBackendDescriptor_t cudnn_tensor(CudnnGraph *g, int64_t uid, cudnnDataType_t t,
                                      const int64_t dims[4], const int64_t strides[4], int byval) {
    static const int64_t one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t d = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    bool virt = uid == 0, by_value = byval != 0;
    int64_t id = virt ? g->next_virtual_uid++ : uid, align = 16;
    set(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t, "tensor type");
    set(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, byval ? one : dims, "tensor dims");
    set(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, byval ? one : strides, "tensor strides");
    set(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id, "tensor uid");
    set(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    set(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    if (by_value) set(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
    finalize(g, d, "tensor finalize");
    return g->status == CUDNN_STATUS_SUCCESS ? d : NULL;
}

void cudnn_pointwise(CudnnGraph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                     cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                     cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis) {
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (axis >= 0) set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    finalize(g, pw, "pointwise finalize");
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise desc");
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
    if (b) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pointwise b");
    if (t) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise t");
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
    finalize(g, op, "pointwise op finalize");
    add_op(g, op);
}

void cudnn_matmul(CudnnGraph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                  cudnnBackendDescriptor_t c) {
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul precision");
    finalize(g, mm, "matmul finalize");
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul desc");
    finalize(g, op, "matmul op finalize");
    add_op(g, op);
}

void cudnn_reduction(CudnnGraph *g, cudnnReduceTensorOp_t rop, cudnnBackendDescriptor_t x,
                     cudnnBackendDescriptor_t y) {
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &rop, "reduction operator");
    set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction precision");
    finalize(g, rd, "reduction finalize");
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, "reduction desc");
    finalize(g, op, "reduction op finalize");
    add_op(g, op);
}

void cudnn_reshape(CudnnGraph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op");
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
    finalize(g, op, "reshape op finalize");
    add_op(g, op);
}

// 1 if the engine of configuration cfg is marked non-deterministic (atomics): megac's results
// must be the same bits every run, so such engines are skipped.
static int nondeterministic(CudnnGraph *g, cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t engine = make(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    if (!engine) return 1;
    int64_t n = 0;
    if (fail(g, g->api->GetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     1, &n, &engine), "engine of a configuration"))
        return 1;
    cudnnBackendNumericalNote_t notes[16];
    n = 0;
    if (g->api->GetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16,
                             &n, notes) != CUDNN_STATUS_SUCCESS)
        return 0;  // no notes to read: nothing marked
    for (int64_t i = 0; i < n && i < 16; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return 1;
    return 0;
}

cudnnBackendDescriptor_t cudnn_graph_finalize(CudnnGraph *g, cudnnHandle_t h) {
    cudnnBackendDescriptor_t graph = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops, "graph ops");
    if (h) set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    finalize(g, graph, "operation graph finalize");
    return g->status == CUDNN_STATUS_SUCCESS ? graph : NULL;
}

cudnnBackendDescriptor_t cudnn_graph_plan(CudnnGraph *g, cudnnHandle_t h, int64_t *workspace) {
    *workspace = 0;
    cudnnBackendDescriptor_t graph = cudnn_graph_finalize(g, h);
    cudnnBackendDescriptor_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristic");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristic graph");
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristic mode");
    finalize(g, heur, "heuristic finalize");
    if (g->status != CUDNN_STATUS_SUCCESS) return NULL;
    int64_t n = 0;
    if (fail(g, g->api->GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     0, &n, NULL), "heuristic result count"))
        return NULL;
    enum { MAX_CFG = 8 };
    cudnnBackendDescriptor_t cfg[MAX_CFG];
    if (n > MAX_CFG) n = MAX_CFG;
    for (int64_t i = 0; i < n; i++) cfg[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    int64_t got = 0;
    if (g->status != CUDNN_STATUS_SUCCESS ||
        fail(g, g->api->GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                     n, &got, cfg), "heuristic results"))
        return NULL;
    for (int64_t i = 0; i < got && i < n; i++) {
        if (nondeterministic(g, cfg[i])) continue;
        cudnnBackendDescriptor_t plan = NULL;
        if (g->api->CreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
            continue;
        int64_t ws = 0, k = 0;
        if (g->api->SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) == CUDNN_STATUS_SUCCESS &&
            g->api->SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]) == CUDNN_STATUS_SUCCESS &&
            g->api->Finalize(plan) == CUDNN_STATUS_SUCCESS &&
            g->api->GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                 &k, &ws) == CUDNN_STATUS_SUCCESS) {
            *workspace = ws;
            return plan;
        }
        g->api->DestroyDescriptor(plan);
    }
    fail(g, CUDNN_STATUS_NOT_SUPPORTED, got ? "no deterministic engine finalized" : "no engine");
    return NULL;
}

cudnnStatus_t cudnn_plan_execute(const CudnnApi *api, cudnnHandle_t h,
                                 cudnnBackendDescriptor_t plan, const int64_t *uids,
                                 void *const *ptrs, int n, void *ws) {
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = api->CreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s != CUDNN_STATUS_SUCCESS) return s;
    if ((s = api->SetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids)) ==
            CUDNN_STATUS_SUCCESS &&
        (s = api->SetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs)) ==
            CUDNN_STATUS_SUCCESS &&
        (s = api->SetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)) ==
            CUDNN_STATUS_SUCCESS &&
        (s = api->Finalize(vp)) == CUDNN_STATUS_SUCCESS)
        s = api->Execute(h, plan, vp);
    api->DestroyDescriptor(vp);
    return s;
}

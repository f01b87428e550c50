// backend/cuda/cuda_backend.cu: the CUDA Backend: creation (device, stream, cuBLASLt handle,
// workspace, reduction scratch, pinned staging), device memory, copies, and the ops table.
// The arithmetic lives in cuda_gemm.cu, cuda_attention.cu, cuda_flash_attention.cu,
// cuda_norm.cu, cuda_embed_xent.cu, cuda_cast.cu, cuda_optim.cu and cuda_dropout.cu; kernels
// in the .cuh files beside them. Activations and weight copies are stored as be->act (fp32, bf16 or fp16).
#include "backend/cuda/cuda_internal.h"

#include <sched.h>   // defines: sched_yield
#include <stdio.h>   // defines: snprintf
#include <stdlib.h>  // defines: free, getenv
#include <string.h>  // defines: memcpy, strcmp

// Waits for everything queued on the backend's stream. Polls (yielding the core) instead of
// blocking in the driver, so the rank stays responsive to signals; a kernel fault surfaces
// here with its CUDA error.
void cuda_wait(Backend *be) {
    cudaStream_t s = cuda_stream(be);
    for (;;) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        sched_yield();
    }
}

// `bytes` of device memory on `device`; a failure ends the job naming `what`, the bytes
// asked and the bytes free.
static void *device_alloc(int device, size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        (void)cudaGetLastError();  // clear the sticky allocation error before asking
        cudaMemGetInfo(&free_b, &total_b);
        core_fatal("cuda backend: cannot allocate %s (%zu bytes, %.2f GiB) on device %d: %zu "
                   "bytes (%.2f GiB) free of %zu (%s)", what, bytes, bytes / 1073741824.0, device,
                   free_b, free_b / 1073741824.0, total_b, cudaGetErrorString(e));
    }
    return p;
}

// Device memory, zeroed (cudaMalloc's is not). A failure names the bytes asked and free.
static void *cuda_alloc(Backend *be, size_t bytes) {
    size_t want = bytes ? bytes : 1;
    void *p = device_alloc(cuda_state(be)->device, want, "device memory");
    CUDA_CHECK(cudaMemsetAsync(p, 0, want, cuda_stream(be)));
    return p;
}

// Frees after the queued work that may still use p (cudaFree synchronises the device).
static void cuda_free(Backend *be, void *p) {
    if (p) CUDA_CHECK(cudaFree(p));
}

// Pinned host memory (cudaMallocHost), zeroed: device copies to and from it run at full speed
// and asynchronously. A failure ends the job naming the bytes.
static void *cuda_alloc_host(Backend *be, size_t bytes) {
    void *p = NULL;
    size_t want = bytes ? bytes : 1;
    if (cudaMallocHost(&p, want) != cudaSuccess)
        core_fatal("cuda backend: cannot allocate %zu bytes of pinned host memory (%s)", want,
                   cudaGetErrorString(cudaGetLastError()));
    memset(p, 0, want);
    return p;
}

static void copies_wait(CudaState *st);

// Waits for the queued work (copies too) that may still use p first.
static void cuda_free_host(Backend *be, void *p) {
    if (!p) return;
    copies_wait(cuda_state(be));
    cuda_wait(be);
    CUDA_CHECK(cudaFreeHost(p));
}

// Device memory in use (every process's on the device: cudaMemGetInfo's total - free).
static size_t cuda_device_memory_used(Backend *be) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

static void cuda_zero(Backend *be, void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream(be)));
}

// Host-to-device copies up to CUDA_STAGING_BYTES go through the pinned staging buffer, so the
// caller's pageable memory is free when this returns and the transfer itself is
// asynchronous (tokens and targets every micro-batch). Larger ones (checkpoints, init) are
// plain synchronous copies. Device-to-host copies wait for the data.
static void cuda_copy(Backend *be, void *dst, const void *src, size_t bytes, BackendCopyKind kind) {
    if (!bytes) return;
    CudaState *st = cuda_state(be);
    switch (kind) {
    case BACKEND_H2D:
        if (bytes <= CUDA_STAGING_BYTES) {
            CUDA_CHECK(cudaEventSynchronize(st->staging_free));  // the previous copy is out
            memcpy(st->staging, src, bytes);
            CUDA_CHECK(cudaMemcpyAsync(dst, st->staging, bytes, cudaMemcpyHostToDevice, st->stream));
            CUDA_CHECK(cudaEventRecord(st->staging_free, st->stream));
        } else {
            CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st->stream));
            cuda_wait(be);
        }
        return;
    case BACKEND_D2H:
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st->stream));
        cuda_wait(be);
        return;
    case BACKEND_D2D:
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream));
        return;
    }
}

// Waits for the copy stream's queued copies (polling, as cuda_wait). No-op without one.
static void copies_wait(CudaState *st) {
    for (cudaError_t e; st->copies && (e = cudaStreamQuery(st->copies)) != cudaSuccess;) {
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        sched_yield();
    }
}

// The copy stream after the compute stream's queued work (made with its events at first use).
static void cuda_copy_async(Backend *be, void *dst, const void *src, size_t bytes, BackendCopyKind kind) {
    CudaState *st = cuda_state(be);
    if (!bytes) return;
    if (!st->copies) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&st->copies, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&st->copies_after, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&st->copies_done, cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventRecord(st->copies_after, st->stream));
    CUDA_CHECK(cudaStreamWaitEvent(st->copies, st->copies_after, 0));
    cudaMemcpyKind k = kind == BACKEND_D2H ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, st->copies));
}

static void cuda_copy_join(Backend *be, int host) {
    CudaState *st = cuda_state(be);
    if (!st->copies) return;
    if (host) {
        copies_wait(st);
        return;
    }
    CUDA_CHECK(cudaEventRecord(st->copies_done, st->copies));
    CUDA_CHECK(cudaStreamWaitEvent(st->stream, st->copies_done, 0));
}

static void cuda_sync(Backend *be) { cuda_wait(be); }  // (the copy stream: copy_join)

static void cuda_destroy(Backend *be) {
    CudaState *st = cuda_state(be);
    if (!st) return;
    cudaStreamSynchronize(st->stream);
    if (st->copies) {
        cudaStreamSynchronize(st->copies);
        cudaEventDestroy(st->copies_after);
        cudaEventDestroy(st->copies_done);
        cudaStreamDestroy(st->copies);
    }
    cudaFree(st->workspace);
    cudaFree(st->partials);
    cudaFree(st->result);
    cudaFreeHost(st->result_host);
    cudaFreeHost(st->staging);
    cudaEventDestroy(st->staging_free);
    cuda_gemm_cache_free(st);
    cuda_grouped_free(st);
#ifdef MEGAC_HAVE_CUDNN
    cuda_cudnn_attn_free(st->cudnn);
#endif
    cublasLtDestroy(st->lt);
    cudaStreamDestroy(st->stream);
    free(st);
    be->u.cuda.state = NULL;
}

// The memory entries (this file's).
static void cuda_memory_ops(BackendOps *t) {
    t->alloc = cuda_alloc;
    t->free = cuda_free;
    t->zero = cuda_zero;
    t->copy = cuda_copy;
    t->sync = cuda_sync;
    t->destroy = cuda_destroy;
    t->alloc_host = cuda_alloc_host;
    t->free_host = cuda_free_host;
    t->device_memory_used = cuda_device_memory_used;
    t->copy_async = cuda_copy_async;
    t->copy_join = cuda_copy_join;
}

// The ops table: every family's entries, registered by the file of its ops (cuda_internal.h).
static void cuda_ops_fill(BackendOps *t) {
    void (*const families[])(BackendOps *) = {
        cuda_memory_ops, cuda_gemm_ops, cuda_norm_ops, cuda_fused_ops, cuda_act_ops, cuda_cast_ops,
        cuda_dropout_ops, cuda_attention_ops, cuda_flash_attention_ops, cuda_embed_xent_ops,
        cuda_optim_ops, cuda_rope_ops, cuda_moe_ops,
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) families[i](t);
}

extern "C" int backend_cuda_available(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();  // a failed query leaves a sticky error behind
    return e == cudaSuccess && n > 0;
}

extern "C" Backend *backend_cuda_create(int device, BackendMath math, BackendDType act) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        core_fatal("cuda backend: no usable CUDA device (%s)",
                   e != cudaSuccess ? cudaGetErrorString(e) : "0 devices visible");
    if (act != BACKEND_F32 && act != BACKEND_BF16 && act != BACKEND_F16)
        core_fatal("cuda backend: unknown activation type %d", (int)act);
    if (device < 0 || device >= n)
        core_fatal("cuda backend: device %d asked for, %d visible", device, n);
    CUDA_CHECK(cudaSetDevice(device));
    CudaState *st = (CudaState *)core_calloc(1, sizeof *st);
    st->device = device;
    st->math = math;
    // MEGAC_CUDA_NO_GELU_EPILOGUE=1: megac's own GELU kernels instead of cuBLASLt's epilogues,
    // so that a GELU-form mismatch on a GPU can be attributed (scripts/gpu/selfcheck.sh step c)
    const char *no_gelu = getenv("MEGAC_CUDA_NO_GELU_EPILOGUE");
    st->gelu_epilogue = !(no_gelu && strcmp(no_gelu, "1") == 0);
    CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasLtCreate(&st->lt));
    st->workspace = device_alloc(device, CUDA_WORKSPACE_BYTES, "the cuBLASLt workspace");
    st->partials = (double *)device_alloc(device, CUDA_PARTIALS * sizeof(double), "reduction scratch");
    st->result = (double *)device_alloc(device, sizeof(double), "a reduction result");
    CUDA_CHECK(cudaMallocHost((void **)&st->result_host, sizeof(double)));
    CUDA_CHECK(cudaMallocHost(&st->staging, CUDA_STAGING_BYTES));
    CUDA_CHECK(cudaEventCreateWithFlags(&st->staging_free, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(st->staging_free, st->stream));

    Backend *be = (Backend *)core_calloc(1, sizeof(Backend));
    cuda_ops_fill(&be->table);
    be->ops = &be->table;
    be->kind = BACKEND_CUDA;
    be->act = act;
    be->u.cuda.device = device;
    be->u.cuda.stream = st->stream;
    be->u.cuda.state = st;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    // e.g. "cuda:0 (NVIDIA H200, bf16 tensor cores)", "(..., TF32 tensor cores)", "strict fp32"
    const char *mode = act == BACKEND_BF16 ? "bf16 tensor cores"
                       : act == BACKEND_F16 ? "fp16 tensor cores"
                       : math == BACKEND_MATH_TF32 ? "TF32 tensor cores" : "strict fp32";
    snprintf(be->name, sizeof be->name, "cuda:%d (%.20s, %s)", device, prop.name, mode);
    return be;
}

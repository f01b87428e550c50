// backend/cuda/cuda_act.cu: launchers of the activations (kernels in act.cuh): act_forward and
// act_backward, pointwise or gated. Contracts: backend/backend.h; the CPU reference is
// backend/cpu/cpu_act.c (tests/backend/cuda compares them).
#include "backend/cuda/act.cuh"  // defines: the kernels, ACT_THREADS

#define ACT_GRID_CAP 4096  // grid-stride kernels: at most this many blocks

// Threads: one per 16-byte chunk of the output (act.cuh): ceil(F / N) chunks a row when
// gated, ceil(N * F / N) otherwise. Pure.
template <typename T>
static size_t act_chunks(int N, int F, BackendAct act) {
    size_t V = (size_t)Vec16<T>::N;
    return backend_act_gated(act) ? (size_t)N * ((F + V - 1) / V) : ((size_t)N * F + V - 1) / V;
}

template <typename T>
static void act_forward_t(Backend *be, void *out, const void *inp, int N, int F, BackendAct act) {
    size_t n = (size_t)N * F;
    unsigned blocks = cuda_blocks(act_chunks<T>(N, F, act), ACT_THREADS, ACT_GRID_CAP);
    if (backend_act_gated(act))
        CUDA_LAUNCH(swiglu_forward_kernel<T>, blocks, ACT_THREADS, 0, cuda_stream(be), (T *)out,
                    (const T *)inp, N, F);
    else
        CUDA_LAUNCH(act_forward_kernel<T>, blocks, ACT_THREADS, 0, cuda_stream(be), (T *)out,
                    (const T *)inp, n, (int)act);
}

// out (N, F) = act(inp (N, F), or (N, 2F) rows [gate | up] for a gated act).
void cuda_act_forward(Backend *be, void *out, const void *inp, int N, int F, BackendAct act) {
    if (N <= 0 || F <= 0) return;
    ACT_DISPATCH(be->act, act_forward_t, be, out, inp, N, F, act);
}

template <typename T>
static void act_backward_t(Backend *be, void *dinp, const void *inp, const void *dout, int N,
                           int F, BackendAct act) {
    size_t n = (size_t)N * F;
    unsigned blocks = cuda_blocks(act_chunks<T>(N, F, act), ACT_THREADS, ACT_GRID_CAP);
    if (backend_act_gated(act))
        CUDA_LAUNCH(swiglu_backward_kernel<T>, blocks, ACT_THREADS, 0, cuda_stream(be),
                    (T *)dinp, (const T *)inp, (const T *)dout, N, F);
    else
        CUDA_LAUNCH(act_backward_kernel<T>, blocks, ACT_THREADS, 0, cuda_stream(be), (T *)dinp,
                    (const T *)inp, (const T *)dout, n, (int)act);
}

// dinp (N, F), or (N, 2F) for a gated act [overwritten], from dout (N, F) and inp.
void cuda_act_backward(Backend *be, void *dinp, const void *inp, const void *dout, int N, int F,
                       BackendAct act) {
    if (N <= 0 || F <= 0) return;
    ACT_DISPATCH(be->act, act_backward_t, be, dinp, inp, dout, N, F, act);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_act_ops(BackendOps *t) {
    t->act_forward = cuda_act_forward;
    t->act_backward = cuda_act_backward;
}

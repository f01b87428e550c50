// backend/cuda/cuda_rope.cu: launchers of the rotary-position ops (kernels in rope.cuh):
// rope_gqa forward and backward. Contracts: backend/backend.h; the CPU reference is
// backend/cpu/cpu_rope.c (tests/backend/cuda/test_cuda_llama.c compares them).
#include "backend/cuda/rope.cuh"  // defines: the kernels, ROPE_THREADS

#define ROPE_GRID_CAP 4096  // grid-stride kernels: at most this many blocks

template <typename T>
static void rope_gqa_forward_t(Backend *be, void *out, const void *inp, int B, int T_, int NH,
                               int G, int hs, int rot, float base, int pos0, const int *pos) {
    size_t n = (size_t)B * T_ * 3 * NH * hs;
    CUDA_LAUNCH(rope_gqa_forward_kernel<T>, cuda_blocks(n, ROPE_THREADS, ROPE_GRID_CAP),
                ROPE_THREADS, 0, cuda_stream(be), (T *)out, (const T *)inp, B * T_, T_, NH, G,
                hs, rot, base, pos0, pos);
}

// out (B, T, 3 NH hs) in attention's layout from inp (B, T, (NH + 2G) hs), q and k rotated.
void cuda_rope_gqa_forward(Backend *be, void *out, const void *inp, int B, int T, int NH, int G,
                           int hs, int rot, float base, int pos0, const int *pos) {
    if (B <= 0 || T <= 0 || NH <= 0 || G <= 0 || NH % G)
        core_fatal("rope_gqa_forward: B %d, T %d, %d heads in %d groups", B, T, NH, G);
    ACT_DISPATCH(be->act, rope_gqa_forward_t, be, out, inp, B, T, NH, G, hs, rot, base, pos0,
                 pos);
}

template <typename T>
static void rope_gqa_backward_t(Backend *be, void *dinp, const void *dout, int B, int T_, int NH,
                                int G, int hs, int rot, float base, int pos0, const int *pos) {
    size_t n = (size_t)B * T_ * (NH + 2 * G) * hs;
    CUDA_LAUNCH(rope_gqa_backward_kernel<T>, cuda_blocks(n, ROPE_THREADS, ROPE_GRID_CAP),
                ROPE_THREADS, 0, cuda_stream(be), (T *)dinp, (const T *)dout, B * T_, T_, NH,
                G, hs, rot, base, pos0, pos);
}

// dinp (B, T, (NH + 2G) hs) [overwritten]: the transpose of the forward on dout.
void cuda_rope_gqa_backward(Backend *be, void *dinp, const void *dout, int B, int T, int NH,
                            int G, int hs, int rot, float base, int pos0, const int *pos) {
    if (B <= 0 || T <= 0 || NH <= 0 || G <= 0 || NH % G)
        core_fatal("rope_gqa_backward: B %d, T %d, %d heads in %d groups", B, T, NH, G);
    ACT_DISPATCH(be->act, rope_gqa_backward_t, be, dinp, dout, B, T, NH, G, hs, rot, base, pos0,
                 pos);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_rope_ops(BackendOps *t) {
    t->rope_gqa_forward = cuda_rope_gqa_forward;
    t->rope_gqa_backward = cuda_rope_gqa_backward;
}

// backend/cuda/rope.cuh: kernels of cuda_rope.cu: rotary positions with grouped-query heads
// (rope_gqa forward, backward). The math of backend/cpu/cpu_rope.c; activation buffers of the
// storage type T (load_f32 / store_from_f32). Deterministic without atomics: a kv head's
// gradient adds its query heads in order.
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, load_f32, store_from_f32

#define ROPE_THREADS 256

// --- rotary positions + grouped-query heads -----------------------------------------------
// Channel i of a head at position t: its rotation partner, cos and sin (angle t base^(-2i/rot),
// fp32 as the CPU's rope_angles); outside [0, rot) it passes (c = 1, s = 0, partner i).
static __device__ __forceinline__ void rope_coef(int i, int t, int rot, float base, float dir,
                                                 int *partner, float *c, float *s, float *sign) {
    *partner = i, *c = 1.0f, *s = 0.0f, *sign = 0.0f;
    if (i >= rot) return;
    int h = rot / 2, k = i < h ? i : i - h;
    float ang = (float)t * (1.0f / powf(base, (float)(2 * k) / (float)rot));
    *partner = i < h ? i + h : i - h;
    *c = cosf(ang);
    *s = dir * sinf(ang);
    *sign = i < h ? -1.0f : 1.0f;  // y_i = x_i c - x_{i+h} s; y_{i+h} = x_{i+h} c + x_i s
}

// out (N, 3 NH hs) from inp (N, (NH + 2G) hs): one thread per output element.
template <typename T>
static __global__ void rope_gqa_forward_kernel(T *out, const T *inp, int N, int T_, int NH, int G,
                                               int hs, int rot, float base, int pos0,
                                               const int *pos) {
    size_t per = (size_t)3 * NH * hs, n = (size_t)N * per, in_row = (size_t)(NH + 2 * G) * hs;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(e / per), rest = (int)(e % per), part = rest / (NH * hs);
        int h = rest % (NH * hs) / hs, i = rest % hs, g = h / (NH / G);
        int head = part == 0 ? h : part == 1 ? NH + g : NH + G + g;  // source head in inp's row
        const T *x = inp + (size_t)r * in_row + (size_t)head * hs;
        int p;
        float c, s, sign;
        rope_coef(part == 2 ? hs : i, pos ? pos[r] : pos0 + r % T_, part == 2 ? 0 : rot, base, 1.0f, &p, &c, &s, &sign);
        if (part == 2) p = i;
        float v = load_f32(x + i) * c + sign * load_f32(x + p) * s;
        store_from_f32(out + e, v);
    }
}

// dinp (N, (NH + 2G) hs) from dout (N, 3 NH hs): one thread per input element; a k or v
// element sums its group's query heads in order.
template <typename T>
static __global__ void rope_gqa_backward_kernel(T *dinp, const T *dout, int N, int T_, int NH,
                                                int G, int hs, int rot, float base, int pos0,
                                                const int *pos) {
    size_t per = (size_t)(NH + 2 * G) * hs, n = (size_t)N * per, out_row = (size_t)3 * NH * hs;
    int rep = NH / G;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(e / per), head = (int)(e % per) / hs, i = (int)(e % per) % hs;
        const T *dy = dout + (size_t)r * out_row;
        int part = head < NH ? 0 : head < NH + G ? 1 : 2;
        int h0 = part == 0 ? head : (head - NH - (part == 2 ? G : 0)) * rep, nh = part == 0 ? 1 : rep;
        int p;
        float c, s, sign, acc = 0.0f;
        rope_coef(part == 2 ? hs : i, pos ? pos[r] : pos0 + r % T_, part == 2 ? 0 : rot, base, -1.0f, &p, &c, &s, &sign);
        if (part == 2) p = i;
        for (int h = h0; h < h0 + nh; h++) {
            const T *d = dy + (size_t)part * NH * hs + (size_t)h * hs;
            acc += load_f32(d + i) * c + sign * load_f32(d + p) * s;
        }
        store_from_f32(dinp + e, acc);
    }
}

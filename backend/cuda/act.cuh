// backend/cuda/act.cuh: kernels of cuda_act.cu: the MLP activations (BackendAct), pointwise
// (GELU, squared ReLU) and gated (SwiGLU), forward and backward. The math of backend/cpu/cpu_act.c;
// activation buffers of the storage type T (load_f32 / store_from_f32), arithmetic in fp32.
// A new pointwise activation is a case in act_value and act_grad. Every kernel moves 16-byte
// chunks (Vec16, cuda_common.cuh).
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, Vec16, grid_first, vec16_chunks

#define ACT_THREADS 256
#define ACT_GELU_K 0.7978845608028654f  // sqrt(2/pi), as backend/cpu/cpu_math.h
#define ACT_GELU_A 0.044715f

// --- pointwise: act(x) and act'(x) of one element (act: a pointwise BackendAct) -------------
// gelu(x) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
// relu2(x) = relu(x)^2.
static __device__ __forceinline__ float act_value(int act, float x) {
    switch (act) {
    case BACKEND_ACT_RELU2: return x > 0.0f ? x * x : 0.0f;
    default: {  // BACKEND_ACT_GELU
        float u = ACT_GELU_K * (x + ACT_GELU_A * x * x * x);
        return x / (1.0f + expf(-2.0f * u));
    }
    }
}

// gelu' = s + x s (1 - s) 2 u'(x), s = sigmoid(2u); relu2' = 2 relu(x).
static __device__ __forceinline__ float act_grad(int act, float x) {
    switch (act) {
    case BACKEND_ACT_RELU2: return x > 0.0f ? 2.0f * x : 0.0f;
    default: {  // BACKEND_ACT_GELU
        float u = ACT_GELU_K * (x + ACT_GELU_A * x * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));
        float du = ACT_GELU_K * (1.0f + 3.0f * ACT_GELU_A * x * x);
        return s + x * s * (1.0f - s) * 2.0f * du;
    }
    }
}

// Pointwise kernels go over the n elements in chunks of Vec16<T>::N (16-byte accesses where
// aligned; the last chunk may be short), grid-stride over chunks.
// out (n) = act(inp).
template <typename T>
static __global__ void act_forward_kernel(T *out, const T *inp, size_t n, int act) {
    constexpr int V = Vec16<T>::N;
    for (size_t k = grid_first(), nk = vec16_chunks(n, V); k < nk; k += grid_stride()) {
        int cnt = vec16_count(n, k, V);
        Vec16<T> x = vec16_load(inp + k * V, cnt), y;
        CUDA_UNROLL
        for (int e = 0; e < V; e++) vec16_set(y, e, act_value(act, vec16_f32(x, e)));
        vec16_store(out + k * V, y, cnt);
    }
}

// dinp (n) = act'(inp) * dout; dinp may alias dout (each chunk is read before the same
// thread writes it).
template <typename T>
static __global__ void act_backward_kernel(T *dinp, const T *inp, const T *dout, size_t n, int act) {
    constexpr int V = Vec16<T>::N;
    for (size_t k = grid_first(), nk = vec16_chunks(n, V); k < nk; k += grid_stride()) {
        int cnt = vec16_count(n, k, V);
        Vec16<T> x = vec16_load(inp + k * V, cnt), g = vec16_load(dout + k * V, cnt), y;
        CUDA_UNROLL
        for (int e = 0; e < V; e++)
            vec16_set(y, e, act_grad(act, vec16_f32(x, e)) * vec16_f32(g, e));
        vec16_store(dinp + k * V, y, cnt);
    }
}

// --- gated: SwiGLU, grid-stride over the chunks of the N rows of F outputs -----------------
// Row r's outputs are ceil(F / N) chunks of Vec16<T>::N (the last may be short); chunk q of row
// r covers columns j0 = q * N, ... of out, of the gate (inp row r, columns j0...) and of up
// (columns F + j0...): 16-byte accesses where each is aligned.
static __device__ __forceinline__ float act_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// out (N, F) = silu(gate) * up, rows of inp (N, 2F) = [gate | up].
template <typename T>
static __global__ void swiglu_forward_kernel(T *out, const T *inp, int N, int F) {
    constexpr int V = Vec16<T>::N;
    size_t cpr = vec16_chunks((size_t)F, V), nk = (size_t)N * cpr;
    for (size_t k = grid_first(); k < nk; k += grid_stride()) {
        size_t r = k / cpr, j0 = (k % cpr) * V;
        int cnt = vec16_count((size_t)F, k % cpr, V);
        const T *gate = inp + r * 2 * F + j0;
        Vec16<T> a = vec16_load(gate, cnt), b = vec16_load(gate + F, cnt), y;
        CUDA_UNROLL
        for (int e = 0; e < V; e++) {
            float av = vec16_f32(a, e);
            vec16_set(y, e, av * act_sigmoid(av) * vec16_f32(b, e));
        }
        vec16_store(out + r * F + j0, y, cnt);
    }
}

// dinp (N, 2F): d gate = dout * up * sig * (1 + gate (1 - sig)); d up = dout * silu(gate).
template <typename T>
static __global__ void swiglu_backward_kernel(T *dinp, const T *inp, const T *dout, int N, int F) {
    constexpr int V = Vec16<T>::N;
    size_t cpr = vec16_chunks((size_t)F, V), nk = (size_t)N * cpr;
    for (size_t k = grid_first(); k < nk; k += grid_stride()) {
        size_t r = k / cpr, j0 = (k % cpr) * V;
        int cnt = vec16_count((size_t)F, k % cpr, V);
        const T *gate = inp + r * 2 * F + j0;
        Vec16<T> a = vec16_load(gate, cnt), b = vec16_load(gate + F, cnt);
        Vec16<T> g = vec16_load(dout + r * F + j0, cnt), da, db;
        CUDA_UNROLL
        for (int e = 0; e < V; e++) {
            float av = vec16_f32(a, e), bv = vec16_f32(b, e), gv = vec16_f32(g, e);
            float sg = act_sigmoid(av);
            vec16_set(da, e, gv * bv * sg * (1.0f + av * (1.0f - sg)));
            vec16_set(db, e, gv * av * sg);
        }
        vec16_store(dinp + r * 2 * F + j0, da, cnt);
        vec16_store(dinp + r * 2 * F + F + j0, db, cnt);
    }
}

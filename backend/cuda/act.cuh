// backend/cuda/act.cuh: kernels of cuda_act.cu: the MLP activations (BackendAct), pointwise
// (GELU, squared ReLU) and gated (SwiGLU), forward and backward. The math of backend/cpu/cpu_act.c;
// activation buffers of the storage type T (load_f32 / store_from_f32), arithmetic in fp32.
// A new pointwise activation is a case in act_value and act_grad.
#pragma once
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, load_f32, store_from_f32

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

// out (n) = act(inp), grid-stride.
template <typename T>
static __global__ void act_forward_kernel(T *out, const T *inp, size_t n, int act) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_from_f32(out + i, act_value(act, load_f32(inp + i)));
}

// dinp (n) = act'(inp) * dout; dinp may alias dout (each element is read before the same
// thread writes it).
template <typename T>
static __global__ void act_backward_kernel(T *dinp, const T *inp, const T *dout, size_t n, int act) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_from_f32(dinp + i, act_grad(act, load_f32(inp + i)) * load_f32(dout + i));
}

// --- gated: SwiGLU, grid-stride over the N * F outputs ------------------------------------
static __device__ __forceinline__ float act_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// out (N, F) = silu(gate) * up, rows of inp (N, 2F) = [gate | up].
template <typename T>
static __global__ void swiglu_forward_kernel(T *out, const T *inp, size_t n, int F) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)F, j = i % (size_t)F;
        float a = load_f32(inp + r * 2 * F + j), b = load_f32(inp + r * 2 * F + F + j);
        store_from_f32(out + i, a * act_sigmoid(a) * b);
    }
}

// dinp (N, 2F): d gate = dout * up * sig * (1 + gate (1 - sig)); d up = dout * silu(gate).
template <typename T>
static __global__ void swiglu_backward_kernel(T *dinp, const T *inp, const T *dout, size_t n, int F) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)F, j = i % (size_t)F;
        float a = load_f32(inp + r * 2 * F + j), b = load_f32(inp + r * 2 * F + F + j);
        float g = load_f32(dout + i), sg = act_sigmoid(a);
        store_from_f32(dinp + r * 2 * F + j, g * b * sg * (1.0f + a * (1.0f - sg)));
        store_from_f32(dinp + r * 2 * F + F + j, g * a * sg);
    }
}

// backend/cuda/cuda_attention.cu: causal multi-head self-attention with the probabilities
// materialised (B, NH, T, T), as the CPU backend: per batch element one strided-batched GEMM
// over the NH heads for each product, the causal softmax (attention.cuh) in between.
//
// Per (b, h), q, k, v are strided views into qkv (B, T, 3*C), C = NH*hs, row stride 3*C:
// q at column h*hs, k at C + h*hs, v at 2*C + h*hs; consecutive heads are hs floats apart.
#include "backend/cuda/attention.cuh"

#include <math.h>  // defines: sqrtf

static void causal_softmax(Backend *be, float *att, long long rows, int T) {
    unsigned blocks = (unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS);
    CUDA_LAUNCH(causal_softmax_kernel, blocks, ATT_WARPS * WARP, 0, cuda_stream(be), att, rows, T);
}

// out (B, T, C) from qkv (B, T, 3*C); att (B, NH, T, T) keeps the probabilities.
void cuda_attention_forward(Backend *be, float *out, float *att, const float *qkv,
                            int B, int T, int NH, int hs) {
    if (B <= 0 || T <= 0 || NH <= 0) return;
    int C = NH * hs, C3 = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {  // scores[b, h] (T, T) = scale * q (T, hs) @ k^T
        const float *q = qkv + (size_t)b * T * C3, *k = q + C;
        cuda_gemm(be, 0, 1, T, T, hs, scale, q, C3, hs, k, C3, hs, 0.0f,
                  att + (size_t)b * NH * TT, T, TT, NH, NULL);
    }
    causal_softmax(be, att, (long long)B * NH * T, T);
    for (int b = 0; b < B; b++) {  // out[b, :, h] (T, hs) = att[b, h] (T, T) @ v (T, hs)
        const float *v = qkv + (size_t)b * T * C3 + 2 * C;
        cuda_gemm(be, 0, 0, T, hs, T, 1.0f, att + (size_t)b * NH * TT, T, TT, v, C3, hs, 0.0f,
                  out + (size_t)b * T * C, C, hs, NH, NULL);
    }
}

// dqkv (B, T, 3*C) overwritten; scratch (B, NH, T, T) holds d(att), then d(scores).
void cuda_attention_backward(Backend *be, float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const float *att, int B, int T, int NH, int hs) {
    if (B <= 0 || T <= 0 || NH <= 0) return;
    int C = NH * hs, C3 = 3 * C;
    long long TT = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * C3 + 2 * C, *dy = dout + (size_t)b * T * C;
        const float *a = att + (size_t)b * NH * TT;
        float *da = scratch + (size_t)b * NH * TT;
        // datt (T, T) = dout_h (T, hs) @ v^T;  dv (T, hs) = att^T (T, T) @ dout_h
        cuda_gemm(be, 0, 1, T, T, hs, 1.0f, dy, C, hs, v, C3, hs, 0.0f, da, T, TT, NH, NULL);
        cuda_gemm(be, 1, 0, T, hs, T, 1.0f, a, T, TT, dy, C, hs, 0.0f,
                  dqkv + (size_t)b * T * C3 + 2 * C, C3, hs, NH, NULL);
    }
    long long rows = (long long)B * NH * T;
    unsigned blocks = (unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS);
    CUDA_LAUNCH(causal_softmax_backward_kernel, blocks, ATT_WARPS * WARP, 0, cuda_stream(be),
                scratch, att, rows, T);
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3, *k = q + C;
        const float *ds = scratch + (size_t)b * NH * TT;
        float *dq = dqkv + (size_t)b * T * C3;
        // dq (T, hs) = scale * dscores @ k;  dk (T, hs) = scale * dscores^T @ q
        cuda_gemm(be, 0, 0, T, hs, T, scale, ds, T, TT, k, C3, hs, 0.0f, dq, C3, hs, NH, NULL);
        cuda_gemm(be, 1, 0, T, hs, T, scale, ds, T, TT, q, C3, hs, 0.0f, dq + C, C3, hs, NH, NULL);
    }
}

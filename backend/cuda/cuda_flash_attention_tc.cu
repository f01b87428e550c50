// backend/cuda/cuda_flash_attention_tc.cu: the tensor-core path of fused causal attention
// (--use-flash-attn): launchers of the flash_attention_tc.cuh kernels (WMMA 16x16x16, fp32
// accumulators), taken by cuda_flash_attention.cu for bf16/fp16 activations and head size 64
// or 128 unless MEGAC_FLASH_ATTN_PLAIN=1 is set (then the plain path runs: tests compare the
// two). Every block runs 4 warps over 64 rows of its own tile; the other side's tile and the
// static shared memory (all under 48 KB) by kernel and head size, with sm_90 ptxas registers:
//   kernel            HS 64: tile, smem bytes, regs     HS 128: tile, smem bytes, regs
//   forward           64 keys,    46592, 115-128       32 keys,    36352,  128-175
//   backward dq       32 keys,    20992, 126-128       32 keys,    36352,  220-244
//   backward dk/dv    32 queries, 20992, 166-168       32 queries, 36352,  255
// (only the fp16 dk/dv kernel at HS 128 spills: 108 bytes stored, 152 loaded).
// The backward reuses the plain path's D = rowsum(dout * out) (computed by the caller).
#include "backend/cuda/flash_attention_tc.cuh"  // defines: the kernels, FTC_THREADS, FTC_ROWS

#include <math.h>    // defines: sqrtf
#include <stdlib.h>  // defines: getenv
#include <string.h>  // defines: strcmp

// Tiles of FTC_ROWS rows (grid.y has at most 65535 blocks). Aborts when T is too long.
static unsigned ftc_tiles(int T) {
    long long n = ((long long)T + FTC_ROWS - 1) / FTC_ROWS;
    if (n > 65535)
        core_fatal("cuda flash attention (tensor cores): T = %d needs %lld tiles (max 65535)", T, n);
    return (unsigned)n;
}

// 1 when the tensor-core path handles this backend's activations and head size: bf16 or
// fp16, hs 64 or 128, and MEGAC_FLASH_ATTN_PLAIN unset (or not "1"). Pure but for the env.
int cuda_flash_tc_usable(const Backend *be, int hs) {
    if (be->act != BACKEND_BF16 && be->act != BACKEND_F16) return 0;
    if (hs != 64 && hs != 128) return 0;
    const char *plain = getenv("MEGAC_FLASH_ATTN_PLAIN");
    return !(plain && strcmp(plain, "1") == 0);
}

template <typename E, int HS, int BK>
static void ftc_forward_launch(Backend *be, void *out, float *lse, const void *qkv, int B,
                               int T, int NH, int hs) {
    dim3 grid((unsigned)(B * NH), ftc_tiles(T));
    CUDA_LAUNCH((ftc_forward_kernel<E, HS, BK>), grid, FTC_THREADS, 0, cuda_stream(be),
                (E *)out, lse, (const E *)qkv, T, NH, hs, FTC_LOG2E / sqrtf((float)hs));
}

template <typename E, int HS, int NT>
static void ftc_backward_launch(Backend *be, void *dqkv, const float *D, const void *dout,
                                const void *qkv, const float *lse, int B, int T, int NH,
                                int hs) {
    dim3 grid((unsigned)(B * NH), ftc_tiles(T));
    float scale = 1.0f / sqrtf((float)hs);
    CUDA_LAUNCH((ftc_backward_dkv_kernel<E, HS, NT>), grid, FTC_THREADS, 0, cuda_stream(be),
                (E *)dqkv, (const E *)dout, (const E *)qkv, lse, D, T, NH, hs, scale);
    CUDA_LAUNCH((ftc_backward_dq_kernel<E, HS, NT>), grid, FTC_THREADS, 0, cuda_stream(be),
                (E *)dqkv, (const E *)dout, (const E *)qkv, lse, D, T, NH, hs, scale);
}

template <typename E>
static void ftc_forward_t(Backend *be, void *out, float *lse, const void *qkv, int B, int T,
                          int NH, int hs) {
    if (hs == 64) ftc_forward_launch<E, 64, 64>(be, out, lse, qkv, B, T, NH, hs);
    else ftc_forward_launch<E, 128, 32>(be, out, lse, qkv, B, T, NH, hs);
}

template <typename E>
static void ftc_backward_t(Backend *be, void *dqkv, const float *D, const void *dout,
                           const void *qkv, const float *lse, int B, int T, int NH, int hs) {
    if (hs == 64) ftc_backward_launch<E, 64, 32>(be, dqkv, D, dout, qkv, lse, B, T, NH, hs);
    else ftc_backward_launch<E, 128, 32>(be, dqkv, D, dout, qkv, lse, B, T, NH, hs);
}

// out (B, T, C), lse (B, NH, T) from qkv (B, T, 3*C); cuda_flash_tc_usable(be, hs) must hold.
void cuda_flash_tc_forward(Backend *be, void *out, float *lse, const void *qkv, int B, int T,
                           int NH, int hs) {
    if (be->act == BACKEND_BF16) ftc_forward_t<__nv_bfloat16>(be, out, lse, qkv, B, T, NH, hs);
    else ftc_forward_t<__half>(be, out, lse, qkv, B, T, NH, hs);
}

// dqkv (B, T, 3*C) overwritten from D = rowsum(dout * out) (B, NH, T), dout, qkv and lse;
// cuda_flash_tc_usable(be, hs) must hold.
void cuda_flash_tc_backward(Backend *be, void *dqkv, const float *D, const void *dout,
                            const void *qkv, const float *lse, int B, int T, int NH, int hs) {
    if (be->act == BACKEND_BF16)
        ftc_backward_t<__nv_bfloat16>(be, dqkv, D, dout, qkv, lse, B, T, NH, hs);
    else ftc_backward_t<__half>(be, dqkv, D, dout, qkv, lse, B, T, NH, hs);
}

// backend/cuda/cuda_flash_attention.cu: fused causal attention (--use-flash-attn) on the GPU:
// launchers of the flash_attention.cuh kernels. The head size picks a compiled variant
// (HS = 32, 64 or 128, zero-padded up to it) and its tiles, all within 48 KB of static
// shared memory per block:
//   HS   forward BQ x BK   backward BQ x BK   shared memory bytes (forward / backward)
//   32   32 x 32           32 x 32            13056 / 25600
//   64   32 x 32           32 x 32            21248 / 41984
//   128  32 x 32           16 x 16            37632 / 35328
// (sm_90 ptxas: 64-96 registers, no spills.)
// Element type: qkv, out, dout, dqkv of be->act (each kernel instantiated for float, bf16 and
// fp16; tiles in shared memory are fp32 whatever the type, so the table holds for all three).
// Backward: D = rowsum(dout * out) into the scratch, then the dk/dv kernel (one block per key
// tile) and the dq kernel (one block per query tile): each element of dqkv written
// once (with a window: added to once, dk and dv into the window's dkv; packed kv rows of
// w->kv_heads = G heads: one dk/dv block per kv head's key tile, over its NH/G query heads).
// cuDNN (be->attn AUTO or CUDNN, --attention-backend): calls cuDNN runs with megac's
// semantics go to cuda_cudnn_attn.c first (GPU builds with cuDNN); the rest, and anything
// cuDNN cannot plan, run the kernels below.
// Dropout on the probabilities (d not NULL): the same kernels with the mask
// (flash_attention.cuh); the tensor-core path has none, so with attention dropout > 0 the
// plain kernels run whatever the type and head size.
#include "backend/cuda/flash_attention.cuh"  // defines: the kernels, FLASH_THREADS

#include <math.h>   // defines: sqrtf
#include <stdio.h>  // defines: fprintf

#define FLASH_MAX_HS 128

// The notes printed once per backend (bits of CudaState.attn_noted), on rank 0 (or without MPI).
enum { NOTE_CASE = 1, NOTE_NO_CUDNN = 2, NOTE_CUDNN_RUNS = 4 };
static void flash_note(Backend *be, unsigned bit, const char *what, const char *why) {
    CudaState *st = cuda_state(be);
    if (st->attn_noted & bit) return;
    st->attn_noted |= bit;
    if (core_world_rank() <= 0) fprintf(stderr, "attention: %s%s%s\n", what, why ? ": " : "", why ? why : "");
}

// 1 when this fused-attention call is to be tried on cuDNN (cuda_cudnn_attn.c): the backend's
// kernels (be->attn) allow it, the call is one cuDNN runs (backend_attn_cudnn_case) and this
// build has cuDNN. With --attention-backend fused, a fallback is printed once per reason.
static int flash_cudnn_wanted(Backend *be, int hs, const BackendDropout *d,
                              const BackendAttnWindow *w) {
    const char *why = NULL;
    if (be->attn == BACKEND_ATTN_MEGAC) return 0;
    if (!backend_attn_cudnn_case(be->act, hs, d, w, &why)) {
        if (be->attn == BACKEND_ATTN_CUDNN)
            flash_note(be, NOTE_CASE, "--attention-backend fused: megac's fused kernels run calls with", why);
        return 0;
    }
#if defined(MEGAC_CUDA_EMU) || !defined(MEGAC_HAVE_CUDNN)
#ifdef MEGAC_CUDA_EMU
    why = "the GPU emulator cannot run cuDNN";
#else
    why = "megac was built without cuDNN (meson -Dcudnn)";
#endif
    if (be->attn == BACKEND_ATTN_CUDNN)
        flash_note(be, NOTE_NO_CUDNN, "--attention-backend fused: megac's fused kernels run instead", why);
    return 0;
#else
    return 1;
#endif
}

#ifdef MEGAC_HAVE_CUDNN
// After a cuDNN attempt: ran (1) or not, with why. Prints which kernels run, once each.
static int flash_cudnn_result(Backend *be, int ran, const char *why) {
    if (ran) flash_note(be, NOTE_CUDNN_RUNS, "cuDNN fused SDPA runs the fused attention", NULL);
    else flash_note(be, NOTE_NO_CUDNN, "cuDNN cannot run it, megac's fused kernels do", why);
    return ran;
}
#endif

// Tiles of T rows (grid.y has at most 65535 blocks). Aborts when T is too long for that.
static unsigned flash_tiles(int T, int rows) {
    long long n = ((long long)T + rows - 1) / rows;
    if (n > 65535) core_fatal("cuda flash attention: T = %d needs %lld tiles of %d (max 65535)",
                              T, n, rows);
    return (unsigned)n;
}

// The kernels' window of w (NULL: the whole sequence) for qkv (B, T, 3C), C = NH*hs, and
// dqkv (the backward's, or NULL); Tg the masks' sequence length.
static FlashWindow flash_window(const BackendAttnWindow *w, const void *qkv, void *dqkv, int T,
                                int Tg, int NH, int hs) {
    int C = NH * hs, G = w ? w->kv_heads : 0;
    FlashWindow fw = {qkv, dqkv, T, 0, 0, 0, Tg, 0, 3 * C, C, C, 1, NULL};
    if (w) fw.kv = w->kv ? w->kv : qkv, fw.dkv = w->dkv ? w->dkv : dqkv, fw.Tk = w->Tk,
           fw.off = w->q0 - w->k0, fw.q0 = w->q0, fw.k0 = w->k0, fw.acc = 1,
           fw.qstart = w->qstart;
    if (G) fw.ldk = 2 * G * hs, fw.ko = 0, fw.vo = G * hs, fw.R = NH / G;
    return fw;
}

// Aborts on a window's kv_heads that does not divide NH or lacks kv (bwd: or dkv).
static void flash_check_kv_heads(const BackendAttnWindow *w, int NH, int bwd) {
    int G = w ? w->kv_heads : 0;
    if (G < 0 || (G && (NH % G || !w->kv || (bwd && !w->dkv))))
        core_fatal("flash_attention_%s: kv_heads %d with %d heads (must divide them; kv%s given)",
                   bwd ? "backward" : "forward", G, NH, bwd ? " and dkv" : "");
}

template <typename E, int HS, int BQ, int BK>
static void flash_forward_launch(Backend *be, void *out, float *lse, const void *qkv,
                                 int B, int T, int NH, int hs, BackendDropout dd,
                                 const BackendAttnWindow *w) {
    dim3 grid((unsigned)(B * NH), flash_tiles(T, BQ));
    FlashWindow fw = flash_window(w, qkv, NULL, T, dd.T ? dd.T : T, NH, hs);
    fw.acc = w && w->accumulate;
    CUDA_LAUNCH((flash_forward_kernel<E, HS, BQ, BK>), grid, FLASH_THREADS, 0, cuda_stream(be),
                (E *)out, lse, (const E *)qkv, T, NH, hs, 1.0f / sqrtf((float)hs), dd, fw);
}

template <typename E, int HS, int BQ, int BK>
static void flash_backward_launch(Backend *be, void *dqkv, const float *D, const void *dout,
                                  const void *qkv, const float *lse, int B, int T, int NH,
                                  int hs, BackendDropout dd, const BackendAttnWindow *w) {
    float scale = 1.0f / sqrtf((float)hs);
    FlashWindow fw = flash_window(w, qkv, dqkv, T, dd.T ? dd.T : T, NH, hs);  // acc: with a window
    dim3 gk((unsigned)(B * (NH / fw.R)), flash_tiles(fw.Tk, BK)), gq((unsigned)(B * NH), flash_tiles(T, BQ));
    CUDA_LAUNCH((flash_backward_dkv_kernel<E, HS, BQ, BK>), gk, FLASH_THREADS, 0, cuda_stream(be),
                (const E *)dout, (const E *)qkv, lse, D, T, NH, hs, scale, dd, fw);
    CUDA_LAUNCH((flash_backward_dq_kernel<E, HS, BQ, BK>), gq, FLASH_THREADS, 0, cuda_stream(be),
                (E *)dqkv, (const E *)dout, (const E *)qkv, lse, D, T, NH, hs, scale, dd, fw);
}

// The kernels' dropout argument: *d, or none (threshold 0).
static BackendDropout flash_dropout_arg(const BackendDropout *d) {
    BackendDropout none = {};
    return d ? *d : none;
}

static void flash_check_hs(int hs) {
    if (hs <= 0 || hs > FLASH_MAX_HS)
        core_fatal("cuda flash attention: head size %d not supported (1..%d)", hs, FLASH_MAX_HS);
}

// The forward for element type E: the head size picks the variant.
template <typename E>
static void flash_forward_t(Backend *be, void *out, float *lse, const void *qkv, int B, int T,
                            int NH, int hs, BackendDropout dd, const BackendAttnWindow *w) {
    if (hs <= 32) flash_forward_launch<E, 32, 32, 32>(be, out, lse, qkv, B, T, NH, hs, dd, w);
    else if (hs <= 64) flash_forward_launch<E, 64, 32, 32>(be, out, lse, qkv, B, T, NH, hs, dd, w);
    else flash_forward_launch<E, 128, 32, 32>(be, out, lse, qkv, B, T, NH, hs, dd, w);
}

// out (B, T, C), lse (B, NH, T) from qkv (B, T, 3*C), C = NH*hs (keys and values from w->kv
// with a window w: the plain kernels); probabilities dropped by d (NULL or threshold 0: none).
void cuda_flash_attention_forward(Backend *be, void *out, float *lse, const void *qkv,
                                  int B, int T, int NH, int hs, const BackendDropout *d,
                                  const BackendAttnWindow *w) {
    if (B <= 0 || T <= 0 || NH <= 0) return;
    flash_check_hs(hs);
    flash_check_kv_heads(w, NH, 0);
    BackendDropout dd = flash_dropout_arg(d);
#ifdef MEGAC_HAVE_CUDNN
    const char *why = NULL;
    if (flash_cudnn_wanted(be, hs, d, w) &&
        flash_cudnn_result(be, cuda_cudnn_attn_forward(be, out, lse, qkv, B, T, NH, hs, &why), why))
        return;
#else
    (void)flash_cudnn_wanted(be, hs, d, w);
#endif
    if (!dd.threshold && !w && cuda_flash_tc_usable(be, hs)) {  // WMMA path: no dropout, window
        cuda_flash_tc_forward(be, out, lse, qkv, B, T, NH, hs);
        return;
    }
    ACT_DISPATCH(be->act, flash_forward_t, be, out, lse, qkv, B, T, NH, hs, dd, w);
}

// The backward for element type E: D = rowsum(dout * out) into scratch, then dk/dv and dq.
template <typename E>
static void flash_backward_t(Backend *be, void *dqkv, float *scratch, const void *dout,
                             const void *qkv, const void *out, const float *lse, int B, int T,
                             int NH, int hs, BackendDropout dd, const BackendAttnWindow *w) {
    long long rows = (long long)B * NH * T;
    unsigned blocks = (unsigned)((rows + FLASH_ROW_WARPS - 1) / FLASH_ROW_WARPS);
    CUDA_LAUNCH(flash_rowdot_kernel<E>, blocks, FLASH_ROW_WARPS * WARP, 0, cuda_stream(be),
                scratch, (const E *)dout, (const E *)out, rows, T, NH, hs);
    if (!dd.threshold && !w && cuda_flash_tc_usable(be, hs)) {  // WMMA path: whole sequence
        cuda_flash_tc_backward(be, dqkv, scratch, dout, qkv, lse, B, T, NH, hs);
        return;
    }
    if (hs <= 32)
        flash_backward_launch<E, 32, 32, 32>(be, dqkv, scratch, dout, qkv, lse, B, T, NH, hs, dd, w);
    else if (hs <= 64)
        flash_backward_launch<E, 64, 32, 32>(be, dqkv, scratch, dout, qkv, lse, B, T, NH, hs, dd, w);
    else
        flash_backward_launch<E, 128, 16, 16>(be, dqkv, scratch, dout, qkv, lse, B, T, NH, hs, dd, w);
}

// dqkv (B, T, 3*C) overwritten (a window w: dq added, dk, dv added into w->dkv, the plain
// kernels); scratch (B, NH, T) gets D = rowsum(dout * out); the mask of d regenerated.
void cuda_flash_attention_backward(Backend *be, void *dqkv, float *scratch, const void *dout,
                                   const void *qkv, const void *out, const float *lse,
                                   int B, int T, int NH, int hs, const BackendDropout *d,
                                   const BackendAttnWindow *w) {
    if (B <= 0 || T <= 0 || NH <= 0) return;
    flash_check_hs(hs);
    if (w && w->kv && !w->dkv)
        core_fatal("flash_attention_backward: a window with kv needs its dkv (Tk %d)", w->Tk);
    flash_check_kv_heads(w, NH, 1);
#ifdef MEGAC_HAVE_CUDNN
    const char *why = NULL;
    if (flash_cudnn_wanted(be, hs, d, w) &&
        flash_cudnn_result(be, cuda_cudnn_attn_backward(be, dqkv, scratch, dout, qkv, out, lse, B,
                                                        T, NH, hs, &why), why))
        return;
#else
    (void)flash_cudnn_wanted(be, hs, d, w);
#endif
    ACT_DISPATCH(be->act, flash_backward_t, be, dqkv, scratch, dout, qkv, out, lse, B, T, NH, hs,
                 flash_dropout_arg(d), w);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_flash_attention_ops(BackendOps *t) {
    t->flash_attention_forward = cuda_flash_attention_forward;
    t->flash_attention_backward = cuda_flash_attention_backward;
}

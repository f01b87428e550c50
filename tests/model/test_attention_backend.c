// tests/model/test_attention_backend.c: --attention-backend's selection, without a GPU.
// (1) gpt_attention_backend: each name's kernels and whether attention is fused, with and
// without --use-flash-attn, and the refusals; (2) backend_attn_cudnn_case: which fused
// attention calls cuDNN may run (bf16/fp16, head size 64 or 128, no dropout, no window);
// (3) where cuDNN cannot run (the CPU backend; under the GPU emulator the CUDA backend too)
// the fused attention gives megac's bits whatever be->attn says (the fallback of
// --attention-backend fused off the GPU).
#include "model/gpt_flags.h"
#include "tests/testing.h"

#include <stdlib.h>
#include <string.h>

// Applies name with --use-flash-attn given (flash0); checks the result.
static void expect_name(const char *name, int flash0, int ok, int flash, BackendAttnKernels k) {
    int f = flash0;
    BackendAttnKernels got = (BackendAttnKernels)-1;
    char err[160] = "";
    int rc = gpt_attention_backend(name, &f, &got, err, sizeof err);
    EXPECT(ok ? rc == 0 : rc == -1, "%s (flash %d): rc %d (%s)", name, flash0, rc, err);
    if (ok) {
        EXPECT(f == flash && got == k, "%s (flash %d): flash %d kernels %d, want %d %d", name,
               flash0, f, (int)got, flash, (int)k);
    } else {
        EXPECT(strstr(err, "--attention-backend") != NULL, "%s: the error names the flag: %s", name, err);
    }
}

static void test_names(void) {
    expect_name("auto", 0, 1, 0, BACKEND_ATTN_AUTO);  // materialised stays materialised
    expect_name("auto", 1, 1, 1, BACKEND_ATTN_AUTO);  // fused: cuDNN where it can
    expect_name("fused", 0, 1, 1, BACKEND_ATTN_CUDNN);
    expect_name("fused", 1, 1, 1, BACKEND_ATTN_CUDNN);
    expect_name("flash", 0, 1, 1, BACKEND_ATTN_MEGAC);
    expect_name("flash", 1, 1, 1, BACKEND_ATTN_MEGAC);
    expect_name("unfused", 0, 1, 0, BACKEND_ATTN_MEGAC);
    expect_name("local", 0, 1, 0, BACKEND_ATTN_MEGAC);
    expect_name("unfused", 1, 0, 0, BACKEND_ATTN_MEGAC);  // contradicts --use-flash-attn
    expect_name("local", 1, 0, 0, BACKEND_ATTN_MEGAC);
    expect_name("cudnn", 0, 0, 0, BACKEND_ATTN_MEGAC);
    expect_name("", 0, 0, 0, BACKEND_ATTN_MEGAC);
    expect_name("Fused", 0, 0, 0, BACKEND_ATTN_MEGAC);
}

static void test_cases(void) {
    const char *why = NULL;
    BackendDropout none = {0}, drop = {0};
    drop.threshold = 1u << 30;
    BackendAttnWindow w = {0, 0, 16, NULL, 0, NULL, 0, NULL};
    EXPECT(backend_attn_cudnn_case(BACKEND_BF16, 64, NULL, NULL, &why) && why == NULL, "bf16 hs 64");
    EXPECT(backend_attn_cudnn_case(BACKEND_F16, 128, NULL, NULL, &why), "fp16 hs 128");
    EXPECT(backend_attn_cudnn_case(BACKEND_BF16, 128, &none, NULL, &why), "threshold 0 is no dropout");
    EXPECT(!backend_attn_cudnn_case(BACKEND_F32, 64, NULL, NULL, &why) && why && strstr(why, "fp32"),
           "fp32: %s", why ? why : "(null)");
    EXPECT(!backend_attn_cudnn_case(BACKEND_BF16, 32, NULL, NULL, &why) && strstr(why, "head size"),
           "hs 32: %s", why);
    EXPECT(!backend_attn_cudnn_case(BACKEND_BF16, 96, NULL, NULL, &why), "hs 96");
    EXPECT(!backend_attn_cudnn_case(BACKEND_BF16, 64, &drop, NULL, &why) && strstr(why, "dropout"),
           "dropout: %s", why);
    EXPECT(!backend_attn_cudnn_case(BACKEND_BF16, 64, NULL, &w, &why) && strstr(why, "window"),
           "window: %s", why);
    EXPECT(!backend_attn_cudnn_case(BACKEND_F32, 32, &drop, &w, NULL), "why may be NULL");
}

// Device buffer of n elements of type t holding x (host fp32), through the backend's copy and cast.
static void *upload(Backend *be, const float *x, size_t n) {
    float *tmp = be->ops->alloc(be, n * sizeof(float));
    void *d = be->ops->alloc(be, n * backend_dtype_size(be->act));
    be->ops->copy(be, tmp, x, n * sizeof(float), BACKEND_H2D);
    be->ops->cast(be, d, be->act, tmp, BACKEND_F32, n);
    be->ops->free(be, tmp);
    return d;
}

// Host copy of n bytes of device buffer d (freed).
static void *download(Backend *be, void *d, size_t bytes) {
    void *h = malloc(bytes);
    be->ops->copy(be, h, d, bytes, BACKEND_D2H);
    be->ops->free(be, d);
    return h;
}

// A backend where cuDNN cannot run (make(): the CPU; the CUDA backend under the GPU emulator):
// its fused attention with be->attn MEGAC and CUDNN gives the same bits (forward, backward).
static void test_fallback(Backend *(*make)(void), const char *what) {
    int B = 2, T = 9, NH = 2, hs = 64, C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = malloc(nq * sizeof *qkv), *dout = malloc(no * sizeof *dout);
    for (size_t i = 0; i < nq; i++) qkv[i] = (float)((i * 7919 % 101) - 50) / 50.0f;
    for (size_t i = 0; i < no; i++) dout[i] = (float)((i * 104729 % 37) - 18) / 18.0f;
    void *out[2], *lse[2], *dqkv[2];
    for (int r = 0; r < 2; r++) {
        Backend *be = make();
        be->attn = r ? BACKEND_ATTN_CUDNN : BACKEND_ATTN_MEGAC;
        size_t e = backend_dtype_size(be->act);
        void *q = upload(be, qkv, nq), *d = upload(be, dout, no);
        void *o = be->ops->alloc(be, no * e), *dq = be->ops->alloc(be, nq * e);
        float *l = be->ops->alloc(be, nl * sizeof(float)), *scr = be->ops->alloc(be, nl * sizeof(float));
        be->ops->flash_attention_forward(be, o, l, q, B, T, NH, hs, NULL, NULL);
        be->ops->flash_attention_backward(be, dq, scr, d, q, o, l, B, T, NH, hs, NULL, NULL);
        out[r] = download(be, o, no * 2), lse[r] = download(be, l, nl * 4), dqkv[r] = download(be, dq, nq * 2);
        be->ops->free(be, q), be->ops->free(be, d), be->ops->free(be, scr);
        backend_destroy(be);
    }
    EXPECT(!memcmp(out[0], out[1], no * 2) && !memcmp(lse[0], lse[1], nl * 4) &&
           !memcmp(dqkv[0], dqkv[1], nq * 2), "%s: fused attention with --attention-backend fused "
           "gives megac's bits", what);
    for (int r = 0; r < 2; r++) free(out[r]), free(lse[r]), free(dqkv[r]);
    free(qkv), free(dout);
}

static Backend *make_cpu(void) { return backend_cpu_create(1, BACKEND_BF16); }
#ifdef MEGAC_CUDA_EMU
static Backend *make_emulated(void) { return backend_cuda_create(0, BACKEND_MATH_TF32, BACKEND_BF16); }
#endif

int main(void) {
    test_names();
    test_cases();
    test_fallback(make_cpu, "cpu");
#ifdef MEGAC_CUDA_EMU
    test_fallback(make_emulated, "the GPU emulator");  // prints its one line: no cuDNN there
#endif
    return test_result("attention_backend");
}

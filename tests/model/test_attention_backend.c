// tests/model/test_attention_backend.c: --attention-backend's selection, without a GPU.
// (1) gpt_attention_backend: each name's kernels and whether attention is fused, with and
// without --use-flash-attn, and the refusals; (2) backend_attn_cudnn_case: which fused
// attention calls cuDNN may run (bf16/fp16, head size 64 or 128, no dropout, no window);
// (3) the CPU backend ignores the kernels: its fused attention gives the same bits whatever
// be->attn says (the fallback of --attention-backend fused off the GPU).
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

// The CPU's fused attention with be->attn MEGAC and CUDNN: the same bits (forward, backward).
static void test_cpu_ignores(void) {
    int B = 2, T = 9, NH = 2, hs = 64, C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = malloc(nq * sizeof *qkv), *dout = malloc(no * sizeof *dout);
    for (size_t i = 0; i < nq; i++) qkv[i] = (float)((i * 7919 % 101) - 50) / 50.0f;
    for (size_t i = 0; i < no; i++) dout[i] = (float)((i * 104729 % 37) - 18) / 18.0f;
    float *out[2], *lse[2], *dqkv[2], *scr = malloc(nl * sizeof *scr);
    for (int r = 0; r < 2; r++) {
        Backend *be = backend_cpu_create(1, BACKEND_BF16);
        be->attn = r ? BACKEND_ATTN_CUDNN : BACKEND_ATTN_MEGAC;
        size_t e = backend_dtype_size(be->act);
        void *q = malloc(nq * e), *d = malloc(no * e);
        be->ops->cast(be, q, be->act, qkv, BACKEND_F32, nq);
        be->ops->cast(be, d, be->act, dout, BACKEND_F32, no);
        out[r] = malloc(no * e), lse[r] = malloc(nl * sizeof(float)), dqkv[r] = malloc(nq * e);
        be->ops->flash_attention_forward(be, out[r], lse[r], q, B, T, NH, hs, NULL, NULL);
        be->ops->flash_attention_backward(be, dqkv[r], scr, d, q, out[r], lse[r], B, T, NH, hs, NULL, NULL);
        free(q), free(d);
        backend_destroy(be);
    }
    EXPECT(!memcmp(out[0], out[1], no * 2) && !memcmp(lse[0], lse[1], nl * 4) &&
           !memcmp(dqkv[0], dqkv[1], nq * 2), "the CPU's fused attention ignores be->attn");
    for (int r = 0; r < 2; r++) free(out[r]), free(lse[r]), free(dqkv[r]);
    free(qkv), free(dout), free(scr);
}

int main(void) {
    test_names();
    test_cases();
    test_cpu_ignores();
    return test_result("attention_backend");
}

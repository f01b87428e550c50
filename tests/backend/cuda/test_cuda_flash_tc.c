// tests/backend/cuda/test_cuda_flash_tc.c: the tensor-core path of fused causal attention
// (cuda_flash_attention_tc.cu, WMMA; taken for bf16/fp16 activations at head size 64 and 128)
// against the CPU backend's fp32 flash attention and against the CUDA plain path
// (MEGAC_FLASH_ATTN_PLAIN=1), forward (out, lse) and backward (dqkv), at T = 1, 17, 100 and
// 256 (not multiples of the 64-row tiles but 256). Method as cuda_half.h: inputs rounded to
// the type, outputs NaN-poisoned first; the backward is fed the reference's out and lse; the
// device runs each op twice and must give the same bits. Exit 77 without a usable device.
// `--quick`: T = 17 and 100 only. MEGAC_TEST_VERBOSE=1 prints every measured error.
//
// Tolerances (relative to max(1, max|ref|)), [0] bf16, [1] fp16:
//   TOL_TC_OUT / TOL_TC_DQKV: the output is rounded once to the type (TOL_STORE's half ulp) and
//     the probabilities p (forward and backward) and ds = p (dout.v - D) (backward) are
//     rounded to the type before their tensor-core products: about one more half ulp of the
//     largest terms. Measured (emulator, this file's shapes): against the CPU up to 3.7e-3
//     (bf16) / 5.4e-4 (fp16), against the plain path (its own rounding too) 7.0e-3 / 8.7e-4.
//   lse is fp32 from the same fp32 scores as the reference: TOL_F32.
#include "tests/backend/cuda/cuda_half.h"

#include <stdio.h>

static const double TOL_TC_OUT[2] = {1.2e-2, 1.5e-3};
static const double TOL_TC_DQKV[2] = {1.2e-2, 1.5e-3};

// Forward on the device: out, lse (host fp32) from host qkv; twice, same bits expected.
static void dev_forward(Half *h, float *out, float *lse, const float *qkv, int B, int T, int NH,
                        int hs) {
    size_t nqkv = (size_t)B * T * 3 * NH * hs, nout = (size_t)B * T * NH * hs;
    size_t nrow = (size_t)B * NH * T;
    float *rep = test_floats(nout + nrow);
    void *d_qkv = half_up(h, qkv, nqkv);
    for (int run = 0; run < 2; run++) {
        void *d_out = half_poisoned(h, nout, h->dt);
        float *d_lse = half_poisoned(h, nrow, BACKEND_F32);
        h->be->ops->flash_attention_forward(h->be, d_out, d_lse, d_qkv, B, T, NH, hs, NULL, NULL);
        half_down(h, run ? rep : out, d_out, nout);
        half_down_f32(h, run ? rep + nout : lse, d_lse, nrow);
    }
    half_release(h);
    EXPECT_SAME_BITS(rep, out, nout, "flash forward out rerun");
    EXPECT_SAME_BITS(rep + nout, lse, nrow, "flash forward lse rerun");
    free(rep);
}

// Backward on the device: dqkv (host fp32) from host dout, qkv, out, lse; twice.
static void dev_backward(Half *h, float *dqkv, const float *dout, const float *qkv,
                         const float *out, const float *lse, int B, int T, int NH, int hs) {
    size_t nqkv = (size_t)B * T * 3 * NH * hs, nout = (size_t)B * T * NH * hs;
    size_t nrow = (size_t)B * NH * T;
    float *rep = test_floats(nqkv);
    void *d_dout = half_up(h, dout, nout), *d_qkv = half_up(h, qkv, nqkv);
    void *d_out = half_up(h, out, nout);
    float *d_lse = half_up_f32(h, lse, nrow);
    for (int run = 0; run < 2; run++) {
        void *d_dqkv = half_poisoned(h, nqkv, h->dt);
        float *d_scr = half_poisoned(h, nrow, BACKEND_F32);
        h->be->ops->flash_attention_backward(h->be, d_dqkv, d_scr, d_dout, d_qkv, d_out, d_lse,
                                             B, T, NH, hs, NULL, NULL);
        half_down(h, run ? rep : dqkv, d_dqkv, nqkv);
    }
    half_release(h);
    EXPECT_SAME_BITS(rep, dqkv, nqkv, "flash backward dqkv rerun");
    free(rep);
}

// One shape: tensor cores against the CPU, then against the plain CUDA path.
static void check_tc(Half *h, int B, int T, int NH, int hs) {
    size_t nqkv = (size_t)B * T * 3 * NH * hs, nout = (size_t)B * T * NH * hs;
    size_t nrow = (size_t)B * NH * T;
    float *qkv = half_rand(h, nqkv, -2, 2), *dout = half_rand(h, nout, -1, 1);
    float *rout = test_floats(nout), *rlse = test_floats(nrow), *rdq = test_floats(nqkv);
    float *gout = test_floats(nout), *glse = test_floats(nrow), *gdq = test_floats(nqkv);
    float *pout = test_floats(nout), *plse = test_floats(nrow), *pdq = test_floats(nqkv);
    float *scr = test_floats(nrow);
    char what[160];
    h->cpu->ops->flash_attention_forward(h->cpu, rout, rlse, qkv, B, T, NH, hs, NULL, NULL);
    unsetenv("MEGAC_FLASH_ATTN_PLAIN");
    dev_forward(h, gout, glse, qkv, B, T, NH, hs);
    snprintf(what, sizeof what, "tc forward out vs cpu B%d T%d NH%d hs%d", B, T, NH, hs);
    HALF_CLOSE(h, gout, rout, nout, half_tol(h, TOL_TC_OUT), what);
    snprintf(what, sizeof what, "tc forward lse (fp32) vs cpu T%d hs%d", T, hs);
    HALF_CLOSE(h, glse, rlse, nrow, TOL_F32, what);
    half_round(h, rout, nout, h->dt);  // both backwards read the same out
    h->cpu->ops->flash_attention_backward(h->cpu, rdq, scr, dout, qkv, rout, rlse, B, T, NH, hs,
                                          NULL, NULL);
    dev_backward(h, gdq, dout, qkv, rout, rlse, B, T, NH, hs);
    snprintf(what, sizeof what, "tc backward dqkv vs cpu B%d T%d NH%d hs%d", B, T, NH, hs);
    HALF_CLOSE(h, gdq, rdq, nqkv, half_tol(h, TOL_TC_DQKV), what);
    setenv("MEGAC_FLASH_ATTN_PLAIN", "1", 1);
    dev_forward(h, pout, plse, qkv, B, T, NH, hs);
    dev_backward(h, pdq, dout, qkv, rout, rlse, B, T, NH, hs);
    unsetenv("MEGAC_FLASH_ATTN_PLAIN");
    snprintf(what, sizeof what, "tc forward out vs plain T%d hs%d", T, hs);
    HALF_CLOSE(h, gout, pout, nout, half_tol(h, TOL_TC_OUT), what);
    snprintf(what, sizeof what, "tc forward lse vs plain T%d hs%d", T, hs);
    HALF_CLOSE(h, glse, plse, nrow, TOL_F32, what);
    snprintf(what, sizeof what, "tc backward dqkv vs plain T%d hs%d", T, hs);
    HALF_CLOSE(h, gdq, pdq, nqkv, half_tol(h, TOL_TC_DQKV), what);
    free(qkv), free(dout), free(rout), free(rlse), free(rdq), free(gout), free(glse), free(gdq);
    free(pout), free(plse), free(pdq), free(scr);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (!backend_cuda_available()) {
        printf("cuda_flash_tc: no usable CUDA device, skipped\n");
        return 77;
    }
    Half h = {.rng = {20261202}, .quick = quick};
    h.cpu = backend_cpu_create(1, BACKEND_F32);
    const BackendDType types[2] = {BACKEND_BF16, BACKEND_F16};
    const int Ts[4] = {1, 17, 100, 256};
    for (int i = 0; i < 2; i++) {
        h.dt = types[i];
        h.be = h.dev[h.dt] = backend_cuda_create(0, BACKEND_MATH_TF32, h.dt);
        printf("cuda_flash_tc: %s against %s%s\n", h.be->name, h.cpu->name, quick ? " (quick)" : "");
        for (int j = quick ? 1 : 0; j < (quick ? 3 : 4); j++) {
            int T = Ts[j], NH = T > 100 ? 1 : 2;
            check_tc(&h, 1, T, NH, 64);
            check_tc(&h, 1, T, NH, 128);
        }
        if (!quick) check_tc(&h, 2, 40, 2, 64);  // B > 1: the heads of another sequence
        backend_destroy(h.be);
    }
    backend_destroy(h.cpu);
    return test_result("cuda_flash_tc");
}

// tests/backend/cuda/test_cudnn_attn.c: cuDNN's fused attention (backend/cuda/
// cuda_cudnn_attn.c, --attention-backend fused) against megac's kernels and the CPU.
//   1. Without a GPU (also `--graph`, which stops there): the forward and backward graphs,
//      bf16 and fp16, head size 64 and 128, built and finalized by the cuDNN library here
//      (shapes and types checked by cuDNN; no engine chosen, nothing run). Exit 77 when
//      libcudnn cannot be loaded.
//   2. On a GPU: for T = 1, 17, 100, 256 (B 2, NH 2) cuDNN's forward (out, lse) and backward
//      (dqkv) against the CPU's fp32 flash attention on the same rounded inputs and against
//      megac's tensor-core kernels; each cuDNN op run twice with the same bits; the backend's
//      dispatch (be->attn = fused) gives the bits of the direct call; megac's backward fed
//      cuDNN's lse matches. Method and buffers as cuda_half.h. Exit 77 without a device.
// Tolerances: as test_cuda_flash_tc.c's (cuDNN also rounds P and dS to the type before its
// tensor-core products); lse (fp32 from fp32 scores, cuDNN's exp and log) 2e-4.
#include "tests/backend/cuda/cuda_half.h"
#include "backend/cuda/cuda_cudnn.h"     // defines: cudnn_api_open, cuda_cudnn_attn_graph_check
#include "backend/cuda/cuda_internal.h"  // defines: cuda_cudnn_attn_forward, _backward

#include <stdio.h>

static const double TOL_OUT[2] = {1.2e-2, 1.5e-3};
static const double TOL_DQKV[2] = {1.2e-2, 1.5e-3};
#define TOL_LSE 2e-4

// Part 1: the graphs finalize. 0 ok, 1 failed, 77 no library.
static int graph_checks(void) {
    CudnnApi api;
    void *lib = NULL;
    char why[512];
    if (cudnn_api_open(&api, &lib, why, sizeof why)) {
        printf("cudnn_attn: %s: skipped\n", why);
        return 77;
    }
    printf("cudnn_attn: cuDNN %zu loaded\n", api.GetVersion());
    const BackendDType types[2] = {BACKEND_BF16, BACKEND_F16};
    const int shapes[3][3] = {{2, 17, 2}, {1, 256, 4}, {4, 1024, 12}};  // B, T, NH
    for (int bwd = 0; bwd < 2; bwd++)
        for (int t = 0; t < 2; t++)
            for (int hs = 64; hs <= 128; hs *= 2)
                for (int s = 0; s < 3; s++) {
                    int rc = cuda_cudnn_attn_graph_check(&api, bwd, types[t], shapes[s][0], shapes[s][1],
                                                         shapes[s][2], hs, why, sizeof why);
                    EXPECT(rc == 0, "%s graph %s hs %d B %d T %d NH %d: %s", bwd ? "backward" : "forward",
                           backend_dtype_name(types[t]), hs, shapes[s][0], shapes[s][1], shapes[s][2], why);
                }
    return test_failures_ ? 1 : 0;
}

// cuDNN's forward, called directly (must run), twice: out, lse to the host.
static void cudnn_forward(Half *h, float *out, float *lse, const float *qkv, int B, int T, int NH, int hs) {
    size_t nq = (size_t)B * T * 3 * NH * hs, no = (size_t)B * T * NH * hs, nr = (size_t)B * NH * T;
    float *rep = test_floats(no + nr);
    void *d_qkv = half_up(h, qkv, nq);
    for (int run = 0; run < 2; run++) {
        void *d_out = half_poisoned(h, no, h->dt);
        float *d_lse = half_poisoned(h, nr, BACKEND_F32);
        const char *why = "";
        int ran = cuda_cudnn_attn_forward(h->be, d_out, d_lse, d_qkv, B, T, NH, hs, &why);
        EXPECT(ran, "cuDNN forward T%d hs%d did not run: %s", T, hs, why);
        half_down(h, run ? rep : out, d_out, no);
        half_down_f32(h, run ? rep + no : lse, d_lse, nr);
    }
    half_release(h);
    EXPECT_SAME_BITS(rep, out, no, "cuDNN forward out rerun");
    EXPECT_SAME_BITS(rep + no, lse, nr, "cuDNN forward lse rerun");
    free(rep);
}

// A backward on the device from host dout, qkv, out, lse: cuDNN directly (direct 1, twice,
// the same bits) or the backend's flash_attention_backward with be->attn = attn.
static void dev_backward(Half *h, float *dqkv, const float *dout, const float *qkv, const float *out,
                         const float *lse, int B, int T, int NH, int hs, int direct,
                         BackendAttnKernels attn) {
    size_t nq = (size_t)B * T * 3 * NH * hs, no = (size_t)B * T * NH * hs, nr = (size_t)B * NH * T;
    float *rep = test_floats(nq);
    void *d_dout = half_up(h, dout, no), *d_qkv = half_up(h, qkv, nq), *d_out = half_up(h, out, no);
    float *d_lse = half_up_f32(h, lse, nr);
    h->be->attn = attn;
    for (int run = 0; run < (direct ? 2 : 1); run++) {
        void *d_dqkv = half_poisoned(h, nq, h->dt);
        float *d_scr = half_poisoned(h, nr, BACKEND_F32);
        const char *why = "";
        if (direct)
            EXPECT(cuda_cudnn_attn_backward(h->be, d_dqkv, d_scr, d_dout, d_qkv, d_out, d_lse, B, T,
                                            NH, hs, &why), "cuDNN backward T%d hs%d did not run: %s", T, hs, why);
        else
            h->be->ops->flash_attention_backward(h->be, d_dqkv, d_scr, d_dout, d_qkv, d_out, d_lse, B,
                                                 T, NH, hs, NULL, NULL);
        half_down(h, run ? rep : dqkv, d_dqkv, nq);
    }
    h->be->attn = BACKEND_ATTN_MEGAC;
    half_release(h);
    if (direct) EXPECT_SAME_BITS(rep, dqkv, nq, "cuDNN backward dqkv rerun");
    free(rep);
}

// The backend's forward with be->attn = attn: out, lse to the host.
static void dev_forward(Half *h, float *out, float *lse, const float *qkv, int B, int T, int NH,
                        int hs, BackendAttnKernels attn) {
    size_t nq = (size_t)B * T * 3 * NH * hs, no = (size_t)B * T * NH * hs, nr = (size_t)B * NH * T;
    void *d_qkv = half_up(h, qkv, nq), *d_out = half_poisoned(h, no, h->dt);
    float *d_lse = half_poisoned(h, nr, BACKEND_F32);
    h->be->attn = attn;
    h->be->ops->flash_attention_forward(h->be, d_out, d_lse, d_qkv, B, T, NH, hs, NULL, NULL);
    h->be->attn = BACKEND_ATTN_MEGAC;
    half_down(h, out, d_out, no);
    half_down_f32(h, lse, d_lse, nr);
    half_release(h);
}

static void check_shape(Half *h, int B, int T, int NH, int hs) {
    size_t nq = (size_t)B * T * 3 * NH * hs, no = (size_t)B * T * NH * hs, nr = (size_t)B * NH * T;
    float *qkv = half_rand(h, nq, -2, 2), *dout = half_rand(h, no, -1, 1), *scr = test_floats(nr);
    float *rout = test_floats(no), *rlse = test_floats(nr), *rdq = test_floats(nq);
    float *cout = test_floats(no), *clse = test_floats(nr), *cdq = test_floats(nq);
    float *mout = test_floats(no), *mlse = test_floats(nr), *mdq = test_floats(nq);
    float *xout = test_floats(no), *xlse = test_floats(nr), *xdq = test_floats(nq);
    char what[160];
    h->cpu->ops->flash_attention_forward(h->cpu, rout, rlse, qkv, B, T, NH, hs, NULL, NULL);
    cudnn_forward(h, cout, clse, qkv, B, T, NH, hs);
    snprintf(what, sizeof what, "cuDNN forward out vs cpu B%d T%d NH%d hs%d", B, T, NH, hs);
    HALF_CLOSE(h, cout, rout, no, half_tol(h, TOL_OUT), what);
    snprintf(what, sizeof what, "cuDNN forward lse vs cpu T%d hs%d", T, hs);
    HALF_CLOSE(h, clse, rlse, nr, TOL_LSE, what);
    dev_forward(h, mout, mlse, qkv, B, T, NH, hs, BACKEND_ATTN_MEGAC);  // megac's kernels
    snprintf(what, sizeof what, "cuDNN forward out vs megac's T%d hs%d", T, hs);
    HALF_CLOSE(h, cout, mout, no, 2 * half_tol(h, TOL_OUT), what);
    dev_forward(h, xout, xlse, qkv, B, T, NH, hs, BACKEND_ATTN_CUDNN);  // the dispatch
    EXPECT_SAME_BITS(xout, cout, no, "forward through be->attn = fused: the direct call's bits");
    EXPECT_SAME_BITS(xlse, clse, nr, "lse through be->attn = fused: the direct call's bits");

    half_round(h, rout, no, h->dt);  // every backward reads the same out and lse
    h->cpu->ops->flash_attention_backward(h->cpu, rdq, scr, dout, qkv, rout, rlse, B, T, NH, hs, NULL, NULL);
    dev_backward(h, cdq, dout, qkv, rout, rlse, B, T, NH, hs, 1, BACKEND_ATTN_MEGAC);
    snprintf(what, sizeof what, "cuDNN backward dqkv vs cpu B%d T%d NH%d hs%d", B, T, NH, hs);
    HALF_CLOSE(h, cdq, rdq, nq, half_tol(h, TOL_DQKV), what);
    dev_backward(h, mdq, dout, qkv, rout, rlse, B, T, NH, hs, 0, BACKEND_ATTN_MEGAC);
    snprintf(what, sizeof what, "cuDNN backward dqkv vs megac's T%d hs%d", T, hs);
    HALF_CLOSE(h, cdq, mdq, nq, 2 * half_tol(h, TOL_DQKV), what);
    dev_backward(h, xdq, dout, qkv, rout, rlse, B, T, NH, hs, 0, BACKEND_ATTN_CUDNN);
    EXPECT_SAME_BITS(xdq, cdq, nq, "backward through be->attn = fused: the direct call's bits");
    dev_backward(h, xdq, dout, qkv, rout, clse, B, T, NH, hs, 0, BACKEND_ATTN_MEGAC);
    snprintf(what, sizeof what, "megac's backward on cuDNN's lse vs cpu T%d hs%d", T, hs);
    HALF_CLOSE(h, xdq, rdq, nq, 2 * half_tol(h, TOL_DQKV), what);
    free(qkv), free(dout), free(scr), free(rout), free(rlse), free(rdq), free(cout), free(clse);
    free(cdq), free(mout), free(mlse), free(mdq), free(xout), free(xlse), free(xdq);
}

int main(int argc, char **argv) {
    int graph_only = argc > 1 && !strcmp(argv[1], "--graph");
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    int rc = graph_checks();
    if (rc == 77 || graph_only) return rc ? rc : test_result("cudnn_attn (graphs)");
    if (!backend_cuda_available()) {
        printf("cudnn_attn: graphs ok; no usable CUDA device, the op comparison skipped\n");
        return 77;
    }
    Half h = {.rng = {20261203}, .quick = quick};
    h.cpu = backend_cpu_create(1, BACKEND_F32);
    const BackendDType types[2] = {BACKEND_BF16, BACKEND_F16};
    const int Ts[4] = {1, 17, 100, 256};
    for (int i = 0; i < 2; i++) {
        h.dt = types[i];
        h.be = h.dev[h.dt] = backend_cuda_create(0, BACKEND_MATH_TF32, h.dt);
        printf("cudnn_attn: %s against %s and megac's kernels%s\n", h.be->name, h.cpu->name,
               quick ? " (quick)" : "");
        for (int j = quick ? 1 : 0; j < (quick ? 3 : 4); j++) {
            check_shape(&h, 2, Ts[j], 2, 64);
            check_shape(&h, 2, Ts[j], 2, 128);
        }
        backend_destroy(h.be);
    }
    backend_destroy(h.cpu);
    return test_result("cudnn_attn");
}

// tests/backend/cuda/test_cuda_fused.c: the fused ops (residual_layernorm_forward,
// matmul_gelu_forward, matmul_backward_dgelu; xent_stats, xent_rescale in cuda_fused_xent.c)
// against the CPU backend, with fp32 (strict fp32 GEMMs), bf16 and fp16 activations on the
// CUDA backend (method and
// helpers: cuda_half.h: inputs rounded to the type first, outputs compared within a tolerance
// of max(1, max|ref|)). Tolerances: fp32 1e-5 (summation order only); 16-bit types the
// TOL_STORE table (one rounding of each stored output; the fused GELU ops round once where
// the unfused pair rounds twice). Also: each fused op on the CPU gives the bits of the
// unfused sequence it replaces (the reference stays bitwise what it was), and the CUDA
// fused GELU ops are checked on both their paths (cuBLASLt epilogue; unaligned pointers or a
// leading dimension not a multiple of 8: the unfused fallback), and in bf16 the switch
// MEGAC_CUDA_NO_GELU_EPILOGUE=1 (the pair's bits). Exit 77 without a device.
#include "tests/backend/backend_ref_ops.h"  // defines: ref_gelu_backward
#include "tests/backend/cuda/cuda_half.h"

#include <stdio.h>
#include <stdlib.h>  // defines: setenv, unsetenv

// Random host floats in [lo, hi), rounded to h->dt unless it is fp32 (caller frees).
static float *fz_rand(Half *h, size_t n, double lo, double hi) {
    float *x = test_floats(n);
    rng_fill(&h->rng, x, n, lo, hi);
    if (h->dt != BACKEND_F32) half_round(h, x, n, h->dt);
    return x;
}

// Tolerance of outputs stored in the type under test, and of fp32 outputs.
static double fz_tol(const Half *h) {
    return h->dt == BACKEND_F32 ? 1e-5 : half_tol(h, TOL_STORE);
}

// The device's residual_layernorm_forward (res aliasing b) against its own add + norm_forward
// (BACKEND_LAYERNORM): the same bits in res, ln, mean and rstd (inputs a, b, w, bias (N, C)).
static void check_residual_ln_bits(Half *h, const float *a, const float *b, const float *w,
                                   const float *bias, int N, int C) {
    size_t nc = (size_t)N * C, esz = backend_dtype_size(h->dt);
    Backend *be = h->be;
    void *d_a = half_up(h, a, nc), *d_w = half_up(h, w, C), *d_bias = half_up(h, bias, C);
    void *f_res = half_up(h, b, nc), *f_ln = half_poisoned(h, nc, h->dt);
    void *u_res = half_poisoned(h, nc, h->dt), *u_ln = half_poisoned(h, nc, h->dt);
    float *f_st = half_poisoned(h, 2 * (size_t)N, BACKEND_F32);
    float *u_st = half_poisoned(h, 2 * (size_t)N, BACKEND_F32);
    be->ops->add(be, u_res, d_a, f_res, nc);
    be->ops->norm_forward(be, u_ln, u_st, u_st + N, u_res, d_w, d_bias, N, C, BACKEND_LAYERNORM);
    be->ops->residual_layernorm_forward(be, f_res, f_ln, f_st, f_st + N, d_a, f_res, d_w, d_bias,
                                        N, C);
    size_t bytes = nc * esz;
    char *hb = malloc(4 * bytes + 32 * (size_t)N);
    be->ops->copy(be, hb, f_res, bytes, BACKEND_D2H), be->ops->copy(be, hb + bytes, u_res, bytes, BACKEND_D2H);
    be->ops->copy(be, hb + 2 * bytes, f_ln, bytes, BACKEND_D2H);
    be->ops->copy(be, hb + 3 * bytes, u_ln, bytes, BACKEND_D2H);
    be->ops->copy(be, hb + 4 * bytes, f_st, 8 * (size_t)N, BACKEND_D2H);
    be->ops->copy(be, hb + 4 * bytes + 8 * (size_t)N, u_st, 8 * (size_t)N, BACKEND_D2H);
    be->ops->sync(be);
    half_release(h);
    char what[200];
    snprintf(what, sizeof what, "%s residual_layernorm_forward is not bitwise add + layernorm_forward "
             "(N %d, C %d)", be->name, N, C);
    EXPECT(!memcmp(hb, hb + bytes, bytes) && !memcmp(hb + 2 * bytes, hb + 3 * bytes, bytes) &&
           !memcmp(hb + 4 * bytes, hb + 4 * bytes + 8 * (size_t)N, 8 * (size_t)N), what);
    free(hb);
}

// residual_layernorm_forward (res aliasing a, as the model calls it) against the CPU, and the
// CPU's fused op against its add + norm_forward(same bits, BACKEND_LAYERNORM); the device's
// fused op against its own add + norm_forward (same bits).
static void check_residual_ln(Half *h, int N, int C) {
    size_t nc = (size_t)N * C;
    float *a = fz_rand(h, nc, -2, 3), *b = fz_rand(h, nc, -1, 1);
    float *w = fz_rand(h, C, 0.5, 1.5), *bias = fz_rand(h, C, -1, 1);
    float *rres = test_floats(nc), *rln = test_floats(nc), *rst = test_floats(2 * N);
    float *ures = test_floats(nc), *uln = test_floats(nc), *ust = test_floats(2 * N);
    Backend *cpu = h->cpu, *be = h->be;
    memcpy(rres, a, nc * sizeof(float));
    cpu->ops->residual_layernorm_forward(cpu, rres, rln, rst, rst + N, rres, b, w, bias, N, C);
    cpu->ops->add(cpu, ures, a, b, nc);
    cpu->ops->norm_forward(cpu, uln, ust, ust + N, ures, w, bias, N, C, BACKEND_LAYERNORM);
    EXPECT(!memcmp(rres, ures, nc * 4) && !memcmp(rln, uln, nc * 4) && !memcmp(rst, ust, 8 * (size_t)N),
           "cpu residual_layernorm_forward is not bitwise add + layernorm_forward");
    void *d_res = half_up(h, a, nc), *d_ln = half_poisoned(h, nc, h->dt);
    float *d_st = half_poisoned(h, 2 * (size_t)N, BACKEND_F32);
    be->ops->residual_layernorm_forward(be, d_res, d_ln, d_st, d_st + N, d_res, half_up(h, b, nc),
                                        half_up(h, w, C), half_up(h, bias, C), N, C);
    half_down(h, ures, d_res, nc), half_down(h, uln, d_ln, nc), half_down_f32(h, ust, d_st, 2 * (size_t)N);
    half_release(h);
    check_residual_ln_bits(h, a, b, w, bias, N, C);
    HALF_CLOSE(h, ures, rres, nc, fz_tol(h), "residual_layernorm_forward res (res == a)");
    HALF_CLOSE(h, uln, rln, nc, fz_tol(h), "residual_layernorm_forward ln");
    // statistics of the rounded residual (device) vs the exact one (CPU): a store's error
    HALF_CLOSE(h, ust, rst, 2 * (size_t)N, h->dt == BACKEND_F32 ? TOL_F32 : fz_tol(h),
               "residual_layernorm_forward mean, rstd (fp32)");
    free(a), free(b), free(w), free(bias), free(rres), free(rln), free(rst), free(ures), free(uln), free(ust);
}

// matmul_act_forward (GELU, with and without bias) and matmul_act_backward (GELU; dweight,
// dbias accumulating onto non-zero values) against the CPU; `shift` moves the pre/dinp
// pointers by one element (not 16-byte aligned: the fallback path). The CPU's fused ops against the
// unfused pairs (same bits).
static void check_linear_gelu(Half *h, int N, int C, int OC, int shift) {
    size_t no = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
    float *inp = fz_rand(h, ni, -1, 1), *w = fz_rand(h, nw, -1, 1), *bias = fz_rand(h, OC, -1, 1);
    float *rout = test_floats(no), *rpre = test_floats(no), *gout = test_floats(no), *gpre = test_floats(no);
    Backend *cpu = h->cpu, *be = h->be;
    char what[120];
    for (int with_bias = 1; with_bias >= 0; with_bias--) {
        const float *bb = with_bias ? bias : NULL;
        cpu->ops->matmul_act_forward(cpu, rout, rpre, inp, w, bb, N, C, OC, BACKEND_ACT_GELU);
        cpu->ops->matmul_forward(cpu, gpre, inp, w, bb, N, C, OC);
        cpu->ops->act_forward(cpu, gout, gpre, 1, (int)(no), BACKEND_ACT_GELU);
        EXPECT(!memcmp(rout, gout, no * 4) && !memcmp(rpre, gpre, no * 4),
               "cpu matmul_gelu_forward is not bitwise matmul_forward + gelu_forward");
        char *d_pre = half_poisoned(h, no + 1, h->dt);
        void *pre = d_pre + (shift ? backend_dtype_size(h->dt) : 0), *d_out = half_poisoned(h, no, h->dt);
        be->ops->matmul_act_forward(be, d_out, pre, half_up(h, inp, ni), half_up(h, w, nw),
                                     with_bias ? half_up(h, bias, OC) : NULL, N, C, OC, BACKEND_ACT_GELU);
        half_down(h, gout, d_out, no), half_down(h, gpre, pre, no);
        half_release(h);
        snprintf(what, sizeof what, "matmul_gelu_forward out, %s bias, %dx%dx%d%s", with_bias ? "" : "no",
                 N, C, OC, shift ? ", unaligned pre" : "");
        HALF_CLOSE(h, gout, rout, no, fz_tol(h), what);
        snprintf(what, sizeof what, "matmul_gelu_forward pre, %s bias, %dx%dx%d%s", with_bias ? "" : "no",
                 N, C, OC, shift ? ", unaligned pre" : "");
        HALF_CLOSE(h, gpre, rpre, no, fz_tol(h), what);
    }
    // backward: the linear (N, OC) -> (N, C) whose input inp was gelu(pre), pre (N, C)
    float *pre = fz_rand(h, ni, -4, 4), *dout = fz_rand(h, no, -1, 1);
    float *dw0 = fz_rand(h, nw, -1, 1), *db0 = fz_rand(h, OC, -1, 1);
    float *rdi = test_floats(ni), *rdw = test_floats(nw), *rdb = test_floats(OC);
    float *gdi = test_floats(ni), *gdw = test_floats(nw), *gdb = test_floats(OC);
    memcpy(rdw, dw0, nw * 4), memcpy(rdb, db0, OC * 4), memcpy(gdw, dw0, nw * 4), memcpy(gdb, db0, OC * 4);
    cpu->ops->matmul_act_backward(cpu, rdi, rdw, rdb, dout, inp, w, pre, N, C, OC, BACKEND_ACT_GELU);
    cpu->ops->matmul_backward(cpu, gdi, gdw, gdb, dout, inp, w, N, C, OC);
    ref_gelu_backward(cpu, gdi, pre, gdi, ni);
    EXPECT(!memcmp(rdi, gdi, ni * 4) && !memcmp(rdw, gdw, nw * 4) && !memcmp(rdb, gdb, OC * 4),
           "cpu matmul_backward_dgelu is not bitwise matmul_backward + gelu_backward");
    char *d_dinp = half_poisoned(h, ni + 1, h->dt), *d_pre = half_alloc(h, ni + 1, h->dt);
    size_t off = shift ? backend_dtype_size(h->dt) : 0;
    void *u = half_up(h, pre, ni);
    be->ops->copy(be, d_pre + off, u, ni * backend_dtype_size(h->dt), BACKEND_D2D);
    float *d_dw = half_up_f32(h, dw0, nw), *d_db = half_up_f32(h, db0, OC);
    be->ops->matmul_act_backward(be, d_dinp + off, d_dw, d_db, half_up(h, dout, no),
                                   half_up(h, inp, ni), half_up(h, w, nw), d_pre + off, N, C, OC, BACKEND_ACT_GELU);
    half_down(h, gdi, d_dinp + off, ni), half_down_f32(h, gdw, d_dw, nw), half_down_f32(h, gdb, d_db, OC);
    half_release(h);
    snprintf(what, sizeof what, "matmul_backward_dgelu dinp, %dx%dx%d%s", N, C, OC,
             shift ? ", unaligned pre/dinp" : "");
    HALF_CLOSE(h, gdi, rdi, ni, fz_tol(h), what);
    HALF_CLOSE(h, gdw, rdw, nw, TOL_F32, "matmul_backward_dgelu dweight += (fp32)");
    HALF_CLOSE(h, gdb, rdb, OC, TOL_F32, "matmul_backward_dgelu dbias += (fp32)");
    free(inp), free(w), free(bias), free(rout), free(rpre), free(gout), free(gpre);
    free(pre), free(dout), free(dw0), free(db0), free(rdi), free(rdw), free(rdb), free(gdi), free(gdw), free(gdb);
}

// A backend created with MEGAC_CUDA_NO_GELU_EPILOGUE=1 (h->dt 16-bit): its GELU linears give
// the bits of the unfused pair (matmul_forward + act_forward; matmul_backward + act_backward)
// on h->be, and other bits than h->be's epilogue path (which rounds once where the pair rounds
// twice), so the switch is seen to take effect. Identical bits there would leave the two paths
// indistinguishable: a failure rather than a blind pass.
static void check_no_gelu_epilogue(Half *h, int N, int C, int OC) {
    setenv("MEGAC_CUDA_NO_GELU_EPILOGUE", "1", 1);
    Backend *off = backend_cuda_create(0, BACKEND_MATH_FP32, h->dt), *be = h->be;
    unsetenv("MEGAC_CUDA_NO_GELU_EPILOGUE");
    size_t no = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
    float *inp = fz_rand(h, ni, -1, 1), *w = fz_rand(h, nw, -1, 1), *bias = fz_rand(h, OC, -1, 1);
    float *pre = fz_rand(h, ni, -4, 4), *dout = fz_rand(h, no, -1, 1);
    float *got[3][2];  // [epilogue, switch, unfused pair][forward out, backward dinp]
    void *d_inp = half_up(h, inp, ni), *d_w = half_up(h, w, nw), *d_b = half_up(h, bias, OC);
    void *d_pre = half_up(h, pre, ni), *d_dout = half_up(h, dout, no);
    for (int k = 0; k < 3; k++) {
        void *fpre = half_poisoned(h, no, h->dt), *fout = half_poisoned(h, no, h->dt);
        void *dinp = half_poisoned(h, ni, h->dt);
        Backend *b = k == 1 ? off : be;
        if (k < 2) {
            b->ops->matmul_act_forward(b, fout, fpre, d_inp, d_w, d_b, N, C, OC, BACKEND_ACT_GELU);
            b->ops->matmul_act_backward(b, dinp, NULL, NULL, d_dout, d_inp, d_w, d_pre, N, C, OC,
                                        BACKEND_ACT_GELU);
        } else {
            be->ops->matmul_forward(be, fpre, d_inp, d_w, d_b, N, C, OC);
            be->ops->act_forward(be, fout, fpre, N, OC, BACKEND_ACT_GELU);
            be->ops->matmul_backward(be, dinp, NULL, NULL, d_dout, d_inp, d_w, N, C, OC);
            be->ops->act_backward(be, dinp, d_pre, dinp, N, C, BACKEND_ACT_GELU);
        }
        b->ops->sync(b);
        got[k][0] = test_floats(no), got[k][1] = test_floats(ni);
        half_down(h, got[k][0], fout, no), half_down(h, got[k][1], dinp, ni);
    }
    half_release(h);
    EXPECT(!memcmp(got[1][0], got[2][0], no * 4) && !memcmp(got[1][1], got[2][1], ni * 4),
           "MEGAC_CUDA_NO_GELU_EPILOGUE=1: GELU linear is not bitwise GEMM + GELU kernel");
    EXPECT(memcmp(got[0][0], got[2][0], no * 4) && memcmp(got[0][1], got[2][1], ni * 4),
           "epilogue path gives the unfused bits: the switch cannot be seen");
    for (int k = 0; k < 3; k++) free(got[k][0]), free(got[k][1]);
    free(inp), free(w), free(bias), free(pre), free(dout);
    backend_destroy(off);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (!backend_cuda_available()) {
        printf("cuda_fused: no usable CUDA device, skipped\n");
        return 77;
    }
    Half h = {.rng = {20261212}, .quick = quick};
    h.cpu = backend_cpu_create(1, BACKEND_F32);
    const BackendDType types[3] = {BACKEND_F32, BACKEND_BF16, BACKEND_F16};
    for (int i = 0; i < 3; i++) {
        h.dt = types[i];
        h.be = h.dev[h.dt] = backend_cuda_create(0, BACKEND_MATH_FP32, h.dt);
        printf("cuda_fused: %s against %s%s\n", h.be->name, h.cpu->name, quick ? " (quick)" : "");
        check_residual_ln(&h, quick ? 37 : 130, quick ? 40 : 100);
        if (!quick) {
            check_residual_ln(&h, 9, 1024);  // aligned rows in every type: 16-byte accesses
            check_residual_ln(&h, 5, 4200);  // several chunks a thread (norm_row.cuh)
            check_residual_ln(&h, 3, 8200);  // longer than norm_row.cuh takes: per-warp kernels
        }
        check_linear_gelu(&h, 37, 40, 64, 0);      // the cuBLASLt epilogues
        check_linear_gelu(&h, 37, 40, 64, 1);      // unaligned: the fallback
        if (!quick) check_linear_gelu(&h, 45, 36, 67, 0);  // ld not a multiple of 8: fallback
        if (h.dt == BACKEND_BF16) check_no_gelu_epilogue(&h, 37, 40, 64);
        test_failures_ += cuda_fused_xent(&h);
        backend_destroy(h.be);
    }
    backend_destroy(h.cpu);
    return test_result("cuda_fused");
}

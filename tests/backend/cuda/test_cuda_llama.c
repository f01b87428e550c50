// tests/backend/cuda/test_cuda_llama.c: the CUDA backend's Llama-style ops (RMSNorm, SwiGLU,
// rope_gqa) against the CPU reference (cpu/cpu_llama.c, cpu_rope.c), fp32, relative 1e-5: forwards
// with poisoned outputs (they must be overwritten), backwards from non-zero accumulators
// (RMSNorm's dinp and dweight add), the device's bits the same on a rerun, a one-row decoding
// step at pos0. Needs a device (exit 77 = skip without one); under the emulator it always runs.
#include "tests/backend/cuda/cuda_parity.h"

#include <stdio.h>

static void check_rmsnorm(Parity *t, int N, int C) {
    size_t nc = (size_t)N * C;
    float *x = par_rand(t, nc, -2, 2), *w = par_rand(t, C, 0.5, 1.5), *dy = par_rand(t, nc, -1, 1);
    float *dx0 = par_rand(t, nc, -1, 1), *dw0 = par_rand(t, C, -1, 1), *rep = test_floats(C);
    ParOut out = par_out(nc), rs = par_out(N), dx = par_out(nc), dw = par_out(C);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_x = par_up(t, k, x, nc), *d_w = par_up(t, k, w, C), *d_dy = par_up(t, k, dy, nc);
        float *d_out = par_alloc(t, k, nc * sizeof(float)), *d_rs = par_alloc(t, k, N * sizeof(float));
        par_poison(t, k, d_out, nc);
        be->ops->norm_forward(be, d_out, NULL, d_rs, d_x, d_w, NULL, N, C, BACKEND_RMSNORM);
        par_down(t, k, out.h[k], d_out, nc);
        par_down(t, k, rs.h[k], d_rs, N);
        float *d_dx = par_up(t, k, dx0, nc), *d_dw = par_up(t, k, dw0, C);
        be->ops->norm_backward(be, d_dx, d_dw, NULL, d_dy, d_x, d_w, NULL, d_rs, N, C, BACKEND_RMSNORM);
        par_down(t, k, dx.h[k], d_dx, nc);
        par_down(t, k, dw.h[k], d_dw, C);
        if (k == PAR_DEV) {
            float *d_dw2 = par_up(t, k, dw0, C);
            be->ops->norm_backward(be, NULL, d_dw2, NULL, d_dy, d_x, d_w, NULL, d_rs, N, C, BACKEND_RMSNORM);
            par_down(t, k, rep, d_dw2, C);
            EXPECT_SAME_BITS(rep, dw.h[k], (size_t)C, "rmsnorm dweight rerun");
        }
        par_release(t);
    }
    PAR_CLOSE_OUT(out, "rmsnorm_forward");
    PAR_CLOSE_OUT(rs, "rmsnorm_forward rstd");
    PAR_CLOSE_OUT(dx, "rmsnorm_backward dinp +=");
    PAR_CLOSE_OUT(dw, "rmsnorm_backward dweight +=");
    free(x), free(w), free(dy), free(dx0), free(dw0), free(rep);
    par_out_free(&out), par_out_free(&rs), par_out_free(&dx), par_out_free(&dw);
}

static void check_swiglu(Parity *t, int N, int F) {
    size_t nf = (size_t)N * F;
    float *x = par_rand(t, 2 * nf, -4, 4), *dy = par_rand(t, nf, -1, 1);
    ParOut out = par_out(nf), dx = par_out(2 * nf);
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_x = par_up(t, k, x, 2 * nf), *d_dy = par_up(t, k, dy, nf);
        float *d_out = par_alloc(t, k, nf * sizeof(float)), *d_dx = par_alloc(t, k, 2 * nf * sizeof(float));
        par_poison(t, k, d_out, nf);
        par_poison(t, k, d_dx, 2 * nf);
        be->ops->act_forward(be, d_out, d_x, N, F, BACKEND_ACT_SWIGLU);
        be->ops->act_backward(be, d_dx, d_x, d_dy, N, F, BACKEND_ACT_SWIGLU);
        par_down(t, k, out.h[k], d_out, nf);
        par_down(t, k, dx.h[k], d_dx, 2 * nf);
        par_release(t);
    }
    PAR_CLOSE_OUT(out, "swiglu_forward");
    PAR_CLOSE_OUT(dx, "swiglu_backward");
    free(x), free(dy);
    par_out_free(&out), par_out_free(&dx);
}

static void check_rope(Parity *t, int B, int T, int NH, int G, int hs, int rot, float base) {
    size_t N = (size_t)B * T, in = (size_t)(NH + 2 * G) * hs, o = (size_t)3 * NH * hs;
    float *x = par_rand(t, N * in, -1, 1), *dy = par_rand(t, N * o, -1, 1), *rep = test_floats(N * in);
    ParOut out = par_out(N * o), dx = par_out(N * in), step = par_out(o);
    char what[96];
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_x = par_up(t, k, x, N * in), *d_dy = par_up(t, k, dy, N * o);
        float *d_out = par_alloc(t, k, N * o * sizeof(float)), *d_dx = par_alloc(t, k, N * in * sizeof(float));
        float *d_step = par_alloc(t, k, o * sizeof(float));
        par_poison(t, k, d_out, N * o);
        par_poison(t, k, d_dx, N * in);
        be->ops->rope_gqa_forward(be, d_out, d_x, B, T, NH, G, hs, rot, base, 0, NULL);
        be->ops->rope_gqa_backward(be, d_dx, d_dy, B, T, NH, G, hs, rot, base, 0, NULL);
        be->ops->rope_gqa_forward(be, d_step, d_x + (N - 1) * in, 1, 1, NH, G, hs, rot, base, T - 1, NULL);
        par_down(t, k, out.h[k], d_out, N * o);
        par_down(t, k, dx.h[k], d_dx, N * in);
        par_down(t, k, step.h[k], d_step, o);
        if (k == PAR_DEV) {
            be->ops->rope_gqa_backward(be, d_dx, d_dy, B, T, NH, G, hs, rot, base, 0, NULL);
            par_down(t, k, rep, d_dx, N * in);
            EXPECT_SAME_BITS(rep, dx.h[k], N * in, "rope_gqa_backward rerun");
        }
        par_release(t);
    }
    snprintf(what, sizeof what, "rope_gqa_forward NH %d G %d hs %d rot %d", NH, G, hs, rot);
    PAR_CLOSE_OUT(out, what);
    snprintf(what, sizeof what, "rope_gqa_backward NH %d G %d hs %d rot %d", NH, G, hs, rot);
    PAR_CLOSE_OUT(dx, what);
    PAR_CLOSE_OUT(step, "rope_gqa_forward one row at pos0 = T-1");
    free(x), free(dy), free(rep);
    par_out_free(&out), par_out_free(&dx), par_out_free(&step);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (!backend_cuda_available()) {
        printf("cuda_llama: no usable CUDA device, skipped\n");
        return 77;
    }
    Parity t = {.rng = {20261201}, .quick = quick};
    t.be[PAR_REF] = backend_cpu_create(1, BACKEND_F32);
    t.be[PAR_DEV] = backend_cuda_create(0, BACKEND_MATH_FP32, BACKEND_F32);
    printf("cuda_llama: %s against %s\n", t.be[PAR_DEV]->name, t.be[PAR_REF]->name);
    check_rmsnorm(&t, 37, 100);
    check_rmsnorm(&t, quick ? 70 : 300, quick ? 40 : 256);
    if (!quick) check_rmsnorm(&t, 5, 2500);  // 4 chunks of 16 bytes a thread (norm_row.cuh)
    if (!quick) check_rmsnorm(&t, 3, 8200);  // too long a row for it: the per-warp kernels
    if (!quick) check_rmsnorm(&t, 130, 8200);  // and two-pass dweight (the column sums)
    check_swiglu(&t, 37, quick ? 50 : 300);
    check_rope(&t, 2, 9, 4, 2, 16, 16, 10000.0f);
    check_rope(&t, 1, 13, 6, 3, 8, 4, 500.0f);
    check_rope(&t, 2, 5, 4, 1, 8, 0, 10000.0f);
    backend_destroy(t.be[PAR_DEV]);
    backend_destroy(t.be[PAR_REF]);
    return test_result("cuda_llama");
}

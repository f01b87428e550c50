// tests/backend/cuda/test_cuda_half.c: the CUDA backend with bf16 and fp16 activations against
// the CPU backend's fp32 ops (tolerances and method: cuda_half.h). This file: the cast op
// (bit-exact against the CPU cast on every 16-bit pattern, on fp32 edge values with their
// expected bits written out, and random values), the backend's name, linear, layernorm,
// the pointwise ops, adamw_multi's weight-copy output and main; attention, flash attention,
// embeddings and cross-entropy are in cuda_half_attn.c, the MoE token rows in
// cuda_half_moe.c, the rest in cuda_half_rest.c. Exit 77 (meson: skipped) without a usable
// device. `--quick`: smaller sizes. `--device cpu`: the CPU
// backend's 16-bit ops are under test instead (test cpu_half).
#include "tests/backend/backend_ref_ops.h"  // defines: ref_gelu_backward
#include "tests/backend/cuda/cuda_half.h"

#include <float.h>
#include <stdio.h>

// Host bytes out (n elements of dt) = device cast of host bytes in (n elements of st).
static void cast_on_device(Half *h, void *out, BackendDType dt, const void *in, BackendDType st,
                           size_t n) {
    Backend *be = h->be;
    void *s = half_alloc(h, n, st), *d = half_alloc(h, n, dt);
    be->ops->copy(be, s, in, n * backend_dtype_size(st), BACKEND_H2D);
    be->ops->cast(be, d, dt, s, st, n);
    be->ops->copy(be, out, d, n * backend_dtype_size(dt), BACKEND_D2H);
    be->ops->sync(be);
    half_release(h);
}

static int is_nan16(uint16_t b, BackendDType t) {
    return t == BACKEND_BF16 ? (b & 0x7f80) == 0x7f80 && (b & 0x7f) : (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
}

// got against want (n elements of t): the same bits, or both NaN. Counts the mismatches.
static size_t cast_mismatches(const void *got, const void *want, size_t n, BackendDType t,
                              size_t *first) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        int same;
        if (t == BACKEND_F32) {
            float a = ((const float *)got)[i], b = ((const float *)want)[i];
            same = (isnan(a) && isnan(b)) || !memcmp(&a, &b, 4);
        } else {
            uint16_t a = ((const uint16_t *)got)[i], b = ((const uint16_t *)want)[i];
            same = a == b || (is_nan16(a, t) && is_nan16(b, t));
        }
        if (!same && bad++ == 0) *first = i;
    }
    return bad;
}

// Every 16-bit pattern of bf16 and fp16 cast to the other two types; fp32 edge values and
// random fp32 values (wide exponent range) cast to bf16 and fp16.
static void check_cast(Half *h) {
    enum { NP = 65536, NR = 4096 };
    BackendDType all[3] = {BACKEND_F32, BACKEND_BF16, BACKEND_F16};
    uint16_t *pat = malloc(NP * 2);
    float *got = test_floats(NP), *want = test_floats(NP);
    size_t first = 0, bad;
    for (int i = 0; i < NP; i++) pat[i] = (uint16_t)i;
    for (int s = 1; s < 3; s++)
        for (int d = 0; d < 3; d++) {
            if (d == s) continue;
            cast_on_device(h, got, all[d], pat, all[s], NP);
            h->cpu->ops->cast(h->cpu, want, all[d], pat, all[s], NP);
            bad = cast_mismatches(got, want, NP, all[d], &first);
            EXPECT(bad == 0, "cast %s -> %s: %zu of 65536 patterns differ from the CPU cast "
                   "(first 0x%04x)", backend_dtype_name(all[s]), backend_dtype_name(all[d]), bad,
                   (unsigned)first);
        }
    // fp32 edge values and their bits in bf16 / fp16 (round to nearest even)
    const float e[] = {1.0f + ldexpf(1, -8), 1.0f + 3 * ldexpf(1, -8), 1.0f + ldexpf(1, -11),
                       1.0f + 3 * ldexpf(1, -11), FLT_MAX, INFINITY, -INFINITY, 65504.0f,
                       65519.0f, 65520.0f, ldexpf(1, -24), ldexpf(1, -25), 3 * ldexpf(1, -26),
                       1.5f * ldexpf(1, -24), -ldexpf(1, -24), ldexpf(1, -14), ldexpf(1, -130),
                       -0.0f, NAN};
    const uint16_t bf[] = {0x3f80, 0x3f82, 0x3f80, 0x3f80, 0x7f80, 0x7f80, 0xff80, 0x4780,
                           0x4780, 0x4780, 0x3380, 0x3300, 0x3340, 0x33c0, 0xb380, 0x3880,
                           0x0008, 0x8000, 0x7fc0};
    const uint16_t hf[] = {0x3c04, 0x3c0c, 0x3c00, 0x3c02, 0x7c00, 0x7c00, 0xfc00, 0x7bff,
                           0x7bff, 0x7c00, 0x0001, 0x0000, 0x0001, 0x0002, 0x8001, 0x0400,
                           0x0000, 0x8000, 0x7e00};
    const size_t ne = sizeof e / sizeof e[0];
    uint16_t out[32];
    for (int d = 1; d < 3; d++) {
        const uint16_t *expect = d == 1 ? bf : hf;
        cast_on_device(h, out, all[d], e, BACKEND_F32, ne);
        for (size_t i = 0; i < ne; i++)
            EXPECT(out[i] == expect[i] || (is_nan16(out[i], all[d]) && is_nan16(expect[i], all[d])),
                   "cast fp32 %a -> %s: 0x%04x, want 0x%04x", (double)e[i],
                   backend_dtype_name(all[d]), out[i], expect[i]);
        float back[32];  // the round trip of the rounded values is exact
        cast_on_device(h, back, BACKEND_F32, out, all[d], ne);
        h->cpu->ops->cast(h->cpu, want, BACKEND_F32, out, all[d], ne);
        bad = cast_mismatches(back, want, ne, BACKEND_F32, &first);
        EXPECT(bad == 0, "cast %s -> fp32 of the edge values: %zu differ", backend_dtype_name(all[d]), bad);
    }
    float *r = test_floats(NR);
    for (int i = 0; i < NR; i++)
        r[i] = ldexpf((float)rng_uniform(&h->rng, -2, 2), (int)rng_uniform(&h->rng, -140, 130));
    for (int d = 1; d < 3; d++) {
        cast_on_device(h, pat, all[d], r, BACKEND_F32, NR);
        h->cpu->ops->cast(h->cpu, want, all[d], r, BACKEND_F32, NR);
        bad = cast_mismatches(pat, want, NR, all[d], &first);
        EXPECT(bad == 0, "cast fp32 -> %s of random values: %zu of %d differ (first %a)",
               backend_dtype_name(all[d]), bad, NR, (double)r[first]);
    }
    // same type: the bits copied (NaN payloads too); dst == src: nothing happens
    uint32_t payload[3] = {0x7fc01234u, 0xffa00001u, 0x3f800001u}, back32[3];
    cast_on_device(h, back32, BACKEND_F32, payload, BACKEND_F32, 3);
    EXPECT(!memcmp(back32, payload, sizeof payload), "cast fp32 -> fp32 changed the bits");
    Backend *be = h->be;
    uint16_t *d = half_alloc(h, 3, BACKEND_BF16), in[3] = {1, 0x7f81, 0xbf80}, o3[3];
    be->ops->copy(be, d, in, sizeof in, BACKEND_H2D);
    be->ops->cast(be, d, BACKEND_BF16, d, BACKEND_BF16, 3);
    be->ops->copy(be, o3, d, sizeof o3, BACKEND_D2H);
    EXPECT(!memcmp(o3, in, sizeof in), "cast bf16 -> bf16 in place changed the bits");
    half_release(h);
    free(pat), free(got), free(want), free(r);
}

// matmul_forward with and without bias; matmul_backward with all gradients (dweight, dbias
// fp32 and accumulated onto non-zero values).
static void check_matmul(Half *h, int N, int C, int OC) {
    float *inp = half_rand(h, (size_t)N * C, -1, 1), *w = half_rand(h, (size_t)OC * C, -1, 1);
    float *bias = half_rand(h, OC, -1, 1), *dout = half_rand(h, (size_t)N * OC, -1, 1);
    float *dw0 = half_rand(h, (size_t)OC * C, -1, 1), *db0 = half_rand(h, OC, -1, 1);
    size_t no = (size_t)N * OC, ni = (size_t)N * C, nw = (size_t)OC * C;
    float *ref = test_floats(no + ni + nw + OC), *got = test_floats(no + ni + nw + OC);
    Backend *cpu = h->cpu, *be = h->be;
    for (int with_bias = 1; with_bias >= 0; with_bias--) {
        cpu->ops->matmul_forward(cpu, ref, inp, w, with_bias ? bias : NULL, N, C, OC);
        void *d_out = half_poisoned(h, no, h->dt);
        be->ops->matmul_forward(be, d_out, half_up(h, inp, ni), half_up(h, w, nw),
                                with_bias ? half_up(h, bias, OC) : NULL, N, C, OC);
        half_down(h, got, d_out, no);
        half_release(h);
        HALF_CLOSE(h, got, ref, no, half_tol(h, TOL_STORE),
                   with_bias ? "matmul_forward, bias" : "matmul_forward, no bias");
    }
    float *rdi = ref, *rdw = ref + ni, *rdb = rdw + nw, *gdi = got, *gdw = got + ni, *gdb = gdw + nw;
    memcpy(rdw, dw0, nw * sizeof(float)), memcpy(rdb, db0, OC * sizeof(float));
    cpu->ops->matmul_backward(cpu, rdi, rdw, rdb, dout, inp, w, N, C, OC);
    void *d_dinp = half_poisoned(h, ni, h->dt);
    float *d_dw = half_up_f32(h, dw0, nw), *d_db = half_up_f32(h, db0, OC);
    be->ops->matmul_backward(be, d_dinp, d_dw, d_db, half_up(h, dout, no), half_up(h, inp, ni),
                             half_up(h, w, nw), N, C, OC);
    half_down(h, gdi, d_dinp, ni), half_down_f32(h, gdw, d_dw, nw), half_down_f32(h, gdb, d_db, OC);
    half_release(h);
    HALF_CLOSE(h, gdi, rdi, ni, half_tol(h, TOL_STORE), "matmul_backward dinp");
    HALF_CLOSE(h, gdw, rdw, nw, TOL_F32, "matmul_backward dweight += (fp32)");
    HALF_CLOSE(h, gdb, rdb, OC, TOL_F32, "matmul_backward dbias += (fp32)");
    free(inp), free(w), free(bias), free(dout), free(dw0), free(db0), free(ref), free(got);
}

// norm_forward(out; mean, rstd fp32, BACKEND_LAYERNORM) and norm_backward(dinp accumulates onto
// non-zero values; dweight, dbias fp32 +=, BACKEND_LAYERNORM), both from the reference's mean and rstd.
static void check_layernorm(Half *h, int N, int C) {
    size_t nc = (size_t)N * C;
    float *inp = half_rand(h, nc, -2, 3), *w = half_rand(h, C, 0.5, 1.5), *b = half_rand(h, C, -1, 1);
    float *dout = half_rand(h, nc, -1, 1), *dinp0 = half_rand(h, nc, -1, 1);
    float *dw0 = half_rand(h, C, -1, 1), *db0 = half_rand(h, C, -1, 1);
    float *ref = test_floats(nc + 2 * N + 2 * C), *got = test_floats(nc + 2 * N + 2 * C);
    float *rmean = ref + nc, *rrstd = rmean + N, *gmean = got + nc, *grstd = gmean + N;
    Backend *cpu = h->cpu, *be = h->be;
    cpu->ops->norm_forward(cpu, ref, rmean, rrstd, inp, w, b, N, C, BACKEND_LAYERNORM);
    void *d_out = half_poisoned(h, nc, h->dt);
    float *d_mean = half_poisoned(h, N, BACKEND_F32), *d_rstd = half_poisoned(h, N, BACKEND_F32);
    be->ops->norm_forward(be, d_out, d_mean, d_rstd, half_up(h, inp, nc), half_up(h, w, C),
                               half_up(h, b, C), N, C, BACKEND_LAYERNORM);
    half_down(h, got, d_out, nc), half_down_f32(h, gmean, d_mean, N), half_down_f32(h, grstd, d_rstd, N);
    half_release(h);
    HALF_CLOSE(h, got, ref, nc, half_tol(h, TOL_STORE), "layernorm_forward out");
    HALF_CLOSE(h, gmean, rmean, N, TOL_F32, "layernorm_forward mean (fp32)");
    HALF_CLOSE(h, grstd, rrstd, N, TOL_F32, "layernorm_forward rstd (fp32)");
    // backward: dinp (N, C) over out; dweight, dbias (C) after mean and rstd
    float *rdi = ref, *rdw = rrstd + N, *rdb = rdw + C, *gdi = got, *gdw = grstd + N, *gdb = gdw + C;
    memcpy(rdi, dinp0, nc * sizeof(float)), memcpy(rdw, dw0, C * sizeof(float));
    memcpy(rdb, db0, C * sizeof(float));
    cpu->ops->norm_backward(cpu, rdi, rdw, rdb, dout, inp, w, rmean, rrstd, N, C, BACKEND_LAYERNORM);
    void *d_dinp = half_up(h, dinp0, nc);
    float *d_dw = half_up_f32(h, dw0, C), *d_db = half_up_f32(h, db0, C);
    be->ops->norm_backward(be, d_dinp, d_dw, d_db, half_up(h, dout, nc), half_up(h, inp, nc),
                                half_up(h, w, C), half_up_f32(h, rmean, N),
                                half_up_f32(h, rrstd, N), N, C, BACKEND_LAYERNORM);
    half_down(h, gdi, d_dinp, nc), half_down_f32(h, gdw, d_dw, C), half_down_f32(h, gdb, d_db, C);
    half_release(h);
    HALF_CLOSE(h, gdi, rdi, nc, half_tol(h, TOL_STORE), "layernorm_backward dinp +=");
    HALF_CLOSE(h, gdw, rdw, C, TOL_F32, "layernorm_backward dweight += (fp32)");
    HALF_CLOSE(h, gdb, rdb, C, TOL_F32, "layernorm_backward dbias += (fp32)");
    free(inp), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0), free(ref), free(got);
}

// gelu forward/backward (also dinp == dout), add (also out == a), add_f32.
static void check_pointwise(Half *h, size_t n) {
    float *x = half_rand(h, n, -6, 6), *y = half_rand(h, n, -2, 2);
    float *ref = test_floats(n), *got = test_floats(n);
    Backend *cpu = h->cpu, *be = h->be;
    const char *names[4] = {"gelu_forward", "gelu_backward", "gelu_backward, dinp == dout",
                            "add, out == a"};
    for (int op = 0; op < 4; op++) {
        void *d_x = half_up(h, x, n), *d_y = half_up(h, y, n), *d_o = half_poisoned(h, n, h->dt);
        if (op == 0) cpu->ops->act_forward(cpu, ref, x, 1, (int)(n), BACKEND_ACT_GELU), be->ops->act_forward(be, d_o, d_x, 1, (int)(n), BACKEND_ACT_GELU);
        if (op == 1) ref_gelu_backward(cpu, ref, x, y, n), ref_gelu_backward(be, d_o, d_x, d_y, n);
        if (op == 2) ref_gelu_backward(cpu, ref, x, y, n), ref_gelu_backward(be, d_y, d_x, d_y, n);
        if (op == 3) cpu->ops->add(cpu, ref, x, y, n), be->ops->add(be, d_x, d_x, d_y, n);
        half_down(h, got, op == 2 ? d_y : op == 3 ? d_x : d_o, n);
        half_release(h);
        HALF_CLOSE(h, got, ref, n, half_tol(h, TOL_STORE), names[op]);
    }
    // add_f32: fp32 in and out whatever be->act (ZeRO-2/3's gradient shard), out == a
    float *d_a = half_up_f32(h, x, n);
    be->ops->add_f32(be, d_a, d_a, half_up_f32(h, y, n), n);
    half_down_f32(h, got, d_a, n);
    half_release(h);
    cpu->ops->add(cpu, ref, x, y, n);
    EXPECT_SAME_BITS(got, ref, n, "add_f32 on a 16-bit backend, out == a");
    // scale_f32: fp32 whatever be->act (the expert region's average), in place
    d_a = half_up_f32(h, x, n);
    be->ops->scale_f32(be, d_a, 0.375f, n);
    half_down_f32(h, got, d_a, n);
    half_release(h);
    for (size_t i = 0; i < n; i++) ref[i] = x[i] * 0.375f;
    EXPECT_SAME_BITS(got, ref, n, "scale_f32 on a 16-bit backend");
    free(x), free(y), free(ref), free(got);
}

// adamw_multi writing the weight copies in the same pass (the copy output): params, m and v
// the same bits as without the copy; the copy the same bits as the CPU cast of the updated
// params inside the segments, untouched outside them.
static void check_adamw_copy(Half *h) {
    enum { N = 3000, NSEG = 2 };
    const BackendSegment segs[NSEG] = {{0, 1000, 1, 0}, {1500, 1400, 0, 0}};
    Backend *be = h->be;
    float *p = test_floats(N), *g = test_floats(N), *m = test_floats(N), *v = test_floats(N);
    float *out = test_floats(6 * N), *sentinel = test_floats(N);
    rng_fill(&h->rng, p, N, -1, 1), rng_fill(&h->rng, g, N, -1, 1);
    rng_fill(&h->rng, m, N, -0.1, 0.1), rng_fill(&h->rng, v, N, 0, 0.01);
    for (int i = 0; i < N; i++) sentinel[i] = 7.0f;
    float *d_p[2] = {half_up_f32(h, p, N), half_up_f32(h, p, N)};
    float *d_m[2] = {half_up_f32(h, m, N), half_up_f32(h, m, N)};
    float *d_v[2] = {half_up_f32(h, v, N), half_up_f32(h, v, N)};
    float *d_g = half_up_f32(h, g, N);
    void *d_copy = half_up(h, sentinel, N);
    BackendSegment *d_segs = (BackendSegment *)half_alloc(h, sizeof segs / 4, BACKEND_F32);
    be->ops->copy(be, d_segs, segs, sizeof segs, BACKEND_H2D);
    for (int k = 0; k < 2; k++)
        be->ops->adamw_multi(be, d_p[k], k ? d_copy : NULL, d_g, d_m[k], d_v[k], d_segs, NSEG,
                             1400, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3);
    for (int k = 0; k < 2; k++) {
        half_down_f32(h, out + 3 * k * N, d_p[k], N);
        half_down_f32(h, out + (3 * k + 1) * N, d_m[k], N);
        half_down_f32(h, out + (3 * k + 2) * N, d_v[k], N);
    }
    EXPECT_SAME_BITS(out + 3 * N, out, 3 * N, "adamw_multi params, m, v with the copy output");
    uint16_t got[N], want[N], keep[N];
    be->ops->copy(be, got, d_copy, sizeof got, BACKEND_D2H);
    be->ops->sync(be);
    h->cpu->ops->cast(h->cpu, want, h->dt, out + 3 * N, BACKEND_F32, N);
    h->cpu->ops->cast(h->cpu, keep, h->dt, sentinel, BACKEND_F32, N);
    size_t bad = 0;
    for (int i = 0; i < N; i++) {
        int inside = i < 1000 || (i >= 1500 && i < 2900);
        bad += got[i] != (inside ? want[i] : keep[i]);
    }
    EXPECT(bad == 0, "adamw_multi copy [%s]: %zu of %d elements differ from the cast of the "
           "updated params (or were touched outside the segments)", backend_dtype_name(h->dt),
           bad, N);
    half_release(h);
    free(p), free(g), free(m), free(v), free(out), free(sentinel);
}

// `--device cpu`: the CPU backend's bf16/fp16 ops (test cpu_half) instead of CUDA's.
int main(int argc, char **argv) {
    int quick = 0, cpu = 0;
    for (int i = 1; i < argc; i++) {
        quick |= strcmp(argv[i], "--quick") == 0;
        cpu |= strcmp(argv[i], "--device") == 0 && i + 1 < argc && strcmp(argv[i + 1], "cpu") == 0;
    }
    const char *test = cpu ? "cpu_half" : "cuda_half";
#ifdef MEGAC_HAVE_CUDA
    if (!cpu && !backend_cuda_available()) {
        printf("cuda_half: no usable CUDA device, skipped\n");
        return 77;
    }
#else
    if (!cpu) {
        printf("cuda_half: built without CUDA, skipped\n");
        return 77;
    }
#endif
    Half h = {.rng = {20261201}, .quick = quick};
    h.cpu = backend_cpu_create(1, BACKEND_F32);
    const BackendDType types[2] = {BACKEND_BF16, BACKEND_F16};
    const char *names[2] = {"bf16 tensor cores", "fp16 tensor cores"};
    for (int i = 0; i < 2; i++) {
        h.dt = types[i];
#ifdef MEGAC_HAVE_CUDA
        if (!cpu) h.be = h.dev[h.dt] = backend_cuda_create(0, BACKEND_MATH_TF32, h.dt);
#endif
        if (cpu) h.be = h.dev[h.dt] = backend_cpu_create(2, h.dt);
        printf("%s: %s against %s%s\n", test, h.be->name, h.cpu->name, quick ? " (quick)" : "");
        EXPECT(h.be->act == h.dt && strstr(h.be->name, cpu ? backend_dtype_name(h.dt) : names[i]),
               "backend %s: act %d", h.be->name, (int)h.be->act);
        if (i == 0) check_cast(&h);
        check_matmul(&h, 37, quick ? 40 : 100, 67);
        if (!quick) check_matmul(&h, 130, 100, 67);  // two-pass column sums for dbias
        if (!quick) check_matmul(&h, 130, 40, 96);  // aligned dout rows: 16-byte column sums
        check_layernorm(&h, quick ? 37 : 130, quick ? 40 : 100);  // 130 rows: two-pass colsums
        if (!quick) check_layernorm(&h, 67, 256);  // 16-byte aligned rows: 16-byte accesses
        if (!quick) check_layernorm(&h, 5, 4200);  // 2 chunks of 8 a thread (norm_row.cuh)
        check_pointwise(&h, quick ? 1000 : 3000);
        check_adamw_copy(&h);
        test_failures_ += cuda_half_attn(&h);
        test_failures_ += cuda_half_rest(&h);
        test_failures_ += cuda_half_moe(&h);
        backend_destroy(h.be);
    }
    backend_destroy(h.cpu);
    return test_result(test);
}

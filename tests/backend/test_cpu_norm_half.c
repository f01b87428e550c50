// tests/backend/test_cpu_norm_half.c: the 16-bit backends' norms (--bf16, --fp16) for every
// kind: LayerNorm, RMSNorm, each with and without BACKEND_NORM_1P (--apply-layernorm-1p).
// They load the 16-bit operands, run the fp32 op and round the result once, so each must give
// the fp32 backend's bits on the same (rounded) values, rounded: out, mean and rstd of the
// forward; dinp (accumulated), dweight and dbias of the backward. (A 1p LayerNorm once read a
// NULL bias in the 16-bit forward: `--bf16 --apply-layernorm-1p` crashed.)
#include "backend/backend.h"
#include "tests/backend/backend_test_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 37, C = 72 };  // rows not a multiple of the threads, channels not of a vector

// x (n) as the 16-bit type t (h, n elements of 2 bytes) and back (x rounded in place).
static void round_to(Backend *be, BackendDType t, uint16_t *h, float *x, size_t n) {
    be->ops->cast(be, h, t, x, BACKEND_F32, n);
    be->ops->cast(be, x, BACKEND_F32, h, t, n);
}

// One bitwise expectation: got and want (bytes each); layernorm_only: skipped for RMSNorm,
// which has no mean and no bias.
typedef struct {
    const char *part;
    const void *got, *want;
    size_t bytes;
    int layernorm_only;
} Same;

static void expect_same(const Same *c, int n, const char *type, const char *kind_name,
                        BackendNorm kind) {
    for (int i = 0; i < n; i++)
        if (!(c[i].layernorm_only && (kind & BACKEND_RMSNORM)))
            EXPECT(memcmp(c[i].got, c[i].want, c[i].bytes) == 0, "%s %s %s: not the fp32 op's bits",
                   type, kind_name, c[i].part);
}

static void test_kind(Backend *f32, Backend *half, BackendDType t, BackendNorm kind, TestRng *r) {
    const char *name = t == BACKEND_BF16 ? "bf16" : "fp16";
    const char *kn[] = {"LayerNorm", "RMSNorm", "LayerNorm 1p", "RMSNorm 1p"};
    size_t nc = (size_t)N * C;
    float *x = test_floats(nc), *w = test_floats(C), *b = test_floats(C), *dy = test_floats(nc);
    float *dx = test_floats(nc), *y = test_floats(nc), *hy = test_floats(nc);
    uint16_t *hx = calloc(nc, 2), *hw = calloc(C, 2), *hb = calloc(C, 2), *hdy = calloc(nc, 2);
    uint16_t *hdx = calloc(nc, 2), *ho = calloc(nc, 2), *ry = calloc(nc, 2);
    rng_fill(r, x, nc, -2, 3), rng_fill(r, w, C, -0.5, 1.5), rng_fill(r, b, C, -1, 1);
    rng_fill(r, dy, nc, -1, 1), rng_fill(r, dx, nc, -1, 1);
    round_to(half, t, hx, x, nc), round_to(half, t, hw, w, C), round_to(half, t, hb, b, C);
    round_to(half, t, hdy, dy, nc), round_to(half, t, hdx, dx, nc);
    float mean[N], rstd[N], hmean[N], hrstd[N];
    memset(mean, 0, sizeof mean), memset(hmean, 0, sizeof hmean);

    f32->ops->norm_forward(f32, y, mean, rstd, x, w, b, N, C, kind);
    half->ops->norm_forward(half, ho, hmean, hrstd, hx, hw, hb, N, C, kind);
    half->ops->cast(half, ry, t, y, BACKEND_F32, nc);  // the fp32 result, rounded once
    Same fwd[] = {{"forward: out", ho, ry, nc * 2, 0},
                  {"forward: rstd", hrstd, rstd, sizeof rstd, 0},
                  {"forward: mean", hmean, mean, sizeof mean, 1}};
    expect_same(fwd, 3, name, kn[kind], kind);
    float dw[C], db[C], hdw[C], hdb[C];
    for (int j = 0; j < C; j++) dw[j] = hdw[j] = 0.25f * (float)j, db[j] = hdb[j] = -0.5f;
    f32->ops->norm_backward(f32, dx, dw, db, dy, x, w, mean, rstd, N, C, kind);
    half->ops->norm_backward(half, hdx, hdw, hdb, hdy, hx, hw, mean, rstd, N, C, kind);
    half->ops->cast(half, ry, t, dx, BACKEND_F32, nc);
    Same bwd[] = {{"backward: dinp", hdx, ry, nc * 2, 0},
                  {"backward: dweight", hdw, dw, sizeof dw, 0},
                  {"backward: dbias", hdb, db, sizeof db, 1}};
    expect_same(bwd, 3, name, kn[kind], kind);
    half->ops->cast(half, hy, BACKEND_F32, ho, t, nc);
    printf("  %s %-12s out[0..2] %.4f %.4f %.4f, dweight[1] %.4f\n", name, kn[kind], hy[0],
           hy[1], hy[2], hdw[1]);
    free(x), free(w), free(b), free(dy), free(dx), free(y), free(hy);
    free(hx), free(hw), free(hb), free(hdy), free(hdx), free(ho), free(ry);
}

int main(void) {
    Backend *f32 = backend_cpu_create(2, BACKEND_F32);
    TestRng r = {29};
    BackendDType types[] = {BACKEND_BF16, BACKEND_F16};
    for (int i = 0; i < 2; i++) {
        Backend *half = backend_cpu_create(2, types[i]);
        for (int kind = BACKEND_LAYERNORM; kind <= BACKEND_RMSNORM_1P; kind++)
            test_kind(f32, half, types[i], (BackendNorm)kind, &r);
        backend_destroy(half);
    }
    backend_destroy(f32);
    return test_result("cpu_norm_half");
}

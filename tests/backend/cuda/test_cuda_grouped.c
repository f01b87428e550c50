// tests/backend/cuda/test_cuda_grouped.c: the CUDA grouped linear (matmul_grouped_forward /
// _backward: cuBLAS's grouped GEMM, cuda_gemm_grouped.cu) against one matmul_forward /
// _backward per group on the same backend: fp32 (strict and TF32 math) and bf16, groups of
// uneven and empty sizes, with and without bias, dinp and dbias, and more non-empty groups
// than one grouped call takes (CUDA_GROUPED_CHUNK). dweight and dbias accumulate. With GELU
// (pre given) against the per-group products, then act_forward / act_backward.
// Under the emulator the results are the same bits (the grouped GEMM does each product with
// the element math of the emulated cuBLASLt); on a GPU they are other kernels, so the test
// allows 1e-4 (fp32 results) or 2e-2 (bf16 results) relative error instead (the GPU
// self-check runs this). MEGAC_EMU_NO_CUBLAS=1 (no cuBLAS) or =grouped (cuBLAS refuses the
// call) runs the grouped entries' fallbacks. Needs a device (exit 77 = skip without one); under the emulator it always runs.
#include "backend/backend.h"
#include "core/half.h"  // defines: core_f32_to_bf16, core_bf16_to_f32
#include "tests/backend/backend_test_util.h"

#include <math.h>
#include <stdio.h>

enum { GMAX = 160 };

typedef struct {
    int G, C, OC, R, rows[GMAX];
    void *x, *w, *b, *g;  // device: inp (R, C), weight (G, OC, C), bias (G, OC), dout (R, OC)
    float *dw0, *db0;     // host: the gradients' starting values (G OC C), (G OC)
} Case;

// Host fp32 values -> a fresh device buffer of be->act.
static void *up_act(Backend *be, const float *f, size_t n) {
    size_t es = backend_dtype_size(be->act);
    void *h = test_floats(n), *d = be->ops->alloc(be, n * es + 4);
    for (size_t i = 0; i < n; i++) {
        if (es == 4) ((float *)h)[i] = f[i];
        else ((uint16_t *)h)[i] = core_f32_to_bf16(f[i]);
    }
    be->ops->copy(be, d, h, n * es, BACKEND_H2D);
    free(h);
    return d;
}

static Case make_case(Backend *be, TestRng *r, const int *rows, int G, int C, int OC) {
    Case k = {.G = G, .C = C, .OC = OC};
    for (int g = 0; g < G; g++) k.rows[g] = rows[g], k.R += rows[g];
    size_t nx = (size_t)k.R * C, nw = (size_t)G * OC * C, nb = (size_t)G * OC, ng = (size_t)k.R * OC;
    size_t most = nw > nx ? (nw > ng ? nw : ng) : (nx > ng ? nx : ng);
    float *t = test_floats(most);
    rng_fill(r, t, nx, -1, 1), k.x = up_act(be, t, nx);
    rng_fill(r, t, nw, -1, 1), k.w = up_act(be, t, nw);
    rng_fill(r, t, nb, -1, 1), k.b = up_act(be, t, nb);
    rng_fill(r, t, ng, -1, 1), k.g = up_act(be, t, ng);
    free(t);
    k.dw0 = test_floats(nw), k.db0 = test_floats(nb);
    rng_fill(r, k.dw0, nw, -1, 1), rng_fill(r, k.db0, nb, -1, 1);
    return k;
}

// The results on the host, as fp32: out (R, OC), dinp (R, C), dweight, dbias.
typedef struct {
    float *out, *dinp, *dw, *db;
} Res;

static float *down_act(Backend *be, const void *d, size_t n) {
    size_t es = backend_dtype_size(be->act);
    float *f = test_floats(n);
    uint16_t *h = (uint16_t *)test_floats(n);
    be->ops->copy(be, es == 4 ? (void *)f : (void *)h, d, n * es, BACKEND_D2H);
    for (size_t i = 0; es == 2 && i < n; i++) f[i] = core_bf16_to_f32(h[i]);
    free(h);
    return f;
}

// One run: grouped entries, or one matmul_forward / _backward per non-empty group. gelu: the
// forward's out = gelu(products), kept in pre; the backward's dinp *= gelu'(x) (x (R, C)
// standing in for a layer before's pre).
static Res run(Backend *be, const Case *k, int grouped, int bias, int with_dinp, int with_db,
               int gelu) {
    size_t e = backend_dtype_size(be->act), nw = (size_t)k->G * k->OC * k->C, nb = (size_t)k->G * k->OC;
    void *out = be->ops->alloc(be, (size_t)k->R * k->OC * e + 4);
    void *dinp = with_dinp ? be->ops->alloc(be, (size_t)k->R * k->C * e + 4) : NULL;
    float *dw = be->ops->alloc(be, nw * 4), *db = with_db ? be->ops->alloc(be, nb * 4) : NULL;
    be->ops->copy(be, dw, k->dw0, nw * 4, BACKEND_H2D);
    if (db) be->ops->copy(be, db, k->db0, nb * 4, BACKEND_H2D);
    const void *b = bias ? k->b : NULL;
    void *pre = gelu ? be->ops->alloc(be, (size_t)k->R * k->OC * e + 4) : NULL;
    BackendAct ga = BACKEND_ACT_GELU;
    if (grouped) {
        be->ops->matmul_grouped_forward(be, out, pre, k->x, k->w, b, k->rows, k->G, k->C, k->OC, ga);
        be->ops->matmul_grouped_backward(be, dinp, dw, db, k->g, k->x, k->w, gelu ? k->x : NULL,
                                         k->rows, k->G, k->C, k->OC, ga);
    }
    for (int g = 0, off = 0; !grouped && g < k->G; off += k->rows[g++]) {
        int n = k->rows[g];
        if (!n) continue;
        const char *x = (const char *)k->x + (size_t)off * k->C * e;
        const char *w = (const char *)k->w + (size_t)g * k->OC * k->C * e;
        const char *dy = (const char *)k->g + (size_t)off * k->OC * e;
        be->ops->matmul_forward(be, (char *)(gelu ? pre : out) + (size_t)off * k->OC * e, x, w,
                                b ? (const char *)b + (size_t)g * k->OC * e : NULL, n, k->C, k->OC);
        be->ops->matmul_backward(be, dinp ? (char *)dinp + (size_t)off * k->C * e : NULL,
                                 dw + (size_t)g * k->OC * k->C, db ? db + (size_t)g * k->OC : NULL,
                                 dy, x, w, n, k->C, k->OC);
    }
    if (gelu && !grouped) {
        be->ops->act_forward(be, out, pre, k->R, k->OC, ga);
        if (dinp) be->ops->act_backward(be, dinp, k->x, dinp, k->R, k->C, ga);
    }
    Res s = {down_act(be, out, (size_t)k->R * k->OC), NULL, test_floats(nw), test_floats(nb)};
    if (dinp) s.dinp = down_act(be, dinp, (size_t)k->R * k->C);
    be->ops->copy(be, s.dw, dw, nw * 4, BACKEND_D2H);
    if (db) be->ops->copy(be, s.db, db, nb * 4, BACKEND_D2H);
    be->ops->free(be, out), be->ops->free(be, dinp), be->ops->free(be, dw), be->ops->free(be, db);
    be->ops->free(be, pre);
    return s;
}

// a against b: the same bits under the emulator, within tol relative error on a GPU.
static void close_to(const float *a, const float *b, size_t n, double tol, const char *what) {
    if (!a || !b) return;
#ifdef MEGAC_CUDA_EMU
    (void)tol;
    EXPECT_SAME_BITS(a, b, n, what);
#else
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (!(d <= worst)) worst = d;
    }
    EXPECT(worst <= tol, "%s: grouped vs per group: relative error %.3g > %.3g", what, worst, tol);
#endif
}

static void check(Backend *be, const Case *k, int bias, int di, int db, int gelu, const char *what) {
    Res a = run(be, k, 1, bias, di, db, gelu), b = run(be, k, 0, bias, di, db, gelu);
    double tol = be->act == BACKEND_F32 ? 1e-4 : 2e-2;
    char name[160];
    snprintf(name, sizeof name, "%s: out", what), close_to(a.out, b.out, (size_t)k->R * k->OC, tol, name);
    snprintf(name, sizeof name, "%s: dinp", what), close_to(a.dinp, b.dinp, (size_t)k->R * k->C, tol, name);
    snprintf(name, sizeof name, "%s: dweight", what);
    close_to(a.dw, b.dw, (size_t)k->G * k->OC * k->C, 1e-4, name);
    snprintf(name, sizeof name, "%s: dbias", what), close_to(a.db, b.db, (size_t)k->G * k->OC, 1e-4, name);
    free(a.out), free(a.dinp), free(a.dw), free(a.db), free(b.out), free(b.dinp), free(b.dw), free(b.db);
}

static void free_case(Backend *be, Case *k) {
    be->ops->free(be, k->x), be->ops->free(be, k->w), be->ops->free(be, k->b), be->ops->free(be, k->g);
    free(k->dw0), free(k->db0);
}

int main(void) {
    if (!backend_cuda_available()) {
        fprintf(stderr, "test_cuda_grouped: no CUDA device: skipped\n");
        return 77;
    }
    static const BackendMath math[3] = {BACKEND_MATH_FP32, BACKEND_MATH_TF32, BACKEND_MATH_FP32};
    static const BackendDType act[3] = {BACKEND_F32, BACKEND_F32, BACKEND_BF16};
    static const char *names[3] = {"fp32", "fp32 tf32", "bf16"};
    const int rows[5] = {300, 0, 130, 64, 1};
    int many[GMAX];
    for (int g = 0; g < GMAX; g++) many[g] = g % 3;  // 106 non-empty groups of 1 or 2 rows
    TestRng r = {11};
    for (int v = 0; v < 3; v++) {
        Backend *be = backend_cuda_create(0, math[v], act[v]);
        Case k = make_case(be, &r, rows, 5, 96, 128), km = make_case(be, &r, many, GMAX, 16, 24);
        char what[80];
        snprintf(what, sizeof what, "%s, bias", names[v]), check(be, &k, 1, 1, 1, 0, what);
        snprintf(what, sizeof what, "%s, no bias, no dinp", names[v]), check(be, &k, 0, 0, 1, 0, what);
        snprintf(what, sizeof what, "%s, no dbias", names[v]), check(be, &k, 1, 1, 0, 0, what);
        snprintf(what, sizeof what, "%s, %d groups", names[v], GMAX), check(be, &km, 1, 1, 1, 0, what);
        snprintf(what, sizeof what, "%s, gelu", names[v]), check(be, &k, 1, 1, 1, 1, what);
        free_case(be, &k), free_case(be, &km);
        backend_destroy(be);
    }
    return test_result("test_cuda_grouped");
}

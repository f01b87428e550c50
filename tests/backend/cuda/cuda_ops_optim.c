// tests/backend/cuda/cuda_ops_optim.c: part of the CUDA-vs-CPU op-parity test (see
// test_cuda_ops.c): AdamW (adamw_multi on one segment, ref_adamw; and on many), the double-
// precision reductions (sum, sum of squares on one segment, sum_squares_multi, sum_acc): values, NaN/Inf, empty
// inputs, and the same bits on every run.
#include "tests/backend/backend_ref_ops.h"  // defines: ref_adamw, ref_sum_squares
#include "tests/backend/cuda/cuda_parity.h"

#define OPT_TOL_D 1e-9  // double sums of floats: only the summation order differs

// |got - want| <= OPT_TOL_D * max(1, |want|), for host doubles.
#define EXPECT_SUM(got, want, what)                                                        \
    EXPECT(fabs((got) - (want)) <= OPT_TOL_D * fmax(1.0, fabs(want)), "%s: %.17g vs %.17g", \
           (what), (got), (want))

// Segments of a flat buffer with gaps that no op may touch; the last ones (beyond 64) make
// the CUDA reductions stride over segments. Returns nseg and max_len.
static int opt_segments(BackendSegment *segs, int many, size_t *total, size_t *max_len) {
    const size_t lens[3] = {100, 50, 1033};
    int nseg = many ? 70 : 3;
    size_t at = 0, mx = 0;
    for (int s = 0; s < nseg; s++) {
        size_t len = s < 3 ? lens[s] : (size_t)(1 + (s * 37) % 23);
        segs[s] = (BackendSegment){.begin = at, .len = len, .weight_decay = s % 2 == 0};
        at += len + 30;  // gap
        mx = len > mx ? len : mx;
    }
    *total = at, *max_len = mx;
    return nseg;
}

// AdamW on one tensor (ref_adamw) over 3 steps and adamw_multi over segments (gaps
// unchanged), from non-zero m, v.
static void check_adamw(Parity *t, size_t n) {
    BackendSegment segs[70];
    size_t total, max_len;
    int nseg = opt_segments(segs, !t->quick, &total, &max_len);
    size_t sizes[2] = {n, total};
    for (int multi = 0; multi < 2; multi++) {
        size_t len = sizes[multi];
        float *p = par_rand(t, len, -1, 1), *m = par_rand(t, len, -0.1, 0.1);
        float *v = par_rand(t, len, 0, 0.01), *g[3];
        for (int s = 0; s < 3; s++) g[s] = par_rand(t, len, -2, 2);
        ParOut po = par_out(len), mo = par_out(len), vo = par_out(len);
        for (int k = 0; k < 2; k++) {
            Backend *be = t->be[k];
            float *d_p = par_up(t, k, p, len), *d_m = par_up(t, k, m, len);
            float *d_v = par_up(t, k, v, len);
            BackendSegment *d_segs = par_up_bytes(t, k, segs, (size_t)nseg * sizeof *segs);
            for (int step = 1; step <= 3; step++) {
                float *d_g = par_up(t, k, g[step - 1], len);
                if (multi)
                    be->ops->adamw_multi(be, d_p, NULL, d_g, d_m, d_v, d_segs, nseg, max_len, 1e-2f,
                                         0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
                else
                    ref_adamw(be, d_p, d_g, d_m, d_v, len, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                                   0.5f, step);
            }
            par_down(t, k, po.h[k], d_p, len), par_down(t, k, mo.h[k], d_m, len);
            par_down(t, k, vo.h[k], d_v, len);
            par_release(t);
        }
        PAR_CLOSE_OUT(po, multi ? "adamw_multi params (gaps unchanged)" : "adamw params");
        PAR_CLOSE_OUT(mo, multi ? "adamw_multi m" : "adamw m");
        PAR_CLOSE_OUT(vo, multi ? "adamw_multi v" : "adamw v");
        free(p), free(m), free(v), free(g[0]), free(g[1]), free(g[2]);
        par_out_free(&po), par_out_free(&mo), par_out_free(&vo);
    }
}

// sum and sum_squares: values, n = 0, NaN and Inf propagate.
static void check_sums(Parity *t, size_t n) {
    float *x = par_rand(t, n, -1, 1);
    double s[2], s2[2], z[2], nan_sq = 0, inf_sq = 0;
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_x = par_up(t, k, x, n);
        s[k] = be->ops->sum(be, NULL, d_x, n);
        s2[k] = ref_sum_squares(be, d_x, n);
        z[k] = be->ops->sum(be, NULL, d_x, 0) + ref_sum_squares(be, d_x, 0);
        if (k == PAR_DEV) {
            float bad[2] = {NAN, INFINITY};
            be->ops->copy(be, d_x + n / 2, &bad[0], sizeof(float), BACKEND_H2D);
            nan_sq = ref_sum_squares(be, d_x, n);
            be->ops->copy(be, d_x + n / 2, &bad[1], sizeof(float), BACKEND_H2D);
            inf_sq = ref_sum_squares(be, d_x, n);
        }
        par_release(t);
    }
    EXPECT_SUM(s[PAR_DEV], s[PAR_REF], "sum");
    EXPECT_SUM(s2[PAR_DEV], s2[PAR_REF], "sum_squares");
    EXPECT(z[PAR_DEV] == 0.0, "sum and sum_squares of 0 elements: %g", z[PAR_DEV]);
    EXPECT(isnan(nan_sq), "NaN must propagate into sum_squares (got %g)", nan_sq);
    EXPECT(isinf(inf_sq), "Inf must propagate into sum_squares (got %g)", inf_sq);
    free(x);
}

// sum_squares_multi (NaN in the gaps must not be read; same bits twice) and sum_acc
// (acc += twice from 1.5; same bits in a second accumulator).
static void check_multi_sums(Parity *t, size_t n) {
    BackendSegment segs[70];
    size_t total, max_len;
    int nseg = opt_segments(segs, !t->quick, &total, &max_len);
    float *x = test_floats(total), *y = par_rand(t, n, -1, 1);  // x (total): NaN in the gaps
    for (size_t i = 0; i < total; i++) x[i] = NAN;
    for (int s = 0; s < nseg; s++) rng_fill(&t->rng, x + segs[s].begin, segs[s].len, -1, 1);
    double sq[2], sq2 = 0, acc[2], acc2 = 0;
    for (int k = 0; k < 2; k++) {
        Backend *be = t->be[k];
        float *d_x = par_up(t, k, x, total), *d_y = par_up(t, k, y, n);
        BackendSegment *d_segs = par_up_bytes(t, k, segs, (size_t)nseg * sizeof *segs);
        sq[k] = be->ops->sum_squares_multi(be, d_x, d_segs, nseg, max_len);
        double init = 1.5;
        double *d_acc = par_up_bytes(t, k, &init, sizeof init);
        be->ops->sum(be, d_acc, d_y, n);
        be->ops->sum(be, d_acc, d_y, n);
        be->ops->sum(be, d_acc, d_y, 0);  // adds nothing
        par_down_bytes(t, k, &acc[k], d_acc, sizeof(double));
        if (k == PAR_DEV) {
            sq2 = be->ops->sum_squares_multi(be, d_x, d_segs, nseg, max_len);
            double *d_acc2 = par_up_bytes(t, k, &init, sizeof init);
            be->ops->sum(be, d_acc2, d_y, n);
            be->ops->sum(be, d_acc2, d_y, n);
            par_down_bytes(t, k, &acc2, d_acc2, sizeof(double));
        }
        par_release(t);
    }
    EXPECT_SUM(sq[PAR_DEV], sq[PAR_REF], "sum_squares_multi");
    EXPECT(memcmp(&sq2, &sq[PAR_DEV], sizeof sq2) == 0, "sum_squares_multi differs between runs");
    EXPECT_SUM(acc[PAR_DEV], acc[PAR_REF], "sum into acc (twice, from 1.5)");
    EXPECT(memcmp(&acc2, &acc[PAR_DEV], sizeof acc2) == 0, "sum_acc differs between runs");
    free(x), free(y);
}

int cuda_ops_optim(Parity *t) {
    check_adamw(t, t->quick ? 300 : 1000);
    check_sums(t, t->quick ? 1000 : 5000);
    check_multi_sums(t, t->quick ? 1000 : 5000);
    return test_failures_;
}

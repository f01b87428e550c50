// bench/bench_gemm.c: what the CPU backend can reach on this machine. Prints the BLAS
// kernels and threads, the sgemm GFLOP/s ceiling at square sizes and at the transformer's
// shapes (M = B*T = 1024 rows), then times every backend op through a `medium` training
// step (bench_ops.c). Not a test: run by hand, e.g.
//     build/bench/bench_gemm --threads 2
//     build/bench/bench_gemm --threads 1 --no-ops
#include "bench.h"
#include "backend/cpu/cpu_blas.h"
#include "backend/cpu/cpu_gemm.h"  // defines: cpu_gemm (the backend's panels)
#include "core/args.h"
#include "core/check.h"
#include "core/host.h"  // defines: core_check_threads
#include "core/timer.h"

#include <cblas.h>   // defines: cblas_sgemm
#include <stdio.h>
#include <stdlib.h>
#include <time.h>  // defines: nanosleep

typedef struct {
    const char *what;
    int ta, tb, M, N, K;  // row-major C (M, N) = op(A) (M, K) @ op(B) (K, N)
} GemmShape;

// Best GFLOP/s of `reps` runs of one shape (after one untimed run): one OpenBLAS call
// threaded by OpenBLAS (be == NULL), or the backend's panels (cpu_gemm: one one-thread
// OpenBLAS call per OpenMP thread).
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// GFLOP/s of the best and (*median, when not NULL) the median of `reps` runs.
static double time_sgemm_m(const GemmShape *s, int reps, Backend *be, double *median) {
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
    float *c = calloc(nc, sizeof(float));
    if (!a || !b || !c) abort();
    for (size_t i = 0; i < na; i++) a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < nb; i++) b[i] = (float)(i % 7) * 0.01f;
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    double best = 1e30, *ts = malloc((size_t)(reps + 1) * sizeof(double));
    if (!ts) abort();
    for (int r = 0; r <= reps; r++) {
        double t0 = core_now();
        if (be)
            cpu_gemm(be, s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, lda, b, ldb, 0.0f, c, s->N);
        else
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                        s->tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1.0f, a, lda, b,
                        ldb, 0.0f, c, s->N);
        double t = core_now() - t0;
        ts[r] = t;
        if (r > 0 && t < best) best = t;
    }
    qsort(ts + 1, (size_t)reps, sizeof(double), cmp_double);
    double flop = 2.0 * s->M * s->N * s->K;
    if (median) *median = flop / ts[1 + reps / 2] * 1e-9;
    free(a), free(b), free(c), free(ts);
    return flop / best * 1e-9;
}

static double time_sgemm(const GemmShape *s, int reps, Backend *be) {
    return time_sgemm_m(s, reps, be, NULL);
}

// The panel policies of cpu_gemm side by side, median GFLOP/s of `reps` runs per shape:
// the rule, then rows (m) or columns (n) cut into 1, 2 or 4 panels per thread.
static void bench_policies(const GemmShape *shapes, size_t n, int reps, Backend *be) {
    static const struct { const char *name; int split, per; } pol[] = {
        {"rule", CPU_GEMM_SPLIT_RULE, 0}, {"m1", CPU_GEMM_SPLIT_M, 1}, {"m2", CPU_GEMM_SPLIT_M, 2},
        {"m4", CPU_GEMM_SPLIT_M, 4},      {"n1", CPU_GEMM_SPLIT_N, 1}, {"n2", CPU_GEMM_SPLIT_N, 2},
        {"n4", CPU_GEMM_SPLIT_N, 4}};
    int np = (int)(sizeof pol / sizeof *pol);
    printf("\ncpu_gemm panel policies, median of %d runs, GFLOP/s\n  %-28s", reps, "shape");
    for (int j = 0; j < np; j++) printf(" %6s", pol[j].name);
    printf("\n");
    int split = be->u.cpu.gemm_split, per = be->u.cpu.gemm_panels;
    for (size_t i = 0; i < n; i++) {
        printf("  %-28s", shapes[i].what);
        for (int j = 0; j < np; j++) {
            be->u.cpu.gemm_split = pol[j].split, be->u.cpu.gemm_panels = pol[j].per;
            double med = 0;
            time_sgemm_m(&shapes[i], reps, be, &med);
            printf(" %6.1f", med);
        }
        printf("\n");
        fflush(stdout);
    }
    be->u.cpu.gemm_split = split, be->u.cpu.gemm_panels = per;
}

// Prints the table (OpenBLAS threading one call; the backend's panels); returns the best
// GFLOP/s of one threaded OpenBLAS call seen (the ceiling).
static double bench_sgemm(int reps, int policies, Backend *be) {
    static const GemmShape shapes[] = {
        {"square 1024 (NN)", 0, 0, 1024, 1024, 1024},
        {"square 2048 (NN)", 0, 0, 2048, 2048, 2048},
        {"C=384  qkv   fwd (NT) N=3C", 0, 1, 1024, 1152, 384},
        {"C=384  fc    fwd (NT) N=4C", 0, 1, 1024, 1536, 384},
        {"C=384  proj  fwd (NT) K=4C", 0, 1, 1024, 384, 1536},
        {"C=384  lm    fwd (NT) N=V", 0, 1, 1024, 50304, 384},
        {"C=384  fc    dinp (NN)", 0, 0, 1024, 384, 1536},
        {"C=384  fc    dweight (TN)", 1, 0, 1536, 384, 1024},
        {"C=384  lm    dinp (NN)", 0, 0, 1024, 384, 50304},
        {"C=384  lm    dweight (TN)", 1, 0, 50304, 384, 1024},
        {"C=768  qkv   fwd (NT) N=3C", 0, 1, 1024, 2304, 768},
        {"C=768  fc    fwd (NT) N=4C", 0, 1, 1024, 3072, 768},
        {"C=768  lm    fwd (NT) N=V", 0, 1, 1024, 50304, 768},
    };
    // The backend's panels first, all shapes, then OpenBLAS's threaded calls: after a threaded
    // call OpenBLAS's idle workers spin (sched_yield) for ~0.1 s on the cores the panels need,
    // which read the panels 15-20 % low when the two alternated (Zen 3, 2 threads).
    enum { NS = sizeof shapes / sizeof *shapes };
    double gf[NS], gp[NS], ceiling = 0;
    for (int i = 0; i < NS; i++) gp[i] = time_sgemm(&shapes[i], reps, be);
    for (int i = 0; i < NS; i++) gf[i] = time_sgemm(&shapes[i], reps, NULL);
    struct timespec nap = {0, 500 * 1000 * 1000};  // OpenBLAS's workers asleep before the ops
    nanosleep(&nap, NULL);
    printf("\nsgemm, best of %d (M x N x K)          OpenBLAS threads | backend panels\n", reps);
    for (int i = 0; i < NS; i++) {
        const GemmShape *s = &shapes[i];
        if (gf[i] > ceiling) ceiling = gf[i];
        printf("  %-28s %5d x %5d x %5d  %7.1f | %7.1f GFLOP/s\n", s->what, s->M, s->N, s->K, gf[i],
               gp[i]);
    }
    printf("  ceiling (best above)                            %7.1f GFLOP/s\n", ceiling);
    if (policies) bench_policies(shapes + 2, sizeof shapes / sizeof *shapes - 2, policies, be);
    return ceiling;
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    int threads = 0, reps = 5, steps = 3, no_ops = 0, no_gemm = 0, vocab = 50257, flash = 0;
    int policies = 0;
    double drop = 0.0;
    ArgSpec specs[] = {
        {"--threads", ARG_INT, &threads, "OpenMP/BLAS threads (0: OMP_NUM_THREADS or all cores)"},
        {"--reps", ARG_INT, &reps, "timed runs per sgemm shape (best is reported)"},
        {"--steps", ARG_INT, &steps, "timed training steps for the op breakdown"},
        {"--no-ops", ARG_BOOL, &no_ops, "skip the per-op breakdown"},
        {"--no-gemm", ARG_BOOL, &no_gemm, "skip the sgemm table"},
        {"--vocab", ARG_INT, &vocab, "vocabulary of the op breakdown (bench_train's medium: 256)"},
        {"--flash", ARG_BOOL, &flash, "op breakdown with the fused attention (--use-flash-attn)"},
        {"--policies", ARG_INT, &policies, "also time cpu_gemm's panel policies, median of N runs"},
        {"--dropout", ARG_FLOAT, &drop, "op breakdown with dropout p (hidden and attention; 0: none)"},
    };
    core_args_parse("bench_gemm [flags]", specs, sizeof specs / sizeof *specs, argc - 1, argv + 1);
    core_check_threads("--threads", threads);
    if (reps < 1 || steps < 1 || policies < 0)
        core_usage_error("--reps and --steps must be >= 1, --policies >= 0");
    if (vocab < 1) core_usage_error("--vocab must be >= 1");
    if (drop < 0 || drop >= 1) core_usage_error("--dropout must be in [0, 1), got %g", drop);
    Backend *be = backend_cpu_create(threads, BACKEND_F32);
    const char *spin = getenv("GOMP_SPINCOUNT"), *wait = getenv("OMP_WAIT_POLICY");
    printf("backend: %s\nOpenBLAS kernels: %s, threads: %d, GOMP_SPINCOUNT=%s, OMP_WAIT_POLICY=%s\n",
           be->name, backend_cpu_blas_corename(), be->u.cpu.nthreads, spin ? spin : "(unset)",
           wait ? wait : "(unset)");
    double ceiling = no_gemm ? 0 : bench_sgemm(reps, policies, be);
    if (!no_ops) bench_ops_medium(be, steps, ceiling, vocab, flash, drop);
    backend_destroy(be);
    return 0;
}

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
#include "core/timer.h"

#include <cblas.h>   // defines: cblas_sgemm
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    const char *what;
    int ta, tb, M, N, K;  // row-major C (M, N) = op(A) (M, K) @ op(B) (K, N)
} GemmShape;

// Best GFLOP/s of `reps` runs of one shape (after one untimed run): one OpenBLAS call
// threaded by OpenBLAS (be == NULL), or the backend's panels (cpu_gemm: one one-thread
// OpenBLAS call per OpenMP thread).
static double time_sgemm(const GemmShape *s, int reps, Backend *be) {
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
    float *c = calloc(nc, sizeof(float));
    if (!a || !b || !c) abort();
    for (size_t i = 0; i < na; i++) a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < nb; i++) b[i] = (float)(i % 7) * 0.01f;
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = core_now();
        if (be)
            cpu_gemm(be, s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, lda, b, ldb, 0.0f, c, s->N);
        else
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                        s->tb ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1.0f, a, lda, b,
                        ldb, 0.0f, c, s->N);
        double t = core_now() - t0;
        if (r > 0 && t < best) best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * s->M * s->N * s->K / best * 1e-9;
}

// Prints the table (OpenBLAS threading one call; the backend's panels); returns the best
// GFLOP/s of one threaded OpenBLAS call seen (the ceiling).
static double bench_sgemm(int reps, Backend *be) {
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
    double ceiling = 0;
    printf("\nsgemm, best of %d (M x N x K)          OpenBLAS threads | backend panels\n", reps);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const GemmShape *s = &shapes[i];
        double gf = time_sgemm(s, reps, NULL), gp = time_sgemm(s, reps, be);
        if (gf > ceiling) ceiling = gf;
        printf("  %-28s %5d x %5d x %5d  %7.1f | %7.1f GFLOP/s\n", s->what, s->M, s->N, s->K, gf, gp);
    }
    printf("  ceiling (best above)                            %7.1f GFLOP/s\n", ceiling);
    return ceiling;
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);
    int threads = 0, reps = 5, steps = 3, no_ops = 0, no_gemm = 0, vocab = 50257, flash = 0;
    ArgSpec specs[] = {
        {"--threads", ARG_INT, &threads, "OpenMP/BLAS threads (0: OMP_NUM_THREADS or all cores)"},
        {"--reps", ARG_INT, &reps, "timed runs per sgemm shape (best is reported)"},
        {"--steps", ARG_INT, &steps, "timed training steps for the op breakdown"},
        {"--no-ops", ARG_BOOL, &no_ops, "skip the per-op breakdown"},
        {"--no-gemm", ARG_BOOL, &no_gemm, "skip the sgemm table"},
        {"--vocab", ARG_INT, &vocab, "vocabulary of the op breakdown (bench_train's medium: 256)"},
        {"--flash", ARG_BOOL, &flash, "op breakdown with the fused attention (--use-flash-attn)"},
    };
    core_args_parse("bench_gemm [flags]", specs, sizeof specs / sizeof *specs, argc - 1, argv + 1);
    Backend *be = backend_cpu_create(threads);
    const char *spin = getenv("GOMP_SPINCOUNT"), *wait = getenv("OMP_WAIT_POLICY");
    printf("backend: %s\nOpenBLAS kernels: %s, threads: %d, GOMP_SPINCOUNT=%s, OMP_WAIT_POLICY=%s\n",
           be->name, backend_cpu_blas_corename(), be->u.cpu.nthreads, spin ? spin : "(unset)",
           wait ? wait : "(unset)");
    double ceiling = no_gemm ? 0 : bench_sgemm(reps, be);
    if (vocab < 1) core_usage_error("--vocab must be >= 1");
    if (!no_ops) bench_ops_medium(be, steps, ceiling, vocab, flash);
    backend_destroy(be);
    return 0;
}

// tests/backend/test_cpu_blas.c: the BLAS kernel choice and the re-exec that applies it.
// usage: test_cpu_blas [--mpi] ARGS...   (ARGS are echoed back through the re-exec)
//
// main() records its PID and counts its starts in the environment before calling
// backend_cpu_select_blas_kernels, so after a re-exec the test sees: the same PID, the same
// argv, at most two starts (no loop), the marker gone, and OpenBLAS running kernels at
// least as good as the CPU supports, and never kernels the CPU cannot run (a user's
// OPENBLAS_CORETYPE=SkylakeX on an AVX2-only CPU is replaced). With --mpi it then joins MPI
// (run under mpiexec: the re-exec happens before MPI_Init and must not break the launcher's
// connection). A final sgemm checks that the kernels run.
#include "backend/backend.h"
#include "backend/cpu/cpu_blas.h"
#include "tests/testing.h"

#include <cblas.h>  // defines: cblas_sgemm
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// One row of a kernel-choice table: the function's arguments and the answer (NULL: none).
typedef struct {
    const char *core;
    int avx512, avx2;
    const char *want;
} CoreCase;

// Checks fn (backend_cpu_blas_upgrade or _runnable) against its n cases.
static void expect_core_table(const char *(*fn)(const char *, int, int), const char *name,
                              const CoreCase *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const char *got = fn(cases[i].core, cases[i].avx512, cases[i].avx2);
        int ok = got && cases[i].want ? strcmp(got, cases[i].want) == 0 : got == cases[i].want;
        EXPECT(ok, "%s(%s, avx512 %d, avx2 %d): got %s, want %s", name,
               cases[i].core ? cases[i].core : "NULL", cases[i].avx512, cases[i].avx2,
               got ? got : "NULL", cases[i].want ? cases[i].want : "NULL");
    }
}

static void test_upgrade_table(void) {
    const CoreCase cases[] = {
        {"Prescott", 1, 1, "SkylakeX"},  // Debian 0.3.21 on an unknown AVX-512 Xeon
        {"Prescott", 0, 1, "Haswell"},   {"Prescott", 0, 0, NULL},
        {"Sandybridge", 0, 1, "Haswell"}, {"Haswell", 1, 1, "SkylakeX"},
        {"Zen", 0, 1, NULL},             {"Zen", 1, 1, "SkylakeX"},  // Zen 4 on 0.3.21
        {"Haswell", 0, 1, NULL},         {"SkylakeX", 1, 1, NULL},
        {"COOPERLAKE", 1, 1, NULL},      {"SapphireRapids", 1, 1, NULL},
    };
    expect_core_table(backend_cpu_blas_upgrade, "upgrade", cases, sizeof cases / sizeof *cases);
}

// A user's OPENBLAS_CORETYPE that the CPU cannot run is replaced by the best it runs ("" =
// unset: OpenBLAS's own choice); one it can run, or a name megac does not know, stands.
static void test_runnable_table(void) {
    const CoreCase cases[] = {
        {"SkylakeX", 0, 1, "Haswell"},  // an AVX-512 cluster's job script on AMD Zen 3
        {"skylakex", 0, 0, ""},          {"Cooperlake", 0, 1, "Haswell"},
        {"SapphireRapids", 0, 0, ""},    {"Haswell", 0, 0, ""},
        {"Zen", 0, 0, ""},               {"SkylakeX", 1, 1, NULL},
        {"Haswell", 0, 1, NULL},         {"Zen", 1, 1, NULL},
        {"Prescott", 0, 0, NULL},        {"NoSuchCore", 0, 0, NULL},
        {NULL, 0, 0, NULL},
    };
    expect_core_table(backend_cpu_blas_runnable, "runnable", cases, sizeof cases / sizeof *cases);
}

// The environment variable k, or d when it is unset.
static const char *env_or(const char *k, const char *d) { return getenv(k) ? getenv(k) : d; }

// After backend_cpu_select_blas_kernels: what the (possibly re-executed) process must see.
static void test_after_select(int starts, int argc, char **argv) {
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    EXPECT(strcmp(getenv("TEST_CPU_BLAS_PID"), pid) == 0, "re-exec must keep the PID (%s vs %s)",
           getenv("TEST_CPU_BLAS_PID"), pid);
    EXPECT(starts <= 2, "started %d times: re-exec loop", starts);
    EXPECT(getenv("MEGAC_CPU_REEXEC") == NULL, "the re-exec marker must be cleared");
    int off = getenv("MEGAC_NO_REEXEC") != NULL;  // the user turned the mechanism off
    const char *user_spin = getenv("TEST_CPU_BLAS_USER_SPIN");  // libgomp's policy is the user's
    EXPECT(user_spin && strcmp(user_spin, env_or("GOMP_SPINCOUNT", "")) == 0,
           "GOMP_SPINCOUNT changed from '%s' to '%s'", user_spin ? user_spin : "(null)",
           env_or("GOMP_SPINCOUNT", "(unset)"));
    int user_core = strcmp(getenv("TEST_CPU_BLAS_USER_CORE"), "1") == 0;  // respected as is
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512cd");
    const char *core = backend_cpu_blas_corename();
    EXPECT(off || user_core || !backend_cpu_blas_upgrade(core, avx512, avx2),
           "OpenBLAS runs %s on a CPU with avx512 %d, avx2 %d", core, avx512, avx2);
    EXPECT(off || !backend_cpu_blas_runnable(core, avx512, avx2),
           "OpenBLAS runs %s kernels, which need more than this CPU's avx512 %d, avx2 %d", core,
           avx512, avx2);
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};  // the kernels run here
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
    EXPECT(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50, "sgemm: %g %g %g %g", c[0],
           c[1], c[2], c[3]);
    const char *want[] = {"alpha", "two words", ""};  // meson passes these (after --mpi)
    int first = argc > 1 && strcmp(argv[1], "--mpi") == 0 ? 2 : 1;
    EXPECT_EQ_INT(argc - first, 3);
    for (int i = 0; i < 3 && first + i < argc; i++)
        EXPECT(strcmp(argv[first + i], want[i]) == 0, "argv[%d] = '%s'", first + i, argv[first + i]);
    printf("test_cpu_blas: pid %s, %d start(s), OpenBLAS %s, GOMP_SPINCOUNT %s\n", pid, starts,
           core, env_or("GOMP_SPINCOUNT", "(unset)"));
}

int main(int argc, char **argv) {
    const char *n = getenv("TEST_CPU_BLAS_STARTS");
    int starts = (n ? atoi(n) : 0) + 1;
    char buf[32];
    snprintf(buf, sizeof buf, "%d", starts);
    setenv("TEST_CPU_BLAS_STARTS", buf, 1);
    snprintf(buf, sizeof buf, "%ld", (long)getpid());
    if (starts == 1) {
        setenv("TEST_CPU_BLAS_PID", buf, 1);
        setenv("TEST_CPU_BLAS_USER_CORE", getenv("OPENBLAS_CORETYPE") ? "1" : "0", 1);
        setenv("TEST_CPU_BLAS_USER_SPIN", env_or("GOMP_SPINCOUNT", ""), 1);
    }
    backend_cpu_select_blas_kernels(argc, argv);

    int mpi = argc > 1 && strcmp(argv[1], "--mpi") == 0;
    if (mpi) MPI_Init(&argc, &argv);
    test_upgrade_table();
    test_runnable_table();
    test_after_select(starts, argc, argv);
    if (mpi) {
        int one = 1, size = 0, sum = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        EXPECT_EQ_INT(sum, size);
        MPI_Finalize();
    }
    return test_result("test_cpu_blas");
}

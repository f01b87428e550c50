// backend/cpu/cpu_blas.c: choose OpenBLAS's kernels for this CPU, re-executing the program
// when the library must see a different environment at load.
#include "cpu_blas.h"

#include "core/host.h"  // defines: core_launcher_first

#include <cblas.h>    // defines: openblas_get_corename
#include <stdio.h>    // defines: fprintf
#include <stdlib.h>   // defines: getenv, setenv, unsetenv, free
#include <string.h>   // defines: strdup
#include <strings.h>  // defines: strcasecmp
#include <unistd.h>   // defines: execv

#define CPU_REEXEC_MARK "MEGAC_CPU_REEXEC"

// 2: AVX-512 kernels, 1: AVX2+FMA kernels, 0: anything older (or unknown).
static int kernel_tier(const char *corename) {
    static const char *avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *avx2[] = {"Haswell", "Zen"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (strcasecmp(corename, avx512[i]) == 0) return 2;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (strcasecmp(corename, avx2[i]) == 0) return 1;
    return 0;
}

// The best kernels the CPU runs: 2 (AVX-512), 1 (AVX2+FMA) or 0. Pure.
static int cpu_tier(int has_avx512, int has_avx2_fma) {
    return has_avx512 ? 2 : has_avx2_fma ? 1 : 0;
}

// The OPENBLAS_CORETYPE that asks for a tier's kernels ("": none, OpenBLAS's own choice). Pure.
static const char *tier_core(int tier) {
    return tier == 2 ? "SkylakeX" : tier == 1 ? "Haswell" : "";
}

// The OPENBLAS_CORETYPE to ask for, or NULL when OpenBLAS's own choice is as good. Pure.
const char *backend_cpu_blas_upgrade(const char *corename, int has_avx512, int has_avx2_fma) {
    int want = cpu_tier(has_avx512, has_avx2_fma);
    if (!corename || want <= kernel_tier(corename)) return NULL;
    return tier_core(want);
}

const char *backend_cpu_blas_runnable(const char *requested, int has_avx512, int has_avx2_fma) {
    int can = cpu_tier(has_avx512, has_avx2_fma);
    if (!requested || kernel_tier(requested) <= can) return NULL;
    return tier_core(can);
}

// openblas_get_corename(), never NULL.
const char *backend_cpu_blas_corename(void) {
    const char *s = openblas_get_corename();
    return s ? s : "unknown";
}

// What this CPU (and the OS, which must save the wide registers) supports. Never fails.
static void cpu_features(int *avx512, int *avx2_fma) {
    *avx512 = *avx2_fma = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    *avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    // SkylakeX kernels use the F, CD, BW, DQ and VL subsets.
    *avx512 = *avx2_fma && __builtin_cpu_supports("avx512f") &&
              __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
}

// Sets what OpenBLAS must read at load time, re-executing the program when it changed
// anything (see cpu_blas.h). Call before MPI_Init. Never fails.
void backend_cpu_select_blas_kernels(int argc, char **argv) {
    if (getenv(CPU_REEXEC_MARK)) {  // we are the re-executed process: done (children start clean)
        unsetenv(CPU_REEXEC_MARK);
        return;
    }
    if (argc < 1 || !argv || !argv[0] || getenv("MEGAC_NO_REEXEC")) return;
    int avx512, avx2_fma;
    cpu_features(&avx512, &avx2_fma);
    const char *user = getenv("OPENBLAS_CORETYPE"), *core;
    if (user) {  // the user's choice stands, unless its instructions would kill the process
        core = backend_cpu_blas_runnable(user, avx512, avx2_fma);
        if (!core) return;
        if (core_launcher_first())
            fprintf(stderr, "megac: OPENBLAS_CORETYPE=%s needs %s, which this CPU lacks: "
                    "running OpenBLAS's %s kernels instead (unset OPENBLAS_CORETYPE to let "
                    "megac choose)\n", user, kernel_tier(user) == 2 ? "AVX-512" : "AVX2 and FMA",
                    *core ? core : "own choice of");
    } else {
        core = backend_cpu_blas_upgrade(backend_cpu_blas_corename(), avx512, avx2_fma);
        if (!core) return;
    }
    char *saved = user ? strdup(user) : NULL;
    if ((*core ? setenv("OPENBLAS_CORETYPE", core, 1) : unsetenv("OPENBLAS_CORETYPE")) == 0) {
        setenv(CPU_REEXEC_MARK, "1", 1);
        execv("/proc/self/exe", argv);  // returns only on failure: carry on as we are
    }
    if (saved) setenv("OPENBLAS_CORETYPE", saved, 1);
    else unsetenv("OPENBLAS_CORETYPE");
    unsetenv(CPU_REEXEC_MARK);
    free(saved);
}

// backend/cpu/cpu_blas.h: pick OpenBLAS's kernels (and a sane OpenMP wait policy) before
// the libraries read their environment.
//
// OpenBLAS chooses its kernels once, when the library is loaded, from the CPUID tables it
// knows; Debian's 0.3.21 does not know recent Intel server CPUs and falls back to its SSE3
// "Prescott" kernels (~4x slower). The only switch is OPENBLAS_CORETYPE, read at load time,
// so setting it inside main() is too late: the process has to be started again with it.
// Likewise libgomp reads its wait policy at load time; its default (spin ~300k iterations
// after every parallel region) steals the cores OpenBLAS's threads need for the next GEMM.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Call first thing in main(), before MPI_Init and before any thread starts. If the
// environment asks for nothing (OPENBLAS_CORETYPE unset) and the kernels OpenBLAS picked
// are weaker than the CPU supports (AVX-512 -> SkylakeX, AVX2+FMA -> Haswell), sets
// OPENBLAS_CORETYPE; if neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, sets a short
// GOMP_SPINCOUNT. When it set anything it re-executes /proc/self/exe with the same argv
// (MEGAC_CPU_REEXEC guards against loops). exec keeps the PID, open descriptors and the
// environment, so it is safe under mpiexec/srun (the PMI connection survives) as long as
// MPI is not initialised yet. If exec fails, it undoes its changes and returns: the
// program runs, only slower. MEGAC_NO_REEXEC=1 turns the re-exec off (e.g. under valgrind,
// where /proc/self/exe is the tool). Never fails.
void backend_cpu_select_blas_kernels(int argc, char **argv);

// The OPENBLAS_CORETYPE worth asking for when OpenBLAS picked `corename` on a CPU with the
// given features, or NULL when `corename` is already as good. Pure; exposed for tests.
const char *backend_cpu_blas_upgrade(const char *corename, int has_avx512, int has_avx2_fma);

// The OpenBLAS kernels in use (openblas_get_corename()), e.g. "Haswell". Never fails.
const char *backend_cpu_blas_corename(void);

#ifdef __cplusplus
}
#endif

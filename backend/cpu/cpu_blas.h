// backend/cpu/cpu_blas.h: pick OpenBLAS's kernels before the library reads its environment.
//
// OpenBLAS chooses its kernels once, when the library is loaded, from the CPUID tables it
// knows; Debian's 0.3.21 does not know recent Intel server CPUs and falls back to its SSE3
// "Prescott" kernels (~4x slower). The only switch is OPENBLAS_CORETYPE, read at load time,
// so setting it inside main() is too late: the process has to be started again with it.
// libgomp's wait policy is left alone: its default (an idle worker spins ~300k iterations
// before it sleeps) is what the backend's many short parallel regions need, now that
// OpenBLAS runs one thread per call inside them (cpu_gemm.h). The old short spin (1000) cost
// `medium` at 1 rank x 2 threads ~20 % (median of 8 interleaved runs: 413 ms/step against
// 340): the workers fell asleep between regions and each region paid their wake-up. A rank
// that shares its cores with other ranks' threads (--num-threads above cores / ranks) should
// run with OMP_WAIT_POLICY=passive.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Call first thing in main(), before MPI_Init and before any thread starts. If the
// environment asks for nothing (OPENBLAS_CORETYPE unset) and the kernels OpenBLAS picked
// are weaker than the CPU supports (AVX-512 -> SkylakeX, AVX2+FMA -> Haswell), sets
// OPENBLAS_CORETYPE and re-executes /proc/self/exe with the same argv
// (MEGAC_CPU_REEXEC guards against loops). exec keeps the PID, open descriptors and the
// environment, so it is safe under mpiexec/srun (the PMI connection survives) as long as
// MPI is not initialised yet. An OPENBLAS_CORETYPE the user set stands, unless its kernels
// need instructions this CPU lacks (SkylakeX asked for on an AVX2-only CPU, say, from a job
// script written for another cluster: the first GEMM would die of SIGILL): then one line
// (launcher rank 0) says so and the program re-executes with the best kernels the CPU runs.
// If exec fails, it undoes its changes and returns: the program runs, only slower (or,
// with the impossible request, dies at its first GEMM as it would have without megac).
// MEGAC_NO_REEXEC=1 turns the re-exec off (e.g. under valgrind, where /proc/self/exe is the
// tool). Never fails.
void backend_cpu_select_blas_kernels(int argc, char **argv);

// The OPENBLAS_CORETYPE worth asking for when OpenBLAS picked `corename` on a CPU with the
// given features, or NULL when `corename` is already as good. Pure; exposed for tests.
const char *backend_cpu_blas_upgrade(const char *corename, int has_avx512, int has_avx2_fma);

// When the user's OPENBLAS_CORETYPE `requested` names kernels that need instructions the CPU
// lacks: the best kernels it runs ("SkylakeX", "Haswell", or "" for OpenBLAS's own choice:
// unset the variable). NULL when `requested` runs here (or is not a name megac knows: OpenBLAS
// falls back to its own choice for those). Pure; exposed for tests.
const char *backend_cpu_blas_runnable(const char *requested, int has_avx512, int has_avx2_fma);

// The OpenBLAS kernels in use (openblas_get_corename()), e.g. "Haswell". Never fails.
const char *backend_cpu_blas_corename(void);

#ifdef __cplusplus
}
#endif

// backend/cpu/cpu_backend.c: the CPU Backend: creation, thread counts and host memory. The
// ops table is filled by the op families (cpu_ops.c), whose files hold the arithmetic:
// cpu_matmul.c, cpu_norm.c, cpu_act.c, cpu_attention.c, cpu_attention_flash.c, cpu_embed_xent.c,
// cpu_optim.c, cpu_cast.c, cpu_dropout.c, cpu_rope.c, cpu_moe.c, each with its 16-bit entries
// (--bf16 / --fp16) on cpu_half.c's helpers; this file registers the memory entries.
#include "cpu_backend.h"
#include "cpu_blas.h"
#include "core/check.h"

#include <cblas.h>   // defines: openblas_set_num_threads
#include <omp.h>     // defines: omp_set_num_threads, omp_get_num_procs
#include <stdio.h>   // defines: snprintf
#include <stdlib.h>  // defines: posix_memalign, free, getenv, strtol
#include <string.h>  // defines: memset, memmove

#define CPU_ALIGN 64

void *cpu_alloc(Backend *be, size_t bytes) {
    size_t padded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    if (padded == 0) padded = CPU_ALIGN;
    void *p = NULL;
    if (padded < bytes || posix_memalign(&p, CPU_ALIGN, padded) != 0)
        core_fatal("cpu backend: cannot allocate %zu bytes", bytes);
    memset(p, 0, padded);
    return p;
}

void cpu_free(Backend *be, void *p) { free(p); }

// Large buffers (the gradients, every step) are cleared by all threads, a slice each.
void cpu_zero(Backend *be, void *p, size_t bytes) {
    int nt = cpu_nt(be);
    if (nt <= 1 || bytes < CPU_ZERO_PAR_MIN) {
        if (bytes) memset(p, 0, bytes);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t me = (size_t)omp_get_thread_num(), team = (size_t)omp_get_num_threads();
        size_t b0 = bytes * me / team / 64 * 64, b1 = me + 1 == team ? bytes : bytes * (me + 1) / team / 64 * 64;
        memset((char *)p + b0, 0, b1 - b0);
    }
}

// Host to host whatever the kind; overlapping ranges are fine.
void cpu_copy(Backend *be, void *dst, const void *src, size_t bytes, BackendCopyKind kind) {
    if (bytes) memmove(dst, src, bytes);
}

void cpu_sync(Backend *be) {}     // every op has finished when it returns
static size_t cpu_device_memory_used(Backend *be) { return 0; }  // no device
static void cpu_copy_join(Backend *be, int host) {}  // copy_async's copies are done already
// All state is in the Backend struct itself but the 16-bit ops' scratch (cpu_half.c).
void cpu_destroy(Backend *be) {
    free(be->u.cpu.half_scratch);
    be->u.cpu.half_scratch = NULL;
    be->u.cpu.half_bytes = 0;
}


// OMP_NUM_THREADS's first entry when it is a positive number, else the cores this process
// may run on. Never fails.
static int cpu_default_threads(void) {
    const char *s = getenv("OMP_NUM_THREADS");
    if (s) {
        char *end = NULL;
        long n = strtol(s, &end, 10);
        if (end != s && n > 0 && n <= 4096) return (int)n;
    }
    int n = omp_get_num_procs();
    return n > 0 ? n : 1;
}

// CPU backend with `nthreads` OpenMP/BLAS threads (<= 0: OMP_NUM_THREADS, else all cores)
// and activations stored as `act`. OpenBLAS's thread count is process-wide: the last backend
// created sets it. Never returns NULL.
Backend *backend_cpu_create(int nthreads, BackendDType act) {
    if (nthreads <= 0) nthreads = cpu_default_threads();
    Backend *be = core_calloc(1, sizeof(Backend));
    cpu_ops_fill(&be->table, act);
    be->ops = &be->table;
    be->act = act;
    be->kind = BACKEND_CPU;
    be->u.cpu.nthreads = nthreads;
    omp_set_num_threads(nthreads);
    openblas_set_num_threads(nthreads);
    snprintf(be->name, sizeof be->name, "cpu (%d thread%s, OpenBLAS %s%s%s)", nthreads,
             nthreads == 1 ? "" : "s", backend_cpu_blas_corename(), act == BACKEND_F32 ? "" : ", ",
             act == BACKEND_F32 ? "" : backend_dtype_name(act));
    return be;
}

void cpu_memory_ops(BackendOps *t, BackendDType act) {
    (void)act;  // the same ops for every activation type
    t->alloc = cpu_alloc;
    t->free = cpu_free;
    t->zero = cpu_zero;
    t->copy = cpu_copy;
    t->sync = cpu_sync;
    t->destroy = cpu_destroy;
    t->alloc_host = cpu_alloc;  // host memory is all there is
    t->free_host = cpu_free;
    t->device_memory_used = cpu_device_memory_used;
    t->copy_async = cpu_copy;         // (one stream: done when it returns)
    t->copy_join = cpu_copy_join;
}

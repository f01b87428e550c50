// tests/comm/comm_test_buf.h: buffers in host or CUDA memory for the Comm tests (the MPI
// Comm works on host memory, NCCL and staged on device memory), and the Comm kind from argv.
#pragma once
#include "core/check.h"
#ifdef MEGAC_HAVE_CUDA
#include "core/check_cuda.h"
#endif

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

static int on_device __attribute__((unused));  // buffers in CUDA memory (nccl / staged)

static void *buf_alloc(size_t bytes) {
#ifdef MEGAC_HAVE_CUDA
    if (on_device) {
        void *p = NULL;
        CUDA_CHECK(cudaMalloc(&p, bytes));
        return p;
    }
#endif
    return malloc(bytes);
}

static void buf_free(void *p) {
#ifdef MEGAC_HAVE_CUDA
    if (on_device) {
        CUDA_CHECK(cudaFree(p));
        return;
    }
#endif
    free(p);
}

// dst = src (bytes); to_dev: host -> buffer, else buffer -> host. Synchronous.
static void buf_copy(void *dst, const void *src, size_t bytes, int to_dev) {
#ifdef MEGAC_HAVE_CUDA
    if (on_device) {
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemcpy(dst, src, bytes, to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
        return;
    }
#endif
    (void)to_dev;
    memcpy(dst, src, bytes);
}


// For a test's kind: "mpi" -> 0 (host buffers); "nccl" / "staged" -> 1 with on_device set and
// *stream a new CUDA stream; -1 when that needs a device and there is none, or a CPU-only
// build (the test then exits 77, a skip).
static int buf_kind_setup(const char *kind, void **stream) {
    *stream = NULL;
    if (!strcmp(kind, "mpi")) return 0;
#ifdef MEGAC_HAVE_CUDA
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) return -1;
    on_device = 1;
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    *stream = s;
    return 1;
#else
    return -1;
#endif
}

// A Comm test's start: MPI_Init, argv[1] (mpi, the default, nccl or staged) into *kind and
// buf_kind_setup's result, returned; when that is a skip, finalizes MPI and exits 77.
static int buf_test_start(int *argc, char ***argv, const char **kind, void **stream) {
    MPI_CHECK(MPI_Init(argc, argv));
    *kind = *argc > 1 ? (*argv)[1] : "mpi";
    int dev = buf_kind_setup(*kind, stream);
    if (dev < 0) {
        MPI_Finalize();
        exit(77);
    }
    return dev;
}

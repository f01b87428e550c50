// backend/cuda/cuda_backend.cu: placeholder until the CUDA backend lands.
#include "backend/backend.h"
#include "core/check_cuda.h"
extern "C" int backend_cuda_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
extern "C" Backend *backend_cuda_create(int device) {
    (void)device;
    core_fatal("CUDA backend not implemented yet");
}

// backend/cuda/cuda_cast.cu: the cast op: element-wise conversion between fp32, bf16 and fp16
// (weight compute copies from the fp32 master weights, activations to and from fp32).
// Through fp32: a bf16/fp16 -> fp32 load is exact, so every conversion rounds once, to
// nearest even (overflow to inf, fp16 subnormals kept, NaN stays NaN). Same types: a copy of
// the bits (no kernel). Also copy_row_blocks (strided blocks of rows copied or added).
#include "backend/cuda/cuda_common.cuh"  // defines: CUDA_LAUNCH, load_f32, store_from_f32

#define CAST_THREADS 256
#define CAST_GRID_CAP 4096  // grid-stride: at most this many blocks

// dst (n, type D) = src (n, type S) rounded to D. Grid-stride over n.
template <typename D, typename S>
static __global__ void cast_kernel(D *dst, const S *src, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        store_from_f32(dst + i, load_f32(src + i));
}

template <typename D, typename S>
static void cast_launch(Backend *be, void *dst, const void *src, size_t n) {
    CUDA_LAUNCH((cast_kernel<D, S>), cuda_blocks(n, CAST_THREADS, CAST_GRID_CAP), CAST_THREADS,
                0, cuda_stream(be), (D *)dst, (const S *)src, n);
}

// The launch for source type S (dst type dt).
template <typename S>
static void cast_from(Backend *be, void *dst, BackendDType dt, const void *src, size_t n) {
    switch (dt) {
    case BACKEND_BF16: cast_launch<__nv_bfloat16, S>(be, dst, src, n); break;
    case BACKEND_F16: cast_launch<__half, S>(be, dst, src, n); break;
    default: cast_launch<float, S>(be, dst, src, n); break;
    }
}

// dst (n, type dt) = src (n, type st) converted, round to nearest even; asynchronous.
void cuda_cast(Backend *be, void *dst, BackendDType dt, const void *src, BackendDType st, size_t n) {
    if (n == 0 || (dt == st && dst == src)) return;
    if (dt == st) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * backend_dtype_size(st), cudaMemcpyDeviceToDevice,
                                   cuda_stream(be)));
        return;
    }
    ACT_DISPATCH(st, cast_from, be, dst, dt, src, n);
}

// copy_row_blocks (backend.h) for element type E: one thread per element of the rows x nb
// x width blocks, grid-stride; an add goes through fp32 and rounds once, as add.
template <typename E>
static __global__ void row_blocks_kernel(E *dst, size_t ldd, size_t dbs, const E *src,
                                         size_t lds, size_t sbs, int nb, int width, size_t n,
                                         int add) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t c = e % (size_t)width, i = e / (size_t)width % (size_t)nb, r = e / width / nb;
        E *d = dst + r * ldd + i * dbs + c;
        const E *s = src + r * lds + i * sbs + c;
        if (add) store_from_f32(d, load_f32(d) + load_f32(s));
        else *d = *s;
    }
}

template <typename E>
static void row_blocks_t(Backend *be, void *dst, size_t ldd, size_t dbs, const void *src,
                         size_t lds, size_t sbs, int rows, int nb, int width, int add) {
    size_t n = (size_t)rows * nb * width;
    CUDA_LAUNCH(row_blocks_kernel<E>, cuda_blocks(n, CAST_THREADS, CAST_GRID_CAP), CAST_THREADS,
                0, cuda_stream(be), (E *)dst, ldd, dbs, (const E *)src, lds, sbs, nb, width, n,
                add);
}

// Blocks of rows copied or added (backend.h); asynchronous.
void cuda_copy_row_blocks(Backend *be, void *dst, size_t ldd, size_t dbs, const void *src,
                          size_t lds, size_t sbs, int rows, int nb, int width, int add) {
    if (rows <= 0 || nb <= 0 || width <= 0) return;
    ACT_DISPATCH(be->act, row_blocks_t, be, dst, ldd, dbs, src, lds, sbs, rows, nb, width, add);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_cast_ops(BackendOps *t) {
    t->cast = cuda_cast;
    t->copy_row_blocks = cuda_copy_row_blocks;
}

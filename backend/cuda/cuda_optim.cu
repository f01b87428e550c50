// backend/cuda/cuda_optim.cu: launchers of multi-tensor AdamW and the double-
// precision reductions (gradient norm, loss sums), kernels in optim.cuh. Contracts:
// backend/backend.h. Reductions go through the backend's scratch: partials (CUDA_PARTIALS
// doubles) -> result (1 double, device) -> result_host (pinned) -> the caller.
#include "backend/cuda/optim.cuh"  // defines: the kernels, OPT_THREADS

#include <math.h>  // defines: pow

#define OPT_MULTI_X_CAP 512     // adamw_multi: blocks per segment at most
#define OPT_REDUCE_BLOCKS 1024  // reductions: partials per range at most
#define OPT_REDUCE_SEGS 64      // sum_squares_multi: grid.y at most (64 * 1024 <= CUDA_PARTIALS)
#define OPT_Y_CAP 65535u        // CUDA's grid.y limit

// 1 - beta^step in double, cast to float (as the CPU backend). Pure.
static float opt_bias_correction(float beta, int step) {
    return (float)(1.0 - pow((double)beta, (double)step));
}

// Copies the device result to the pinned host double and waits for the stream.
static double opt_read_result(Backend *be) {
    CudaState *cs = cuda_state(be);
    CUDA_CHECK(cudaMemcpyAsync(cs->result_host, cs->result, sizeof(double),
                               cudaMemcpyDeviceToHost, cs->stream));
    cuda_wait(be);
    return *cs->result_host;
}

// adamw_multi_kernel<E> with copy as E * (E: the storage type of be->act).
template <typename E>
static void opt_adamw_multi_t(Backend *be, dim3 grid, float *param, void *copy,
                              const float *grad, float *m, float *v, const BackendSegment *segs,
                              int nseg, float lr, float beta1, float beta2, float eps, float wd,
                              float grad_scale, float bc1, float bc2) {
    CUDA_LAUNCH(adamw_multi_kernel<E>, grid, OPT_THREADS, 0, cuda_stream(be), param, (E *)copy,
                grad, m, v, segs, nseg, lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2);
}

// AdamW on every segment of segs (nseg, device memory) in one launch; max_len >= every len;
// copy (NULL, or be->act elements indexed as param) gets the updated parameters rounded.
void cuda_adamw_multi(Backend *be, float *param, void *copy, const float *grad, float *m, float *v,
                      const BackendSegment *segs, int nseg, size_t max_len, float lr,
                      float beta1, float beta2, float eps, float wd, float grad_scale, int step) {
    if (nseg <= 0 || max_len == 0) return;
    float bc1 = opt_bias_correction(beta1, step), bc2 = opt_bias_correction(beta2, step);
    size_t chunks = max_len / Vec16<float>::N + 2;  // a segment's chunks at most (of 4 or 8)
    dim3 grid(cuda_blocks(chunks, OPT_THREADS, OPT_MULTI_X_CAP),
              (unsigned)nseg < OPT_Y_CAP ? (unsigned)nseg : OPT_Y_CAP);
    ACT_DISPATCH(be->act, opt_adamw_multi_t, be, grid, param, copy, grad, m, v, segs, nseg, lr,
                 beta1, beta2, eps, wd, grad_scale, bc1, bc2);
}

// Sum of x (n) into cuda_state(be)->result (add = 0) or added to *acc (add = 1).
// Asynchronous.
static void opt_reduce(Backend *be, double *out, const float *x, size_t n, int add) {
    CudaState *cs = cuda_state(be);
    unsigned blocks = cuda_blocks(n, OPT_THREADS, OPT_REDUCE_BLOCKS);
    CUDA_LAUNCH(reduce_partial_kernel, blocks, OPT_THREADS, 0, cs->stream, cs->partials, x, n);
    CUDA_LAUNCH(reduce_finish_kernel, 1, OPT_THREADS, 0, cs->stream, out,
                (const double *)cs->partials, (int)blocks, add);
}

// Sum of x[i] in double: acc NULL, returned on the host (waits for the stream); else
// acc[0] += it on the device, asynchronous, 0 returned.
double cuda_sum(Backend *be, double *acc, const float *x, size_t n) {
    if (n == 0) return 0.0;
    if (acc) {
        opt_reduce(be, acc, x, n, 1);
        return 0.0;
    }
    opt_reduce(be, cuda_state(be)->result, x, n, 0);
    return opt_read_result(be);
}

// Sum of x[i]^2 over the segments of segs (nseg, device memory), in double, fixed order; one
// device-to-host read. Waits for the stream.
double cuda_sum_squares_multi(Backend *be, const float *x, const BackendSegment *segs, int nseg,
                              size_t max_len) {
    if (nseg <= 0 || max_len == 0) return 0.0;
    CudaState *cs = cuda_state(be);
    dim3 grid(cuda_blocks(max_len, OPT_THREADS, OPT_REDUCE_BLOCKS),
              (unsigned)(nseg < OPT_REDUCE_SEGS ? nseg : OPT_REDUCE_SEGS));
    CUDA_LAUNCH(reduce_multi_partial_kernel, grid, OPT_THREADS, 0, cs->stream, cs->partials, x,
                segs, nseg);
    CUDA_LAUNCH(reduce_finish_kernel, 1, OPT_THREADS, 0, cs->stream, cs->result,
                (const double *)cs->partials, (int)(grid.x * grid.y), 0);
    return opt_read_result(be);
}

// This file's entries of the CUDA ops table (cuda_internal.h).
void cuda_optim_ops(BackendOps *t) {
    t->adamw_multi = cuda_adamw_multi;
    t->sum_squares_multi = cuda_sum_squares_multi;
    t->sum = cuda_sum;
}

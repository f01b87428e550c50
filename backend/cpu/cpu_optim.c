// backend/cpu/cpu_optim.c: AdamW and the double-precision reductions (gradient norm, sums).
//
// Reductions split x into a fixed number of contiguous chunks (not one per thread): each
// chunk is summed in double, then the chunk sums are added in order, so the result has the
// same bits for every run and every thread count.
#include "cpu_backend.h"

#include <math.h>  // defines: pow, sqrtf

#define CPU_SUM_CHUNKS 256

// AdamW on n elements (see backend.h for the formula); bias corrections in double. The loop
// is memory-bound (7 floats of traffic per element), so it stays scalar: sqrtf's errno
// branch keeps GCC from vectorising it without -fno-math-errno, and that would not help.
void cpu_adamw(Backend *be, float *param, const float *grad, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
               int step) {
    float bc1 = (float)(1.0 - pow((double)beta1, (double)step));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)step));
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if (n > CPU_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * param[i]);
    }
}

// Sum over chunks of f(x) in double; squares != 0 sums x^2, else x.
static double cpu_reduce(Backend *be, const float *x, size_t n, int squares) {
    double part[CPU_SUM_CHUNKS];
    size_t chunk = (n + CPU_SUM_CHUNKS - 1) / CPU_SUM_CHUNKS;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if (n > CPU_PAR_MIN)
    for (int c = 0; c < CPU_SUM_CHUNKS; c++) {
        size_t i0 = c * chunk < n ? c * chunk : n, i1 = i0 + chunk < n ? i0 + chunk : n;
        double s = 0.0;
        if (squares) {
#pragma omp simd reduction(+ : s)
            for (size_t i = i0; i < i1; i++) s += (double)x[i] * (double)x[i];
        } else {
#pragma omp simd reduction(+ : s)
            for (size_t i = i0; i < i1; i++) s += (double)x[i];
        }
        part[c] = s;
    }
    double total = 0.0;
    for (int c = 0; c < CPU_SUM_CHUNKS; c++) total += part[c];
    return total;
}

// Sum of x[i]^2 in double (NaN/Inf propagate).
double cpu_sum_squares(Backend *be, const float *x, size_t n) { return cpu_reduce(be, x, n, 1); }

// Sum of x[i] in double.
double cpu_sum(Backend *be, const float *x, size_t n) { return cpu_reduce(be, x, n, 0); }

// AdamW on every segment of segs (host memory for this backend), as cpu_adamw.
void cpu_adamw_multi(Backend *be, float *param, const float *grad, float *m, float *v,
                     const BackendSegment *segs, int nseg, size_t max_len, float lr,
                     float beta1, float beta2, float eps, float wd, float grad_scale, int step) {
    for (int s = 0; s < nseg; s++) {
        size_t b = segs[s].begin;
        cpu_adamw(be, param + b, grad + b, m + b, v + b, segs[s].len, lr, beta1, beta2, eps,
                  segs[s].weight_decay ? wd : 0.0f, grad_scale, step);
    }
}

// Sum of x^2 over the segments, each segment summed as cpu_sum_squares, in segment order.
double cpu_sum_squares_multi(Backend *be, const float *x, const BackendSegment *segs, int nseg,
                             size_t max_len) {
    double total = 0.0;
    for (int s = 0; s < nseg; s++) total += cpu_reduce(be, x + segs[s].begin, segs[s].len, 1);
    return total;
}

// acc[0] += sum of x.
void cpu_sum_acc(Backend *be, double *acc, const float *x, size_t n) { acc[0] += cpu_reduce(be, x, n, 0); }

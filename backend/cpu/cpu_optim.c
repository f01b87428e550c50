// backend/cpu/cpu_optim.c: AdamW and the double-precision reductions (gradient norm, sums).
//
// Reductions split x into a fixed number of contiguous chunks (not one per thread): each
// chunk is summed in double, then the chunk sums are added in order, so the result has the
// same bits for every run and every thread count.
#include "cpu_backend.h"
#include "cpu_math.h"  // defines: CPU_SIMD_CLONES

#include <math.h>  // defines: pow, sqrtf
#include <omp.h>   // defines: omp_get_thread_num, omp_get_num_threads
#include <string.h>  // defines: memcpy

#define CPU_SUM_CHUNKS 256

// Elements per work item of AdamW (a multiple of every vector width).
#define CPU_ADAMW_SPAN 16384

// AdamW on one span (backend.h's formula). Each element is the same sequence of IEEE operations
// in every clone (no FMA contraction in ISO C), so the bits do not depend on the vector
// width; vectorising needs sqrtf without errno (-fno-math-errno in meson.build).
CPU_SIMD_CLONES static void cpu_adamw_span(float *param, const float *grad, float *m, float *v,
                                           size_t n, float lr, float beta1, float beta2,
                                           float eps, float wd, float grad_scale, float bc1,
                                           float bc2) {
#pragma omp simd
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

// Sum of x (n) in double, or of x^2 when squares != 0. The order inside follows the vector
// width of the clone that runs (8 double lanes with AVX-512), fixed for a given machine.
CPU_SIMD_CLONES static double cpu_reduce_span(const float *x, size_t n, int squares) {
    double s = 0.0;
    if (squares) {
#pragma omp simd reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    } else {
#pragma omp simd reduction(+ : s)
        for (size_t i = 0; i < n; i++) s += (double)x[i];
    }
    return s;
}

// Sum over chunks of f(x) in double; squares != 0 sums x^2, else x.
static double cpu_reduce(Backend *be, const float *x, size_t n, int squares) {
    double part[CPU_SUM_CHUNKS];
    size_t chunk = (n + CPU_SUM_CHUNKS - 1) / CPU_SUM_CHUNKS;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if (n > CPU_PAR_MIN)
    for (int c = 0; c < CPU_SUM_CHUNKS; c++) {
        size_t i0 = c * chunk < n ? c * chunk : n, i1 = i0 + chunk < n ? i0 + chunk : n;
        part[c] = cpu_reduce_span(x + i0, i1 - i0, squares);
    }
    double total = 0.0;
    for (int c = 0; c < CPU_SUM_CHUNKS; c++) total += part[c];
    return total;
}

// Sum of x[i] in double.
// Sum of x in double: returned (acc NULL) or added to acc[0] (then 0 is returned).
double cpu_sum(Backend *be, double *acc, const float *x, size_t n) {
    double s = cpu_reduce(be, x, n, 0);
    if (!acc) return s;
    acc[0] += s;
    return 0.0;
}

// AdamW on every segment of segs (host memory for this backend) in one OpenMP region; bias
// corrections in double. The segments' spans are numbered in order and each thread takes a
// contiguous range of them (an element's arithmetic does not depend on the split). The loop
// is memory-bound (7 floats of traffic per element) once vectorised. A copy gets the updated
// parameters rounded to be->act (as they are with fp32).
void cpu_adamw_multi(Backend *be, float *param, void *copy, const float *grad, float *m, float *v,
                     const BackendSegment *segs, int nseg, size_t max_len, float lr,
                     float beta1, float beta2, float eps, float wd, float grad_scale, int step) {
    float bc1 = (float)(1.0 - pow((double)beta1, (double)step));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)step));
    size_t total = 0, elems = 0;
    for (int s = 0; s < nseg; s++) {
        total += (segs[s].len + CPU_ADAMW_SPAN - 1) / CPU_ADAMW_SPAN;
        elems += segs[s].len;
    }
    int nt = cpu_nt(be);
    BackendDType act = be->act;
#pragma omp parallel num_threads(nt) if (elems > CPU_PAR_MIN)
    {
        size_t me = (size_t)omp_get_thread_num(), team = (size_t)omp_get_num_threads();
        size_t g0 = total * me / team, g1 = total * (me + 1) / team, g = 0;  // my spans
        for (int s = 0; s < nseg && g < g1; s++) {
            size_t len = segs[s].len, ns = (len + CPU_ADAMW_SPAN - 1) / CPU_ADAMW_SPAN;
            size_t k0 = g0 > g ? g0 - g : 0, k1 = g1 - g < ns ? g1 - g : ns, b = segs[s].begin;
            float swd = segs[s].weight_decay ? wd : 0.0f;
            for (size_t k = k0; k < k1; k++) {
                size_t i0 = k * CPU_ADAMW_SPAN, n = len - i0 < CPU_ADAMW_SPAN ? len - i0 : CPU_ADAMW_SPAN;
                cpu_adamw_span(param + b + i0, grad + b + i0, m + b + i0, v + b + i0, n, lr,
                               beta1, beta2, eps, swd, grad_scale, bc1, bc2);
                if (copy && act == BACKEND_F32)
                    memcpy((float *)copy + b + i0, param + b + i0, n * sizeof(float));
                else if (copy)
                    for (size_t i = b + i0; i < b + i0 + n; i++) cpu_store(copy, act, i, param[i]);
            }
            g += ns;
        }
    }
}

// Sum of x^2 over the segments (NaN/Inf propagate), each segment summed in double over a
// fixed number of chunks (cpu_reduce), the segments added in order.
double cpu_sum_squares_multi(Backend *be, const float *x, const BackendSegment *segs, int nseg,
                             size_t max_len) {
    double total = 0.0;
    for (int s = 0; s < nseg; s++) total += cpu_reduce(be, x + segs[s].begin, segs[s].len, 1);
    return total;
}

void cpu_optim_ops(BackendOps *t, BackendDType act) {
    (void)act;  // the same ops for every activation type
    t->adamw_multi = cpu_adamw_multi;
    t->sum_squares_multi = cpu_sum_squares_multi;
    t->sum = cpu_sum;
}

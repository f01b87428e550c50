// tests/backend/backend_ref_ops.h: the arithmetic of three ops the Backend dropped (they
// served only tests and benchmarks), written with the entries that remain, so the op tests
// keep checking that arithmetic on every backend (header only; buffers in the backend's
// memory, activations of type be->act):
//   ref_gelu_backward: matmul_backward_dgelu of an (n, 1) x (1, 1) linear of weight 1; the
//     product is exact, so dinp = gelu'(inp) * dout: on the CPU the span the fused op runs,
//     on CUDA the gelu_backward kernel (C = 1 is off the DGELU epilogue: its unfused path)
//   ref_adamw: adamw_multi on one segment {0, n} (an element's arithmetic does not depend
//     on the segments)
//   ref_sum_squares: sum_squares_multi on one segment {0, n}
#pragma once
#include "backend/backend.h"

#include <stddef.h>

// A one-segment table {0, n} with weight decay flag wd in be's memory (free with ops->free).
static inline BackendSegment *ref_one_segment(Backend *be, size_t n, int wd) {
    BackendSegment s = {0, n, wd, 0}, *d = be->ops->alloc(be, sizeof s);
    be->ops->copy(be, d, &s, sizeof s, BACKEND_H2D);
    return d;
}

// dinp (n) = gelu'(inp) * dout; dinp may alias dout (then dout is copied first).
static inline void ref_gelu_backward(Backend *be, void *dinp, const void *inp, const void *dout,
                                      size_t n) {
    size_t es = backend_dtype_size(be->act);
    float one = 1.0f, *w32 = be->ops->alloc(be, sizeof one);
    void *w = be->ops->alloc(be, es), *tmp = NULL;
    be->ops->copy(be, w32, &one, sizeof one, BACKEND_H2D);
    be->ops->cast(be, w, be->act, w32, BACKEND_F32, 1);
    if (dinp == dout) {  // the GEMM reads dout while it writes dinp
        tmp = be->ops->alloc(be, n * es);
        be->ops->copy(be, tmp, dout, n * es, BACKEND_D2D);
        dout = tmp;
    }
    be->ops->matmul_backward_dgelu(be, dinp, NULL, NULL, dout, NULL, w, inp, (int)n, 1, 1);
    be->ops->sync(be);
    be->ops->free(be, w32), be->ops->free(be, w), be->ops->free(be, tmp);
}

// AdamW (backend.h's formula) on param, grad, m, v (n, fp32).
static inline void ref_adamw(Backend *be, float *param, const float *grad, float *m, float *v,
                              size_t n, float lr, float beta1, float beta2, float eps, float wd,
                              float grad_scale, int step) {
    if (n == 0) return;
    BackendSegment *seg = ref_one_segment(be, n, 1);
    be->ops->adamw_multi(be, param, NULL, grad, m, v, seg, 1, n, lr, beta1, beta2, eps, wd,
                         grad_scale, step);
    be->ops->sync(be);
    be->ops->free(be, seg);
}

// Sum of x[i]^2 (n, fp32) in double, on the host.
static inline double ref_sum_squares(Backend *be, const float *x, size_t n) {
    BackendSegment *seg = ref_one_segment(be, n, 0);
    double s = be->ops->sum_squares_multi(be, x, seg, 1, n);
    be->ops->free(be, seg);
    return s;
}

// tests/backend/backend_ref_ops.h: the arithmetic of ops the Backend dropped (they
// served only tests and benchmarks), written with the entries that remain, so the op tests
// keep checking that arithmetic on every backend (header only; buffers in the backend's
// memory, activations of type be->act):
//   ref_gelu_backward: act_backward with GELU, the span and kernel the fused op's epilogue
//     and its unfused path run
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

// dinp (n) = gelu'(inp) * dout; dinp may alias dout: act_backward, pointwise GELU.
static inline void ref_gelu_backward(Backend *be, void *dinp, const void *inp, const void *dout,
                                      size_t n) {
    be->ops->act_backward(be, dinp, inp, dout, 1, (int)n, BACKEND_ACT_GELU);
    be->ops->sync(be);
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

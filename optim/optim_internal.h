// optim/optim_internal.h: what optimizer.c and optim_offload.c share (not for other modules).
#pragma once
#include "optimizer.h"

// One AdamW step's scalars: the config, the learning rates (lr_dec: --decoupled-lr's, equal
// to lr for none), the gradient scale (clipping, loss scale) and the step count (from 1).
typedef struct {
    const AdamWConfig *cfg;
    double lr, lr_dec, grad_scale;
    int step;
} OptimStepArgs;

// AdamW on backend be over the n segments of table (be's memory; the last nd are --decoupled-
// lr's, run with a->lr_dec when it differs from a->lr; max_len >= every length) of params,
// copy (NULL or indexed as params), grads, m and v: one adamw_multi per learning rate.
// Asynchronous on CUDA.
void optim_adamw_groups(Backend *be, float *params, void *copy, const float *grads, float *m, float *v,
                        const BackendSegment *table, int n, int nd, size_t max_len,
                        const OptimStepArgs *a);
// The offloaded part's step (slice floats [0, o->host_len) of params and grads, the slice's
// device buffers): down, AdamW on the host, back up. Returns when the device holds the
// updated values (the copies up are queued before anything that follows on the stream).
void optim_offload_update(Optimizer *o, float *params, const float *grads, const OptimStepArgs *a);
// Frees the offload's state (nothing without one).
void optim_offload_destroy(Optimizer *o);

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
// The offloaded part's step, in two halves around the device part's launch: its gradients
// (slice floats [0, o->host_len) of the slice's device grads) copied down, waiting for the
// device (with the overlap: those the buckets' hooks did not send, queued on the copy stream,
// which the second half waits for first); then AdamW on the host (its masters in host memory) and the masters (and weight
// copies) queued up into params (DDP / ZeRO-1: the slice's device parameters; ZeRO-2/3:
// unused, unit by unit where the engine keeps them) behind the device's work.
void optim_offload_grads_down(Optimizer *o, const float *grads);
void optim_offload_step(Optimizer *o, float *params, const OptimStepArgs *a);
// Frees the offload's state (nothing without one).
void optim_offload_destroy(Optimizer *o);

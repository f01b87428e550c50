// optim/optim_offload.c: Megatron-Core's --optimizer-cpu-offload for DDP and ZeRO-1 (see
// optim_set_offload): the first --optimizer-offload-fraction of this rank's slice is updated
// on the host by the CPU backend's AdamW, its moments in pinned host memory only.
//
// Bitwise: the CPU AdamW (cpu_optim.c's cpu_adamw_span) and the CUDA one (optim.cuh's
// adamw_element) are the same sequence of IEEE fp32 operations per element (no FMA
// contraction: ISO C on the host; nvcc needs -fmad=false for the same on a GPU, not yet
// checked on one), with the bias corrections computed alike on the host in double, and both
// round the weight copies to nearest-even: an element updated on either side gets the same
// bits, so the run is bitwise the run without offload (tests/train/offload.py).
//
// Not overlapped yet: the step waits for the device (the gradients' copy down), runs the host
// part, then queues the copies up; --overlap-cpu-optimizer-d2h-h2d is accepted and changes
// nothing (docs/offload.md).
#include "optim_internal.h"
#include "core/check.h"

#include <math.h>    // defines: ceil
#include <stdlib.h>  // defines: free
#include <string.h>  // defines: memcpy

#define OFFLOAD_ALIGN 16  // floats: the split point's granularity (as the slices' padding)

struct OptimHost {
    Backend *cpu;           // the CPU backend whose AdamW updates the host part
    float *param, *grad;    // (host_len) pinned staging: masters down and up, gradients down
    float *m, *v;           // (host_len) the host part's moments (pinned; not on the device)
    void *copy;             // (host_len, be->act) the weight copies AdamW writes, or NULL
    BackendSegment *table;  // (n) the host part's segments (host memory), decoupled last
    int n, ndec;            // entries, of which the last ndec are --decoupled-lr's
    size_t max_len;         // the longest entry
};

// The segments of o->segs inside slice floats [lo, hi), cut to it and relative to lo, into
// out (room for o->n_segs + 1), the --decoupled-lr ones last, each kind in slice order (as
// build_tables); *ndec: how many are decoupled. Returns the count. Pure.
static int cut_segments(const Optimizer *o, size_t lo, size_t hi, BackendSegment *out, int *ndec) {
    int n = 0;
    *ndec = 0;
    for (int pass = 0; pass < 2; pass++)  // plain, then decoupled
        for (int i = 0; i < o->n_segs; i++) {
            const OptSegment *g = &o->segs[i];
            size_t b = g->at > lo ? g->at : lo, e = g->at + g->len < hi ? g->at + g->len : hi;
            if (g->decoupled != pass || b >= e) continue;
            out[n++] = (BackendSegment){b - lo, e - b, g->weight_decay, 0};
            *ndec += pass;
        }
    return n;
}

// The device part's table rewritten for slice floats [h, shard_len), its moments reallocated
// for those only.
static void shrink_device_part(Optimizer *o, size_t h) {
    Backend *be = o->be;
    size_t room = ((size_t)o->n_segs + 2) * sizeof(BackendSegment), d = o->shard_len - h;
    BackendSegment *dev = core_calloc((size_t)o->n_segs + 2, sizeof *dev);
    o->n_dev_segs = cut_segments(o, h, o->shard_len, dev, &o->unit_ndec[0]);
    be->ops->copy(be, o->update_table, dev, room, BACKEND_H2D);
    free(dev);
    be->ops->free(be, o->m);
    be->ops->free(be, o->v);
    o->m = d ? be->ops->alloc(be, d * sizeof(float)) : NULL;
    o->v = d ? be->ops->alloc(be, d * sizeof(float)) : NULL;
}

void optim_set_offload(Optimizer *o, double fraction, int threads) {
    if (o->unit_seg) core_fatal("--optimizer-cpu-offload: ZeRO-2/3 are not supported yet");
    Backend *be = o->be;
    size_t h = (size_t)ceil(fraction * (double)o->shard_len / OFFLOAD_ALIGN) * OFFLOAD_ALIGN;
    if (h > o->shard_len) h = o->shard_len;
    if (h == 0) return;
    struct OptimHost *x = core_calloc(1, sizeof *x);
    x->cpu = backend_cpu_create(threads, be->act);  // (rounds the copies as be->act)
    x->table = core_calloc((size_t)o->n_segs + 2, sizeof *x->table);
    x->n = cut_segments(o, 0, h, x->table, &x->ndec);
    for (int i = 0; i < x->n; i++)
        if (x->table[i].len > x->max_len) x->max_len = x->table[i].len;
    x->param = be->ops->alloc_host(be, h * sizeof(float));
    x->grad = be->ops->alloc_host(be, h * sizeof(float));
    x->m = be->ops->alloc_host(be, h * sizeof(float));
    x->v = be->ops->alloc_host(be, h * sizeof(float));
    if (o->copy) x->copy = be->ops->alloc_host(be, h * backend_dtype_size(be->act));
    shrink_device_part(o, h);
    o->host_len = h;
    o->host = x;
}

void optim_offload_update(Optimizer *o, float *params, const float *grads, const OptimStepArgs *a) {
    struct OptimHost *x = o->host;
    Backend *be = o->be;
    size_t bytes = o->host_len * sizeof(float);
    be->ops->copy(be, x->grad, grads, bytes, BACKEND_D2H);  // (waits for the stream)
    be->ops->copy(be, x->param, params, bytes, BACKEND_D2H);
    optim_adamw_groups(x->cpu, x->param, x->copy, x->grad, x->m, x->v, x->table, x->n, x->ndec,
                       x->max_len, a);
    be->ops->copy(be, params, x->param, bytes, BACKEND_H2D);
    if (x->copy) be->ops->copy(be, o->copy, x->copy, o->host_len * backend_dtype_size(be->act), BACKEND_H2D);
}

void optim_offload_destroy(Optimizer *o) {
    struct OptimHost *x = o->host;
    if (!x) return;
    Backend *be = o->be;
    be->ops->free_host(be, x->param);
    be->ops->free_host(be, x->grad);
    be->ops->free_host(be, x->m);
    be->ops->free_host(be, x->v);
    be->ops->free_host(be, x->copy);
    backend_destroy(x->cpu);
    free(x->table);
    free(x);
    o->host = NULL;
}

void optim_moments_read(const Optimizer *o, float *hm, float *hv) {
    size_t h = o->host_len, d = o->shard_len - h;
    if (h) {
        memcpy(hm, o->host->m, h * sizeof(float));
        memcpy(hv, o->host->v, h * sizeof(float));
    }
    if (d) {
        o->be->ops->copy(o->be, hm + h, o->m, d * sizeof(float), BACKEND_D2H);
        o->be->ops->copy(o->be, hv + h, o->v, d * sizeof(float), BACKEND_D2H);
    }
}

void optim_moments_write(const Optimizer *o, const float *hm, const float *hv) {
    size_t h = o->host_len, d = o->shard_len - h;
    if (h) {
        memcpy(o->host->m, hm, h * sizeof(float));
        memcpy(o->host->v, hv, h * sizeof(float));
    }
    if (d) {
        o->be->ops->copy(o->be, o->m, hm + h, d * sizeof(float), BACKEND_H2D);
        o->be->ops->copy(o->be, o->v, hv + h, d * sizeof(float), BACKEND_H2D);
    }
    o->be->ops->sync(o->be);
}

size_t optim_host_state_bytes(const Optimizer *o) {
    if (!o->host) return 0;
    size_t es = o->host->copy ? backend_dtype_size(o->be->act) : 0;
    return o->host_len * (4 * sizeof(float) + es);  // moments, masters, gradients, copies
}

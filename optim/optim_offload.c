// optim/optim_offload.c: Megatron-Core's --optimizer-cpu-offload (see optim_set_offload): the
// first --optimizer-offload-fraction of this rank's slice is updated on the host by the CPU
// backend's AdamW, its moments in pinned host memory only. DDP / ZeRO-1 update the slice as
// one range; ZeRO-2/3 unit by unit (each unit's parameters where the engine keeps them), so a
// unit may be split between host and device.
//
// Bitwise: the CPU AdamW (cpu_optim.c's cpu_adamw_span) and the CUDA one (optim.cuh's
// adamw_element) are the same sequence of IEEE fp32 operations per element (no FMA
// contraction: ISO C on the host; nvcc needs -fmad=false for the same on a GPU, not yet
// checked on one), with the bias corrections computed alike on the host in double, and both
// round the weight copies to nearest-even: an element updated on either side gets the same
// bits, so the run is bitwise the run without offload (tests/train/offload.py).
//
// The host part's fp32 masters are kept in pinned host memory between steps (read from the
// device at set-up and after a checkpoint load: optim_reload_masters), so a step moves the
// gradients down and the masters (and copies) up. The device keeps its fp32 parameters too:
// they are the model's weights in fp32 and the gathers' input.
//
// Order in a step (optimizer.c's update): the host part's gradients come down (waiting for
// the reductions), the device part's AdamW is launched, the host AdamW runs meanwhile, then
// the masters go up behind the device's kernel on its stream.
//
// With --overlap-cpu-optimizer-d2h-h2d (optim_set_offload_overlap) the copies run on the
// backend's copy stream (copy_async): DDP / ZeRO-1 with buckets, each bucket's host-part
// gradients go down as soon as the engine has reduced it (its grad_ready hook: an event after
// the reduction on the compute stream, no host wait), overlapping the later buckets'
// reductions (and, with --overlap-grad-reduce, the rest of the backward); otherwise (ZeRO-2/3,
// one rank) they all go down at the step. The host waits for the copy stream only before its
// AdamW (after the norm and the loss-scale check, which read the device's gradients); the
// masters (and copies) go up on the copy stream too, and the compute stream waits for them by
// an event before the parameter gather. The same bytes move: bitwise the run without.
#include "optim_internal.h"
#include "core/check.h"
#include "distributed/dist_geometry.h"  // defines: dist_offload_host_len, dist_offload_bytes

#include <stdlib.h>  // defines: free
#include <string.h>  // defines: memcpy

struct OptimHost {
    Backend *cpu;           // the CPU backend whose AdamW updates the host part
    float *param;           // (host_len) the host part's fp32 masters, pinned: read from the
                            // device at set-up and after a load, updated here, copied up
    float *grad;            // (host_len) pinned staging of the gradients coming down
    float *m, *v;           // (host_len) the host part's moments (pinned; not on the device)
    void *copy;             // (host_len, be->act) the weight copies AdamW writes, or NULL
    BackendSegment *table;  // (n) the host part's segments (host memory), decoupled last
    int n, ndec;            // entries, of which the last ndec are --decoupled-lr's
    size_t max_len;         // the longest entry
    int overlap;            // --overlap-cpu-optimizer-d2h-h2d: copies on the copy stream
    int per_bucket;         // overlap: the buckets' pieces tile [0, host_len), each sent down
                            // by its grad_ready hook (else all sent at the step)
};

// The host part's floats from slice float lo up to hi, moved between the device at dev (slice
// float lo) and the host at host (the same): on the copy stream with the overlap, else
// synchronously (a copy down waits for the device).
static void move(const Optimizer *o, float *host, float *dev, size_t lo, size_t hi, BackendCopyKind kind) {
    Backend *be = o->be;
    if (hi > o->host_len) hi = o->host_len;
    if (lo >= hi) return;
    size_t bytes = (hi - lo) * sizeof(float);
    void *dst = kind == BACKEND_D2H ? (void *)host : (void *)dev;
    const void *src = kind == BACKEND_D2H ? (const void *)dev : (const void *)host;
    if (o->host->overlap) be->ops->copy_async(be, dst, src, bytes, kind);
    else be->ops->copy(be, dst, src, bytes, kind);
}

// Segments i0..i1-1 of o->segs inside slice floats [lo, hi), cut to it and relative to lo,
// into out, the --decoupled-lr ones last, each kind in slice order (as build_tables); *ndec:
// how many are decoupled. Returns the count. Pure.
static int cut_segments(const Optimizer *o, int i0, int i1, size_t lo, size_t hi, BackendSegment *out,
                        int *ndec) {
    int n = 0;
    *ndec = 0;
    for (int pass = 0; pass < 2; pass++)  // plain, then decoupled
        for (int i = i0; i < i1; i++) {
            const OptSegment *g = &o->segs[i];
            size_t b = g->at > lo ? g->at : lo, e = g->at + g->len < hi ? g->at + g->len : hi;
            if (g->decoupled != pass || b >= e) continue;
            out[n++] = (BackendSegment){b - lo, e - b, g->weight_decay, 0};
            *ndec += pass;
        }
    return n;
}

// The units (ZeRO-2/3), or the whole slice as one. Pure.
static int n_units(const Optimizer *o) { return o->unit_seg ? o->sync->n_buckets : 1; }

// The device part's table rewritten for slice floats [h, shard_len): unit k's segments cut to
// its part from max(at, h), relative to that; the moments reallocated for those floats only
// (ZeRO-2/3: one more, as optim_create's).
static void shrink_device_part(Optimizer *o, size_t h) {
    Backend *be = o->be;
    const DistSync *s = o->sync;
    size_t room = ((size_t)o->n_segs + 2) * sizeof(BackendSegment);
    size_t d = o->shard_len - h + (o->sharding >= OPTIM_SHARD_GRADS);
    BackendSegment *dev = core_calloc((size_t)o->n_segs + 2, sizeof *dev);
    int n = 0;
    for (int k = 0; k < n_units(o); k++) {
        int i0 = o->unit_seg ? o->unit_seg[k] : 0, i1 = o->unit_seg ? o->unit_seg[k + 1] : o->n_segs;
        size_t at = o->unit_seg ? s->buckets[k].at : 0;
        o->dev_seg[k] = n;
        n += cut_segments(o, i0, i1, at > h ? at : h, o->shard_len, dev + n, &o->unit_ndec[k]);
    }
    o->dev_seg[n_units(o)] = n;
    be->ops->copy(be, o->update_table, dev, room, BACKEND_H2D);
    free(dev);
    be->ops->free(be, o->m);
    be->ops->free(be, o->v);
    o->m = d ? be->ops->alloc(be, d * sizeof(float)) : NULL;
    o->v = d ? be->ops->alloc(be, d * sizeof(float)) : NULL;
}

// The host part's masters between the device and x->param (slice-indexed). With params: one
// range there (DDP: the flat buffer; ZeRO-1 in a step: the packed slice the gather reads).
// Without (NULL): piece by piece, each unit's (ZeRO-1: bucket's) owned floats below host_len
// where the engine keeps them (dist_sync_unit_params: ZeRO-1/2 the flat buffer's piece, ZeRO-3
// the master shard's). Copies down wait for the device.
static void move_masters(const Optimizer *o, float *params, BackendCopyKind kind) {
    if (o->master_host) return;  // --offload-params: x->param is the engine's shard
    DistSync *s = o->sync;
    float *host = o->host->param;
    size_t h = o->host_len;
    for (int k = 0; k < (params ? 1 : s->n_buckets); k++) {
        size_t at = params ? 0 : s->buckets[k].at, own = params ? o->shard_len : s->buckets[k].own;
        if (at >= h || own == 0) continue;
        size_t bytes = (h - at < own ? h - at : own) * sizeof(float);
        float *dev = params ? params : dist_sync_unit_params(s, k);
        if (kind == BACKEND_D2H) o->be->ops->copy(o->be, host + at, dev, bytes, BACKEND_D2H);
        else move(o, host + at, dev, at, at + bytes / sizeof(float), BACKEND_H2D);
    }
}

void optim_reload_masters(const Optimizer *o) {
    if (o->host) move_masters(o, o->sync->sharded ? NULL : o->sync->m->param_mem, BACKEND_D2H);
}

// The host part's masters: pinned host memory of its own, or with --offload-params the
// engine's master shard (then the host part must be the whole slice).
static float *host_masters(const Optimizer *o, size_t h) {
    if (!o->master_host) return o->be->ops->alloc_host(o->be, h * sizeof(float));
    if (h != o->shard_len)
        core_fatal("--offload-params needs --optimizer-offload-fraction 1 (host part %zu of %zu floats)",
                   h, o->shard_len);
    return o->master;
}

void optim_offload_params(Optimizer *o) {
    dist_sync_offload_params(o->sync);
    o->master = o->sync->master;
    o->master_host = 1;
}

void optim_set_offload(Optimizer *o, double fraction, int threads) {
    Backend *be = o->be;
    size_t h = dist_offload_host_len(o->shard_len, fraction);  // (megac plan counts the same)
    if (h == 0) return;
    struct OptimHost *x = core_calloc(1, sizeof *x);
    x->cpu = backend_cpu_create(threads, be->act);  // (rounds the copies as be->act)
    x->table = core_calloc((size_t)o->n_segs + 2, sizeof *x->table);
    x->n = cut_segments(o, 0, o->n_segs, 0, h, x->table, &x->ndec);
    for (int i = 0; i < x->n; i++)
        if (x->table[i].len > x->max_len) x->max_len = x->table[i].len;
    x->param = host_masters(o, h);
    x->grad = be->ops->alloc_host(be, h * sizeof(float));
    x->m = be->ops->alloc_host(be, h * sizeof(float));
    x->v = be->ops->alloc_host(be, h * sizeof(float));
    if (o->copy) x->copy = be->ops->alloc_host(be, h * backend_dtype_size(be->act));
    shrink_device_part(o, h);
    o->host_len = h;
    o->host = x;
    optim_reload_masters(o);  // (the model's initial weights)
}

// Slice floats [*lo, *hi) of bucket k (stages 0-1: its piece of the shard, or its range of
// the flat buffer). Pure.
static void bucket_span(const DistSync *s, int k, size_t *lo, size_t *hi) {
    const DistSyncBucket *b = &s->buckets[k];
    *lo = s->sharded ? b->at : b->start;
    *hi = *lo + (s->sharded ? b->per : b->len);
}

// The engine's grad_ready hook: bucket k's host-part gradients down on the copy stream.
static void bucket_down(void *ctx, int k) {
    Optimizer *o = ctx;
    size_t lo, hi;
    bucket_span(o->sync, k, &lo, &hi);
    move(o, o->host->grad + lo, dist_sync_shard_grads(o->sync) + lo, lo, hi, BACKEND_D2H);
}

void optim_set_offload_overlap(Optimizer *o) {
    struct OptimHost *x = o->host;
    DistSync *s = o->sync;
    if (!x) return;
    x->overlap = 1;
    if (o->unit_seg || s->n_buckets == 0) return;  // (ZeRO-2/3, one rank: at the step)
    size_t covered = 0, lo, hi;  // the buckets' pieces below host_len, disjoint
    for (int k = 0; k < s->n_buckets; k++) {
        bucket_span(s, k, &lo, &hi);
        if (lo < o->host_len) covered += (hi < o->host_len ? hi : o->host_len) - lo;
    }
    if (covered != o->host_len) return;
    x->per_bucket = 1;
    s->grad_ready = bucket_down;
    s->grad_ready_ctx = o;
}

void optim_offload_grads_down(Optimizer *o, const float *grads) {
    struct OptimHost *x = o->host;
    if (!x->per_bucket) move(o, x->grad, (float *)grads, 0, o->host_len, BACKEND_D2H);
}

void optim_offload_step(Optimizer *o, float *params, const OptimStepArgs *a) {
    struct OptimHost *x = o->host;
    Backend *be = o->be;
    // the gradients down (overlapped), and --offload-params' copies up of the shard updated
    // below (a no-op before any copy_async); the device's AdamW runs on
    be->ops->copy_join(be, 1);
    optim_adamw_groups(x->cpu, x->param, x->copy, x->grad, x->m, x->v, x->table, x->n, x->ndec,
                       x->max_len, a);  // (x->param: the host part's masters, current)
    move_masters(o, o->unit_seg ? NULL : params, BACKEND_H2D);
    size_t cb = o->host_len * backend_dtype_size(be->act);
    if (x->copy && x->overlap) be->ops->copy_async(be, o->copy, x->copy, cb, BACKEND_H2D);
    else if (x->copy) be->ops->copy(be, o->copy, x->copy, cb, BACKEND_H2D);
    if (x->overlap) be->ops->copy_join(be, 0);  // the gathers and the forward after them
}

void optim_offload_destroy(Optimizer *o) {
    struct OptimHost *x = o->host;
    if (!x) return;
    Backend *be = o->be;
    if (!o->master_host) be->ops->free_host(be, x->param);  // (else the engine's)
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
    return dist_offload_bytes(o->host_len, es).host;  // moments, masters, gradients, copies
}

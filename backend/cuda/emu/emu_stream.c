// backend/cuda/emu/emu_stream.c: the CPU emulator's CUDA streams and events (the model is in
// emu_runtime.c: everything is synchronous). Streams and events are plain objects with a
// magic word (a destroyed or foreign handle is cudaErrorInvalidValue) and a trace number;
// queries always succeed, events record CLOCK_MONOTONIC, and with env MEGAC_EMU_TRACE each
// stream operation is traced in issue order (emu_trace.c).
#include "emu_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define STREAM_MAGIC 0x53747231u
#define EVENT_MAGIC 0x45767431u
struct CUstream_st {
    unsigned magic, flags;
    int id;  // the trace's number (from 1)
};
struct CUevent_st {
    unsigned magic, flags;
    int id;  // the trace's number (from 1)
    int recorded;
    struct timespec when;
};

// 1 if s is the default stream or a live stream.
static int stream_ok(cudaStream_t s) { return !s || s->magic == STREAM_MAGIC; }
static int event_ok(cudaEvent_t e) { return e && e->magic == EVENT_MAGIC; }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
    if (!pStream) return emu_fail(cudaErrorInvalidValue);
    struct CUstream_st *s = malloc(sizeof *s);
    if (!s) return emu_fail(cudaErrorMemoryAllocation);
    static atomic_int n_streams;
    *s = (struct CUstream_st){STREAM_MAGIC, flags, atomic_fetch_add(&n_streams, 1) + 1};
    *pStream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *p) { return cudaStreamCreateWithFlags(p, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream || !stream_ok(stream)) return emu_fail(cudaErrorInvalidValue);
    stream->magic = 0;
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (!stream_ok(stream)) return emu_fail(cudaErrorInvalidValue);
    emu_trace(emu_stream_id(stream), "sync", "stream");
    return cudaSuccess;
}

int emu_stream_id(cudaStream_t s) { return s && stream_ok(s) ? s->id : 0; }

// (Traced as a sync: megac's cuda_wait polls it to wait.)
cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    (void)flags;
    if (!stream_ok(stream) || !event_ok(event)) return emu_fail(cudaErrorInvalidValue);
    emu_trace(emu_stream_id(stream), "wait", "e%d", event->id);
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    if (!event) return emu_fail(cudaErrorInvalidValue);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return emu_fail(cudaErrorMemoryAllocation);
    static atomic_int n_events;
    e->magic = EVENT_MAGIC;
    e->flags = flags;
    e->id = atomic_fetch_add(&n_events, 1) + 1;
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event_ok(event) || !stream_ok(stream)) return emu_fail(cudaErrorInvalidValue);
    emu_trace(emu_stream_id(stream), "record", "e%d", event->id);
    clock_gettime(CLOCK_MONOTONIC, &event->when);
    event->recorded = 1;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event_ok(event)) return emu_fail(cudaErrorInvalidValue);
    emu_trace(-1, "sync", "event e%d", event->id);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event_ok(event)) return emu_fail(cudaErrorInvalidValue);
    emu_trace(-1, "query", "e%d", event->id);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms || !event_ok(start) || !event_ok(end)) return emu_fail(cudaErrorInvalidValue);
    if ((start->flags | end->flags) & cudaEventDisableTiming) return emu_fail(cudaErrorInvalidValue);
    if (!start->recorded || !end->recorded) return emu_fail(cudaErrorNotReady);
    *ms = (float)((double)(end->when.tv_sec - start->when.tv_sec) * 1e3 +
                  (double)(end->when.tv_nsec - start->when.tv_nsec) * 1e-6);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event_ok(event)) return emu_fail(cudaErrorInvalidValue);
    event->magic = 0;
    free(event);
    return cudaSuccess;
}

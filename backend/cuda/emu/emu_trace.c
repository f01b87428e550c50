// backend/cuda/emu/emu_trace.c: the emulator's optional trace of stream operations, for tests
// that check how work is ordered across streams (the emulator itself runs everything at once,
// so the order of issue is all there is to see).
//
// env MEGAC_EMU_TRACE=PATH: every stream operation appends one line to PATH ("%p" in it is
// replaced by the process id, one file per rank):
//     SEQ s<STREAM> <kind> <detail>
// SEQ counts from 1 in issue order; STREAM is the stream's number (0: the default stream, then
// 1, 2, ... in creation order; "-" for none); kind and detail:
//     kernel NAME              a kernel launch (NAME: the kernel; cublasLtMatmul for GEMMs)
//     memcpy D2H|H2D|D2D|H2H BYTES   cudaMemcpyAsync   (memcpy-sync: cudaMemcpy, stream -)
//     memset BYTES             cudaMemsetAsync
//     nccl CALL                an NCCL collective or point-to-point call
//     record e<EVENT>          cudaEventRecord (events numbered from 1 in creation order)
//     wait e<EVENT>            cudaStreamWaitEvent: the stream's later work waits for it
//     sync stream|event|device  a host synchronisation (cudaStreamSynchronize, cudaStreamQuery,
//                              which megac polls to wait; cudaEventSynchronize; cudaDeviceSynchronize)
//     query e<EVENT>           cudaEventQuery (a test, no wait)
// Unset: nothing is written (one getenv at the first operation).
#include "emu_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *trace_file;
static int trace_state;  // 0: not looked at yet, 1: tracing, -1: off
static unsigned long trace_seq;

// Opens the trace file named by MEGAC_EMU_TRACE (under trace_lock). Fatal when it cannot.
static void trace_open(void) {
    const char *v = getenv("MEGAC_EMU_TRACE");
    trace_state = -1;
    if (!v || !*v) return;
    char path[4096];
    const char *p = strstr(v, "%p");
    if (p) snprintf(path, sizeof path, "%.*s%ld%s", (int)(p - v), v, (long)getpid(), p + 2);
    else snprintf(path, sizeof path, "%s", v);
    trace_file = fopen(path, "w");
    if (!trace_file) {
        fprintf(stderr, "cuda emulator: cannot write MEGAC_EMU_TRACE file %s\n", path);
        exit(1);
    }
    trace_state = 1;
}

void emu_trace(int stream, const char *kind, const char *fmt, ...) {
    if (trace_state < 0) return;
    pthread_mutex_lock(&trace_lock);
    if (trace_state == 0) trace_open();
    if (trace_state > 0) {
        if (stream >= 0) fprintf(trace_file, "%lu s%d %s ", ++trace_seq, stream, kind);
        else fprintf(trace_file, "%lu s- %s ", ++trace_seq, kind);
        va_list ap;
        va_start(ap, fmt);
        vfprintf(trace_file, fmt, ap);
        va_end(ap);
        fputc('\n', trace_file);
        fflush(trace_file);
    }
    pthread_mutex_unlock(&trace_lock);
}

void emu_trace_launch(cudaStream_t stream, const char *name) {
    if (trace_state >= 0) emu_trace(emu_stream_id(stream), "kernel", "%s", name);
}

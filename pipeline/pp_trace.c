// pipeline/pp_trace.c: the step timeline recorder (Chrome trace-event JSON) and the
// measured pipeline bubble. Nothing here allocates after pp_trace_create, except the
// writing and merging at the end of the run.
#include "pp_trace.h"
#include "core/check.h"
#include "core/timer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[PP_EV_NKINDS] = {
    "forward", "backward", "recv_forward", "send_forward", "recv_backward", "send_backward",
    "send_forward_recv_backward", "send_backward_recv_forward", "grad_sync", "optimizer", "step",
    "send_forward_recv_forward", "send_backward_recv_backward", "grad_bucket",
    "param_gather",
};

const char *pp_trace_kind_name(PPEventKind kind) {
    return kind >= 0 && kind < PP_EV_NKINDS ? kind_names[kind] : "?";
}

PPTrace *pp_trace_create(Comm *world, size_t cap) {
    PPTrace *tr = core_calloc(1, sizeof *tr);
    tr->cap = cap;
    tr->chunk = -1;
    if (cap) tr->events = core_calloc(cap, sizeof *tr->events);
    comm_barrier(world);
    tr->epoch = core_now();
    return tr;
}

void pp_trace_destroy(PPTrace *tr) {
    if (!tr) return;
    free(tr->events);
    free(tr);
}

double pp_trace_begin(const PPTrace *tr) { return tr ? core_now() - tr->epoch : 0.0; }

// Stores one event (times since the epoch), or counts it as dropped when the buffer is full.
static void store(PPTrace *tr, PPEventKind kind, int micro, double t0, double t1) {
    if (tr->n < tr->cap) {
        tr->events[tr->n++] = (PPEvent){t0, t1, micro, (int)kind, tr->chunk};
    } else if (tr->cap && tr->dropped++ == 0) {
        fprintf(stderr, "[rank %d] megac: trace buffer full (%zu events): later events are dropped\n",
                core_world_rank(), tr->cap);
    }
}

void pp_trace_end(PPTrace *tr, PPEventKind kind, int micro, double t0) {
    if (!tr) return;
    if (tr->sync) tr->sync(tr->sync_ctx);
    double t1 = core_now() - tr->epoch;
    if (tr->in_step && (kind == PP_EV_FORWARD || kind == PP_EV_BACKWARD)) tr->step_busy += t1 - t0;
    store(tr, kind, micro, t0, t1);
}

void pp_trace_span(PPTrace *tr, PPEventKind kind, int micro, double t0, double t1) {
    if (tr) store(tr, kind, micro, t0 - tr->epoch, t1 - tr->epoch);
}

void pp_trace_step_begin(PPTrace *tr) {
    if (!tr) return;
    if (tr->sync) tr->sync(tr->sync_ctx);
    tr->step_t0 = pp_trace_begin(tr);
    tr->step_busy = 0.0;
    tr->in_step = 1;
}

void pp_trace_step_end(PPTrace *tr) {
    if (!tr) return;
    double t0 = tr->step_t0;
    pp_trace_end(tr, PP_EV_STEP, -1, t0);
    double t1 = core_now() - tr->epoch;
    tr->in_step = 0;
    tr->busy_s += tr->step_busy;
    tr->sched_s += t1 - t0;
    if (tr->steps == 0) {
        tr->first_busy_s = tr->step_busy;
        tr->first_sched_s = t1 - t0;
    }
    tr->steps++;
}

void pp_trace_reset_counters(PPTrace *tr) {
    tr->steps = tr->in_step = 0;
    tr->busy_s = tr->sched_s = tr->first_busy_s = tr->first_sched_s = tr->step_busy = 0.0;
}

// One event as a line of JSON (times in microseconds), comma first unless it opens a list.
static void write_event(FILE *f, const PPEvent *e, int rank) {
    char name[32];
    if ((e->kind == PP_EV_FORWARD || e->kind == PP_EV_BACKWARD) && e->chunk >= 0)  // F<micro>.<chunk>
        snprintf(name, sizeof name, "%c%d.%d", e->kind == PP_EV_FORWARD ? 'F' : 'B', e->micro, e->chunk);
    else if (e->kind == PP_EV_FORWARD || e->kind == PP_EV_BACKWARD)
        snprintf(name, sizeof name, "%c%d", e->kind == PP_EV_FORWARD ? 'F' : 'B', e->micro);
    else
        snprintf(name, sizeof name, "%s", kind_names[e->kind]);
    fprintf(f, ",{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
            "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"micro\":%d,\"chunk\":%d}}\n", name, kind_names[e->kind],
            rank, e->kind == PP_EV_STEP ? 1 : e->kind == PP_EV_GRAD_BUCKET ? 2 : e->kind == PP_EV_PARAM_GATHER ? 3 : 0, e->t0 * 1e6, (e->t1 - e->t0) * 1e6, e->micro, e->chunk);
}

static void write_rank_file(const PPTrace *tr, const char *file, int rank, const char *label) {
    FILE *f = fopen(file, "w");
    if (!f) core_fatal("cannot write trace file %s", file);
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d: %s\"}}\n",
            rank, rank, label);
    fprintf(f, ",{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}\n",
            rank, rank);
    fprintf(f, ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute + p2p\"}}\n", rank);
    fprintf(f, ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"steps\"}}\n", rank);
    fprintf(f, ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":2,\"args\":{\"name\":\"dp grad buckets\"}}\n", rank);
    fprintf(f, ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":3,\"args\":{\"name\":\"dp param gathers\"}}\n", rank);
    for (size_t i = 0; i < tr->n; i++) write_event(f, &tr->events[i], rank);
    fprintf(f, "],\"displayTimeUnit\":\"ms\"}\n");
    if (fclose(f) != 0) core_fatal("cannot write trace file %s", file);
}

// Appends the event lines of one rank file (all but its first and last line) to out.
static void merge_rank_file(FILE *out, const char *file, int first_rank) {
    FILE *f = fopen(file, "r");
    if (!f) {
        fprintf(stderr, "megac: trace %s missing (no shared file system?): merged trace incomplete\n", file);
        return;
    }
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (lineno == 1 || !strncmp(line, "],\"displayTimeUnit\"", 19)) continue;
        if (lineno == 2 && !first_rank) fputc(',', out);
        fputs(line, out);
    }
    fclose(f);
}

void pp_trace_write(PPTrace *tr, Comm *world, const char *path, const char *label) {
    size_t len = strlen(path) + 32;
    char *file = core_calloc(len, 1);
    snprintf(file, len, "%s.rank%d.json", path, world->rank);
    write_rank_file(tr, file, world->rank, label);
    comm_barrier(world);
    if (world->rank == 0) {
        FILE *out = fopen(path, "w");
        if (!out) core_fatal("cannot write trace file %s", path);
        fprintf(out, "{\"traceEvents\":[\n");
        for (int r = 0; r < world->size; r++) {
            snprintf(file, len, "%s.rank%d.json", path, r);
            merge_rank_file(out, file, r == 0);
        }
        fprintf(out, "],\"displayTimeUnit\":\"ms\"}\n");
        if (fclose(out) != 0) core_fatal("cannot write trace file %s", path);
        printf("trace: %s (all %d ranks; per rank %s.rank<R>.json); open in https://ui.perfetto.dev\n",
               path, world->size, path);
    }
    if (tr->dropped)
        fprintf(stderr, "[rank %d] megac: %zu trace events dropped (buffer of %zu)\n", world->rank,
                tr->dropped, tr->cap);
    free(file);
}

void pp_trace_report_bubble(PPTrace *tr, Comm *world, int pp_rank, int pp, int n_micro, int v) {
    double busy = tr->busy_s, sched = tr->sched_s;
    int steps = tr->steps;
    if (steps > 1) {  // leave the first step out
        busy -= tr->first_busy_s;
        sched -= tr->first_sched_s;
        steps--;
    }
    double mine[4] = {(double)pp_rank, busy, sched, (double)steps};
    double *all = core_calloc((size_t)world->size * 4, sizeof(double));
    comm_all_gather(world, mine, all, 4, COMM_F64);
    if (world->rank == 0 && steps > 0) {
        double theory = (double)(pp - 1) / ((double)v * n_micro + pp - 1);
        if (v > 1)
            printf("pipeline bubble over %d step(s), m = %d micro-batches, PP = %d, v = %d chunks per "
                   "rank (interleaved; theory (PP-1)/(v*m+PP-1) = %.3f of the step, bubble/compute "
                   "(PP-1)/(v*m) = %.3f):\n", steps, n_micro, pp, v, theory,
                   (double)(pp - 1) / ((double)v * n_micro));
        else
            printf("pipeline bubble over %d step(s), m = %d micro-batches, PP = %d "
                   "(theory (PP-1)/(m+PP-1) = %.3f):\n", steps, n_micro, pp, theory);
        for (int s = 0; s < pp; s++) {
            double b = 0.0, sc = 0.0;
            for (int r = 0; r < world->size; r++)
                if ((int)all[4 * r] == s) { b += all[4 * r + 1]; sc += all[4 * r + 2]; }
            printf("  stage %d: measured bubble %.3f (compute %.1f ms of %.1f ms per step)\n", s,
                   sc > 0 ? 1.0 - b / sc : 0.0, b / steps * 1e3 / (world->size / pp),
                   sc / steps * 1e3 / (world->size / pp));
        }
        fflush(stdout);
    }
    free(all);
}

// bench/bench_pipeline.c: the 1F1B schedule's step time against its ideal.
//
//     megac-mpiexec -n 2 bench_pipeline [--micro 2,4,8] [--num-layers 4] ...
//
// One rank per pipeline stage (PP = world size), one thread each. First every stage times
// forward + backward of one micro-batch alone (no p2p; all stages at once, as they run in
// the pipeline); the slowest stage's time t_mb sets the ideal 1F1B step,
//     ideal = t_mb x (m + PP - 1)         (the bubble is (PP - 1) / (m + PP - 1) of it),
// and the real step (the trainer's pp_forward_backward, real p2p) is timed against it.
// Prints per m: step time, ideal, their ratio (target <= 1.15 at m = 8 on PP = 2), and the
// measured bubble per stage beside the theoretical one. --pipeline-schedule gpipe times
// GPipe against the same ideal (its bubble is the same; it holds m activations, not PP - s).
// --virtual-pipeline-model-parallel-size v times the interleaved 1F1B schedule (v model
// chunks per stage, m a multiple of PP): t_mb is then forward + backward of one micro-batch
// through all v chunks of the stage, the ideal t_mb x (m + (PP - 1) / v), the bubble
// (PP - 1) / (v m + PP - 1) of the step ((PP - 1) / (v m) of the compute, Megatron's figure).
#include "backend/backend.h"
#include "backend/cpu/cpu_blas.h"
#include "core/args.h"
#include "core/check.h"
#include "core/host.h"  // defines: core_check_threads
#include "core/timer.h"
#include "pipeline/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Deterministic tokens: enough for timing.
static void bench_batch(void *ctx, int micro, int *tokens, int *targets) {
    const GPT *m = ctx;
    for (int i = 0; i < m->N; i++) {
        tokens[i] = (micro * 131 + i * 7) % m->cfg.vocab_size;
        targets[i] = (micro * 31 + i * 13 + 1) % m->cfg.vocab_size;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// This stage's forward + backward of one micro-batch alone (no p2p; every chunk of the
// stage with the interleaved schedule), the slowest rank's.
static double time_micro_batch(PPStep *st, Comm *world) {
    GPT *m = st->model;
    comm_barrier(world);
    double t0 = core_now();
    st->get_batch(st->batch_ctx, 0, st->tokens, st->targets);
    for (int c = 0; c < st->n_chunks; c++) {
        GPT *mc = st->n_chunks > 1 ? st->chunks[c] : m;
        gpt_forward(mc, st->grid->tp, 0, st->tokens, st->targets, st->loss_scale);
        gpt_backward(mc, st->grid->tp, 0, mc->last ? NULL : st->dout, st->loss_scale);
    }
    m->be->ops->sync(m->be);
    double dt = core_now() - t0;
    comm_all_reduce(world, &dt, 1, COMM_F64, COMM_MAX);
    return dt;
}

// One pipelined step (pp_forward_backward), the slowest rank's time.
static double time_step(PPStep *st, Comm *world) {
    for (int c = 0; c < st->n_chunks; c++) gpt_zero_grads(st->n_chunks > 1 ? st->chunks[c] : st->model);
    comm_barrier(world);
    double t0 = core_now();
    pp_forward_backward(st);
    st->model->be->ops->sync(st->model->be);
    double dt = core_now() - t0;
    comm_all_reduce(world, &dt, 1, COMM_F64, COMM_MAX);
    return dt;
}

// Medians over `reps` of t_mb and of the step, measured alternately (after one warm-up of
// each) so that a change of machine load between them does not skew the ratio.
static void measure(PPStep *st, Comm *world, int reps, double *t_mb, double *step) {
    double *a = core_calloc(2 * (size_t)reps, sizeof(double)), *b = a + reps;
    for (int r = -1; r < reps; r++) {
        if (r == 0) pp_trace_reset_counters(st->trace);  // the bubble of the timed steps
        double x = time_micro_batch(st, world), y = time_micro_batch(st, world);
        double z = time_step(st, world);
        if (r >= 0) { a[r] = x < y ? x : y; b[r] = z; }
    }
    *t_mb = median(a, reps);
    *step = median(b, reps);
    free(a);
}

// Parses --micro's values into ms (at most cap): "2,4,8" and "2 4 8" alike. Returns the
// count; exits with a usage error on anything but positive integers.
static int parse_micros(const CoreStrList *l, int *ms, int cap) {
    int n = 0;
    for (int i = 0; i < l->n; i++)
        for (const char *p = l->items[i]; *p;) {
            char *end = NULL;
            long v = strtol(p, &end, 10);
            if (end == p || v <= 0 || v > 1000000 || (*end && *end != ','))
                core_usage_error("--micro: counts must be positive integers, got '%s'", l->items[i]);
            if (n == cap) core_usage_error("--micro: at most %d counts", cap);
            ms[n++] = (int)v;
            p = *end ? end + 1 : end;
        }
    return n;
}

// One row of the table: the step with m micro-batches planned, timed (median of reps), its
// ideal time and bubble, and each stage's measured bubble (printed by rank 0).
static void time_row(GPT **chunks, int v, ProcessGrid *g, int kind, int mb, int reps, PPTrace *tr) {
    GPT *m = chunks[0];
    int pp = g->dims.pp;
    PPStep st;  // planned for this m
    pp_step_init(&st, m, g, (PPScheduleKind)kind, bench_batch, m, mb, 1.0f / ((float)m->N * mb), tr);
    if (v > 1) pp_step_set_chunks(&st, chunks, v);
    double t_mb = 0.0, step = 0.0;
    measure(&st, g->world, reps, &t_mb, &step);
    pp_step_free(&st);
    double ideal = t_mb * (mb + (double)(pp - 1) / v);
    double bubble = tr->sched_s > 0 ? 1.0 - tr->busy_s / tr->sched_s : 0.0;
    double *all = core_calloc((size_t)pp, sizeof(double));
    comm_all_gather(g->world, &bubble, all, 1, COMM_F64);
    if (g->coord.rank == 0) {
        printf("%4d %10.2f %12.2f %12.2f %8.3f %14.3f ", mb, t_mb * 1e3, step * 1e3,
               ideal * 1e3, step / ideal, (double)(pp - 1) / ((double)v * mb + pp - 1));
        for (int r = 0; r < pp; r++) printf(" %.3f", all[r]);
        printf("\n");
        fflush(stdout);
    }
    free(all);
}

// Rank s's v model chunks (chunk c: virtual stage c*PP + s of PP*v), each with enough
// activation slots for every m timed (ms[0 .. n_m)).
static void create_chunks(GPT **chunks, int v, const GPTConfig *cfg, Backend *be, int pp, int s,
                          int kind, int micro_batch, const int *ms, int n_m, int max_m) {
    for (int c = 0; c < v; c++) {
        int slots = pp_schedule_slots((PPScheduleKind)kind, pp, s, max_m), sl[PP_ILV_MAX_CHUNKS];
        for (int i = 0; v > 1 && i < n_m; i++) {  // enough for every m timed
            pp_ilv_slots(pp, v, ms[i], s, sl);
            if (i == 0 || sl[c] > slots) slots = sl[c];
        }
        chunks[c] = gpt_create(cfg, be, NULL,
                               &(GPTStage){.stage = c * pp + s, .n_stages = pp * v, .vpp = v, .micro_batch = micro_batch,
                                           .n_slots = slots, .seed = 1234, .pad_multiple = 1});
    }
    if (v > 1) gpt_share_workspace(chunks, v);  // one chunk computes at a time
}

int main(int argc, char **argv) {
    backend_cpu_select_blas_kernels(argc, argv);  // before MPI_Init: may re-execute
    MPI_CHECK(MPI_Init(&argc, &argv));
    GPTConfig cfg = {.num_layers = 4, .hidden_size = 256, .num_heads = 4, .seq_length = 128,
                     .vocab_size = 512, .vocab_divisible_by = 128};
    int micro_batch = 2, reps = 5, threads = 1;
    CoreStrList micros = {0};
    const char *schedule = "1f1b";
    int v = 1;
    const ArgSpec specs[] = {
        {"--num-layers", ARG_INT, &cfg.num_layers, "layers (split evenly over the stages)"},
        {"--hidden-size", ARG_INT, &cfg.hidden_size, "C"},
        {"--num-attention-heads", ARG_INT, &cfg.num_heads, "NH"},
        {"--seq-length", ARG_INT, &cfg.seq_length, "T"},
        {"--vocab-size", ARG_INT, &cfg.vocab_size, "V (small: stages stay balanced)"},
        {"--micro-batch-size", ARG_INT, &micro_batch, "B"},
        {"--micro", ARG_LIST, &micros, "micro-batches per step to time, e.g. 2,4,8 (default 4,8)"},
        {"--reps", ARG_INT, &reps, "timed repetitions (median)"},
        {"--num-threads", ARG_INT, &threads, "threads per rank"},
        {"--pipeline-schedule", ARG_STR, &schedule, "1f1b | gpipe"},
        {"--virtual-pipeline-model-parallel-size", ARG_INT, &v, "v model chunks per stage: interleaved 1F1B (m a multiple of PP)"},
    };
    core_args_parse("megac-mpiexec -n PP bench_pipeline [flags]", specs,
                    sizeof specs / sizeof *specs, argc - 1, argv + 1);
    int ms[16] = {4, 8}, n_m = 2, max_m = 0;
    if (micros.n) n_m = parse_micros(&micros, ms, 16);
    for (int i = 0; i < n_m; i++)
        if (ms[i] > max_m) max_m = ms[i];
    if (reps <= 0) core_usage_error("--reps must be > 0");
    core_check_threads("--num-threads", threads);
    int kind = pp_schedule_parse(schedule);
    if (kind < 0) core_usage_error("--pipeline-schedule must be 1f1b or gpipe, got '%s'", schedule);
    cfg.ffn_hidden_size = 4 * cfg.hidden_size;
    cfg.max_position_embeddings = cfg.seq_length;
    int pp = 0;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &pp));
    char err[512];
    if (gpt_config_check(&cfg, 1, pp, err, sizeof err) != 0) core_usage_error("%s", err);
    if (v < 1 || v > PP_ILV_MAX_CHUNKS || (v > 1 && (kind != PP_SCHEDULE_1F1B || cfg.num_layers % (pp * v))))
        core_usage_error("--virtual-pipeline-model-parallel-size %d: needs 1..%d, the 1f1b schedule and "
                         "--num-layers %d divisible by PP %d x v", v, PP_ILV_MAX_CHUNKS, cfg.num_layers, pp);
    for (int i = 0; v > 1 && i < n_m; i++)
        if (pp_ilv_check(pp, v, ms[i], err, sizeof err)) core_usage_error("--micro %d: %s", ms[i], err);

    Backend *be = backend_cpu_create(threads, BACKEND_F32);
    ProcessGrid *g = pgrid_create(&(PGridDims){.tp = 1, .cp = 1, .pp = pp, .ep = 1, .etp = 1},
                                  PGRID_COMM_MPI, NULL, 600.0);
    int s = g->coord.pp_rank;
    GPT *chunks[PP_ILV_MAX_CHUNKS];  // chunk c: virtual stage c*PP + s of PP*v (v = 1: the stage)
    create_chunks(chunks, v, &cfg, be, pp, s, kind, micro_batch, ms, n_m, max_m);
    PPTrace *tr = pp_trace_create(g->world, 0);
    if (g->coord.rank == 0) {
        printf("bench_pipeline: %s%s, PP = %d, v = %d, %s; L=%d C=%d NH=%d T=%d B=%d V=%d, median of %d\n",
               schedule, v > 1 ? " (interleaved)" : "", pp, v, be->name, cfg.num_layers, cfg.hidden_size,
               cfg.num_heads, cfg.seq_length, micro_batch, cfg.vocab_size, reps);
        printf("t_mb: forward + backward of one micro-batch on the slowest stage, alone\n");
        printf("%4s %10s %12s %12s %8s %14s %s\n", "m", "t_mb (ms)", "step (ms)", "ideal (ms)",
               "ratio", "bubble theory", "bubble measured per stage");
    }
    for (int i = 0; i < n_m; i++) time_row(chunks, v, g, kind, ms[i], reps, tr);
    pp_trace_destroy(tr);
    for (int c = 0; c < v; c++) gpt_destroy(chunks[c]);
    pgrid_destroy(g);
    backend_destroy(be);
    MPI_CHECK(MPI_Finalize());
    return 0;
}

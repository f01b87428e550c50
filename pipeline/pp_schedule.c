// pipeline/pp_schedule.c: the step driver: this rank's GPT stage wrapped as a PPStage
// (the last stage computes the loss and seeds the backward with loss_scale per token), run
// by the 1F1B or GPipe schedule over the pipeline group.
#include "schedule.h"
#include "core/check.h"

#include <stdlib.h>
#include <string.h>

// --- the GPT stage as a PPStage ----------------------------------------------------------
// Index of micro-batch `micro`'s first sample in the step's global batch (pgrid_micro_first
// from 0: this data-parallel rank's share, then the micro-batch). Pure.
static int64_t pp_micro_sample0(const PPStep *st, int micro) {
    int B = st->model->B, dp = st->grid->dims.dp;
    return pgrid_micro_first(0, st->n_micro * B * dp, st->grid->coord.dp_rank, dp, B, micro);
}

void pp_forward_micro(PPStep *st, GPT *m, int micro, int slot) {
    if (m->first || m->last || m->docs.positions || m->docs.attention)  // --reset-*: every stage
        st->get_batch(st->batch_ctx, micro, st->tokens, st->targets);
    gpt_set_micro_sample(m, slot, pp_micro_sample0(st, micro));  // its dropout masks
    gpt_forward(m, st->grid->tp, slot, st->tokens, st->targets,
                st->forward_only ? 0.0f : st->loss_scale);  // training: the fused classifier
    if (m->last) gpt_loss_accumulate(m, slot, st->loss_acc);
}

static void stage_forward(void *ctx, int micro, int slot) {
    PPStep *st = ctx;
    pp_forward_micro(st, st->model, micro, slot);
}

static void stage_backward(void *ctx, int micro, int slot) {
    PPStep *st = ctx;
    gpt_backward(st->model, st->grid->tp, slot, st->model->last ? NULL : st->dout, st->loss_scale);
}

static void *stage_input(void *ctx, int slot) { return gpt_stage_input(((PPStep *)ctx)->model, slot); }

static const void *stage_output(void *ctx, int slot) {
    return gpt_stage_output(((PPStep *)ctx)->model, slot);
}

static const void *stage_input_grad(void *ctx) { return gpt_stage_input_grad(((PPStep *)ctx)->model); }

static void sync_backend(void *ctx) {
    Backend *be = ctx;
    be->ops->sync(be);
}

// --- the step ------------------------------------------------------------------------------
void pp_step_init(PPStep *st, GPT *model, ProcessGrid *grid, PPScheduleKind kind,
                  PPBatchFn get_batch, void *batch_ctx, int n_micro, float loss_scale,
                  PPTrace *trace) {
    size_t N = (size_t)model->N, io = gpt_stage_io_numel(model);  // io: (N, C), or (N/tp, C) with SP
    *st = (PPStep){.model = model, .grid = grid, .kind = kind, .get_batch = get_batch,
                   .batch_ctx = batch_ctx, .n_micro = n_micro, .loss_scale = loss_scale,
                   .trace = trace, .n_chunks = 1};
    st->tokens = core_calloc(N, sizeof(int));
    st->targets = core_calloc(N, sizeof(int));
    st->dout = model->be->ops->alloc(model->be, io * backend_dtype_size(model->be->act));
    st->loss_acc = model->be->ops->alloc(model->be, sizeof(double));
    st->stage = (PPStage){.ctx = st, .forward = stage_forward, .backward = stage_backward,
                          .input = stage_input, .output = stage_output,
                          .input_grad = stage_input_grad, .output_grad = st->dout};
    st->link = (PPLink){grid->pp, grid->pp_prev, grid->pp_next, io, tp_act_dtype(model->be), trace};
    if (trace && trace->cap && model->be->kind != BACKEND_CPU) {
        trace->sync = sync_backend;  // device work is queued: time it when it is done
        trace->sync_ctx = model->be;
    }
}

void pp_step_free(PPStep *st) {
    pp_chunks_free(st);
    free(st->tokens);
    free(st->targets);
    if (st->dout) st->model->be->ops->free(st->model->be, st->dout);
    if (st->loss_acc) st->model->be->ops->free(st->model->be, st->loss_acc);
    memset(st, 0, sizeof *st);
}

// The loss of the run just finished: one device-to-host read (last stage only).
static double read_loss(PPStep *st) {
    Backend *be = st->model->be;
    st->loss = 0.0;
    if (st->model->last) be->ops->copy(be, &st->loss, st->loss_acc, sizeof(double), BACKEND_D2H);
    return st->loss;
}

double pp_forward_backward(PPStep *st) {
    if (st->n_chunks > 1) return pp_chunks_run(st, 0);  // interleaved (pp_chunks.c)
    Backend *be = st->model->be;
    be->ops->zero(be, st->loss_acc, sizeof(double));
    pp_schedule_run(st->kind, &st->stage, &st->link, st->n_micro, st->model->n_slots);
    return read_loss(st);
}

double pp_forward_only(PPStep *st) {
    if (st->n_chunks > 1) return pp_chunks_run(st, 1);
    Backend *be = st->model->be;
    be->ops->zero(be, st->loss_acc, sizeof(double));
    st->forward_only = 1;
    pp_schedule_forward_only(&st->stage, &st->link, st->n_micro, st->model->n_slots);
    st->forward_only = 0;
    return read_loss(st);
}

int pp_schedule_parse(const char *name) {
    if (!strcmp(name, "1f1b")) return PP_SCHEDULE_1F1B;
    if (!strcmp(name, "gpipe")) return PP_SCHEDULE_GPIPE;
    return -1;
}

// pipeline/pp_chunks.c: the step driver of the interleaved schedule: each of this rank's
// v model chunks (GPT stages of virtual stage c*PP + pp_rank) wrapped as a PPStage, their
// received-gradient queues, and the plans of pp_interleaved.c run over the pipeline ring.
#include "schedule.h"
#include "core/check.h"

#include <stdlib.h>
#include <string.h>

struct PPChunk {
    PPStep *step;
    GPT *model;
    PPStage *self;  // its PPStage: output_grad is set by the schedule before each backward
};

static void chunk_forward(void *ctx, int micro, int slot) {
    struct PPChunk *k = ctx;
    pp_forward_micro(k->step, k->model, micro, slot);
}

static void chunk_backward(void *ctx, int micro, int slot) {
    struct PPChunk *k = ctx;
    (void)micro;
    gpt_backward(k->model, k->step->grid->tp, slot, k->model->last ? NULL : k->self->output_grad,
                 k->step->loss_scale);
}

static void *chunk_input(void *ctx, int slot) { return gpt_stage_input(((struct PPChunk *)ctx)->model, slot); }

static const void *chunk_output(void *ctx, int slot) {
    return gpt_stage_output(((struct PPChunk *)ctx)->model, slot);
}

static const void *chunk_input_grad(void *ctx) {
    return gpt_stage_input_grad(((struct PPChunk *)ctx)->model);
}

void pp_step_set_chunks(PPStep *st, GPT **chunks, int v) {
    if (chunks[0] != st->model) core_fatal("pp_step_set_chunks: chunks[0] is not the step's model");
    ProcessGrid *g = st->grid;
    int p = g->dims.pp, r = g->coord.pp_rank;
    st->n_chunks = v;
    st->chunks = chunks;
    st->chunk_ctx = core_calloc((size_t)v, sizeof *st->chunk_ctx);
    st->chunk_stages = core_calloc((size_t)v, sizeof *st->chunk_stages);
    st->grad_bufs = core_calloc((size_t)v, sizeof *st->grad_bufs);
    pp_ilv_plan(&st->plan, p, v, st->n_micro, r, 0);
    pp_ilv_plan(&st->eval_plan, p, v, st->n_micro, r, 1);
    Backend *be = st->model->be;
    size_t bytes = gpt_stage_io_numel(st->model) * backend_dtype_size(be->act);
    for (int c = 0; c < v; c++) {
        st->chunk_ctx[c] = (struct PPChunk){st, chunks[c], &st->chunk_stages[c]};
        st->chunk_stages[c] = (PPStage){.ctx = &st->chunk_ctx[c], .forward = chunk_forward,
                                        .backward = chunk_backward, .input = chunk_input,
                                        .output = chunk_output, .input_grad = chunk_input_grad};
        int n = st->grad_n[c] = st->plan.grad_slots[c];
        st->grad_bufs[c] = core_calloc((size_t)n, sizeof(void *));
        for (int j = 0; j < n; j++) st->grad_bufs[c][j] = be->ops->alloc(be, bytes);  // (N_sp, C)
    }
    st->ring = st->link;  // the same group and message, neighbours around the ring
    st->ring.prev = (r + p - 1) % p;
    st->ring.next = (r + 1) % p;
}

// Frees what pp_step_set_chunks allocated (pp_step_free calls it). Never fails.
void pp_chunks_free(PPStep *st) {
    if (st->n_chunks <= 1) return;
    Backend *be = st->model->be;
    for (int c = 0; c < st->n_chunks; c++) {
        for (int j = 0; j < st->grad_n[c]; j++) be->ops->free(be, st->grad_bufs[c][j]);
        free(st->grad_bufs[c]);
    }
    free(st->grad_bufs);
    free(st->chunk_ctx);
    free(st->chunk_stages);
    pp_ilv_plan_free(&st->plan);
    pp_ilv_plan_free(&st->eval_plan);
}

// pl made again for st->n_micro micro-batches (a batch ramp-up, or a step schedule, changed
// the count); aborts if it needs more slots or queued gradients than were allocated.
static void replan(PPStep *st, PPIlvPlan *pl) {
    int p = st->grid->dims.pp, r = st->grid->coord.pp_rank, fonly = pl->forward_only;
    pp_ilv_plan_free(pl);
    pp_ilv_plan(pl, p, st->n_chunks, st->n_micro, r, fonly);
    for (int c = 0; c < st->n_chunks; c++)
        if (pl->act_slots[c] > st->chunks[c]->n_slots || (!fonly && pl->grad_slots[c] > st->grad_n[c]))
            core_fatal("interleaved schedule: %d micro-batches need %d activation slots and %d "
                       "gradient buffers for chunk %d, %d and %d were allocated", st->n_micro,
                       pl->act_slots[c], pl->grad_slots[c], c, st->chunks[c]->n_slots, st->grad_n[c]);
}

// One interleaved run (training or forward-only); returns the summed loss on the last rank.
double pp_chunks_run(PPStep *st, int forward_only) {
    PPIlvPlan *pl = forward_only ? &st->eval_plan : &st->plan;
    st->forward_only = forward_only;
    if (st->n_micro != pl->m) replan(st, pl);
    Backend *be = st->model->be;
    GPT *last = st->chunks[st->n_chunks - 1];
    int slots[PP_ILV_MAX_CHUNKS];
    for (int c = 0; c < st->n_chunks; c++) slots[c] = st->chunks[c]->n_slots;
    be->ops->zero(be, st->loss_acc, sizeof(double));
    pp_ilv_run(pl, st->chunk_stages, (void *const *const *)st->grad_bufs, slots, &st->ring);
    st->loss = 0.0;
    if (last->last) be->ops->copy(be, &st->loss, st->loss_acc, sizeof(double), BACKEND_D2H);
    return st->loss;
}

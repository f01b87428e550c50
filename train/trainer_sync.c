// train/trainer_sync.c: the step's communication outside the pipeline schedule: the
// gradient reductions after the backward (sequence-parallel LayerNorm sums, the tied
// embedding's two copies, data parallelism's buckets; ZeRO-2/3 on the shard), the global
// sums of the gradient norm and the loss, and --overlap-param-gather's settle and spans.
#include "trainer_sync.h"
#include "optim/zero.h"

// Sums the two copies of the tied embedding's gradient (first and last stage).
static void sync_tied_embedding(Trainer *t) {
    ProcessGrid *g = t->grid;
    if (g->dims.pp == 1 || !g->embedding || t->wte_param < 0 || t->args.model.untie_embeddings) return;
    GPT *m = t->chunks[t->wte_chunk];  // interleaved: chunk 0 on the first stage, v-1 on the last
    const ParamInfo *p = &m->params[t->wte_param];
    comm_all_reduce(g->embedding, m->grad_mem + p->offset, p->numel, COMM_F32, COMM_SUM);
}

// Each DP bucket's reduction of this step as a span of the trace (start to completion).
static void trace_buckets(Trainer *t) {
    for (int c = 0; c < t->n_chunks && t->args.trace; c++)
        for (int k = 0; k < t->opts[c]->n_buckets; k++) {
            const OptBucket *b = &t->opts[c]->buckets[k];
            if (b->done) pp_trace_span(t->trace, PP_EV_GRAD_BUCKET, k, b->t0, b->t1);
        }
}

// ZeRO-2 --overlap-grad-reduce: each reduce-scatter of this step (every unit, every
// micro-batch) as a span of the same row, numbered by its unit. Never fails.
static void trace_zero_reduces(Trainer *t) {
    const ZeroSpan *s = NULL;
    int n = optim_zero_take_spans(t->opt, &s);
    for (int i = 0; i < n && t->args.trace; i++)
        pp_trace_span(t->trace, PP_EV_GRAD_BUCKET, s[i].unit, s[i].t0, s[i].t1);
}

void trainer_reduce_grads(Trainer *t) {
    if (t->opt->zero) {  // ZeRO-2/3: reduced layer by layer; the sums below on the shard only
        optim_zero_finish_grads(t->opt, t->model->sp ? t->grid->tp : NULL,
                                t->grid->dims.pp > 1 ? t->grid->embedding : NULL);
        trace_zero_reduces(t);
    } else {
        for (int c = 0; c < t->n_chunks; c++) {  // --overlap-grad-reduce: the layers' sums are done
            if (t->opts[c]->ov) optim_overlap_sync_sp_rest(t->opts[c]);
            else gpt_sync_sequence_parallel_grads(t->chunks[c], t->grid->tp);
        }
        sync_tied_embedding(t);
        for (int c = 0; c < t->n_chunks; c++) optim_reduce_grads(t->opts[c], t->chunks[c]->grad_mem);
        trace_buckets(t);
    }
    t->be->ops->sync(t->be);  // (the norm's read after this waits for the device anyway)
}

void trainer_global_sums(Trainer *t, double *sq, double *loss_sum) {
    const ProcessGrid *g = t->grid;
    double v[2] = {*sq, (g->is_last_stage && g->coord.tp_rank == 0) ? *loss_sum : 0.0};
    comm_all_reduce(g->world, v, 2, COMM_F64, COMM_SUM);
    *sq = v[0];
    *loss_sum = v[1];
}

double trainer_take_gathers(Trainer *t) {
    double ms = 0.0, t0, t1;
    for (int c = 0; c < t->n_chunks; c++) {
        ms += optim_gather_take_exposed(t->opts[c]) * 1e3;
        for (int k = 0; k < t->opts[c]->n_buckets; k++)
            if (optim_gather_take_span(t->opts[c], k, &t0, &t1) && t->args.trace)
                pp_trace_span(t->trace, PP_EV_PARAM_GATHER, k, t0, t1);
    }
    return ms;
}

void trainer_settle_params(Trainer *t) {
    for (int c = 0; c < t->n_chunks; c++) optim_gather_settle(t->opts[c]);
}

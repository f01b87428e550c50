// train/trainer_sync.c: the step's communication outside the pipeline schedule: the
// gradient reductions after the backward (sequence-parallel LayerNorm sums, the tied
// embedding's two copies, data parallelism's buckets; ZeRO-2/3 on the shard), the global
// sums of the gradient norm and the loss, and --overlap-param-gather's settle and spans.
#include "trainer_sync.h"

// Each DP bucket's reduction of this step as a span of the trace (start to completion).
static void trace_buckets(Trainer *t) {
    for (int c = 0; c < t->n_chunks && t->args.trace; c++)
        for (int k = 0; k < t->opts[c]->sync->n_buckets; k++) {
            const DistSyncBucket *b = &t->opts[c]->sync->buckets[k];
            if (b->done) pp_trace_span(t->trace, PP_EV_GRAD_BUCKET, k, b->t0, b->t1);
        }
}

// ZeRO-2 --overlap-grad-reduce: each reduce-scatter of this step (every unit, every
// micro-batch) as a span of the same row, numbered by its unit. Never fails.
static void trace_zero_reduces(Trainer *t) {
    const DistSyncSpan *s = NULL;
    int n = dist_sync_take_spans(t->opt->sync, &s);
    for (int i = 0; i < n && t->args.trace; i++)
        pp_trace_span(t->trace, PP_EV_GRAD_BUCKET, s[i].unit, s[i].t0, s[i].t1);
}

void trainer_reduce_grads(Trainer *t) {
    Comm *emb = t->grid->dims.pp > 1 ? t->grid->embedding : NULL;
    for (int c = 0; c < t->n_chunks; c++) dist_sync_model_grads(t->opts[c]->sync, emb);
    for (int c = 0; c < t->n_chunks; c++) dist_sync_finish_grad_sync(t->opts[c]->sync);
    if (t->opt->sync->stage >= 2) trace_zero_reduces(t);
    else trace_buckets(t);
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
        DistSync *s = t->opts[c]->sync;
        ms += dist_sync_take_exposed(s) * 1e3;
        for (int k = 0; k < s->n_buckets; k++)
            if (dist_sync_take_param_span(s, k, &t0, &t1) && t->args.trace)
                pp_trace_span(t->trace, PP_EV_PARAM_GATHER, k, t0, t1);
    }
    return ms;
}

void trainer_settle_params(Trainer *t) {
    for (int c = 0; c < t->n_chunks; c++) dist_sync_finish_param_sync(t->opts[c]->sync);
}

// train/train_moe.c: the mixture-of-experts statistics of a training step (trainer.h): the
// load-balancing and z losses as Megatron logs them, and the tokens routed to each expert;
// the expert bias of aux-loss-free balancing, which those tokens move.
#include "trainer.h"
#include "model/gpt_moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float *train_moe_bias(Trainer *t) {
    const GPTConfig *c = &t->args.model;
    if (c->num_experts <= 0 || !c->moe_expert_bias) return NULL;
    if (!t->moe_bias) t->moe_bias = calloc((size_t)c->num_layers * c->num_experts, sizeof(float));
    return t->moe_bias;
}

void train_moe_push_bias(Trainer *t) {
    const float *b = train_moe_bias(t);
    for (int k = 0; b && k < t->n_chunks; k++) gpt_moe_set_bias(t->chunks[k], b);
}

void train_moe_begin_step(Trainer *t) {
    for (int c = 0; c < t->n_chunks; c++) gpt_moe_stats_reset(t->chunks[c]);
}

void train_moe_step_stats(Trainer *t, StepResult *r) {
    const GPTConfig *c = &t->args.model;
    r->moe_layers = 0;
    if (c->num_experts <= 0) return;
    int L = c->num_layers, E = c->num_experts;
    size_t row = (size_t)E + 3;  // per global layer: lb, z, dropped, tokens (E)
    if (!t->moe_sums) t->moe_sums = calloc((size_t)L * row, sizeof(double));
    double *v = t->moe_sums;
    memset(v, 0, (size_t)L * row * sizeof(double));
    // a micro-batch's values are the same on its tp and cp ranks: one of them adds them
    const ProcessGrid *g = t->grid;
    if (g->coord.tp_rank == 0 && g->coord.cp_rank == 0)
        for (int k = 0; k < t->n_chunks; k++) {
            const GPT *m = t->chunks[k];
            if (!m->moe) continue;
            for (int l = 0; l < m->n_layers; l++) {
                double *d = v + (size_t)(m->layer0 + l) * row;
                d[0] += m->moe->lb_loss[l];
                d[1] += m->moe->z_loss[l];
                d[2] += m->moe->dropped[l];
                for (int e = 0; e < E; e++) d[3 + e] += m->moe->tokens[(size_t)l * E + e];
            }
        }
    comm_all_reduce(g->world, v, (size_t)L * row, COMM_F64, COMM_SUM);
    if (c->moe_expert_bias) {  // aux-loss-free balancing: after every step, skipped or not
        for (int l = 0; l < L; l++)  // (Megatron updates it before the optimizer step)
            if (gpt_moe_layer(c, l))
                gpt_moe_bias_step(train_moe_bias(t) + (size_t)l * E, v + (size_t)l * row + 3, E,
                                  c->moe_bias_rate);
        train_moe_push_bias(t);
    }
    int n = 0;
    double lb = 0, z = 0, dropped = 0, micro = (double)t->step.n_micro * t->dp;  // the global batch's micro-batches
    for (int l = 0; l < L; l++) {
        if (!gpt_moe_layer(c, l)) continue;
        lb += v[(size_t)l * row];
        z += v[(size_t)l * row + 1];
        dropped += v[(size_t)l * row + 2];
        memmove(v + (size_t)n * E, v + (size_t)l * row + 3, (size_t)E * sizeof(double));  // packed
        n++;
    }
    r->moe_layers = n;
    r->moe_tokens = v;
    r->moe_dropped = dropped;
    r->moe_lb_loss = c->moe_aux_coeff > 0 && c->moe_load_balancing != GPT_MOE_LB_NONE
                         ? lb / c->moe_aux_coeff / (n * micro) : NAN;
    r->moe_z_loss = c->moe_z_coeff > 0 ? z / c->moe_z_coeff / (n * micro) : NAN;
}

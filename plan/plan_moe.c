// plan/plan_moe.c: what a stage's mixture-of-experts layers move (plan_model.h): the
// collectives of gpt_moe_backward at every expert-parallel size (the router's list of its
// token counts and losses over the ranks sharing a micro-batch's rows, moe_router_calls; the
// router's and experts' gradients summed with sequence parallelism are plan_traffic.c's, with
// the norms'). Their memory is the allocator's own count (gpt_measure).
#include "plan_model.h"
#include "layers/moe_router.h"  // defines: moe_router_calls
#include "model/gpt_moe.h"     // defines: gpt_moe_layer

int plan_moe_layers(const GPTConfig *c, int layer0, int n) {
    int k = 0;
    for (int l = layer0; c->num_experts > 0 && l < layer0 + n; l++) k += gpt_moe_layer(c, l);
    return k;
}

void plan_moe_traffic(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, int n_micro,
                      PlanTraffic *tp, PlanTraffic *cp) {
    const GPTConfig *c = &s->model;
    uint64_t L = (uint64_t)plan_moe_layers(c, st->layer0, st->n_layers), M = (uint64_t)n_micro;
    if (!L) return;
    uint64_t G = c->moe_load_balancing == GPT_MOE_LB_SEQ_AUX ? (uint64_t)l->micro_batch : 1;
    uint64_t E = (uint64_t)c->num_experts, n = (uint64_t)l->tp, P = (uint64_t)plan_cp(l);
    // moe_router_backward's calls (moe_router_calls), per layer and micro-batch, over the
    // ranks that share the micro-batch's rows: sequence-parallel tp, then cp
    CommCall calls[MOE_ROUTER_MAX_CALLS];
    int k = moe_router_calls((int)G, (int)E, calls);
    if (l->sp) plan_count_calls(tp, (int)n, 4, calls, k, L * M);
    if (P > 1) plan_count_calls(cp, (int)P, 4, calls, k, L * M);
}

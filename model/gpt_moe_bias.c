// model/gpt_moe_bias.c: aux-loss-free load balancing (DeepSeek-V3, Megatron's
// --moe-router-enable-expert-bias) in a stage: the update (the router's, layers/moe_router.h)
// and the copy of the whole model's bias into the stage's MoE layers (gpt_moe.h).
#include "gpt_moe.h"

void gpt_moe_bias_step(float *bias, const double *tokens, int E, double rate) {
    moe_router_bias_step(bias, tokens, E, rate);
}

void gpt_moe_set_bias(GPT *m, const float *all) {
    if (!m->moe || !m->moe->bias) return;
    size_t E = (size_t)m->cfg.num_experts;
    m->be->ops->copy(m->be, m->moe->bias, all + (size_t)m->layer0 * E,
                     (size_t)m->n_layers * E * sizeof(float), BACKEND_H2D);
}

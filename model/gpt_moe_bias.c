// model/gpt_moe_bias.c: aux-loss-free load balancing (DeepSeek-V3, Megatron's
// --moe-router-enable-expert-bias): the expert bias of the MoE layers (gpt_moe.h).
#include "gpt_moe.h"

void gpt_moe_bias_step(float *bias, const double *tokens, int E, double rate) {
    double sum = 0.0;
    for (int e = 0; e < E; e++) sum += tokens[e];
    double mean = sum / E;
    float r = (float)rate;
    for (int e = 0; e < E; e++) {
        float sign = tokens[e] < mean ? 1.0f : tokens[e] > mean ? -1.0f : 0.0f;
        bias[e] = bias[e] + sign * r;
    }
}

void gpt_moe_set_bias(GPT *m, const float *all) {
    if (!m->moe || !m->moe->bias) return;
    size_t E = (size_t)m->cfg.num_experts;
    m->be->ops->copy(m->be, m->moe->bias, all + (size_t)m->layer0 * E,
                     (size_t)m->n_layers * E * sizeof(float), BACKEND_H2D);
}

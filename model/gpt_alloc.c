// model/gpt_alloc.c: creation of a GPT stage: its place in the grid and sizes, the flat
// parameter/gradient buffers and their views, and the activations (gpt_acts.c), all
// allocated once at start-up (nothing is allocated in the training step); gpt_measure counts
// the activations without allocating.
#include "gpt.h"
#include "gpt_acts.h"  // defines: gpt_acts_alloc, gpt_acts_measure
#include "core/check.h"
#include "gpt_cp.h"  // defines: gpt_cp_check, gpt_cp_attention
#include "gpt_moe.h"

#include <stdlib.h>
#include <string.h>

// Element `off` of a buffer of `esize`-byte elements.
static void *at(void *mem, size_t off, size_t esize) { return (char *)mem + off * esize; }

void gpt_point_layer_views(const GPT *m, GPTBlockW *b, int l, void *mem, size_t origin,
                           void *emem, size_t eorigin, size_t esize) {
    const ParamInfo *t = &m->params[m->block_param[l]];  // the block's tensors
    int nb = m->block_param[l + 1] - m->block_param[l];
    enum { NV = 17 };  // in the table's order (gpt_params.c's BLOCK)
    static const char *const SUFFIX[NV] = {".ln1.weight", ".ln1.bias", ".qkv.weight", ".qkv.bias",
                                           ".attn.proj.weight", ".attn.proj.bias", ".ln2.weight",
                                           ".ln2.bias", ".router.weight", ".fc.weight", ".fc.bias",
                                           ".proj.weight", ".proj.bias", ".shared.fc.weight",
                                           ".shared.fc.bias", ".shared.proj.weight",
                                           ".shared.proj.bias"};
    void **v[NV] = {&b->ln1w, &b->ln1b, &b->qkvw, &b->qkvb, &b->projw, &b->projb, &b->ln2w,
                    &b->ln2b, &b->routerw, &b->fcw, &b->fcb, &b->fcprojw, &b->fcprojb,
                    &b->sfcw, &b->sfcb, &b->sfcprojw, &b->sfcprojb};
    for (int i = 0, k = 0; i < NV; i++) {  // absent tensors (no biases, dense/MoE): NULL views
        size_t nl = k < nb ? strlen(t[k].name) : 0, ns = strlen(SUFFIX[i]);
        int here = nl > ns && !strcmp(t[k].name + nl - ns, SUFFIX[i]);
        int ex = here && t[k].offset >= m->expert_offset;
        *v[i] = !here ? NULL : ex ? at(emem, t[k++].offset - eorigin, esize) : at(mem, t[k++].offset - origin, esize);
    }
}

// Points the views of `w` into `mem`, whose elements are `esize` bytes, following the
// table's offsets.
static void make_views(GPT *m, GPTWeights *w, void *mem, size_t esize) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, "wte")) w->wte = at(mem, m->params[i].offset, esize);
        else if (!strcmp(m->params[i].name, "output_layer")) w->out = at(mem, m->params[i].offset, esize);
    if (m->first && !m->cfg.rope) w->wpe = at(mem, m->params[gpt_param_index(m, "wpe")].offset, esize);
    for (int l = 0; l < m->n_layers; l++) gpt_point_layer_views(m, &w->blocks[l], l, mem, 0, mem, 0, esize);
    if (m->last) {
        w->lnfw = at(mem, m->params[gpt_param_index(m, "final_ln.weight")].offset, esize);
        int b = gpt_param_index(m, "final_ln.bias");  // none with RMSNorm
        w->lnfb = b >= 0 ? at(mem, m->params[b].offset, esize) : NULL;
    }
}

static void init_params(GPT *m, uint64_t seed) {
    float *host = core_calloc(m->n_floats, sizeof(float));
    for (int i = 0; i < m->n_params; i++)
        gpt_param_init(&m->params[i], &m->cfg, m->tp, m->tp_rank, seed, host + m->params[i].offset);
    m->be->ops->copy(m->be, m->param_mem, host, m->n_floats * sizeof(float), BACKEND_H2D);
    free(host);
}

// The grid's part of the stage: tensor, context and expert parallelism's sizes, this rank's
// place in them and the CP and EP groups (grid NULL: one rank).
static void place_in_grid(GPT *m, const ProcessGrid *grid, const GPTStage *st) {
    const PGridDims *d = grid ? &grid->dims : NULL;
    m->tp = d ? d->tp : 1;
    m->tp_rank = d ? grid->coord.tp_rank : 0;
    m->cp = d ? pgrid_dims_cp(d) : 1;
    m->cp_rank = m->cp > 1 ? grid->coord.cp_rank : 0;
    m->cp_comm = m->cp > 1 ? grid->cp : NULL;
    m->cp_host = m->cp > 1 ? grid->cp_host : NULL;
    m->cp_comm_type = m->cp > 1 ? st->cp_comm : CP_COMM_P2P;
    m->ep = d ? pgrid_dims_ep(d) : 1;
    m->ep_rank = m->ep > 1 ? grid->coord.ep_rank : 0;
    m->ep_comm = m->ep > 1 ? grid->ep : NULL;
}

// The stage's sizes: its layers, rows (B, T, N, N_sp; context and sequence parallelism) and
// tensor-parallel widths. A layout the sizes do not divide is a usage error (exit 2).
static void set_sizes(GPT *m, const GPTStage *st) {
    const GPTConfig *cfg = &m->cfg;
    int tp = m->tp;
    int v = st->vpp > 1 ? st->vpp : 1;
    gpt_stage_layers(cfg, st->n_stages / v, v, st->stage, &m->layer0, &m->n_layers);
    m->first = (st->stage == 0);
    m->last = (st->stage == st->n_stages - 1);
    m->B = st->micro_batch;
    if (cfg->num_experts > 0 && cfg->num_experts % m->ep)
        core_usage_error("--num-experts %d is not divisible by --expert-model-parallel-size %d",
                         cfg->num_experts, m->ep);
    m->T_seq = cfg->seq_length;
    char err[256];
    if (gpt_cp_check(cfg, tp, m->cp, m->cp_comm_type, err, sizeof err)) core_usage_error("%s", err);
    m->T = m->T_seq / m->cp;
    m->N = m->B * m->T;
    m->sp = st->sequence_parallel && tp > 1;
    m->N_sp = m->sp ? m->N / tp : m->N;
    if (m->sp && m->N % tp)
        core_usage_error("--sequence-parallel: micro-batch x seq-length = %d is not divisible by "
                         "tensor-model-parallel-size %d", m->N, tp);
    // The whole model's fact, not this stage's, so every rank refuses alike (gpt_moe_check
    // already refused experts with no MoE layer).
    if (cfg->num_experts > 0 && cfg->moe_capacity > 0 && (m->sp || m->cp > 1))
        core_usage_error("--moe-expert-capacity-factor with --sequence-parallel or "
                         "--context-parallel-size > 1 is not implemented yet (the capacity is per "
                         "micro-batch: its rows would have to be routed together)");
    m->NH_tp = cfg->num_heads / tp;
    m->F_tp = cfg->ffn_hidden_size / tp;
    m->hs = gpt_head_size(cfg);
    m->A_tp = m->NH_tp * m->hs;
    m->G_tp = gpt_kv_heads(cfg) / tp;
    m->rot = gpt_rotary_dim(cfg);
    m->QKV_tp = (m->NH_tp + 2 * m->G_tp) * m->hs;
    m->remap_qkv = cfg->rope || m->G_tp != m->NH_tp;
    m->Vp = gpt_padded_vocab(cfg, tp);
    m->vocab = tp_vocab_split(cfg->vocab_size, m->Vp, tp, m->tp_rank);
}

// The parameter table, the flat buffers (n_alloc floats, a multiple of st->pad_multiple;
// the experts' region from expert_offset), their views, and the initial weights.
static void build_params(GPT *m, const ProcessGrid *grid, const GPTStage *st) {
    Backend *be = m->be;
    size_t pad_multiple = st->pad_multiple;
    size_t total, dense, experts;
    m->params = gpt_params_build_ep(&m->cfg, m->tp, m->ep, m->ep_rank, m->Vp, m->layer0,
                                    m->n_layers, m->first, m->last, &m->n_params, &total);
    gpt_params_regions(m->params, m->n_params, m->ep, &dense, &experts);
    GPTParamsGeometry geo = gpt_params_geometry(dense, experts, pad_multiple);  // megac plan's
    if (m->ep > 1 && gpt_params_place_experts(m->params, m->n_params, pad_multiple, &total) !=
                         (experts ? geo.expert_offset : total))
        core_fatal("gpt: the expert region's placement differs from gpt_params_geometry's");
    if (m->ep > 1 && m->tp > 1 && pgrid_dims_etp(&grid->dims) == 1)  // not replicated over TP
        gpt_params_experts_over_tp(m->params, m->n_params);
    m->block_param = core_calloc((size_t)m->n_layers + 1, sizeof(int));
    gpt_params_block_index(m->params, m->n_params, m->layer0, m->n_layers, m->block_param);
    m->n_floats = geo.n_floats;
    m->n_alloc = geo.n_alloc;
    m->expert_offset = geo.expert_offset;
    m->param_mem = be->ops->alloc(be, m->n_alloc * sizeof(float));
    m->grad_mem = be->ops->alloc(be, m->n_alloc * sizeof(float));
    size_t act = backend_dtype_size(be->act);
    m->param_copy = be->act == BACKEND_F32 ? (void *)m->param_mem : be->ops->alloc(be, m->n_alloc * act);
    m->w.blocks = core_calloc((size_t)m->n_layers, sizeof(GPTBlockW));
    m->g.blocks = core_calloc((size_t)m->n_layers, sizeof(GPTBlockW));
    make_views(m, &m->w, m->param_copy, act);
    make_views(m, &m->g, m->grad_mem, sizeof(float));
    init_params(m, st->seed);
    gpt_refresh_weight_copies(m);
}

GPTActBytes gpt_measure(const GPTConfig *cfg, const PGridDims *dims, const GPTStage *st, BackendDType act) {
    GPT *m = core_calloc(1, sizeof *m);
    Backend be = {0};  // only its activation type is read (nothing is allocated or called)
    be.act = act;
    m->cfg = *cfg;
    m->be = &be;
    ProcessGrid grid = {0};  // the sizes; ranks 0 and no communicators
    grid.dims = *dims;
    place_in_grid(m, &grid, st);
    set_sizes(m, st);
    GPTActBytes r = gpt_acts_measure(m);
    free(m);
    return r;
}

GPT *gpt_create(const GPTConfig *cfg, Backend *be, const ProcessGrid *grid, const GPTStage *st) {
    GPT *m = core_calloc(1, sizeof *m);
    m->cfg = *cfg;
    m->be = be;
    // MEGAC_NO_FUSED_CLASSIFIER=1: d(logits) in the backward, as before the fused classifier
    // (the same bits: a check of the fused path, and a switch for attribution on a GPU)
    const char *nofuse = getenv("MEGAC_NO_FUSED_CLASSIFIER");
    m->fused_classifier = !(nofuse && strcmp(nofuse, "1") == 0);
    place_in_grid(m, grid, st);
    set_sizes(m, st);
    build_params(m, grid, st);
    gpt_acts_alloc(m, st->n_slots);
    m->s.dscale_value = 0.0f;
    m->s.dscale_host = core_calloc((size_t)m->N, sizeof(float));
    gpt_moe_create(m);
    return m;
}

void gpt_destroy(GPT *m) {
    if (!m) return;
    Backend *be = m->be;
    for (int s = 0; s < m->n_slots; s++) {
        be->ops->free(be, m->slots[s].mem);
        be->ops->free(be, m->slots[s].doc_pos);  // gpt_documents.c
        be->ops->free(be, m->slots[s].doc_start);
        be->ops->free(be, m->slots[s].doc_start_seq);
        free(m->slots[s].layers);
    }
    free(m->slots);
    free(m->rc);
    if (m->scratch_bytes) be->ops->free(be, m->s.mem);  // 0: shared, chunk 0 frees it
    free(m->s.dscale_host);
    gpt_moe_destroy(m);
    free(m->mask.w);  // --eod-mask-loss (gpt_loss_mask.c)
    free(m->mask.loss_host);
    free(m->docs.host);
    be->ops->free(be, m->param_mem);
    be->ops->free(be, m->grad_mem);
    if (m->param_copy != (void *)m->param_mem) be->ops->free(be, m->param_copy);
    free(m->w.blocks);
    free(m->g.blocks);
    free(m->params);
    free(m->block_param);
    free(m);
}

int gpt_param_index(const GPT *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

void gpt_zero_grads(GPT *m) {
    if (m->grad_mem) m->be->ops->zero(m->be, m->grad_mem, m->n_alloc * sizeof(float));
}

void gpt_release_flat_buffers(GPT *m, int grads, int params) {
    if (grads) {
        m->be->ops->free(m->be, m->grad_mem);
        m->grad_mem = NULL;
    }
    if (params) {  // fp32: the ops read param_mem; bf16/fp16: the copies go too
        if (m->param_copy != (void *)m->param_mem) m->be->ops->free(m->be, m->param_copy);
        m->be->ops->free(m->be, m->param_mem);
        m->param_mem = NULL;
        m->param_copy = NULL;
    }
}

void gpt_refresh_weight_copies(GPT *m) {
    if (m->be->act == BACKEND_F32 || !m->param_mem) return;  // ZeRO-3: gathered per layer
    m->be->ops->cast(m->be, m->param_copy, m->be->act, m->param_mem, BACKEND_F32, m->n_alloc);
}

// model/gpt_alloc.c: allocation of a GPT stage: flat parameter/gradient buffers and their
// views, activation slots and backward workspace, all carved out of a few big allocations
// made once at start-up (nothing is allocated in the training step).
#include "gpt.h"
#include "core/check.h"
#include "gpt_cp.h"  // defines: gpt_cp_check, gpt_cp_attention
#include "gpt_moe.h"

#include <stdlib.h>
#include <string.h>

// Bump allocator over one backend allocation: pass 1 (base NULL) counts, pass 2 carves.
typedef struct {
    char *base;
    size_t used;
} Carver;

static void *carve(Carver *cv, size_t bytes) {
    void *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += (bytes + 63) / 64 * 64;
    return p;
}
#define CARVE_F(cv, n) ((float *)carve((cv), (size_t)(n) * sizeof(float)))
// n activation elements of the backend's type (fp32, bf16 or fp16)
#define CARVE_A(cv, n) carve((cv), (size_t)(n) * backend_dtype_size(m->be->act))

// A mixture-of-experts layer's routing and expert activations (GPTMoEActs; gpt_moe.h); the
// host counts are set by gpt_moe_create and kept.
static void carve_moe(GPT *m, Carver *cv, GPTMoEActs *x) {
    const GPTConfig *c = &m->cfg;
    size_t n = (size_t)m->N_sp, E = (size_t)c->num_experts, K = (size_t)c->moe_topk, NK = n * K;
    size_t M = gpt_moe_rows(m), C = (size_t)c->hidden_size, Fe = (size_t)gpt_moe_ffn(c);
    size_t R = gpt_moe_recv_rows(m);  // the local experts' rows (M without expert parallelism)
    size_t G = c->moe_load_balancing == GPT_MOE_LB_SEQ_AUX ? (size_t)m->B : 1;
    x->logits = CARVE_F(cv, n * E);
    x->idx = carve(cv, NK * sizeof(int));
    x->probs = CARVE_F(cv, NK);
    x->perm = carve(cv, M * sizeof(int));
    x->slot = carve(cv, NK * sizeof(int));
    x->pprobs = CARVE_F(cv, M);
    x->coef = CARVE_F(cv, G * E);
    x->xp = CARVE_A(cv, R * C);
    x->fch = CARVE_A(cv, R * (backend_act_gated(c->activation) ? 2 : 1) * Fe);
    x->fch_act = CARVE_A(cv, R * Fe);
    x->eo = CARVE_A(cv, M * C);
}

// One layer's activations (GPTLayerActs in gpt.h); kind: GPT_MLP_DENSE and/or GPT_MLP_MOE,
// the MLPs it may run (a recomputation chunk's shared buffers: either).
enum { GPT_MLP_DENSE = 1, GPT_MLP_MOE = 2 };
static int layer_kind(const GPT *m, int l) {
    return gpt_moe_layer(&m->cfg, m->layer0 + l) ? GPT_MLP_MOE : GPT_MLP_DENSE;
}
// The widest tensor-parallel dense MLP that layers of `kind` run (F/tp, the shared expert's
// Fs/tp), 0 for none. Pure.
static size_t mlp_width(const GPT *m, int kind) {
    size_t F = kind & GPT_MLP_DENSE ? (size_t)m->F_tp : 0;
    size_t Fs = kind & GPT_MLP_MOE ? (size_t)(m->cfg.moe_shared_ffn / m->tp) : 0;
    return F > Fs ? F : Fs;
}
static void carve_layer(GPT *m, Carver *cv, GPTLayerActs *L, int kind) {
    size_t N = (size_t)m->N, Ns = (size_t)m->N_sp, C = (size_t)m->cfg.hidden_size;
    size_t rows = (size_t)m->B * m->NH_tp * m->T;  // attention rows (b, h, t)
    int flash = m->cfg.use_flash_attn;
    L->ln1 = CARVE_A(cv, Ns * C);
    L->ln1_mean = CARVE_F(cv, Ns);
    L->ln1_rstd = CARVE_F(cv, Ns);
    L->qkv = CARVE_A(cv, N * 3 * m->A_tp);
    int selective = m->cfg.recompute == GPT_RECOMPUTE_SELECTIVE;
    L->att = flash ? NULL : selective ? m->s.att : CARVE_A(cv, rows * m->T);  // selective: shared
    L->lse = flash ? CARVE_F(cv, rows) : NULL;
    L->atty = CARVE_A(cv, N * m->A_tp);
    L->res2 = CARVE_A(cv, Ns * C);
    L->ln2 = CARVE_A(cv, Ns * C);
    L->ln2_mean = CARVE_F(cv, Ns);
    L->ln2_rstd = CARVE_F(cv, Ns);
    size_t F = mlp_width(m, kind);  // the dense MLP's, or a shared expert's (gpt_block.c)
    if (F) {
        L->fch = CARVE_A(cv, N * (backend_act_gated(m->cfg.activation) ? 2 : 1) * F);
        L->fch_act = CARVE_A(cv, N * F);
    }
    if (kind & GPT_MLP_MOE) carve_moe(m, cv, &L->moe);
    L->res3 = CARVE_A(cv, Ns * C);
}

// A micro-batch's activations. A recomputed layer uses the shared chunk buffers (m->rc) and
// keeps only its output here when it ends its chunk: the next chunk's input.
static void carve_slot(GPT *m, Carver *cv, GPTActs *a) {
    size_t N = (size_t)m->N, Ns = (size_t)m->N_sp, C = (size_t)m->cfg.hidden_size;
    a->tokens = carve(cv, N * sizeof(int));
    a->targets = carve(cv, N * sizeof(int));
    a->x0 = CARVE_A(cv, Ns * C);
    for (int l = 0; l < m->n_layers; l++) {
        GPTLayerActs *L = &a->layers[l];
        int first, last;
        if (!gpt_layer_recomputed(m, l, &first, &last)) {
            carve_layer(m, cv, L, layer_kind(m, l));
            continue;
        }
        *L = m->rc[l - first];
        if (l == last) L->res3 = CARVE_A(cv, Ns * C);  // the chunk's output
    }
    if (m->last) {
        a->lnf = CARVE_A(cv, Ns * C);
        a->lnf_mean = CARVE_F(cv, Ns);
        a->lnf_rstd = CARVE_F(cv, Ns);
        a->logits = CARVE_A(cv, N * m->vocab.V_tp);
        a->xent.rowmax = CARVE_F(cv, N);
        a->xent.stats = CARVE_F(cv, 2 * N);
        a->xent.loss = CARVE_F(cv, N);
    }
}

static void carve_scratch(GPT *m, Carver *cv) {
    size_t N = (size_t)m->N, Ns = (size_t)m->N_sp, C = (size_t)m->cfg.hidden_size;
    m->s.dres = CARVE_A(cv, Ns * C);
    m->s.dln = CARVE_A(cv, Ns * C);
    m->s.dqkv = CARVE_A(cv, N * 3 * m->A_tp);
    size_t rows = (size_t)m->B * m->NH_tp * m->T;  // attention rows (b, h, t)
    m->s.datt = CARVE_F(cv, m->cfg.use_flash_attn ? rows : rows * m->T);
    m->s.datty = CARVE_A(cv, N * m->A_tp);
    // (from the config, not the stage's layers: interleaved chunks share one layout)
    int gated = backend_act_gated(m->cfg.activation), moe = m->cfg.num_experts > 0;
    size_t F = mlp_width(m, GPT_MLP_DENSE | (moe ? GPT_MLP_MOE : 0));
    m->s.dfch = CARVE_A(cv, N * (gated ? 2 : 1) * F);
    m->s.dact = gated ? CARVE_A(cv, N * F) : NULL;
    m->s.shared_out = moe && m->cfg.moe_shared_ffn ? CARVE_A(cv, Ns * C) : NULL;
    m->s.qkv_in = m->remap_qkv ? CARVE_A(cv, N * m->QKV_tp) : NULL;
    m->s.dscale = CARVE_F(cv, N);
    if (m->sp) {
        m->s.sp_gather = CARVE_A(cv, N * C);
        m->s.sp_full = CARVE_A(cv, N * C);
    }
    if (m->cfg.recompute == GPT_RECOMPUTE_SELECTIVE && !m->cfg.use_flash_attn)
        m->s.att = CARVE_A(cv, rows * m->T);
    if (m->cp > 1) {  // the layer's workspace (layers/cp_attention.h)
        CPAttention cp = gpt_cp_attention(m);
        m->s.cp_buf = CARVE_A(cv, cp_attention_workspace(&cp.d));
    }
    int kinds = 0;  // the recomputation chunk's buffers serve any of the stage's layers
    for (int l = 0; l < m->n_layers; l++) kinds |= layer_kind(m, l);
    for (int i = 0; i < m->n_rc; i++) carve_layer(m, cv, &m->rc[i], kinds);
}

int gpt_layer_recomputed(const GPT *m, int l, int *first, int *last) {
    const GPTConfig *c = &m->cfg;
    *first = *last = l;
    if (c->recompute != GPT_RECOMPUTE_FULL) return 0;
    if (c->recompute_block) return l < c->recompute_num_layers;  // each layer alone
    int k = c->recompute_num_layers;
    *first = l / k * k;
    *last = *first + k - 1 < m->n_layers - 1 ? *first + k - 1 : m->n_layers - 1;
    return 1;
}

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
    gpt_stage_layers(cfg, st->n_stages, st->stage, &m->layer0, &m->n_layers);
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
    m->params = gpt_params_build_ep(&m->cfg, m->tp, m->ep, m->ep_rank, m->Vp, m->layer0,
                                    m->n_layers, m->first, m->last, &m->n_params, &m->n_floats);
    size_t experts = m->ep > 1 ? gpt_params_place_experts(m->params, m->n_params, pad_multiple,
                                                          &m->n_floats) : 0;
    if (m->ep > 1 && m->tp > 1 && pgrid_dims_etp(&grid->dims) == 1)  // not replicated over TP
        gpt_params_experts_over_tp(m->params, m->n_params);
    m->block_param = core_calloc((size_t)m->n_layers + 1, sizeof(int));
    gpt_params_block_index(m->params, m->n_params, m->layer0, m->n_layers, m->block_param);
    m->n_alloc = (m->n_floats + pad_multiple - 1) / pad_multiple * pad_multiple;
    m->expert_offset = m->ep > 1 && experts < m->n_floats ? experts : m->n_alloc;
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

// The backward workspace, then n_slots activation slots, each one backend allocation
// measured by its carver's first pass and carved by the second.
static void alloc_activations(GPT *m, int n_slots) {
    Backend *be = m->be;
    const GPTConfig *cfg = &m->cfg;
    if (cfg->recompute == GPT_RECOMPUTE_FULL) {  // one chunk's layers, shared by the slots
        int k = cfg->recompute_block ? 1 : cfg->recompute_num_layers;
        m->n_rc = k < m->n_layers ? k : m->n_layers;
        m->rc = core_calloc((size_t)(m->n_rc > 0 ? m->n_rc : 1), sizeof(GPTLayerActs));
    }
    Carver sc = {NULL, 0};  // the workspace first: recomputed layers point into it
    carve_scratch(m, &sc);
    sc.base = be->ops->alloc(be, sc.used);
    m->s.mem = sc.base;
    m->scratch_bytes = sc.used;
    sc.used = 0;
    carve_scratch(m, &sc);
    m->n_slots = n_slots;
    m->slots = core_calloc((size_t)n_slots, sizeof(GPTActs));
    for (int s = 0; s < n_slots; s++) {
        GPTActs *a = &m->slots[s];
        a->layers = core_calloc((size_t)m->n_layers, sizeof(GPTLayerActs));
        Carver cv = {NULL, 0};
        carve_slot(m, &cv, a);
        cv.base = be->ops->alloc(be, cv.used);
        m->slot_bytes = cv.used;
        a->mem = cv.base;
        cv.used = 0;
        carve_slot(m, &cv, a);
    }
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
    alloc_activations(m, st->n_slots);
    m->s.dscale_value = 0.0f;
    m->s.dscale_host = core_calloc((size_t)m->N, sizeof(float));
    gpt_moe_create(m);
    return m;
}

void gpt_share_workspace(GPT **chunks, int n) {
    GPT *owner = chunks[0];
    for (int c = 1; c < n; c++) {
        GPT *m = chunks[c];
        if (m->be != owner->be || m->scratch_bytes != owner->scratch_bytes)
            core_fatal("gpt_share_workspace: chunk %d's workspace is %zu bytes, chunk 0's %zu", c,
                       m->scratch_bytes, owner->scratch_bytes);
        m->be->ops->free(m->be, m->s.mem);
        m->s.mem = owner->s.mem;
        m->scratch_bytes = 0;  // chunk 0 holds (and frees) it
        Carver sc = {m->s.mem, 0};
        carve_scratch(m, &sc);  // the same layout as chunk 0's: dscale stays where it was
        for (int s = 0; s < m->n_slots; s++) {  // recomputed layers point into the workspace
            Carver cv = {m->slots[s].mem, 0};
            carve_slot(m, &cv, &m->slots[s]);
        }
    }
}

void gpt_destroy(GPT *m) {
    if (!m) return;
    Backend *be = m->be;
    for (int s = 0; s < m->n_slots; s++) {
        be->ops->free(be, m->slots[s].mem);
        be->ops->free(be, m->slots[s].doc_pos);  // gpt_documents.c
        be->ops->free(be, m->slots[s].doc_start);
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

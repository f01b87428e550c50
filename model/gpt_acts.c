// model/gpt_acts.c: the activation layout of a GPT stage (gpt_acts.h): each micro-batch's
// slot, the backward workspace and the recomputation chunk's shared layers, carved out of one
// backend allocation each by a bump allocator whose counting pass is also what gpt_measure
// (megac plan's memory) returns.
#include "gpt_acts.h"
#include "core/check.h"
#include "gpt_cp.h"  // defines: gpt_cp_attention
#include "gpt_moe.h"

#include <stdlib.h>

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

// A mixture-of-experts layer's routing and expert activations (MoEActs; layers/moe.h); the
// host counts are set by gpt_moe_create and kept.
static void carve_moe(GPT *m, Carver *cv, MoEActs *x) {
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

// A slot's pieces besides its layers: the input, and on the last stage the final norm,
// logits and loss statistics.
static void carve_slot_ends(GPT *m, Carver *cv, GPTActs *a) {
    size_t N = (size_t)m->N, Ns = (size_t)m->N_sp, C = (size_t)m->cfg.hidden_size;
    a->tokens = carve(cv, N * sizeof(int));
    a->targets = carve(cv, N * sizeof(int));
    a->x0 = CARVE_A(cv, Ns * C);
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

// A micro-batch's activations. A recomputed layer uses the shared chunk buffers (m->rc) and
// keeps only its output here when it ends its chunk: the next chunk's input.
static void carve_slot(GPT *m, Carver *cv, GPTActs *a) {
    size_t Ns = (size_t)m->N_sp, C = (size_t)m->cfg.hidden_size;
    carve_slot_ends(m, cv, a);
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
}

// The MoE layers among local layers [l0, l1).
static int moe_layers(const GPT *m, int l0, int l1) {
    int n = 0;
    for (int l = l0; m->cfg.num_experts > 0 && l < l1; l++) n += layer_kind(m, l) == GPT_MLP_MOE;
    return n;
}

// The bytes carve_slot carves, from its pieces without walking a dense stage's layers: the
// kept layers of a kind are alike (carve_layer), and each recomputation chunk keeps its
// output (gpt_recompute_counts; the recomputed layers are the first R). gpt_acts_alloc
// checks it against every slot it carves.
static size_t slot_bytes(GPT *m) {
    int R, outputs;
    gpt_recompute_counts(m, &R, &outputs);
    int moe = moe_layers(m, R, m->n_layers), dense = m->n_layers - R - moe;
    GPTActs a = {0};
    GPTLayerActs L;
    Carver ends = {NULL, 0}, ld = {NULL, 0}, lm = {NULL, 0}, out = {NULL, 0};
    carve_slot_ends(m, &ends, &a);
    if (dense) carve_layer(m, &ld, &L, GPT_MLP_DENSE);
    if (moe) carve_layer(m, &lm, &L, GPT_MLP_MOE);
    CARVE_A(&out, (size_t)m->N_sp * m->cfg.hidden_size);
    return ends.used + (size_t)dense * ld.used + (size_t)moe * lm.used + (size_t)outputs * out.used;
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
    int n_moe = moe_layers(m, 0, m->n_layers);  // the recomputation chunk's buffers serve
    int kinds = (n_moe ? GPT_MLP_MOE : 0) | (n_moe < m->n_layers ? GPT_MLP_DENSE : 0);  // any layer
    for (int i = 0; i < m->n_rc; i++) carve_layer(m, cv, &m->rc[i], kinds);
}

void gpt_recompute_counts(const GPT *m, int *recomputed, int *chunks) {
    const GPTConfig *c = &m->cfg;
    int n = m->n_layers, k = c->recompute_num_layers;
    *recomputed = *chunks = 0;
    if (c->recompute != GPT_RECOMPUTE_FULL || n <= 0) return;
    *recomputed = c->recompute_block ? (k < n ? k : n) : n;
    *chunks = c->recompute_block ? *recomputed : (n + k - 1) / k;
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

void gpt_acts_recompute_chunk(GPT *m) {
    const GPTConfig *cfg = &m->cfg;
    if (cfg->recompute != GPT_RECOMPUTE_FULL) return;
    int k = cfg->recompute_block ? 1 : cfg->recompute_num_layers;
    m->n_rc = k < m->n_layers ? k : m->n_layers;
    m->rc = core_calloc((size_t)(m->n_rc > 0 ? m->n_rc : 1), sizeof(GPTLayerActs));
}

void gpt_acts_alloc(GPT *m, int n_slots) {
    Backend *be = m->be;
    gpt_acts_recompute_chunk(m);
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
        if (cv.used != slot_bytes(m))  // gpt_measure's count (megac plan's) is this slot's
            core_fatal("gpt: a slot carves %zu bytes, slot_bytes counts %zu", cv.used, slot_bytes(m));
        cv.base = be->ops->alloc(be, cv.used);
        m->slot_bytes = cv.used;
        a->mem = cv.base;
        cv.used = 0;
        carve_slot(m, &cv, a);
    }
}

GPTActBytes gpt_acts_measure(GPT *m) {
    gpt_acts_recompute_chunk(m);
    GPTActBytes r = {0};
    Carver sc = {NULL, 0};  // the counting pass of gpt_acts_alloc
    carve_scratch(m, &sc);
    r.scratch = sc.used;
    r.slot = slot_bytes(m);  // (checked against the carved slots by gpt_acts_alloc)
    r.moe_workspace = gpt_moe_workspace_bytes(m);
    free(m->rc);
    m->rc = NULL;
    m->n_rc = 0;
    return r;
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

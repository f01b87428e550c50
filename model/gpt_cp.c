// model/gpt_cp.c: context parallelism's attention (gpt_cp.h): the p2p ring and the
// all_gather variant over the CP group, on any backend (flash attention windows).
#include "gpt_cp.h"
#include "core/check.h"
#include "layers/tp_linear.h"  // defines: tp_act_dtype

#include <stdio.h>
#include <string.h>

int gpt_cp_check(const GPTConfig *cfg, int cp, char *err, size_t errlen) {
    if (cp < 1) return snprintf(err, errlen, "--context-parallel-size must be >= 1, got %d", cp), -1;
    if (cp > 1 && cfg->seq_length % (2 * cp))
        return snprintf(err, errlen, "--context-parallel-size %d: --seq-length %d is not divisible "
                        "by 2 x %d (each rank holds two of the 2 x CP chunks of a sequence)", cp,
                        cfg->seq_length, cp), -1;
    if (cp > 1 && !cfg->use_flash_attn)
        return snprintf(err, errlen, "--context-parallel-size %d needs --use-flash-attn (the ring "
                        "merges attention blocks by their log-sum-exp)", cp), -1;
    return 0;
}

int gpt_cp_chunk_pos(int T_seq, int cp, int r, int h) {
    int c = T_seq / (2 * cp);
    return (h ? 2 * cp - 1 - r : r) * c;
}

GPTRows gpt_cp_rows(const GPT *m, int64_t sample0) {
    GPTRows r = {m->B, m->T, gpt_cp_chunk_pos(m->T_seq, m->cp, m->cp_rank, 0), sample0, 1,
                 gpt_cp_chunk_pos(m->T_seq, m->cp, m->cp_rank, 1), NULL, NULL};
    return r;
}

void gpt_cp_select(int *local, const int *full, int B, int T_seq, int cp, int cp_rank) {
    int c = T_seq / (2 * cp);
    for (int h = 0; h < 2; h++)
        for (int b = 0; b < B; b++)
            memcpy(local + ((size_t)h * B + b) * c,
                   full + (size_t)b * T_seq + gpt_cp_chunk_pos(T_seq, cp, cp_rank, h),
                   (size_t)c * sizeof(int));
}

// The pieces of this rank's buffers one attention call reads or writes: half h of the
// qkv-shaped rows (B, c, 3*C/tp), of the ring's packed K/V rows (B, c, 2*G_tp*hs), of atty
// (B, c, C/tp) and of lse (B, NH/tp, c).
typedef struct {
    GPT *m;
    int P, i, c, hs;
    size_t esz, qkv_half, kv_half, y_half, lse_half;  // bytes, bytes, bytes, floats
    size_t n;    // elements of a whole qkv buffer (N, 3*C/tp)
    size_t nkv;  // elements of a whole packed K/V buffer (N, 2*G_tp*hs)
    CommDtype dt;
} CPCtx;

static CPCtx ctx(GPT *m) {
    CPCtx x = {m, m->cp, m->cp_rank, m->T / 2, m->hs, backend_dtype_size(m->be->act), 0, 0, 0, 0,
               0, 0, tp_act_dtype(m->be)};
    x.qkv_half = (size_t)m->B * x.c * 3 * m->A_tp * x.esz;
    x.kv_half = (size_t)m->B * x.c * 2 * m->G_tp * m->hs * x.esz;
    x.y_half = (size_t)m->B * x.c * m->A_tp * x.esz;
    x.lse_half = (size_t)m->B * m->NH_tp * x.c;
    x.n = (size_t)m->N * 3 * m->A_tp;
    x.nkv = (size_t)m->N * 2 * m->G_tp * m->hs;
    if (!m->cp_comm) core_fatal("context parallelism: no CP group (gpt_create)");
    return x;
}

// The ring's packing: kv (N, 2*G_tp*hs) = [k | v] of kv heads g = expanded heads g*(NH/G)
// of the attention-layout rows qkv (N, 3*C/tp), whose other heads of a group are copies
// (rope_gqa_forward); without GQA just the k | v parts. back 1: the reverse, ADDING kv's
// dK/dV into those heads of qkv's rows (the group's other heads untouched: rope_gqa_backward
// sums the group, so the group's gradient lands in its kv head once).
static void pack_kv(const CPCtx *x, void *kv, void *qkv, int back) {
    GPT *m = x->m;
    int R = m->NH_tp / m->G_tp, nb = R == 1 ? 1 : 2 * m->G_tp, w = R == 1 ? 2 * m->A_tp : m->hs;
    size_t kvw = 2 * (size_t)m->G_tp * m->hs, C3 = 3 * (size_t)m->A_tp, sb = (size_t)R * m->hs;
    char *kvp = (char *)qkv + (size_t)m->A_tp * x->esz;  // the k part of row 0
    if (back) m->be->ops->copy_row_blocks(m->be, kvp, C3, sb, kv, kvw, (size_t)m->hs, m->N, nb, w, 1);
    else m->be->ops->copy_row_blocks(m->be, kv, kvw, (size_t)m->hs, kvp, C3, sb, m->N, nb, w, 0);
}

static char *half(const void *p, size_t bytes, int h) { return (char *)p + h * bytes; }

// The gathered qkv rows of every rank, gath (cp, N, 3*C/tp) in rank order, put into seq (B,
// T_seq, 3*C/tp) in sequence order (to_seq 1), or the reverse (to_seq 0).
static void reorder(const CPCtx *x, void *gath, void *seq, int to_seq) {
    GPT *m = x->m;
    size_t row = 3 * (size_t)m->A_tp * x->esz, chunk = (size_t)x->c * row;
    for (int r = 0; r < x->P; r++)
        for (int h = 0; h < 2; h++)
            for (int b = 0; b < m->B; b++) {
                char *g = (char *)gath + (size_t)r * x->n * x->esz + ((size_t)h * m->B + b) * chunk;
                char *s = (char *)seq + ((size_t)b * m->T_seq + gpt_cp_chunk_pos(m->T_seq, x->P, r, h)) * row;
                m->be->ops->copy(m->be, to_seq ? s : g, to_seq ? g : s, chunk, BACKEND_D2D);
            }
}

// all_gather: seq (B, T_seq, 3*C/tp) = the whole sequences' qkv rows; gath is workspace.
static void gather_seq(const CPCtx *x, const GPTLayerActs *a, void *gath, void *seq) {
    comm_all_gather(x->m->cp_comm, a->qkv, gath, x->n, x->dt);
    reorder(x, gath, seq, 1);
}

void gpt_cp_attention_forward(GPT *m, const GPTLayerActs *a, const BackendDropout *d) {
    CPCtx x = ctx(m);
    Backend *be = m->be;
    char *buf = m->s.cp_buf;
    if (m->cp_all_gather) {
        char *gath = buf, *seq = buf + (size_t)x.P * x.n * x.esz;
        gather_seq(&x, a, gath, seq);
        for (int h = 0; h < 2; h++) {
            BackendAttnWindow w = {gpt_cp_chunk_pos(m->T_seq, x.P, x.i, h), 0, m->T_seq, seq, 0, NULL, 0, NULL};
            be->ops->flash_attention_forward(be, half(a->atty, x.y_half, h), a->lse + h * x.lse_half,
                                             half(a->qkv, x.qkv_half, h), m->B, x.c, m->NH_tp, x.hs, d, &w);
        }
        return;
    }
    // the ring of packed K/V rows: cur is the block of rank j = i - s; next receives rank
    // j - 1's (into the buffer the previous step sent from)
    char *kvb[2] = {buf, buf + x.nkv * x.esz}, *cur = kvb[0];
    pack_kv(&x, cur, a->qkv, 0);
    int started[2] = {0, 0};
    for (int s = 0; s < x.P; s++) {
        int j = (x.i - s + x.P) % x.P;
        char *next = kvb[(s + 1) % 2];
        CommRequest req = {0};
        if (s < x.P - 1)
            comm_isend_recv(m->cp_comm, cur, x.nkv, (x.i + 1) % x.P, next, x.nkv,
                            (x.i - 1 + x.P) % x.P, x.dt, &req);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 2; k++) {
                int qpos = gpt_cp_chunk_pos(m->T_seq, x.P, x.i, h), kpos = gpt_cp_chunk_pos(m->T_seq, x.P, j, k);
                if (kpos > qpos) continue;  // every key after every query
                BackendAttnWindow w = {qpos, kpos, x.c, half(cur, x.kv_half, k), started[h], NULL,
                                       m->G_tp, NULL};
                started[h] = 1;
                be->ops->flash_attention_forward(be, half(a->atty, x.y_half, h), a->lse + h * x.lse_half,
                                                 half(a->qkv, x.qkv_half, h), m->B, x.c, m->NH_tp, x.hs, d, &w);
            }
        if (s < x.P - 1) {
            comm_wait(m->cp_comm, &req);
            cur = next;
        }
    }
}

// One backward call: dq of query half h += , dK/dV of kv's Tk key rows (window at kpos; G
// packed kv heads, 0: qkv-layout rows) += into dkv's.
static void backward_block(const CPCtx *x, const GPTLayerActs *a, const BackendDropout *d, int h,
                           int kpos, int Tk, const void *kv, void *dkv, int G) {
    GPT *m = x->m;
    Backend *be = m->be;
    BackendAttnWindow w = {gpt_cp_chunk_pos(m->T_seq, x->P, x->i, h), kpos, Tk, kv, 0, dkv, G, NULL};
    be->ops->flash_attention_backward(be, half(m->s.dqkv, x->qkv_half, h), m->s.datt,
                                      half(m->s.datty, x->y_half, h), half(a->qkv, x->qkv_half, h),
                                      half(a->atty, x->y_half, h), a->lse + h * x->lse_half, m->B,
                                      x->c, m->NH_tp, x->hs, d, &w);
}

void gpt_cp_attention_backward(GPT *m, const GPTLayerActs *a, const BackendDropout *d) {
    CPCtx x = ctx(m);
    Backend *be = m->be;
    char *buf = m->s.cp_buf;
    size_t bytes = x.n * x.esz;
    be->ops->zero(be, m->s.dqkv, bytes);  // dq accumulates; k|v parts come at the end
    if (m->cp_all_gather) {
        char *gath = buf, *seq = buf + (size_t)x.P * bytes, *mine = buf + 2 * (size_t)x.P * bytes;
        gather_seq(&x, a, gath, seq);
        char *dseq = gath;  // (B, T_seq, 3*C/tp): dK/dV of the whole sequences
        be->ops->zero(be, dseq, (size_t)x.P * bytes);
        for (int h = 0; h < 2; h++) backward_block(&x, a, d, h, 0, m->T_seq, seq, dseq, 0);
        reorder(&x, seq, dseq, 0);  // seq now holds them in rank order
        comm_reduce_scatter(m->cp_comm, seq, mine, x.n, x.dt, COMM_SUM);
        be->ops->add(be, m->s.dqkv, m->s.dqkv, mine, x.n);
        return;
    }
    size_t kvbytes = x.nkv * x.esz;
    char *kvb[2] = {buf, buf + kvbytes}, *cur = kvb[0];
    char *dbuf[2] = {buf + 2 * kvbytes, buf + 3 * kvbytes}, *dcur = dbuf[0];
    pack_kv(&x, cur, a->qkv, 0);
    be->ops->zero(be, dcur, kvbytes);
    for (int s = 0; s < x.P; s++) {
        int j = (x.i - s + x.P) % x.P;
        char *next = kvb[(s + 1) % 2];
        CommRequest req = {0};
        if (s < x.P - 1)
            comm_isend_recv(m->cp_comm, cur, x.nkv, (x.i + 1) % x.P, next, x.nkv,
                            (x.i - 1 + x.P) % x.P, x.dt, &req);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 2; k++) {
                int qpos = gpt_cp_chunk_pos(m->T_seq, x.P, x.i, h), kpos = gpt_cp_chunk_pos(m->T_seq, x.P, j, k);
                if (kpos <= qpos)
                    backward_block(&x, a, d, h, kpos, x.c, half(cur, x.kv_half, k),
                                   half(dcur, x.kv_half, k), m->G_tp);
            }
        // the block's dK/dV partial goes on with it (the last hop takes it home)
        char *dnext = dcur == dbuf[0] ? dbuf[1] : dbuf[0];
        comm_send_recv(m->cp_comm, dcur, x.nkv, (x.i + 1) % x.P, dnext, x.nkv,
                       (x.i - 1 + x.P) % x.P, x.dt);
        dcur = dnext;
        if (s < x.P - 1) {
            comm_wait(m->cp_comm, &req);
            cur = next;
        }
    }
    pack_kv(&x, dcur, m->s.dqkv, 1);  // k | v parts of dqkv are 0 until here
}

// layers/cp_attention.c: context parallelism's attention (cp_attention.h): the p2p ring
// (one ring step for the forward and the backward), the all_gather variant and Ulysses'
// all-to-all of heads (a2a) over the CP group, on any backend (flash attention windows); their workspace and calls.
#include "cp_attention.h"
#include "core/check.h"
#include "tp_linear.h"  // defines: tp_act_dtype

#include <stdio.h>
#include <stdlib.h>  // defines: free
#include <string.h>

int cp_chunk_pos(int T_seq, int cp, int r, int h) {
    int c = T_seq / (2 * cp);
    return (h ? 2 * cp - 1 - r : r) * c;
}

static const char *const NAMES[CP_COMM_NTYPES] = {"p2p", "all_gather", "a2a"};

const char *cp_comm_type_name(CPCommType t) {
    return t >= 0 && t < CP_COMM_NTYPES ? NAMES[t] : "?";
}

int cp_comm_type_parse(const char *s, char *err, size_t errlen) {
    for (int t = 0; t < CP_COMM_NTYPES; t++)
        if (!strcmp(s, NAMES[t])) return t;
    if (!err) return -1;
    size_t n = (size_t)snprintf(err, errlen, "--cp-comm-type must be ");
    for (int t = 0; t < CP_COMM_NTYPES && n < errlen; t++)
        n += (size_t)snprintf(err + n, errlen - n, "%s%s", t == 0 ? "" : t == CP_COMM_NTYPES - 1 ? " or " : ", ",
                              NAMES[t]);
    if (n < errlen) n += (size_t)snprintf(err + n, errlen - n, ", got '%s'", s);
    if (n < errlen && !strcmp(s, "a2a+p2p"))
        snprintf(err + n, errlen - n, " (Megatron's hierarchical a2a+p2p is not implemented in megac)");
    return -1;
}

int cp_attention_check(const CPAttnDims *d, char *err, size_t errlen) {
    if (d->type < 0 || d->type >= CP_COMM_NTYPES)
        return snprintf(err, errlen, "--cp-comm-type: unknown exchange %d", (int)d->type), -1;
    if (d->type == CP_COMM_A2A && d->NH % d->cp)
        return snprintf(err, errlen, "--cp-comm-type a2a: the %d attention heads of each tensor-parallel "
                        "rank are not divisible by --context-parallel-size %d (each CP rank attends "
                        "NH/CP heads)", d->NH, d->cp), -1;
    return 0;
}

// Local rows of the layer of d.
static size_t rows(const CPAttnDims *d) { return (size_t)d->B * (size_t)(d->T_seq / d->cp); }

size_t cp_attention_workspace(const CPAttnDims *d) {
    size_t N = rows(d);
    if (d->type == CP_COMM_ALL_GATHER)  // the gathered rows, in sequence order, this rank's dK/dV
        return (size_t)(2 * d->cp + 1) * N * 3 * d->NH * d->hs;
    if (d->type == CP_COMM_A2A)  // (N, NH*hs) parts: qkv 3, out 1, dout 1, dqkv 3, send 3
        return 11 * N * d->NH * d->hs;
    return 4 * N * 2 * (size_t)d->G * d->hs;  // two packed K/V blocks, two dK/dV partials
}

int cp_attention_calls(const CPAttnDims *d, int backward, CommCall calls[CP_MAX_CALLS]) {
    size_t N = rows(d), n = N * 3 * d->NH * d->hs, nkv = N * 2 * (size_t)d->G * d->hs;
    int P = d->cp;
    if (d->type == CP_COMM_ALL_GATHER) {  // the gather, and the backward's dK/dV home
        calls[0] = (CommCall){COMM_ALL_GATHER, n, 1, 0};
        calls[1] = (CommCall){COMM_REDUCE_SCATTER, n, 1, 0};
        return backward ? 2 : 1;
    }
    if (d->type == CP_COMM_A2A) {  // to each of the P - 1 peers: its rows of its NH/P heads
        size_t u = (size_t)(P - 1) * N * (size_t)(d->NH / P) * d->hs;
        calls[0] = (CommCall){COMM_ALL_TO_ALL, 3 * u, backward ? 2 : 1, 0};  // qkv (and dqkv)
        calls[1] = (CommCall){COMM_ALL_TO_ALL, u, backward ? 2 : 1, 0};        // out (and dout)
        return 2;
    }
    // P - 1 K/V hops; the backward's P hops of each key half's dK/dV partial besides
    calls[0] = (CommCall){COMM_SEND, nkv, P - 1, 0};
    calls[1] = (CommCall){COMM_RECV, nkv, P - 1, 0};
    calls[2] = (CommCall){COMM_SEND, nkv / 2, 2 * P, 0};
    calls[3] = (CommCall){COMM_RECV, nkv / 2, 2 * P, 0};
    return backward ? 4 : 2;
}

// The pieces of this rank's buffers one attention call reads or writes: half h of the
// qkv-shaped rows (B, c, 3*NH*hs), of the ring's packed K/V rows (B, c, 2*G*hs), of atty
// (B, c, NH*hs) and of lse (B, NH, c).
typedef struct {
    const CPAttention *L;
    Backend *be;
    int P, i, c, B, T_seq, NH, G, hs, N;
    size_t esz, qkv_half, kv_half, y_half, lse_half;  // bytes, bytes, bytes, floats
    size_t n;    // elements of a whole qkv buffer (N, 3*NH*hs)
    size_t nkv;  // elements of a whole packed K/V buffer (N, 2*G*hs)
    CommDtype dt;
} CPCtx;

static CPCtx ctx(const CPAttention *L) {
    const CPAttnDims *d = &L->d;
    CPCtx x = {L, L->be, d->cp, d->rank, d->T_seq / (2 * d->cp), d->B, d->T_seq, d->NH, d->G,
               d->hs, (int)rows(d), backend_dtype_size(L->be->act), 0, 0, 0, 0, 0, 0,
               tp_act_dtype(L->be)};
    size_t A = (size_t)d->NH * d->hs;  // attention channels
    x.qkv_half = (size_t)x.B * x.c * 3 * A * x.esz;
    x.kv_half = (size_t)x.B * x.c * 2 * x.G * x.hs * x.esz;
    x.y_half = (size_t)x.B * x.c * A * x.esz;
    x.lse_half = (size_t)x.B * x.NH * x.c;
    x.n = (size_t)x.N * 3 * A;
    x.nkv = (size_t)x.N * 2 * x.G * x.hs;
    if (!L->comm) core_fatal("context parallelism: no CP group");
    return x;
}

// What the attention calls of one pass read and write (the backward's: dqkv non-NULL).
typedef struct {
    void *atty;
    float *lse;
    const void *qkv;
    const BackendDropout *d;
    void *dqkv;
    float *scratch;
    const void *datty;
    CPDocStarts docs;
} CPIO;

// The ring's packing: kv (N, 2*G*hs) = [k | v] of kv heads g = expanded heads g*(NH/G) of
// the attention-layout rows qkv (N, 3*NH*hs), whose other heads of a group are copies
// (rope_gqa_forward); without GQA just the k | v parts. back 1: the reverse, ADDING kv's
// dK/dV into those heads of qkv's rows (the group's other heads untouched: rope_gqa_backward
// sums the group, so the group's gradient lands in its kv head once).
static void pack_kv(const CPCtx *x, void *kv, const void *qkv, int back) {
    int A = x->NH * x->hs, R = x->NH / x->G, nb = R == 1 ? 1 : 2 * x->G, w = R == 1 ? 2 * A : x->hs;
    size_t kvw = 2 * (size_t)x->G * x->hs, C3 = 3 * (size_t)A, sb = (size_t)R * x->hs;
    char *kvp = (char *)qkv + (size_t)A * x->esz;  // the k part of row 0
    if (back) x->be->ops->copy_row_blocks(x->be, kvp, C3, sb, kv, kvw, (size_t)x->hs, x->N, nb, w, 1);
    else x->be->ops->copy_row_blocks(x->be, kv, kvw, (size_t)x->hs, kvp, C3, sb, x->N, nb, w, 0);
}

static char *half(const void *p, size_t bytes, int h) { return (char *)p + h * bytes; }

// Rows of `width` elements of every rank, gath (cp, N, width) in rank order, put into seq
// (B, T_seq, width) in sequence order (to_seq 1), or the reverse (to_seq 0).
static void reorder(const CPCtx *x, void *gath, void *seq, size_t width, int to_seq) {
    size_t row = width * x->esz, chunk = (size_t)x->c * row;
    for (int r = 0; r < x->P; r++)
        for (int h = 0; h < 2; h++)
            for (int b = 0; b < x->B; b++) {
                char *g = (char *)gath + ((size_t)r * x->N + ((size_t)h * x->B + b) * x->c) * row;
                size_t t = (size_t)b * x->T_seq + cp_chunk_pos(x->T_seq, x->P, r, h);
                char *s = (char *)seq + t * row;
                x->be->ops->copy(x->be, to_seq ? s : g, to_seq ? g : s, chunk, BACKEND_D2D);
            }
}

// all_gather: seq (B, T_seq, 3*NH*hs) = the whole sequences' qkv rows; gath is workspace.
static void gather_seq(const CPCtx *x, const void *qkv, void *gath, void *seq) {
    comm_all_gather(x->L->comm, qkv, gath, x->n, x->dt);
    reorder(x, gath, seq, 3 * (size_t)x->NH * x->hs, 1);
}

// One call of query half h against Tk key rows at kpos of kv (G packed kv heads; 0:
// qkv-layout rows): the forward merges into atty and lse (accumulate: after earlier
// windows); the backward adds dq of half h and the keys' dK/dV into dkv.
static void attend(const CPCtx *x, const CPIO *io, int h, int kpos, int Tk, const void *kv,
                   void *dkv, int G, int accumulate) {
    Backend *be = x->be;
    const int *qstart = io->docs.rows ? io->docs.rows + (size_t)h * x->B * x->c : NULL;  // half h's
    BackendAttnWindow w = {cp_chunk_pos(x->T_seq, x->P, x->i, h), kpos, Tk, kv, accumulate,
                           io->dqkv ? dkv : NULL, G, qstart};
    if (!io->dqkv)
        be->ops->flash_attention_forward(be, half(io->atty, x->y_half, h), io->lse + h * x->lse_half,
                                         half(io->qkv, x->qkv_half, h), x->B, x->c, x->NH, x->hs,
                                         io->d, &w);
    else
        be->ops->flash_attention_backward(be, half(io->dqkv, x->qkv_half, h), io->scratch,
                                          half(io->datty, x->y_half, h), half(io->qkv, x->qkv_half, h),
                                          half(io->atty, x->y_half, h), io->lse + h * x->lse_half,
                                          x->B, x->c, x->NH, x->hs, io->d, &w);
}

// The ring's state: kv[s % 2] the packed K/V block held at step s, kv[(s + 1) % 2] the one
// arriving; in the backward dkv[s % 2] its dK/dV partial, each key half of which hops on to
// rank i+1 as soon as it is complete (hop[k]: in flight since the previous step).
typedef struct {
    char *kv[2], *dkv[2];
    int started[2];      // forward: query half h has merged a window
    CommRequest hop[2];  // backward: the partial of key half k on its way to rank i+1
} CPRing;

// Step s of the ring (forward: io->dqkv NULL; backward): the next block starts from rank
// i-1 while this one, of rank j = i-s, is attended, key half by key half (each output gets
// its terms in the order of h, of k and of s). In the backward, key half k's partial waits
// for its arrival (the previous step's hop[k]) before this rank adds to it, and leaves for
// rank i+1 as soon as both query halves have: half 0 travels while half 1 is computed, half
// 1 while the next step computes half 0. Every wait is for a call started one step earlier
// on every rank, so no order of ranks deadlocks.
static void ring_step(const CPCtx *x, const CPIO *io, CPRing *r, int s) {
    Comm *comm = x->L->comm;
    int j = (x->i - s + x->P) % x->P, to = (x->i + 1) % x->P, from = (x->i - 1 + x->P) % x->P;
    char *cur = r->kv[s % 2], *dcur = r->dkv[s % 2], *dnext = r->dkv[(s + 1) % 2];
    CommRequest req = {0};
    size_t nhalf = x->nkv / 2;
    if (s < x->P - 1)
        comm_isend_recv(comm, cur, x->nkv, to, r->kv[(s + 1) % 2], x->nkv, from, x->dt, &req);
    for (int k = 0; k < 2; k++) {
        int kpos = cp_chunk_pos(x->T_seq, x->P, j, k);
        char *kv = half(cur, x->kv_half, k), *dkv = half(dcur, x->kv_half, k);
        if (io->dqkv) comm_wait(comm, &r->hop[k]);  // this half's partial has arrived
        for (int h = 0; h < 2; h++) {
            if (kpos > cp_chunk_pos(x->T_seq, x->P, x->i, h)) continue;  // every key after every query
            if (io->dqkv) attend(x, io, h, kpos, x->c, kv, dkv, x->G, 0);
            else attend(x, io, h, kpos, x->c, kv, NULL, x->G, r->started[h]);
            r->started[h] = 1;
        }
        if (io->dqkv)  // the partial goes on with its block (the last hop takes it home)
            comm_isend_recv(comm, dkv, nhalf, to, half(dnext, x->kv_half, k), nhalf, from, x->dt,
                            &r->hop[k]);
    }
    comm_wait(comm, &req);
}

// The whole ring over the P blocks (forward or backward, as ring_step); returns the
// buffer that holds this rank's block's dK/dV when it has come home (backward).
static char *ring(const CPCtx *x, const CPIO *io) {
    char *buf = x->L->work;
    size_t kvbytes = x->nkv * x->esz;
    CPRing r = {{buf, buf + kvbytes}, {buf + 2 * kvbytes, buf + 3 * kvbytes}, {0, 0}, {{0}, {0}}};
    pack_kv(x, r.kv[0], io->qkv, 0);
    if (io->dqkv) x->be->ops->zero(x->be, r.dkv[0], kvbytes);
    for (int s = 0; s < x->P; s++) ring_step(x, io, &r, s);
    for (int k = 0; k < 2; k++) comm_wait(x->L->comm, &r.hop[k]);  // home
    return r.dkv[x->P % 2];
}

// The all-to-all of heads: to 1, block p of send (N, np*H*hs) = heads p*H.. of rows, sent
// to rank p, and recv (P, N, np*H*hs) = this rank's heads of each rank's rows; to 0, the
// reverse (recv's blocks of heads p*H.. from rank p into rows).
static void exchange_heads(const CPCtx *x, const void *rows, int np, void *send, void *recv, int to) {
    Backend *be = x->be;
    size_t A = (size_t)x->NH * x->hs, W = (size_t)(x->NH / x->P) * x->hs, blk = (size_t)x->N * np * W;
    size_t *counts = core_calloc((size_t)x->P, sizeof *counts);
    for (int p = 0; p < x->P; p++) counts[p] = blk;
    for (int p = 0; p < x->P && to; p++)
        be->ops->copy_row_blocks(be, (char *)send + p * blk * x->esz, np * W, W,
                                 (const char *)rows + p * W * x->esz, np * A, A, x->N, np, (int)W, 0);
    comm_all_to_all_v(x->L->comm, send, counts, recv, counts, x->dt);
    for (int p = 0; p < x->P && !to; p++)
        be->ops->copy_row_blocks(be, (char *)rows + p * W * x->esz, np * A, A,
                                 (const char *)recv + p * blk * x->esz, np * W, W, x->N, np, (int)W, 0);
    free(counts);
}

// Ulysses (a2a): rank p attends heads p*H.. (H = NH/P) of each of np parts (q | k | v, or
// one) over the whole sequences. seq (B, T_seq, np*H*hs) = this rank's heads of every rank's
// rows (N, np*NH*hs); send and recv: workspace of N*np*NH*hs elements each.
static void to_heads(const CPCtx *x, const void *rows, int np, void *send, void *recv, void *seq) {
    exchange_heads(x, rows, np, send, recv, 1);
    reorder(x, recv, seq, (size_t)np * (x->NH / x->P) * x->hs, 1);
}

// The reverse of to_heads: rows (N, np*NH*hs) [overwritten] from every rank's seq.
static void from_heads(const CPCtx *x, const void *seq, int np, void *send, void *recv, void *rows) {
    reorder(x, send, (void *)seq, (size_t)np * (x->NH / x->P) * x->hs, 0);
    exchange_heads(x, rows, np, send, recv, 0);
}

// The dropout of this rank's heads: global head h0 + i*H of local head 0.
static const BackendDropout *heads_dropout(const CPCtx *x, const BackendDropout *d, BackendDropout *own) {
    if (!d) return NULL;
    *own = *d;
    own->h0 += x->i * (x->NH / x->P);
    return own;
}

// a2a's forward (io->dqkv NULL) or backward: heads in, one attention of the whole sequences,
// heads out. The (N, NH*hs)-part regions of the workspace: qs 3, ys 1, r2 1, r3 3, send 3.
static void ulysses(const CPCtx *x, const CPIO *io) {
    Backend *be = x->be;
    size_t u = (size_t)x->N * x->NH * x->hs * x->esz;
    char *qs = x->L->work, *ys = qs + 3 * u, *r2 = qs + 4 * u, *r3 = qs + 5 * u, *send = qs + 8 * u;
    int H = x->NH / x->P;
    BackendDropout own;
    const BackendDropout *d = heads_dropout(x, io->d, &own);
    BackendAttnWindow docs = {0, 0, x->T_seq, NULL, 0, NULL, 0, io->docs.seq};  // documents
    const BackendAttnWindow *w = io->docs.seq ? &docs : NULL;
    to_heads(x, io->qkv, 3, send, r3, qs);  // (B, T_seq, 3*H*hs)
    if (!io->dqkv) {
        be->ops->flash_attention_forward(be, ys, io->lse, qs, x->B, x->T_seq, H, x->hs, d, w);
        from_heads(x, ys, 1, send, r2, io->atty);
        return;
    }
    to_heads(x, io->atty, 1, send, r3, ys);
    to_heads(x, io->datty, 1, send, r3, r2);
    if (w) be->ops->zero(be, r3, 3 * u);  // a window adds: dqkv from 0
    be->ops->flash_attention_backward(be, r3, io->scratch, r2, qs, ys, io->lse, x->B, x->T_seq, H,
                                      x->hs, d, w);
    from_heads(x, r3, 3, send, qs, io->dqkv);
}

void cp_attention_forward(const CPAttention *L, void *atty, float *lse, const void *qkv,
                          const BackendDropout *d, CPDocStarts docs) {
    CPCtx x = ctx(L);
    CPIO io = {atty, lse, qkv, d, NULL, NULL, NULL, docs};
    if (L->d.type == CP_COMM_A2A) {
        ulysses(&x, &io);
        return;
    }
    if (L->d.type == CP_COMM_P2P) {
        ring(&x, &io);
        return;
    }
    char *gath = L->work, *seq = gath + (size_t)x.P * x.n * x.esz;
    gather_seq(&x, qkv, gath, seq);
    for (int h = 0; h < 2; h++) attend(&x, &io, h, 0, x.T_seq, seq, NULL, 0, 0);
}

void cp_attention_backward(const CPAttention *L, void *dqkv, float *scratch, const void *datty,
                           const void *qkv, const void *atty, const float *lse,
                           const BackendDropout *d, CPDocStarts docs) {
    CPCtx x = ctx(L);
    Backend *be = x.be;
    CPIO io = {(void *)atty, (float *)lse, qkv, d, dqkv, scratch, datty, docs};
    size_t bytes = x.n * x.esz;
    if (L->d.type == CP_COMM_A2A) {  // writes every element of dqkv
        ulysses(&x, &io);
        return;
    }
    be->ops->zero(be, dqkv, bytes);  // dq accumulates; k|v parts come at the end
    if (L->d.type == CP_COMM_P2P) {
        pack_kv(&x, ring(&x, &io), dqkv, 1);  // k | v parts of dqkv are 0 until here
        return;
    }
    char *gath = L->work, *seq = gath + (size_t)x.P * bytes, *mine = gath + 2 * (size_t)x.P * bytes;
    gather_seq(&x, qkv, gath, seq);
    char *dseq = gath;  // (B, T_seq, 3*NH*hs): dK/dV of the whole sequences
    be->ops->zero(be, dseq, (size_t)x.P * bytes);
    for (int h = 0; h < 2; h++) attend(&x, &io, h, 0, x.T_seq, seq, dseq, 0, 0);
    reorder(&x, seq, dseq, 3 * (size_t)x.NH * x.hs, 0);  // seq now holds them in rank order
    comm_reduce_scatter(L->comm, seq, mine, x.n, x.dt, COMM_SUM);
    be->ops->add(be, dqkv, dqkv, mine, x.n);
}

// tests/backend/attention_ring.h: a ring over key blocks (context parallelism) composed from
// the windowed flash ops, on any backend (buffers through its alloc and copy; header only).
//
// The sequence T = 2*P*c is cut into 2P chunks of c rows; "rank" i holds chunks i and
// 2P-1-i (the causal load balance). For each of its query chunks a rank runs the flash
// forward over the key chunks in ring order (ranks i, i-1, ...: both chunks of each; skipped
// when every key is after the queries; the own chunk a as the diagonal with kv NULL),
// overwriting on the first block and accumulating after (or, with fresh, accumulating from
// the start onto out 0 and lse -inf: "no key seen yet"); then the flash backward once per
// visible block with the final out and lse, adding dq into the query chunk's buffer and
// dk, dv into the key chunk's dkv (the diagonal: into the query chunk's own rows, dkv NULL).
// The result, reassembled on the host, must be the whole-sequence op's; the q parts of the
// dkv buffers must stay 0. With G kv heads (grouped-query attention, as the model's ring):
// qkv's k | v heads are copies within each group of NH/G (ring_group_copies); every block,
// the diagonal too, is a packed (B, c, 2*G*hs) buffer (window kv_heads G) and so is its dkv;
// the reassembled dqkv holds a kv head's dk, dv in the group's first head and 0 in the others
// (compare with ring_group_sum of the whole-sequence op's), and dq's k | v parts stay 0.
#pragma once
#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int B, NH, hs, P, c;     // T = 2*P*c
    const BackendDropout *d;  // attention dropout (d->T = T: global positions) or NULL
    int fresh;                // 1: every forward accumulates, from out 0 and lse -inf
    int G;                    // kv heads, packed rows (0: the qkv-layout rows)
} AttnRing;

// rows of qkv (rows, 3*NH*hs): each k | v head h set to head h - h % (NH/G) of its group.
static inline void ring_group_copies(float *qkv, size_t rows, int NH, int hs, int G) {
    int C = NH * hs, R = NH / G;
    for (size_t r = 0; r < rows; r++)
        for (int p = 1; p < 3; p++)
            for (int h = 0; h < NH; h++)
                if (h % R) memcpy(qkv + r * 3 * C + p * C + h * hs,
                                  qkv + r * 3 * C + p * C + (h - h % R) * hs, hs * sizeof(float));
}

// rows of dqkv (rows, 3*NH*hs): each group's k | v gradients summed into its first head, the
// others 0 (what the model's rope_gqa_backward reads the same as the expanded gradients).
static inline void ring_group_sum(float *dqkv, size_t rows, int NH, int hs, int G) {
    int C = NH * hs, R = NH / G;
    for (size_t r = 0; r < rows; r++)
        for (int p = 1; p < 3; p++)
            for (int h = 0; h < NH; h++)
                if (h % R)
                    for (int e = 0; e < hs; e++) {
                        float *x = dqkv + r * 3 * C + p * C;
                        x[(h - h % R) * hs + e] += x[h * hs + e];
                        x[h * hs + e] = 0.0f;
                    }
}

// dst (B, n, W) = rows [t0, t0 + n) of each sequence of src (B, T, W), both host.
static inline void ring_rows_get(float *dst, const float *src, int B, int T, int t0, int n,
                                 int W) {
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * n * W, src + ((size_t)b * T + t0) * W,
               (size_t)n * W * sizeof(float));
}

// Backend copy of host floats (n).
static inline void *ring_up(Backend *be, const float *h, size_t n) {
    void *p = be->ops->alloc(be, n * sizeof(float));
    be->ops->copy(be, p, h, n * sizeof(float), BACKEND_H2D);
    return p;
}

// The global chunk of query chunk s (0 or 1) of rank i.
static inline int ring_chunk(const AttnRing *g, int i, int s) {
    return s == 0 ? i : 2 * g->P - 1 - i;
}

// out (B, T, C), lse (B, NH, T), dqkv (B, T, 3C) on the host from qkv (B, T, 3C) and dout
// (B, T, C) (host), composed as above on be. Returns the number of non-zero entries in the
// q parts of the dkv buffers, or with G in the k | v parts of dq (0 when the backward leaves
// them untouched).
static inline int attn_ring_run(Backend *be, const AttnRing *g, const float *qkv,
                                 const float *dout, float *out, float *lse, float *dqkv) {
    int B = g->B, NH = g->NH, hs = g->hs, P = g->P, c = g->c, T = 2 * P * c, NC = 2 * P;
    int C = NH * hs, C3 = 3 * C, G = g->G, R = G ? NH / G : 1, KW = G ? 2 * G * hs : C3;
    size_t nq = (size_t)B * c * C3, no = (size_t)B * c * C, nl = (size_t)B * NH * c;
    size_t nk = (size_t)B * c * KW;
    float *h = malloc(nq * sizeof(float)), *hz = calloc(nq, sizeof(float));
    float *hk = malloc(nk * sizeof(float));
    void *cq[2 * 8], *cdq[2 * 8], *cdkv[2 * 8], *ckv[2 * 8];  // per chunk: qkv, dq, dkv, packed kv
    for (int a = 0; a < NC; a++) {
        ring_rows_get(h, qkv, B, T, a * c, c, C3);
        cq[a] = ring_up(be, h, nq);
        cdq[a] = ring_up(be, hz, nq), cdkv[a] = ring_up(be, hz, nk);
        for (size_t r = 0; G && r < (size_t)B * c; r++)  // kv head i of [k | v]: head i*R
            for (int i = 0; i < 2 * G; i++)
                memcpy(hk + r * KW + i * hs, h + r * C3 + C + (size_t)i * R * hs, hs * sizeof(float));
        ckv[a] = G ? ring_up(be, hk, nk) : NULL;
    }
    void *o = be->ops->alloc(be, no * sizeof(float)), *dy = be->ops->alloc(be, no * sizeof(float));
    float *l = be->ops->alloc(be, nl * sizeof(float)), *scr = be->ops->alloc(be, nl * sizeof(float));
    float *ho = malloc(no * sizeof(float)), *hl = malloc(nl * sizeof(float));
    int stray = 0;
    for (int i = 0; i < P; i++)
        for (int s = 0; s < 2; s++) {
            int a = ring_chunk(g, i, s), q0 = a * c, first = !g->fresh;
            if (g->fresh) {  // out 0, lse -inf
                for (size_t e = 0; e < nl; e++) hl[e] = -INFINITY;
                be->ops->zero(be, o, no * sizeof(float));
                be->ops->copy(be, l, hl, nl * sizeof(float), BACKEND_H2D);
            }
            int vis[2 * 8], nv = 0;  // visible key chunks in ring order
            for (int r = 0; r < P; r++)
                for (int ks = 0; ks < 2; ks++) {
                    int kc = ring_chunk(g, ((i - r) % P + P) % P, ks);
                    if (kc <= a) vis[nv++] = kc;  // kc > a: every key after the queries
                }
            for (int v = 0; v < nv; v++) {
                int kc = vis[v];
                BackendAttnWindow w = {q0, kc * c, c, kc == a ? NULL : cq[kc], !first, NULL, G, NULL};
                if (G) w.kv = ckv[kc];
                be->ops->flash_attention_forward(be, o, l, cq[a], B, c, NH, hs, g->d, &w);
                first = 0;
            }
            ring_rows_get(h, dout, B, T, q0, c, C);
            be->ops->copy(be, dy, h, no * sizeof(float), BACKEND_H2D);
            for (int v = 0; v < nv; v++) {
                int kc = vis[v];
                BackendAttnWindow w = {q0, kc * c, c, kc == a ? NULL : cq[kc], 0,
                                       kc == a ? NULL : cdkv[kc], G, NULL};
                if (G) w.kv = ckv[kc], w.dkv = cdkv[kc];
                be->ops->flash_attention_backward(be, cdq[a], scr, dy, cq[a], o, l, B, c, NH, hs,
                                                  g->d, &w);
            }
            be->ops->copy(be, ho, o, no * sizeof(float), BACKEND_D2H);
            be->ops->copy(be, hl, l, nl * sizeof(float), BACKEND_D2H);
            for (int b = 0; b < B; b++) {
                memcpy(out + ((size_t)b * T + q0) * C, ho + (size_t)b * c * C,
                       (size_t)c * C * sizeof(float));
                for (int hh = 0; hh < NH; hh++)
                    memcpy(lse + ((size_t)b * NH + hh) * T + q0, hl + ((size_t)b * NH + hh) * c,
                           (size_t)c * sizeof(float));
            }
        }
    // dqkv: the q part from the chunk's dq; k | v: its dkv plus the diagonal's (in dq's rows);
    // packed: kv head i's into head i*R, dq's k | v parts must be 0.
    for (int a = 0; a < NC; a++) {
        be->ops->copy(be, h, cdq[a], nq * sizeof(float), BACKEND_D2H);
        be->ops->copy(be, hz, cdkv[a], nk * sizeof(float), BACKEND_D2H);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < c; t++) {
                float *dst = dqkv + ((size_t)b * T + a * c + t) * C3;
                const float *x = h + ((size_t)b * c + t) * C3, *y = hz + ((size_t)b * c + t) * KW;
                if (G) {
                    for (int j = 0; j < C3; j++) dst[j] = j < C ? x[j] : 0.0f;
                    for (int j = C; j < C3; j++) stray += x[j] != 0.0f;
                    for (int i = 0; i < 2 * G; i++)
                        memcpy(dst + C + (size_t)i * R * hs, y + i * hs, hs * sizeof(float));
                    continue;
                }
                for (int j = 0; j < C3; j++) dst[j] = x[j] + (j < C ? 0.0f : y[j]);
                for (int j = 0; j < C; j++) stray += y[j] != 0.0f;
            }
        be->ops->free(be, cq[a]), be->ops->free(be, cdq[a]), be->ops->free(be, cdkv[a]);
        be->ops->free(be, ckv[a]);
    }
    be->ops->free(be, o), be->ops->free(be, dy), be->ops->free(be, l), be->ops->free(be, scr);
    free(h), free(hz), free(hk), free(ho), free(hl);
    return stray;
}

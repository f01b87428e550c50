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
// dkv buffers must stay 0.
#pragma once
#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int B, NH, hs, P, c;     // T = 2*P*c
    const BackendDropout *d;  // attention dropout (d->T = T: global positions) or NULL
    int fresh;                // 1: every forward accumulates, from out 0 and lse -inf
} AttnRing;

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
// q parts of the dkv buffers (0 when the backward leaves them untouched).
static inline int attn_ring_run(Backend *be, const AttnRing *g, const float *qkv,
                                 const float *dout, float *out, float *lse, float *dqkv) {
    int B = g->B, NH = g->NH, hs = g->hs, P = g->P, c = g->c, T = 2 * P * c, NC = 2 * P;
    int C = NH * hs, C3 = 3 * C;
    size_t nq = (size_t)B * c * C3, no = (size_t)B * c * C, nl = (size_t)B * NH * c;
    float *h = malloc(nq * sizeof(float)), *hz = calloc(nq, sizeof(float));
    void *cq[2 * 8], *cdq[2 * 8], *cdkv[2 * 8];  // per chunk: its qkv rows, dq, dkv (P <= 8)
    for (int a = 0; a < NC; a++) {
        ring_rows_get(h, qkv, B, T, a * c, c, C3);
        cq[a] = ring_up(be, h, nq);
        cdq[a] = ring_up(be, hz, nq), cdkv[a] = ring_up(be, hz, nq);
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
                BackendAttnWindow w = {q0, kc * c, c, kc == a ? NULL : cq[kc], !first, NULL};
                be->ops->flash_attention_forward(be, o, l, cq[a], B, c, NH, hs, g->d, &w);
                first = 0;
            }
            ring_rows_get(h, dout, B, T, q0, c, C);
            be->ops->copy(be, dy, h, no * sizeof(float), BACKEND_H2D);
            for (int v = 0; v < nv; v++) {
                int kc = vis[v];
                BackendAttnWindow w = {q0, kc * c, c, kc == a ? NULL : cq[kc], 0,
                                       kc == a ? NULL : cdkv[kc]};
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
    // dqkv: the q part from the chunk's dq; k | v: its dkv plus the diagonal's (in dq's rows).
    for (int a = 0; a < NC; a++) {
        be->ops->copy(be, h, cdq[a], nq * sizeof(float), BACKEND_D2H);
        be->ops->copy(be, hz, cdkv[a], nq * sizeof(float), BACKEND_D2H);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < c; t++) {
                float *dst = dqkv + ((size_t)b * T + a * c + t) * C3;
                const float *x = h + ((size_t)b * c + t) * C3, *y = hz + ((size_t)b * c + t) * C3;
                for (int j = 0; j < C3; j++) dst[j] = x[j] + (j < C ? 0.0f : y[j]);
                for (int j = 0; j < C; j++) stray += y[j] != 0.0f;
            }
        be->ops->free(be, cq[a]), be->ops->free(be, cdq[a]), be->ops->free(be, cdkv[a]);
    }
    be->ops->free(be, o), be->ops->free(be, dy), be->ops->free(be, l), be->ops->free(be, scr);
    free(h), free(hz), free(ho), free(hl);
    return stray;
}

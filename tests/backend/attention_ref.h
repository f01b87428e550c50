// tests/backend/attention_ref.h: the double-precision causal self-attention reference that
// the CPU attention tests share (header only): out = causal softmax(q k^T / sqrt(hs)) v, with
// on request the probabilities, each row's log-sum-exp and dropout on the probabilities (the
// mask from the backend's own hash), and L = sum(g * out) for finite differences (fd_grad).
#pragma once
#include "backend/backend.h"
#include "tests/backend/backend_test_util.h"

typedef struct {
    int B, T, NH, hs;
    double *qkv, *out;        // (B, T, 3C) input, (B, T, C) output
    double *att, *lse;        // (B, NH, T, T) probabilities (after dropout, 0 above the
                              // diagonal), (B, NH, T) log-sum-exp of the scores; or NULL
    const BackendDropout *d;  // dropout on the probabilities, or NULL
    const float *g;           // (B, T, C) upstream gradient, for attention_ref_loss
} AttnRef;

// c->out (and c->att, c->lse where not NULL) from c->qkv, all in double.
static inline void attention_ref(AttnRef *c) {
    int T = c->T, NH = c->NH, hs = c->hs, C = NH * hs;
    const BackendDropout *d = c->d;
    double scale = 1.0 / sqrt((double)hs), *s = test_doubles((size_t)T);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = c->qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double m = -INFINITY, l = 0;
                for (int u = 0; u <= t; u++) {
                    const double *k = c->qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    double dot = 0;
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    m = fmax(m, s[u] = dot * scale);
                }
                for (int u = 0; u <= t; u++) l += (s[u] = exp(s[u] - m));
                if (c->lse) c->lse[((size_t)b * NH + h) * T + t] = m + log(l);
                // the mask index of (b, h, t, u): backend.h's attention_forward
                uint64_t base = d ? (((uint64_t)(d->sample0 + b) * d->NH + d->h0 + h) * T + t) * T : 0;
                for (int u = 0; u <= t; u++) s[u] = s[u] / l * (d ? dropout_factor(d, base + u) : 1.0);
                double *a = c->att ? c->att + (((size_t)b * NH + h) * T + t) * T : NULL;
                for (int u = 0; a && u < T; u++) a[u] = u <= t ? s[u] : 0.0;
                double *o = c->out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++)
                        acc += s[u] * c->qkv[((size_t)b * T + u) * 3 * C + 2 * C + h * hs + i];
                    o[i] = acc;
                }
            }
    free(s);
}

// L = sum(g * out) of the reference (a TestLossFn: ctx is an AttnRef).
static inline double attention_ref_loss(void *ctx) {
    AttnRef *c = ctx;
    attention_ref(c);
    return dot_fd(c->g, c->out, (size_t)c->B * c->T * c->NH * c->hs);
}

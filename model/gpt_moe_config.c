// model/gpt_moe_config.c: which layers are mixture-of-experts layers (--moe-layer-freq) and
// the checks of the MoE fields (gpt_moe.h).
#include "gpt_moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Megatron's list form of --moe-layer-freq, a Python expression of 0/1 lists: list literals,
// `+` (concatenation), `* int` (repetition) and parentheses, e.g. "([1]*3+[0])*2". A small
// recursive-descent parser writing into out[0 .. cap); *n counts the entries (may exceed cap:
// then only the count is right). Returns 0, or -1 on a syntax error.
typedef struct {
    const char *s;
    unsigned char *out;
    long cap, n;
} Pattern;

static void skip(Pattern *p) {
    while (*p->s == ' ') p->s++;
}
static int expr(Pattern *p);

static int factor(Pattern *p) {
    skip(p);
    if (*p->s == '(') {
        p->s++;
        if (expr(p)) return -1;
        skip(p);
        if (*p->s != ')') return -1;
        p->s++;
        return 0;
    }
    if (*p->s != '[') return -1;
    p->s++;
    for (;;) {
        skip(p);
        if (*p->s != '0' && *p->s != '1') return -1;
        if (p->n < p->cap) p->out[p->n] = (unsigned char)(*p->s - '0');
        p->n++;
        p->s++;
        skip(p);
        if (*p->s == ']') break;
        if (*p->s != ',') return -1;
        p->s++;
    }
    p->s++;
    return 0;
}

static int term(Pattern *p) {
    long start = p->n;
    if (factor(p)) return -1;
    for (;;) {
        skip(p);
        if (*p->s != '*') return 0;
        p->s++;
        skip(p);
        char *end;
        long k = strtol(p->s, &end, 10);
        if (end == p->s || k < 0 || k > GPT_MAX_LAYERS) return -1;
        p->s = end;
        long len = p->n - start;
        if (k == 0) p->n = start;
        for (long r = 1; r < k; r++)
            for (long i = 0; i < len; i++, p->n++) {
                if (p->n > (long)GPT_MAX_LAYERS) return -1;  // far past any model
                if (p->n < p->cap && start + i < p->cap) p->out[p->n] = p->out[start + i];
            }
    }
}

static int expr(Pattern *p) {
    if (term(p)) return -1;
    for (;;) {
        skip(p);
        if (*p->s != '+') return 0;
        p->s++;
        if (term(p)) return -1;
    }
}

// The pattern of c into out (num_layers entries): 1 = MoE layer. Returns 0, or -1 with err.
static int layer_pattern(const GPTConfig *c, unsigned char *out, char *err, size_t errlen) {
    const char *f = c->moe_layer_freq[0] ? c->moe_layer_freq : "1";
    char *end;
    long every = strtol(f, &end, 10);
    if (end != f && *end == '\0') {
        if (every < 1) {
            snprintf(err, errlen, "--moe-layer-freq %s: an interval must be >= 1", f);
            return -1;
        }
        for (int l = 0; l < c->num_layers; l++) out[l] = l % every == 0;
        return 0;
    }
    Pattern p = {f, out, c->num_layers, 0};
    if (expr(&p) || (skip(&p), *p.s != '\0')) {
        snprintf(err, errlen, "--moe-layer-freq '%s': not an int or a list of 0/1 such as "
                 "[1,0,1,0] or ([1]*3+[0])*2", f);
        return -1;
    }
    if (p.n != c->num_layers) {
        snprintf(err, errlen, "--moe-layer-freq '%s' has %ld entries, num-layers is %d", f, p.n,
                 c->num_layers);
        return -1;
    }
    return 0;
}

int gpt_moe_layer(const GPTConfig *c, int layer) {
    if (c->num_experts <= 0 || layer < 0 || layer >= c->num_layers) return 0;
    const char *f = c->moe_layer_freq[0] ? c->moe_layer_freq : "1";
    char *end;
    long every = strtol(f, &end, 10);
    if (end != f && *end == '\0') return every >= 1 && layer % every == 0;
    unsigned char *pat = malloc((size_t)c->num_layers);
    char err[160];
    int moe = pat && !layer_pattern(c, pat, err, sizeof err) && pat[layer];
    free(pat);
    return moe;
}

int gpt_moe_ffn(const GPTConfig *c) {
    return c->moe_ffn_hidden_size > 0 ? c->moe_ffn_hidden_size : c->ffn_hidden_size;
}

int gpt_moe_check(const GPTConfig *c, char *err, size_t n) {
    if (c->num_experts < 0 || c->num_experts > GPT_MOE_MAX_EXPERTS) {
        snprintf(err, n, "--num-experts %d: must be in [1, %d]", c->num_experts, GPT_MOE_MAX_EXPERTS);
        return -1;
    }
    if (c->num_experts == 0) return 0;
    if (c->moe_topk < 1 || c->moe_topk > c->num_experts) {
        snprintf(err, n, "--moe-router-topk %d: must be in [1, num-experts %d]", c->moe_topk,
                 c->num_experts);
        return -1;
    }
    if (c->moe_ffn_hidden_size < 0 || c->moe_shared_ffn < 0) {
        snprintf(err, n, "--moe-ffn-hidden-size %d, --moe-shared-expert-intermediate-size %d: "
                 "must be >= 0", c->moe_ffn_hidden_size, c->moe_shared_ffn);
        return -1;
    }
    if (c->moe_aux_coeff < 0 || c->moe_z_coeff < 0 || c->moe_topk_scaling < 0) {
        snprintf(err, n, "--moe-aux-loss-coeff %g, --moe-z-loss-coeff %g, "
                 "--moe-router-topk-scaling-factor %g: must be >= 0", c->moe_aux_coeff,
                 c->moe_z_coeff, c->moe_topk_scaling);
        return -1;
    }
    unsigned char *pat = malloc((size_t)c->num_layers > 0 ? (size_t)c->num_layers : 1);
    if (!pat) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    int rc = c->num_layers > 0 ? layer_pattern(c, pat, err, n) : 0, any = 0;
    for (int l = 0; !rc && l < c->num_layers; l++) any |= pat[l];
    free(pat);
    if (!rc && !any) {
        snprintf(err, n, "--moe-layer-freq '%s' names no layer of %d", c->moe_layer_freq,
                 c->num_layers);
        return -1;
    }
    return rc;
}

// model/gpt_moe_config.c: which layers are mixture-of-experts layers (--moe-layer-freq) and
// the checks of the MoE fields (gpt_moe.h).
#include "gpt_moe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --moe-layer-freq compiled once per call into a small tree, which answers "is layer l an
// MoE layer?" in O(depth) without expanding the num_layers entries. The int form N is one
// node (layer % N == 0); Megatron's list form, a Python expression of 0/1 lists (list
// literals, `+` concatenation, `* int` repetition, parentheses, e.g. "([1]*3+[0])*2"), is
// parsed by recursive descent into list, concatenation and repetition nodes. The flag has
// under 64 characters, so under 64 nodes and 32 entries per literal.
enum { PAT_LIST, PAT_CAT, PAT_REP, PAT_EVERY };
enum { PAT_MAX_NODES = 64 };  // >= the characters of GPTConfig.moe_layer_freq

typedef struct {
    int kind;              // PAT_*
    int a, b;              // CAT: the two parts; REP: a, the repeated node
    long long len;         // entries the node expands to
    unsigned long long bits;  // LIST: entry i is bit i; EVERY: the interval
    int any;               // some entry is 1
} PatNode;

typedef struct {
    const char *s;         // the parse position
    PatNode node[PAT_MAX_NODES];
    int n_nodes;
    long long n;           // entries so far, the whole expression's (bounds the repetitions)
} Pattern;

static int node_new(Pattern *p, int kind, long long len) {
    if (p->n_nodes == PAT_MAX_NODES) return -1;
    p->node[p->n_nodes] = (PatNode){.kind = kind, .len = len};
    return p->n_nodes++;
}

static void skip(Pattern *p) {
    while (*p->s == ' ') p->s++;
}
static int expr(Pattern *p);

// Each parse step returns its node's index, or -1 on a syntax error.
static int factor(Pattern *p) {
    skip(p);
    if (*p->s == '(') {
        p->s++;
        int e = expr(p);
        if (e < 0) return -1;
        skip(p);
        if (*p->s != ')') return -1;
        p->s++;
        return e;
    }
    if (*p->s != '[') return -1;
    p->s++;
    int k = node_new(p, PAT_LIST, 0);
    if (k < 0) return -1;
    PatNode *l = &p->node[k];
    for (;;) {
        skip(p);
        if (*p->s != '0' && *p->s != '1') return -1;
        if (l->len == 64) return -1;  // never: 64 entries take 129 characters
        if (*p->s == '1') l->bits |= 1ull << l->len;
        l->len++;
        p->n++;
        p->s++;
        skip(p);
        if (*p->s == ']') break;
        if (*p->s != ',') return -1;
        p->s++;
    }
    p->s++;
    l->any = l->bits != 0;
    return k;
}

static int term(Pattern *p) {
    int f = factor(p);
    for (;;) {
        if (f < 0) return -1;
        skip(p);
        if (*p->s != '*') return f;
        p->s++;
        skip(p);
        char *end;
        long k = strtol(p->s, &end, 10);
        if (end == p->s || k < 0 || k > GPT_MAX_LAYERS) return -1;
        p->s = end;
        long long len = p->node[f].len, start = p->n - len;
        p->n = start + len * k;
        if (k > 1 && len > 0 && p->n - 1 > (long long)GPT_MAX_LAYERS) return -1;  // far past any model
        int r = node_new(p, PAT_REP, len * k);
        if (r < 0) return -1;
        p->node[r].a = f;
        p->node[r].any = k > 0 && p->node[f].any;
        f = r;
    }
}

static int expr(Pattern *p) {
    int t = term(p);
    for (;;) {
        if (t < 0) return -1;
        skip(p);
        if (*p->s != '+') return t;
        p->s++;
        int u = term(p);
        if (u < 0) return -1;
        int c = node_new(p, PAT_CAT, p->node[t].len + p->node[u].len);
        if (c < 0) return -1;
        p->node[c].a = t;
        p->node[c].b = u;
        p->node[c].any = p->node[t].any || p->node[u].any;
        t = c;
    }
}

// c's --moe-layer-freq ("1" when empty) into p; returns the root node's index (its len is
// num_layers), or -1 with err.
static int pattern_compile(const GPTConfig *c, Pattern *p, char *err, size_t errlen) {
    const char *f = c->moe_layer_freq[0] ? c->moe_layer_freq : "1";
    p->s = f;  // (node[] is written as nodes are made: no clearing per call)
    p->n_nodes = 0;
    p->n = 0;
    char *end;
    long every = strtol(f, &end, 10);
    if (end != f && *end == '\0') {
        if (every < 1) {
            snprintf(err, errlen, "--moe-layer-freq %s: an interval must be >= 1", f);
            return -1;
        }
        p->node[0] = (PatNode){.kind = PAT_EVERY, .len = c->num_layers,
                               .bits = (unsigned long long)every, .any = c->num_layers > 0};
        p->n_nodes = 1;
        return 0;
    }
    int root = expr(p);
    if (root < 0 || (skip(p), *p->s != '\0')) {
        snprintf(err, errlen, "--moe-layer-freq '%s': not an int or a list of 0/1 such as "
                 "[1,0,1,0] or ([1]*3+[0])*2", f);
        return -1;
    }
    if (p->node[root].len != c->num_layers) {
        snprintf(err, errlen, "--moe-layer-freq '%s' has %lld entries, num-layers is %d", f,
                 p->node[root].len, c->num_layers);
        return -1;
    }
    return root;
}

// Entry i (0 <= i < the node's len) of node k's expansion.
static int pattern_at(const Pattern *p, int k, long long i) {
    for (;;) {
        const PatNode *d = &p->node[k];
        switch (d->kind) {
        case PAT_LIST: return (int)(d->bits >> i & 1);
        case PAT_EVERY: return i % (long long)d->bits == 0;
        case PAT_REP: i %= p->node[d->a].len, k = d->a; break;
        default:  // PAT_CAT
            if (i < p->node[d->a].len) k = d->a;
            else i -= p->node[d->a].len, k = d->b;
        }
    }
}

int gpt_moe_layer(const GPTConfig *c, int layer) {
    if (c->num_experts <= 0 || layer < 0 || layer >= c->num_layers) return 0;
    Pattern p;
    char err[160];
    int root = pattern_compile(c, &p, err, sizeof err);
    return root >= 0 && pattern_at(&p, root, layer);
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
    Pattern p;
    int root = c->num_layers > 0 ? pattern_compile(c, &p, err, n) : 0, rc = root < 0 ? -1 : 0;
    int any = c->num_layers > 0 && root >= 0 && p.node[root].any;
    if (!rc && !any) {
        snprintf(err, n, "--moe-layer-freq '%s' names no layer of %d", c->moe_layer_freq,
                 c->num_layers);
        return -1;
    }
    return rc;
}

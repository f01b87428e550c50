// hf/hf_sample.c: greedy and sampled decoding steps (see hf_sample.h).
#include "hf_sample.h"
#include "core/check.h"   // defines: core_calloc
#include "core/philox.h"  // defines: core_philox4x32

#include <math.h>
#include <stdlib.h>

typedef struct {
    float logit;
    int id;
} Cand;

// Descending logit, then ascending id: a total order, so the cut is deterministic.
static int by_logit(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int argmax(const float *logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int hf_sample(const HfSampler *s, const float *logits, int V, uint64_t step) {
    if (s->temperature <= 0) return argmax(logits, V);
    Cand *c = core_calloc((size_t)V, sizeof *c);  // (V) candidates, most likely first
    for (int i = 0; i < V; i++) c[i] = (Cand){logits[i], i};
    qsort(c, (size_t)V, sizeof *c, by_logit);
    int n = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    double total = 0, top = c[0].logit;
    for (int r = 0; r < n; r++) total += exp((c[r].logit - top) / s->temperature);
    if (s->top_p < 1) {  // the nucleus: the fewest ids whose probability reaches top_p
        double acc = 0;
        for (int r = 0; r < n; r++) {
            acc += exp((c[r].logit - top) / s->temperature);
            if (acc >= s->top_p * total) {
                n = r + 1;
                total = acc;
                break;
            }
        }
    }
    uint32_t w[4];
    core_philox4x32(s->seed, 0x68665f73616d70ull /* "hf_samp" */, step, w);
    double u = ((double)w[0] * 4294967296.0 + w[1]) / 18446744073709551616.0 * total;  // [0, total)
    double acc = 0;
    int pick = c[n - 1].id;
    for (int r = 0; r < n; r++) {
        acc += exp((c[r].logit - top) / s->temperature);
        if (u < acc) {
            pick = c[r].id;
            break;
        }
    }
    free(c);
    return pick;
}

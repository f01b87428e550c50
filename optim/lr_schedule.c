// optim/lr_schedule.c: warm-up + decay (see lr_schedule.h).
#include "lr_schedule.h"
#include <math.h>
#include <string.h>

double optim_lr_at(const LRSchedule *s, int64_t it) {
    if (s->warmup_iters > 0 && it <= s->warmup_iters)
        return s->init_lr + (s->lr - s->init_lr) * (double)it / (double)s->warmup_iters;
    if (s->style == LR_CONSTANT) return s->lr;
    if (it > s->decay_iters) return s->min_lr;
    double span = (double)(s->decay_iters - s->warmup_iters);
    double ratio = span > 0 ? (double)(it - s->warmup_iters) / span : 1.0;
    double coeff = s->style == LR_LINEAR ? 1.0 - ratio : 0.5 * (cos(M_PI * ratio) + 1.0);
    return s->min_lr + coeff * (s->lr - s->min_lr);
}

int optim_lr_style_parse(const char *s, LRDecayStyle *out) {
    if (!strcmp(s, "constant")) *out = LR_CONSTANT;
    else if (!strcmp(s, "linear")) *out = LR_LINEAR;
    else if (!strcmp(s, "cosine")) *out = LR_COSINE;
    else return -1;
    return 0;
}

// optim/loss_scale.c: dynamic loss scaling for fp16 (see loss_scale.h).
#include "loss_scale.h"

LossScaler loss_scale_init(double initial, double min_scale, int window, int hysteresis, int dynamic) {
    LossScaler s = {.scale = initial, .min_scale = min_scale, .window = window,
                    .hysteresis = hysteresis, .dynamic = dynamic, .good_steps = 0,
                    .overflows_left = hysteresis};
    return s;
}

void loss_scale_update(LossScaler *s, int found_inf) {
    if (!s->dynamic) return;
    if (found_inf) {
        s->good_steps = 0;
        if (--s->overflows_left <= 0)  // stays <= 0 until the next growth: from then on
            s->scale = s->scale / 2 < s->min_scale ? s->min_scale : s->scale / 2;  // every
        return;                                                   // overflow halves
    }
    if (++s->good_steps >= s->window) {
        s->good_steps = 0;
        s->overflows_left = s->hysteresis;
        s->scale *= 2;
    }
}

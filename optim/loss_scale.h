// optim/loss_scale.h: the loss scale of fp16 training (Megatron-LM's semantics).
//
// fp16 has a narrow range: small gradients underflow to zero. The loss is multiplied by a
// scale S before the backward (so every gradient is S times larger) and the optimizer divides
// by S again. With a dynamic scale, an overflow (any Inf/NaN in the gradients) skips the step;
// the `hysteresis`-th overflow since the last growth, and every one after it, halves S (never
// below min_scale); `window` steps in a row without overflow double S and re-arm hysteresis. A static scale never changes.
// bf16 and fp32 need none: S = 1.
#pragma once

typedef struct {
    double scale;          // S, the current loss scale
    double min_scale;      // --min-loss-scale
    int window;            // --loss-scale-window: clean steps before S doubles
    int hysteresis;        // --hysteresis: overflows tolerated before S halves
    int dynamic;           // 0: static (--loss-scale), S never changes
    int good_steps;        // clean steps since the last change or overflow
    int overflows_left;    // overflows left before S halves
} LossScaler;

// A dynamic scaler starting at `initial` (> 0), or a static one (dynamic = 0). Pure.
LossScaler loss_scale_init(double initial, double min_scale, int window, int hysteresis, int dynamic);

// Records one step: found_inf = 1 if the step's gradients held an Inf or NaN (the step is
// then skipped by the caller). Updates the scale as described above. Never fails.
void loss_scale_update(LossScaler *s, int found_inf);

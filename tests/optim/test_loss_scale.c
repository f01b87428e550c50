// tests/optim/test_loss_scale.c: the fp16 loss scale follows Megatron-LM's dynamic rules:
// overflows halve it after `hysteresis` of them (then every one until it grows again), never
// below the minimum; `window` clean steps double it and re-arm the hysteresis; a static scale
// never moves.
#include "optim/loss_scale.h"
#include "tests/testing.h"

int main(void) {
    // hysteresis 2: the first overflow keeps the scale, the second halves it
    LossScaler s = loss_scale_init(1024.0, 1.0, 3, 2, 1);
    loss_scale_update(&s, 1);
    EXPECT(s.scale == 1024.0, "scale %g after 1 overflow (hysteresis 2)", s.scale);
    loss_scale_update(&s, 1);
    EXPECT(s.scale == 512.0, "scale %g after 2 overflows", s.scale);
    loss_scale_update(&s, 1);  // hysteresis spent: every further overflow halves
    EXPECT(s.scale == 256.0, "scale %g after 3 overflows", s.scale);
    // window 3: three clean steps double it; an overflow in between restarts the count
    loss_scale_update(&s, 0);
    loss_scale_update(&s, 0);
    EXPECT(s.scale == 256.0, "scale %g after 2 clean steps", s.scale);
    loss_scale_update(&s, 0);
    EXPECT(s.scale == 512.0, "scale %g after 3 clean steps", s.scale);
    loss_scale_update(&s, 0);
    loss_scale_update(&s, 0);
    loss_scale_update(&s, 1);  // growth re-armed hysteresis: this one does not halve
    EXPECT(s.scale == 512.0, "scale %g: hysteresis re-armed by the growth", s.scale);
    loss_scale_update(&s, 0);
    loss_scale_update(&s, 0);
    EXPECT(s.scale == 512.0, "scale %g: the overflow restarted the window", s.scale);
    loss_scale_update(&s, 0);
    EXPECT(s.scale == 1024.0, "scale %g after a full window", s.scale);

    // the floor
    LossScaler f = loss_scale_init(4.0, 2.0, 1000, 1, 1);
    for (int i = 0; i < 5; i++) loss_scale_update(&f, 1);
    EXPECT(f.scale == 2.0, "scale %g under --min-loss-scale 2", f.scale);

    // static: nothing moves
    LossScaler c = loss_scale_init(128.0, 1.0, 1, 1, 0);
    loss_scale_update(&c, 1);
    loss_scale_update(&c, 0);
    EXPECT(c.scale == 128.0, "static scale moved to %g", c.scale);
    return test_result("loss_scale");
}

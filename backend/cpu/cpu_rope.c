// backend/cpu/cpu_rope.c: rotary positions with grouped-query heads (rope_gqa forward,
// backward). Contracts in backend/backend.h. Rows are independent and split over threads; a
// kv head's gradient adds its query heads in order, so the bits do not depend on the thread
// count.
#include "cpu_backend.h"

#include <math.h>  // defines: cosf, sinf, powf

// cos, sin (rot/2) of the angles t * base^(-2i/rot), in fp32 as Hugging Face's Llama does.
static void rope_angles(float *cs, float *sn, int t, int rot, float base) {
    for (int i = 0; i < rot / 2; i++) {
        float inv_freq = 1.0f / powf(base, (float)(2 * i) / (float)rot);
        float ang = (float)t * inv_freq;
        cs[i] = cosf(ang);
        sn[i] = sinf(ang);
    }
}

// y (hs) = x rotated (dir 1) or rotated back (dir -1: the transpose); y += when acc.
static void rope_head(float *y, const float *x, const float *cs, const float *sn, int hs, int rot,
                      float dir, int acc) {
    int h = rot / 2;
    for (int i = 0; i < h; i++) {
        float a = x[i], b = x[i + h], s = dir * sn[i];
        float ya = a * cs[i] - b * s, yb = b * cs[i] + a * s;
        y[i] = acc ? y[i] + ya : ya;
        y[i + h] = acc ? y[i + h] + yb : yb;
    }
    for (int i = rot; i < hs; i++) y[i] = acc ? y[i] + x[i] : x[i];
}

enum { ROPE_MAX_HALF = 2048 };  // rot / 2 per head, on the stack (gpt_config_check: hs <= 4096)

// out (B, T, 3 NH hs) = [rotated q | rotated k repeated | v repeated] of inp (B, T, (NH + 2G) hs).
void cpu_rope_gqa_forward(Backend *be, void *out_, const void *inp_, int B, int T, int NH, int G,
                          int hs, int rot, float base, int pos0, const int *pos) {
    float *out = out_;
    const float *inp = inp_;
    int nt = cpu_nt(be), rep = NH / G, N = B * T;
    size_t in_row = (size_t)(NH + 2 * G) * hs, out_row = (size_t)3 * NH * hs;
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * out_row > CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
        rope_angles(cs, sn, pos ? pos[r] : pos0 + r % T, rot, base);
        const float *q = inp + r * in_row, *k = q + (size_t)NH * hs, *v = k + (size_t)G * hs;
        float *oq = out + r * out_row, *ok = oq + (size_t)NH * hs, *ov = ok + (size_t)NH * hs;
        for (int h = 0; h < NH; h++) {
            int g = h / rep;
            rope_head(oq + (size_t)h * hs, q + (size_t)h * hs, cs, sn, hs, rot, 1.0f, 0);
            rope_head(ok + (size_t)h * hs, k + (size_t)g * hs, cs, sn, hs, rot, 1.0f, 0);
            for (int j = 0; j < hs; j++) ov[(size_t)h * hs + j] = v[(size_t)g * hs + j];
        }
    }
}

// dinp (B, T, (NH + 2G) hs) = rotated back dout; k and v summed over each group's heads.
void cpu_rope_gqa_backward(Backend *be, void *dinp_, const void *dout_, int B, int T, int NH,
                           int G, int hs, int rot, float base, int pos0, const int *pos) {
    float *dinp = dinp_;
    const float *dout = dout_;
    int nt = cpu_nt(be), rep = NH / G, N = B * T;
    size_t in_row = (size_t)(NH + 2 * G) * hs, out_row = (size_t)3 * NH * hs;
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * out_row > CPU_PAR_MIN)
    for (int r = 0; r < N; r++) {
        float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
        rope_angles(cs, sn, pos ? pos[r] : pos0 + r % T, rot, base);
        const float *dq = dout + r * out_row, *dk = dq + (size_t)NH * hs, *dv = dk + (size_t)NH * hs;
        float *iq = dinp + r * in_row, *ik = iq + (size_t)NH * hs, *iv = ik + (size_t)G * hs;
        for (size_t j = 0; j < (size_t)2 * G * hs; j++) ik[j] = 0.0f;  // k and v sums
        for (int h = 0; h < NH; h++) {  // a group's heads in order: the same bits every run
            int g = h / rep;
            rope_head(iq + (size_t)h * hs, dq + (size_t)h * hs, cs, sn, hs, rot, -1.0f, 0);
            rope_head(ik + (size_t)g * hs, dk + (size_t)h * hs, cs, sn, hs, rot, -1.0f, 1);
            for (int j = 0; j < hs; j++) iv[(size_t)g * hs + j] += dv[(size_t)h * hs + j];
        }
    }
}

// --- 16-bit activations (--bf16 / --fp16): fp32 arithmetic between rounded loads and stores
// (cpu_half.c's helpers: the rules there) -------------------------------------------------

static void h_rope_forward(Backend *be, void *o, const void *inp, int B, int T, int NH, int G,
                           int hs, int rot, float base, int pos0, const int *pos) {
    size_t ni = CPU_SZ(B) * T * (NH + 2 * G) * hs, no = CPU_SZ(B) * T * 3 * NH * hs;
    CpuArena a = cpu_arena(be, cpu_pad(ni) + cpu_pad(no));
    const float *fi = cpu_in(&a, inp, ni);
    float *fo = cpu_take(&a, no);
    cpu_rope_gqa_forward(be, fo, fi, B, T, NH, G, hs, rot, base, pos0, pos);
    cpu_out(be, o, fo, no);
}

static void h_rope_backward(Backend *be, void *dinp, const void *dout, int B, int T, int NH,
                            int G, int hs, int rot, float base, int pos0, const int *pos) {
    size_t ni = CPU_SZ(B) * T * (NH + 2 * G) * hs, no = CPU_SZ(B) * T * 3 * NH * hs;
    CpuArena a = cpu_arena(be, cpu_pad(ni) + cpu_pad(no));
    const float *fd = cpu_in(&a, dout, no);
    float *fdi = cpu_take(&a, ni);
    cpu_rope_gqa_backward(be, fdi, fd, B, T, NH, G, hs, rot, base, pos0, pos);
    cpu_out(be, dinp, fdi, ni);
}

void cpu_rope_ops(BackendOps *t, BackendDType act) {
    int f32 = act == BACKEND_F32;
    t->rope_gqa_forward = f32 ? cpu_rope_gqa_forward : h_rope_forward;
    t->rope_gqa_backward = f32 ? cpu_rope_gqa_backward : h_rope_backward;
}

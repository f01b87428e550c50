// backend/cpu/cpu_act.c: the MLP activations (BackendAct): GELU and squared ReLU (pointwise),
// SwiGLU (gated),
// forward and backward, and the pointwise spans the fused GEMM epilogues call (cpu_gemm.c).
// Contracts in backend/backend.h. Elements are independent and split over threads, so the
// bits do not depend on the thread count.
#include "cpu_backend.h"
#include "cpu_math.h"  // defines: cpu_gelu, cpu_gelu_grad, cpu_sigmoid_den, CPU_SIMD_CLONES
#include "core/check.h"  // defines: core_fatal

#define CPU_SPAN 4096  // elements per work item of the pointwise loops

CPU_SIMD_CLONES static void gelu_span(float *out, const float *inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = cpu_gelu(inp[i]);
}

CPU_SIMD_CLONES static void gelu_grad_span(float *dinp, const float *inp, const float *dout,
                                           size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dinp[i] = cpu_gelu_grad(inp[i]) * dout[i];
}

// Squared ReLU: relu(x)^2, and its derivative 2 relu(x).
CPU_SIMD_CLONES static void relu2_span(float *out, const float *inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] * inp[i] : 0.0f;
}

CPU_SIMD_CLONES static void relu2_grad_span(float *dinp, const float *inp, const float *dout,
                                            size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) dinp[i] = (inp[i] > 0.0f ? 2.0f * inp[i] : 0.0f) * dout[i];
}

void cpu_act_span(BackendAct act, float *out, const float *inp, size_t n) {
    switch (act) {
    case BACKEND_ACT_GELU: gelu_span(out, inp, n); return;
    case BACKEND_ACT_RELU2: relu2_span(out, inp, n); return;
    default: core_fatal("act_forward: activation %d is not pointwise", (int)act);
    }
}

void cpu_act_grad_span(BackendAct act, float *dinp, const float *inp, const float *dout,
                       size_t n) {
    switch (act) {
    case BACKEND_ACT_GELU: gelu_grad_span(dinp, inp, dout, n); return;
    case BACKEND_ACT_RELU2: relu2_grad_span(dinp, inp, dout, n); return;
    default: core_fatal("act_backward: activation %d is not pointwise", (int)act);
    }
}

// SwiGLU on one row: y (F) = silu(a) * b, silu(a) = a sigmoid(a) (a NaN gate gives NaN
// through the a factor; cpu_sigmoid_den's note).
CPU_SIMD_CLONES static void swiglu_row(float *y, const float *a, const float *b, int F) {
#pragma omp simd
    for (int j = 0; j < F; j++) y[j] = a[j] * (1.0f / cpu_sigmoid_den(-a[j])) * b[j];
}

// d gate = dout * up * sig * (1 + gate * (1 - sig)); d up = dout * silu(gate), on one row.
CPU_SIMD_CLONES static void swiglu_grad_row(float *da, float *db, const float *a, const float *b,
                                            const float *dy, int F) {
#pragma omp simd
    for (int j = 0; j < F; j++) {
        float sg = 1.0f / cpu_sigmoid_den(-a[j]);
        da[j] = dy[j] * b[j] * sg * (1.0f + a[j] * (1.0f - sg));
        db[j] = dy[j] * a[j] * sg;
    }
}

// out (N, F) = silu(gate) * up of inp rows [gate | up] (N, 2F).
static void swiglu_forward(Backend *be, float *out, const float *inp, int N, int F) {
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * F > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *a = inp + (size_t)i * 2 * F;
        swiglu_row(out + (size_t)i * F, a, a + F, F);
    }
}

// dinp (N, 2F) = [d gate | d up] of inp rows [gate | up] and dout (N, F).
static void swiglu_backward(Backend *be, float *dinp, const float *inp, const float *dout, int N,
                            int F) {
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * F > CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *a = inp + (size_t)i * 2 * F;
        float *da = dinp + (size_t)i * 2 * F;
        swiglu_grad_row(da, da + F, a, a + F, dout + (size_t)i * F, F);
    }
}

// out (N, F) = act(inp): pointwise acts in spans of CPU_SPAN elements over the threads.
void cpu_act_forward(Backend *be, void *out, const void *inp, int N, int F, BackendAct act) {
    if (backend_act_gated(act)) {
        swiglu_forward(be, out, inp, N, F);
        return;
    }
    size_t n = (size_t)N * F, nspan = (n + CPU_SPAN - 1) / CPU_SPAN;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if (n > CPU_PAR_MIN)
    for (size_t k = 0; k < nspan; k++) {
        size_t i0 = k * CPU_SPAN, len = n - i0 < CPU_SPAN ? n - i0 : CPU_SPAN;
        cpu_act_span(act, (float *)out + i0, (const float *)inp + i0, len);
    }
}

// dinp (N, F or 2F) [overwritten] = act'(inp) * dout.
void cpu_act_backward(Backend *be, void *dinp, const void *inp, const void *dout, int N, int F,
                      BackendAct act) {
    if (backend_act_gated(act)) {
        swiglu_backward(be, dinp, inp, dout, N, F);
        return;
    }
    size_t n = (size_t)N * F, nspan = (n + CPU_SPAN - 1) / CPU_SPAN;
    int nt = cpu_nt(be);
#pragma omp parallel for num_threads(nt) schedule(static) if (n > CPU_PAR_MIN)
    for (size_t k = 0; k < nspan; k++) {
        size_t i0 = k * CPU_SPAN, len = n - i0 < CPU_SPAN ? n - i0 : CPU_SPAN;
        cpu_act_grad_span(act, (float *)dinp + i0, (const float *)inp + i0,
                          (const float *)dout + i0, len);
    }
}

// --- 16-bit activations (--bf16 / --fp16): fp32 arithmetic between rounded loads and stores
// (cpu_half.c's helpers: the rules there) -------------------------------------------------

static void h_act_forward(Backend *be, void *o, const void *inp, int N, int F, BackendAct act) {
    size_t ni = CPU_SZ(N) * F * (backend_act_gated(act) ? 2 : 1);
    CpuArena a = cpu_arena(be, cpu_pad(ni) + cpu_pad(CPU_SZ(N) * F));
    const float *fi = cpu_in(&a, inp, ni);
    float *fo = cpu_take(&a, CPU_SZ(N) * F);
    cpu_act_forward(be, fo, fi, N, F, act);
    cpu_out(be, o, fo, CPU_SZ(N) * F);
}

static void h_act_backward(Backend *be, void *dinp, const void *inp, const void *dout, int N,
                           int F, BackendAct act) {
    size_t ni = CPU_SZ(N) * F * (backend_act_gated(act) ? 2 : 1);
    CpuArena a = cpu_arena(be, 2 * cpu_pad(ni) + cpu_pad(CPU_SZ(N) * F));
    const float *fi = cpu_in(&a, inp, ni), *fd = cpu_in(&a, dout, CPU_SZ(N) * F);
    float *fdi = cpu_take(&a, ni);
    cpu_act_backward(be, fdi, fi, fd, N, F, act);
    cpu_out(be, dinp, fdi, ni);
}

void cpu_act_ops(BackendOps *t, BackendDType act) {
    int f32 = act == BACKEND_F32;
    t->act_forward = f32 ? cpu_act_forward : h_act_forward;
    t->act_backward = f32 ? cpu_act_backward : h_act_backward;
}

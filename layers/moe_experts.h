// layers/moe_experts.h: the experts of a mixture-of-experts layer (Megatron-Core's
// GroupedMLP / SequentialMLP): each local expert is an MLP (fc, the model's activation,
// fcproj; its own F) on its contiguous rows, in local-expert order, the rows the token
// dispatcher put together (layers/moe_dispatcher.h): one GEMM pair per expert in turn, or
// with MoEDims.grouped each product of every expert in one grouped Backend call.
#pragma once
#include "layers/moe.h"

// The experts' weights (be->act views, the E/ep local experts stacked: fcw (El F2e, C), fcb
// (El F2e), projw (El C, Fe), projb (El C); biases may be NULL) and their fp32 gradients
// (accumulated; NULL in the forward).
typedef struct {
    const void *fcw, *fcb, *projw, *projb;
    float *dfcw, *dfcb, *dprojw, *dprojb;
} MoEExpertWeights;

// The experts' backward workspace (moe_experts_buffers).
typedef struct {
    void *dfch;  // (R, F2e) d(fc output)
    void *dact;  // (R, Fe) d(activation output) (gated activations)
} MoEExpertsWork;

typedef struct {
    MoEDims d;
    Backend *be;
    MoEExpertsWork *w;
} MoEExperts;

// The experts' buffers for dims d: backend bytes counted in a (allocated when a->be is set).
// Never fails (aborts).
void moe_experts_buffers(MoEExpertsWork *w, const MoEDims *d, MoEAlloc *a);
// Frees what moe_experts_buffers allocated. Never fails.
void moe_experts_free(MoEExpertsWork *w, Backend *be);

// Forward: lc[e] contiguous rows of x->xp for local expert e (e = 0 .. El-1, in order), fc
// and the activation into x->fch / x->fch_act, the output rows into out (R, C).
void moe_experts_forward(const MoEExperts *X, const MoEExpertWeights *W, MoEActs *x, void *out,
                         const int *lc);
// Backward of moe_experts_forward (same lc): dout (R, C) the gradient of its output rows,
// dxp (R, C) written with that of x->xp; the experts' gradients accumulate into W's d*.
void moe_experts_backward(const MoEExperts *X, const MoEExpertWeights *W, const MoEActs *x,
                          const void *dout, void *dxp, const int *lc);

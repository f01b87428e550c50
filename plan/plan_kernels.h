// plan/plan_kernels.h: the memory-bound kernels of a micro-batch (norms, residual adds,
// activations, bias gradients, cross-entropy, embedding, rope, materialised softmax), with
// the bytes each moves through HBM and its FLOPs, on one rank. `megac plan` times them at
// the profile's HBM bandwidth (plan_cost.c), so its MFU is an estimate rather than the
// GEMM-only upper bound; bench_plan_kernels prints the inventory of a named config.
//
// One data table (plan_kernels.c) lists the kernels the backend runs, in the model's order,
// each with its bytes and FLOPs per (row, column) of the tensor it sweeps. The figures are
// estimates (one pass per read or write, no cache reuse across kernels), not counts of a
// run: only communication bytes are exact in `megac plan`. GEMMs and attention's matrix
// products are timed by their FLOPs (plan_model.c); AdamW per step (plan_cost.c).
#pragma once
#include "plan_model.h"

enum { PLAN_KERNELS_MAX = 40 };

// Where a kernel runs: per layer (forward / backward), on the first stage (embedding) or on
// the last (final norm, output cross-entropy).
typedef enum {
    PLAN_KW_LAYER_FWD, PLAN_KW_LAYER_BWD, PLAN_KW_FIRST_FWD, PLAN_KW_FIRST_BWD,
    PLAN_KW_LAST_FWD, PLAN_KW_LAST_BWD
} PlanKernelWhere;

typedef struct {
    const char *name;
    PlanKernelWhere where;
    double bytes;  // one call, one micro-batch, one rank
    double flops;
} PlanKernel;

// The kernels that run for spec s and layout l (the model's norm, activation, bias, rope
// and attention choices), one entry per kernel call of one layer or stage end, in out
// (at most PLAN_KERNELS_MAX). Returns their number. Pure.
int plan_kernels(const PlanSpec *s, const PlanLayout *l, PlanKernel *out);

// Bytes the memory-bound kernels of one micro-batch move on a rank of a stage with n_layers
// layers (n_recomputed of them re-running their forward), the embedding when first, the
// final norm and cross-entropy when last. Pure.
double plan_kernel_bytes(const PlanSpec *s, const PlanLayout *l, int n_layers, int n_recomputed,
                         int first, int last);

// "layer fwd", "layer bwd", "first fwd", ... Pure.
const char *plan_kernel_where_name(PlanKernelWhere w);

// plan/plan_enum.h: every valid layout of a world size, predicted and ranked.
//
// A layout is TP x CP x PP x DP = world size (CP, context parallelism, as the filter fixes
// it; free (0), every CP that flash attention and 2 x CP dividing the sequence allow, with
// chunks of at least 128 positions), a micro-batch size dividing the global batch per
// DP rank, the pipeline schedule (1F1B or GPipe, when PP > 1), sequence parallelism (on or
// off, when TP > 1) and the ZeRO-1 distributed optimizer (on or off, when DP > 1; ZeRO-2 or 3
// instead of ZeRO-1 when the filter asks). Interleaved 1F1B only when the filter gives v (or
// layers per virtual stage): then every layout has it, and those that cannot are refused;
// expert parallelism likewise (EP, when given). With --optimizer-cpu-offload each layout
// again with its optimizer offloaded (the filter's fractions), ranked beside the others.
#pragma once
#include "plan_model.h"

// Restrictions from the command line: 0 (sizes) or -1 (switches) leave a dimension free.
typedef struct {
    int tp, pp, micro_batch;
    int gpipe, sp, zero1;
    int zero;  // 2 / 3: ZeRO-2 / ZeRO-3 for the sharded layouts (with zero1 = 1); 0: ZeRO-1
    int vpp;         // --virtual-pipeline-model-parallel-size v (0: none), or
    int vpp_layers;  // --num-layers-per-virtual-pipeline-stage n: v = L / (PP x n) per PP
    int cp;          // --context-parallel-size (megac plan: 1 unless given; 0: every CP the
                     // model allows)
    CPCommType cp_comm;  // --cp-comm-type, for the CP > 1 layouts
    int ep;          // --expert-model-parallel-size (0 or 1: none): every layout has it, those
                     // whose DP x CP it does not divide are refused
    int etp1;        // --expert-tensor-parallel-size 1 (EP > 1): the TP > 1 layouts' EP groups
                     // span TP x DP x CP (PlanLayout.ep_over_tp; SP required)
    int offload;     // --optimizer-cpu-offload: each layout also with the optimizer offloaded
    double offload_fraction;  // with offload: --optimizer-offload-fraction F (only F tried; 0:
                              // the layouts without offload), or < 0: every one of
                              // PLAN_OFFLOAD_FRACTIONS
} PlanFilter;

// The offload fractions megac plan --optimizer-cpu-offload tries when none is given (0: the
// layout without offload).
#define PLAN_OFFLOAD_FRACTIONS {0.0, 0.5, 1.0}

typedef struct {
    PlanResult *results;  // (n) ranked: layouts that fit first, each part fastest first
    int n;
    int n_rejected;       // (TP, PP, micro-batch) combinations the checks refused
    char reason[512];     // the last refusal, for a message when n == 0
} PlanSet;

// Enumerates and predicts every valid layout that passes the filter, then ranks them; the
// first `keep` results (0: all) hold their stages, the others r->stages NULL. Never fails
// (an empty set has n == 0 and a reason). Free with plan_set_free. Divisors only, and
// O(PP) per layout (interleaved O(PP v), its slots shared through a PlanMemo of this call's,
// unless s->memo is given): world 2^20, batch 2^24, 1024 layers in about a second.
void plan_enumerate(const PlanSpec *s, const PlanFilter *f, const PlanHardware *hw, int keep, PlanSet *out);
void plan_set_free(PlanSet *set);

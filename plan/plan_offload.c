// plan/plan_offload.c: --optimizer-cpu-offload in the plan (optim/optim_offload.c,
// docs/offload.md). The host part of each rank's optimizer slice is the run's own split
// (dist_offload_host_len) and its bytes the run's own count (dist_offload_bytes: what
// optim_host_state_bytes logs as optimizer_host_bytes), so the plan's figures equal the run's
// (tests/plan/plan_vs_run.py --offload-only).
#include "plan_model.h"
#include "distributed/dist_geometry.h"  // defines: dist_offload_host_len, dist_offload_bytes

void plan_offload_counts(const PlanSpec *s, const PlanLayout *l, PlanStage *st) {
    if (!(l->offload > 0)) return;
    size_t e = (size_t)plan_act_bytes(s->precision);
    // the host AdamW writes the 16-bit weight copies where the device's would: DDP in bf16 /
    // fp16 only (optim_set_weight_copies: a sharded slice's copies come from the gathers)
    size_t copy = !l->zero1 && e != sizeof(float) ? e : 0;
    DistOffloadBytes b = dist_offload_bytes(dist_offload_host_len(st->shard_len, l->offload), copy);
    st->mem[PLAN_MEM_OPTIM] -= (double)b.device_saved;
    st->host_mem = (double)b.host;
    st->pcie_down = (double)b.down;
    st->pcie_up = (double)b.up;
}

// The overlap assumption, in this one place: megac's step copies the gradients down after the
// reductions and the masters up after the host AdamW, nothing else running on the GPU
// meanwhile (optimizer.c's update; --overlap-cpu-optimizer-d2h-h2d changes nothing yet), so
// both directions add to the step, one after the other. Should the run overlap them, this
// is the function to change.
double plan_offload_seconds(const PlanHardware *hw, const PlanStage *st) {
    return (st->pcie_down + st->pcie_up) / (hw->pcie_gbps * 1e9);
}

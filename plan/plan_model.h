// plan/plan_model.h: what one layout costs, predicted from megac's own code paths: memory
// per rank by category, bytes per group per step by collective, FLOPs, time, MFU.
//
// The byte counts are what megac's communicators count (comm/comm.h: ring all-reduce
// 2(n-1)/n of the buffer, all-gather and reduce-scatter (n-1)/n, p2p the buffer), call by
// call with the same integer arithmetic, so a run's --log-json traffic equals the
// prediction exactly. Activation memory is the allocator's own count (gpt_measure,
// model/gpt.h: the counting passes of model/gpt_acts.c: one slot, times the slots the
// pipeline schedule keeps, the backward workspace, the MoE layers' buffers); parameters
// come from the parameter table (model/gpt_params.c), ZeRO-1 shards and buckets from
// optim/optimizer.c, the received gradient from pipeline/pp_schedule.c.
//
// Context parallelism (l->cp > 1, layers/cp_attention.h): every per-token buffer and count
// scales with the rank's N = B T / CP rows; the layer's workspace is in gpt_measure's, and
// the cp group's traffic is the layer's own list of calls (cp_attention_calls: p2p, the K/V
// ring and its dK/dV hops; all_gather; a2a, the all-to-alls of heads), once per layer and
// micro-batch forward and backward and again per recomputed forward. Gradients reduce (and
// ZeRO shards) over DP x CP.
//
// Activation recomputation (spec.model.recompute*, train's flags): full recomputation keeps
// only each chunk's output per micro-batch, holds one chunk's activations in the workspace,
// re-runs the recomputed layers' forward (hardware FLOPs, step time) and repeats their
// tensor-parallel collectives; selective drops the attention probabilities from every slot
// (one copy in the workspace) and recomputes q k^T. MFU counts model FLOPs only.
//
// Precision (plan_hw.h): megac's own recipes. fp32 / tf32: every tensor fp32 (tf32 changes
// only the GEMM rate). bf16 / fp16: activations, weight copies and tensor/pipeline traffic
// in 16 bits; fp32 master weights (unsharded), fp32 gradients and data-parallel traffic,
// fp32 Adam moments (sharded by ZeRO-1). ZeRO-2/3 (plan_zero.c): the formulas of distributed/dist_sync_units.c;
// ZeRO-3 gathers 16-bit weights.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "comm/comm.h"          // defines: CommKind, COMM_NKINDS, comm_kind_name
#include "distributed/dist_geometry.h"  // defines: dist_pad_ranks
#include "layers/cp_attention.h"  // defines: CPCommType, CPAttnDims
#include "model/gpt_config.h"   // defines: GPTConfig
#include "model/gpt_params.h"   // defines: ParamInfo
#include "parallel_state/pgrid.h"  // defines: PGridDims, PGridKind
#include "plan_hw.h"

typedef struct {
    GPTConfig model;          // vocab_size set (the tokenizer's V, before padding)
    int world_size;
    int global_batch;
    PlanPrecision precision;
    int64_t ddp_bucket_size;  // --ddp-bucket-size (0: one bucket)
    double attention_dropout; // --attention-dropout (train's default 0.1): cuDNN's fused
                              // attention runs only without it (plan_attn_cudnn)
    struct PlanMemo *memo;    // optional (NULL: none): what one enumeration's layouts share
                              // (plan_memo_init); changes no result, only the time
    int offload;              // --optimizer-cpu-offload asked: the outputs show the host memory
                              // and PCIe columns (without it they are as before the offload)
} PlanSpec;

typedef struct {
    int tp, pp, dp;
    int micro_batch;
    int gpipe;       // 0: 1F1B, 1: GPipe
    int sp;          // sequence parallelism (tp > 1)
    int zero1;       // ZeRO-1 distributed optimizer (dp > 1)
    int zero;        // 2 or 3: ZeRO-2 / ZeRO-3 (--data-parallel-sharding-strategy optim_grads /
                     // optim_grads_params; zero1 is 1 then); 0: as zero1 says
    int vpp;         // v > 1: interleaved 1F1B with v model chunks per pipeline rank
                     // (--virtual-pipeline-model-parallel-size); 0 or 1: none
    int cp;          // context parallelism (--context-parallel-size; 0 or 1: none): a rank
                     // holds B T / cp rows of each micro-batch; world = TP x CP x DP x PP
    CPCommType cp_comm;  // --cp-comm-type (layers/cp_attention.h), for CP > 1
    int ep;          // expert parallelism (--expert-model-parallel-size; 0 or 1: none): each
                     // MoE layer's experts split over EP ranks of DP x CP (plan_ep.c)
    int ep_over_tp;  // --expert-tensor-parallel-size 1 at TP > 1 and EP > 1: the EP groups span
                     // TP x DP x CP, the experts neither replicated nor summed over TP (needs SP)
    double offload;  // --optimizer-cpu-offload --optimizer-offload-fraction F (0 < F <= 1): the
                     // first F of each optimizer slice on the host (plan_offload.c); 0: none
} PlanLayout;

// 1 if megac train runs the fused attention of spec s at layout l on cuDNN's fused SDPA
// (--attention-backend auto/fused, backend_attn_cudnn_case: 16-bit activations, head size
// 64 or 128, no attention dropout, no CP window), 0 on megac's own kernels (or unfused).
// Pure.
int plan_attn_cudnn(const PlanSpec *s, const PlanLayout *l);

// The CP size of a layout (an initialiser without it means 1).
static inline int plan_cp(const PlanLayout *l) { return l->cp > 1 ? l->cp : 1; }
// The ranks that reduce the gradients (and shard ZeRO): DP x CP (the run's "dp" counters).
// The context-parallel attention layer of a stage of spec s at layout l (CP > 1), rank 0.
CPAttnDims plan_cp_dims(const PlanSpec *s, const PlanLayout *l);
static inline int plan_dp_cp(const PlanLayout *l) { return l->dp * plan_cp(l); }
// Bytes of an activation element: 2 in bf16 and fp16, else 4. Pure.
static inline int plan_act_bytes(PlanPrecision p) { return p == PLAN_BF16 || p == PLAN_FP16 ? 2 : 4; }
// Rows of one micro-batch on one rank: B T, or this rank's B T / CP (context parallelism).
// Pure.
static inline size_t plan_rows(const PlanSpec *s, const PlanLayout *l) {
    return (size_t)l->micro_batch * s->model.seq_length / (size_t)plan_cp(l);
}
// The EP size of a layout (an initialiser without it means 1), and the expert-data-parallel
// group that reduces (and ZeRO shards) the expert region: DP x CP / EP, or with ETP 1
// (ep_over_tp) TP x DP x CP / EP.
static inline int plan_ep(const PlanLayout *l) { return l->ep > 1 ? l->ep : 1; }
static inline int plan_edp(const PlanLayout *l) {
    return (l->ep_over_tp ? l->tp : 1) * plan_dp_cp(l) / plan_ep(l);
}
// The ranks the flat buffer's padding serves, as megac train pads it: lcm(DP x CP, EDP)
// (dist_pad_ranks). Pure.
static inline int plan_pad_ranks(const PlanLayout *l) {
    return dist_pad_ranks(plan_dp_cp(l), plan_ep(l) > 1 ? plan_edp(l) : 0);
}
// " x CP n" when CP > 1, else "": layout names read "TP 2 x CP 2 x PP 1 ..." (buf: 32 chars).
const char *plan_cp_label(const PlanLayout *l, char *buf);

// dp: the gradient group, DP x CP (with EP > 1 the dense region only); cp: context
// parallelism's K/V exchange (layers/cp_attention.c); ep: the tokens' all-to-all (EP > 1); edp: the
// expert region's gradient group, DP x CP / EP
typedef enum { PLAN_G_TP, PLAN_G_PP, PLAN_G_DP, PLAN_G_EMB, PLAN_G_CP, PLAN_G_EP, PLAN_G_EDP,
               PLAN_NGROUPS } PlanGroup;

typedef enum {
    PLAN_MEM_PARAMS, PLAN_MEM_GRADS, PLAN_MEM_OPTIM, PLAN_MEM_ACTIVATIONS, PLAN_MEM_WORKSPACE,
    PLAN_MEM_COMM, PLAN_NMEM
} PlanMem;

typedef struct {
    uint64_t bytes[COMM_NKINDS], calls[COMM_NKINDS];
} PlanTraffic;

// One pipeline stage (every rank of a stage holds and moves the same amounts, except that
// only the first and last stages are in an embedding group).
typedef struct {
    int layer0, n_layers, first, last;
    int n_slots;                       // activation slots the schedule needs (interleaved:
                                       // of all the rank's chunks, each 1/v of the stage)
    int n_recomputed;                  // --recompute-granularity full: layers re-run in the
                                       // backward (their forward collectives repeat)
    int n_chunk_outputs;               // of those, layers that keep their output per slot
    int n_moe;                         // mixture-of-experts layers among them (plan_moe.c)
    double scratch;                    // of mem[WORKSPACE]: the backward workspace (shared
                                       // by interleaved chunks: the largest)
    double moe_workspace;              // of mem[WORKSPACE]: the MoE layers' buffers
                                       // (gpt_moe_create: per model chunk, not shared)
    size_t slot_bytes;                 // one activation slot: mem[ACTIVATIONS] = slot_bytes x
                                       // n_slots (interleaved: 0, the chunks differ)
    size_t n_floats, n_alloc;          // parameter floats, padded flat buffer length
    size_t shard_len;                  // optimizer slice (n_alloc / DP with ZeRO-1; EP > 1:
                                       // the dense region / (DP x CP) + the expert region / EDP)
    size_t expert_offset;              // where the expert region starts in the flat buffer
                                       // (gpt_params_geometry), n_alloc when the stage has
                                       // none (always at EP 1)
    double mem[PLAN_NMEM];             // bytes per rank by category
    double mem_optim_unsharded;        // optimizer state without ZeRO-1
    double host_mem;                   // --optimizer-cpu-offload: pinned host bytes per rank
                                       // (not in mem[]: those are the device's)
    double pcie_down, pcie_up;         // its bytes per step per rank over PCIe: D2H, H2D
    PlanTraffic traffic[PLAN_NGROUPS]; // one step, one rank of this stage
    double flops_mb;                   // GEMM FLOPs of one micro-batch, forward + backward, per
                                       // rank, as the hardware runs them (with recomputation)
    double model_flops_mb;             // the same without recomputation (Megatron's model FLOPs)
    double attn_flops_mb;              // of flops_mb: the fused attention's products (timed at
                                       // attn_*_efficiency, plan_attn_cudnn); 0 unfused
    double kernel_bytes_mb;            // bytes the memory-bound kernels of one micro-batch
                                       // move on one rank (plan_kernels.h; with recomputation)
    double t_mb;                       // seconds per micro-batch: GEMMs + memory-bound
                                       // kernels at hbm_gbps + TP + p2p
    double t_after;                    // seconds after the pipeline: grad syncs + optimizer
    double bubble;                     // idle fraction of this stage in the schedule
} PlanStage;

typedef struct {
    PlanLayout layout;
    int n_micro;                       // micro-batches per step per DP rank
    int crosses[PLAN_NGROUPS];         // the group spans nodes
    PlanStage *stages;                 // (pp)
    double mem_peak;                   // largest total over stages, bytes
    int fits;                          // the busiest stage fits in the GPU and (offload) the
                                       // node's ranks' pinned bytes in its host memory
    double host_peak;                  // largest host_mem over stages, bytes
    double t_pcie;                     // of t_step: the offload's copies (plan_offload_seconds)
    double bubble;                     // idle fraction of all stages; (PP-1)/(m+PP-1) when
                                       // the stages take equally long, (PP-1)/(v m+PP-1)
                                       // interleaved (a bubble of (PP-1)/(v m) of the work)
    double model_flops;                // per step, Megatron's formula, whole model (MFU)
    double hardware_flops;             // per step, with recomputation's extra forward
    double t_step, tokens_per_s, mfu;
} PlanResult;

// Interleaved 1F1B's schedule facts, worked out once per enumeration instead of per stage
// and layout: every rank's activation and gradient slots of each (PP, v, m) (pp_ilv_slots_all;
// m capped at 2 PP, past which they no longer change: test plan_formulas checks it), and the
// first, middle and last model chunks of the layout last counted (every other chunk is like
// the middle one but for its layer0 and slots).
typedef struct {
    int p, v, m;
    int *act, *grad;  // (p, v)
} PlanIlvSlots;

typedef struct PlanMemo {
    PlanIlvSlots *slots;  // (n_slots)
    int n_slots;
    PlanLayout layout;    // the chunks' layout and micro-batches per step (have_chunks)
    int n_micro, have_chunks;
    PlanStage chunks[3];  // virtual stages 0, 1 and PP v - 1, with one slot each
} PlanMemo;

void plan_memo_init(PlanMemo *memo);
void plan_memo_free(PlanMemo *memo);

// Activation slots and gradient queue lengths of rank `rank`'s v chunks (act, grad: (v)) under
// interleaved 1F1B with p ranks and m micro-batches: pp_ilv_slots and pp_ilv_plan's
// grad_slots, taken from memo when it has them (memo may be NULL; else added to it). Pure
// but for the memo.
void plan_ilv_slots(PlanMemo *memo, int p, int v, int m, int rank, int *act, int *grad);

// Checks the layout against the spec (divisibility, the model's checks, SP rows; with
// vpp > 1 megac train's refusals of the interleaved schedule). Returns 0, or -1 with one
// line naming the numbers in err.
int plan_layout_check(const PlanSpec *s, const PlanLayout *l, char *err, size_t errlen);

// Fills the memory and traffic of pipeline stage `stage` (n_micro micro-batches per step):
// every field of *st but the times; with l->vpp > 1 the sums over the rank's v chunks (one
// shared backward workspace; the chunks and slots kept in s->memo when it has one). Call
// after plan_layout_check succeeded. Pure but for s->memo.
void plan_stage_counts(const PlanSpec *s, const PlanLayout *l, int stage, int n_micro,
                       PlanStage *st);

// Whether pipeline stage `stage` of l (not interleaved) holds what *st, the previous stage,
// holds: as many layers, neither first nor last unless st is last too. If so, turns *st into
// stage `stage` (its layer0, activation slots and their bytes; times and traffic as they
// were) and returns 1, at O(1) cost; else returns 0 and leaves *st. Pure.
int plan_stage_like(const PlanSpec *s, const PlanLayout *l, int stage, int n_micro, PlanStage *st);

// Predicts memory and traffic of every stage, then time and MFU on hw. Call after
// plan_layout_check succeeded. The result owns r->stages (plan_result_free). The cost is
// O(PP) plus the counts of the distinct stages (first, middle, last; interleaved: O(PP v)
// sums of three distinct chunks, and the schedule's slots, from s->memo when it has them);
// plan_predict_summary fills the same result without r->stages (NULL).
void plan_predict(const PlanSpec *s, const PlanLayout *l, const PlanHardware *hw, PlanResult *r);
void plan_predict_summary(const PlanSpec *s, const PlanLayout *l, const PlanHardware *hw, PlanResult *r);

// Whether some group of `kind` (TP, CP, DP, DP x CP, PP or the embedding group; CP is the
// factor d leaves, pgrid_dims_cp) has members on two nodes (rank r on node r /
// gpus_per_node). O(min(groups, gpus_per_node)). Pure.
int plan_group_crosses(const PGridDims *d, PGridKind kind, int gpus_per_node);
void plan_result_free(PlanResult *r);

// Counts `times` calls of kind k moving bytes x num / den each (Comm's integer arithmetic).
void plan_count(PlanTraffic *t, CommKind k, uint64_t bytes, uint64_t num, uint64_t den, uint64_t times);
// t += the k calls of a layer's list (comm.h's CommCall) over a group of n ranks, each
// made `passes` times; e: bytes of an activation element. Never fails.
void plan_count_calls(PlanTraffic *t, int n, uint64_t e, const CommCall *calls, int k, uint64_t passes);
// Adds one step's traffic on one rank of *st, virtual stage `stage` of P (plan_traffic.c):
// TP, CP (the MoE layers' too), the PP sends and receives, the tied embedding's gradient sum
// and, below ZeRO-2, DP (ZeRO-2/3: plan_zero_counts). For plan_stage_counts, after the
// stage's layers, recompute counts, n_alloc and shard_len are set. Pure.
void plan_stage_traffic(const PlanSpec *s, const PlanLayout *l, int P, int stage, int n_micro,
                        PlanStage *st);

// ZeRO-2/3 (plan_zero.c, distributed/dist_sync_units.c): the stage's gradient, optimizer (and ZeRO-3
// parameter) memory and shard_len from its table (p, n_params: plan_stage_table's); its DP
// traffic (EP > 1: each layer's expert unit over EDP, its traffic in the edp group), and the
// sequence-parallel LayerNorm and tied-wte sums over the shard of DP rank 0. For
// plan_stage_counts, after the recompute counts. The table may hold the stage's edge
// tensors and only its first k >= 2 of st->n_layers layers: the others count as its last
// (O(k), whatever the layers). Returns 0, or -1 (nothing set) when those two last layers
// differ: then pass the whole table.
int plan_zero_counts(const PlanSpec *s, const PlanLayout *l, const ParamInfo *p, int n_params,
                     int n_micro, PlanStage *st);

// --optimizer-cpu-offload (plan_offload.c, optim/optim_offload.c): of a model chunk counted
// without it (shard_len, mem[PLAN_MEM_OPTIM] set), the host part of each rank's slice by the
// run's own split and byte counts (dist_offload_host_len, dist_offload_bytes): the moments
// moved off mem[PLAN_MEM_OPTIM], host_mem, pcie_down and pcie_up set. Nothing at offload 0.
// Pure.
void plan_offload_counts(const PlanSpec *s, const PlanLayout *l, PlanStage *st);
// Seconds the offload's copies add to a step of stage st: the one place the plan assumes how
// they overlap the rest (today: not at all, as the run; docs/offload.md). Pure.
double plan_offload_seconds(const PlanHardware *hw, const PlanStage *st);

// Mixture-of-experts layers (plan_moe.c, model/gpt_moe.h; their memory is gpt_measure's).
// All pure.
// The MoE layers among global layers [layer0, layer0 + n).
int plan_moe_layers(const GPTConfig *c, int layer0, int n);
// Adds one step's MoE traffic of stage st on one rank: the token-count and loss sums per
// layer and micro-batch (tp with sequence parallelism, cp) and, with sequence parallelism
// below ZeRO-2, the router and expert gradient sums over tp (ETP 1: the router's only).
void plan_moe_traffic(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, int n_micro,
                      PlanTraffic *tp, PlanTraffic *cp);

// Expert parallelism (l->ep > 1; plan_ep.c, layers/moe_dispatcher.c, dist_sync.c's
// regions). All pure. (The stage's flat buffer with the experts split is plan_model.c's, by
// gpt_params_geometry, as gpt_create lays it out.)
// The gradient and ZeRO-1 parameter traffic of region [0, len) of a flat buffer over n ranks
// (optim/optimizer.c's buckets of --ddp-bucket-size: per = len / n with ZeRO-1), added to t.
void plan_region_traffic(const PlanSpec *s, const PlanLayout *l, size_t len, int n, PlanTraffic *t);
// Adds one step's data-parallel (dense region over DP x CP), expert-data-parallel (expert
// region over EDP; ZeRO-2/3: plan_zero_counts) and token-dispatch (ep) traffic of stage st on
// one rank. The ep bytes are exact with the allgather dispatcher (its gathers and
// reduce-scatters have fixed sizes) and, with alltoall, with --moe-pad-expert-input-to-capacity
// (every expert runs its capacity, so the rows sent to each peer are known); alltoall dropless,
// or a capacity without padding, they are the expectation under uniform routing (every
// expert gets n K / E rows of each rank).
void plan_ep_traffic(const PlanSpec *s, const PlanLayout *l, PlanStage *st, int n_micro);
// plan_layout_check's part for EP > 1: experts, EP dividing E and DP x CP (ETP 1: TP x DP x
// CP, with sequence parallelism at TP > 1), megac train's refusals. Returns 0, or -1 with one
// line naming the numbers in err.
int plan_ep_check(const PlanSpec *s, const PlanLayout *l, char *err, size_t errlen);
// The parameter table of stage st's first n layers (and its edge tensors) as megac train lays
// it out (model/gpt_alloc.c): at EP > 1 E/EP experts of each MoE layer, placed after the
// other tensors, and with ETP 1 (ep_over_tp) neither replicated nor summed over TP. The
// caller frees it; *total: its floats.
ParamInfo *plan_stage_table(const PlanSpec *s, const PlanLayout *l, const PlanStage *st, int n,
                            int *n_params, size_t *total);
// Whether plan_ep_traffic's ep bytes are exact (allgather, or capacity with padding) for this
// model.
int plan_ep_exact(const GPTConfig *c);

// Bytes per rank that a ring all-reduce of `bytes` over n ranks moves: 2(n-1)/n x bytes. Pure.
double plan_all_reduce_bytes(double bytes, int n);

// Model state per rank in ZeRO's accounting (Rajbhandari et al. 2020): n_params parameters
// at param_bytes each, gradients at grad_bytes each and k bytes of optimizer state per
// parameter, the last divided by dp when shard_optimizer (ZeRO-1, "P_os").
// out = {parameters, gradients, optimizer state} in bytes. Pure.
void plan_zero_state_bytes(double n_params, double param_bytes, double grad_bytes, double k,
                           int dp, int shard_optimizer, double out[3]);

// Names: "tp", "pp", "dp", "embedding"; "parameters", "gradients", ... Pure.
const char *plan_group_name(PlanGroup g);
const char *plan_mem_name(PlanMem m);

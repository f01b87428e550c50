// model/gpt_params.h: the parameter table of one model shard (a pipeline stage's layers,
// split over tensor parallelism), its place in the flat buffer, and its initialisation.
//
// Every parameter is described once, with its full (unsharded) shape and how tensor
// parallelism splits it. From that follow the local shape, which rows/columns of the full
// tensor a rank holds (for initialisation and checkpoints), and the optimizer's settings.
// Vectors are (n, 1) matrices.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "gpt_config.h"

typedef enum {
    SHARD_NONE,    // replicated on every tp rank (LayerNorms, row-parallel biases, wpe)
    SHARD_COLUMN,  // column-parallel: rows (output features) split in tp blocks
    SHARD_QKV,     // fused QKV: each of the q, k, v row sections split (whole heads per rank;
                   // with grouped-query attention k and v have G heads, whole groups per rank)
    SHARD_GLU,     // SwiGLU's fc: each of the gate and up row sections split
    SHARD_ROW,     // row-parallel weight: columns (input features) split
    SHARD_VOCAB,   // vocab-parallel: rows split over the padded vocabulary; rows >= V padding
    SHARD_EXPERT,  // a mixture-of-experts layer's stacked experts: replicated over tp, rows
                   // (whole experts) split in ep blocks over expert parallelism
} ShardKind;

typedef enum { INIT_NORMAL, INIT_NORMAL_OUT, INIT_ZERO, INIT_ONE } InitKind;

typedef struct {
    char name[48];        // logical name, e.g. "layers.3.mlp.fc.weight" (checkpoint key)
    uint32_t tensor_id;   // RNG stream: same for every layout
    int rows, cols;       // full shape (vocab: real V rows)
    int local_rows, local_cols;
    ShardKind shard;
    InitKind init;
    int weight_decay;     // 1 for weight matrices and embeddings, 0 for biases and norms
    int tp_replicated;    // same value on every tp rank: counted once in the grad norm
    int tied_copy;        // the last stage's copy of wte (counted on the first stage only)
    int embedding_or_output;  // wte (either copy) or output_layer: --decoupled-lr's
                              // parameters (Megatron's is_embedding_or_output_parameter)
    int norm_param;       // norm weight/bias
    int sp_sum;           // replicated over tp, and with sequence parallelism each tp rank's
                          // gradient covers its own rows only (summed over tp each step): the
                          // norms, and a mixture-of-experts layer's router and experts
    int expert;           // an expert tensor (SHARD_EXPERT): its gradient is reduced over the
                          // expert-data-parallel group; expert_row0: the first full row held
    int expert_row0;
    int sections[3];      // SHARD_QKV / SHARD_GLU: full rows of each section (q, k, v or
                          // gate, up), each split over tp; 0 past the last
    size_t offset;        // in floats, into the flat parameter/gradient buffers
    size_t numel;         // local_rows * local_cols
} ParamInfo;

// A rectangle of the full tensor held locally: full rows [row0, row0+nrows) x cols
// [col0, col0+ncols) sit at local rows [local_row0, ...) and local cols [0, ncols).
typedef struct {
    int row0, local_row0, nrows, col0, ncols;
} ParamSlice;

// The slices rank `tp_rank` holds of p (at most 3: q, k, v; 2 for gate, up). Padding rows
// of a vocab shard are in no slice. Returns the count. Pure.
int gpt_param_slices(const ParamInfo *p, int tp, int tp_rank, ParamSlice out[3]);

// first[l] (l < n_layers) = index in t (n entries) of local layer l's first tensor (names
// "layers.<layer0 + l>."), first[n_layers] = one past the last; a block's tensors are
// consecutive. Pure.
void gpt_params_block_index(const ParamInfo *t, int n, int layer0, int n_layers, int *first);

// Builds the table for the stage owning layers [layer0, layer0 + n_layers), with the
// embeddings on the first stage (no wpe with rope) and, on the last, the final norm (no bias
// with RMSNorm) and the output layer: wte (a tied copy unless the stage is also the first),
// or output_layer when untied. A block's tensors are consecutive, in the order of GPTBlockW.
// The experts are whole (expert parallelism 1). Returns the table (caller frees) and its
// length in *n; *total = floats in all.
ParamInfo *gpt_params_build(const GPTConfig *c, int tp, int padded_vocab, int layer0,
                            int n_layers, int first_stage, int last_stage, int *n, size_t *total);
// gpt_params_build with the experts split over ep expert-parallel ranks (E/ep experts each;
// E divisible by ep), those of rank ep_rank held here.
ParamInfo *gpt_params_build_ep(const GPTConfig *c, int tp, int ep, int ep_rank, int padded_vocab,
                               int layer0, int n_layers, int first_stage, int last_stage, int *n,
                               size_t *total);
// Places the expert tensors of table t (n entries) after all others, from the first multiple
// of `align` floats past them (so the two regions pad separately); the others keep their
// offsets. Returns that start (the total when the table has no expert tensor); *total
// becomes the end of the last expert tensor (64-byte aligned views, as before).
size_t gpt_params_place_experts(ParamInfo *t, int n, size_t align, size_t *total);
// The floats of table t's (n entries) tensors outside and inside the expert region, each
// view 64-byte aligned as the flat buffer lays them out: at ep > 1 *experts holds the expert
// tensors' (gpt_params_place_experts moves them there); at ep 1 they sit among the others
// and *experts is 0. Pure.
void gpt_params_regions(const ParamInfo *t, int n, int ep, size_t *dense, size_t *experts);

// The flat buffers of a stage (gpt_create's, and megac plan's count of them).
typedef struct {
    size_t n_floats;       // floats the tensors use: the dense region, then the expert one
    size_t n_alloc;        // floats allocated: n_floats rounded up to the pad multiple
    size_t expert_offset;  // start of the expert region (a multiple of the pad multiple);
                           // n_alloc when the stage has no expert region
} GPTParamsGeometry;

// The geometry of `dense` floats followed by `experts` floats of expert region (0: none),
// padded to multiples of pad_multiple (each region padded on its own: the expert region
// starts at the first multiple past the dense one). Pure.
GPTParamsGeometry gpt_params_geometry(size_t dense, size_t experts, size_t pad_multiple);

// Expert-tensor-parallel 1 at tp > 1 (the expert-parallel groups span TP ranks): each TP rank
// holds other experts, so the expert tensors of t (n) are not tp-replicated (their owner
// writes them, the norm counts them everywhere) and not summed over TP under sequence
// parallelism. Pure.
void gpt_params_experts_over_tp(ParamInfo *t, int n);

// Whether tp rank tp_rank's copy of p is the one that counts among the tensor-parallel
// ranks and pipeline stages holding it: not a replicated tensor on tp rank > 0, not the last
// stage's tied copy of wte. The gradient norm counts, and checkpoints write, only these. Pure.
int gpt_param_is_owner(const ParamInfo *p, int tp_rank);

// Fills host buffer `out` (p->numel) with this rank's slice of parameter p: N(0, std),
// N(0, std/sqrt(2L)) for output projections (std = init_method_std, 0.02 when 0), zeros,
// ones; each element from (seed, tensor id, full element index), so the value does not
// depend on the layout.
void gpt_param_init(const ParamInfo *p, const GPTConfig *c, int tp, int tp_rank, uint64_t seed,
                    float *out);

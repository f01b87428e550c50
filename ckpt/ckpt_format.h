// ckpt/ckpt_format.h: the checkpoint's on-disk layout (see ckpt/CHECKPOINT.md), shared by
// the writer and reader (ckpt.c), the HDF5 helpers (ckpt_h5.c), rank 0's validator
// (ckpt_check.c) and the tools that read or write the same files (hf/hf_ckpt.c,
// train/train_outputs.c's list of inputs).
//
//     DIR/latest_checkpointed_iteration.txt     "10\n": the newest complete checkpoint
//     DIR/iter_0000010/checkpoint.h5            attributes (CkptMeta) on the root group,
//         /model/<name>                         full, unsharded parameter (rows[, cols]),
//                                               chunked, Fletcher-32 per chunk
//         /optim/exp_avg/<name>                 AdamW first moment, same shape
//         /optim/exp_avg_sq/<name>              AdamW second moment, same shape
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <hdf5.h>  // defines: hid_t
#include "model/gpt_config.h"
#include "model/gpt_params.h"

#define CKPT_FORMAT "megac-gpt-checkpoint"
#define CKPT_VERSION 1
#define CKPT_LATEST "latest_checkpointed_iteration.txt"
#define CKPT_FILE "checkpoint.h5"
#define CKPT_TMP_FILE "checkpoint.h5.tmp"  // while being written
#define CKPT_LOCK_FILE ".megac-save.lock"  // the --save lock (ckpt_lock.h)
#define CKPT_PATH_MAX 4096
#define CKPT_MSG_MAX 1024
#define CKPT_CHUNK_ELEMS ((hsize_t)1 << 18)  // elements per chunk (1 MiB), each Fletcher-32 checked

// The root group's integer attributes (all stored as 64-bit integers under these names).
typedef struct {
    int64_t format_version;
    int64_t iteration, consumed_samples, adam_step, nan_iterations;
    int64_t seed, global_batch_size;
    int64_t num_layers, hidden_size, num_attention_heads, ffn_hidden_size, seq_length,
            max_position_embeddings, vocab_size;
    int64_t saved_tp, saved_pp, saved_dp, saved_zero1;  // the writer's layout (informational)
    // Optional (absent from older files and from runs without a dynamic --fp16 loss scale):
    // attributes fp16_loss_scale (float64), fp16_loss_scale_good_steps and
    // fp16_loss_scale_overflows_left (int64), the LossScaler's state.
    int64_t has_loss_scale;
    double loss_scale;
    // Optional: untie_embeddings_and_output_weights (int64, written as 1 only by untied models;
    // absent: 0, tied), compared with this run like the model config.
    int64_t untie;
    int64_t loss_scale_good_steps, loss_scale_overflows_left;
    // Optional (absent: 0; written when > 0): fp16_skipped_iterations, fp16_skipped_samples
    // (int64), the steps skipped for an fp16 overflow so far and their samples: the learning
    // rate schedule advances only on the steps taken, so a resumed run continues it there.
    int64_t skipped_iterations, skipped_samples;
    // Optional, written only by Llama-style models (absent: GPT-2's 0), see
    // ckpt_arch.c: normalization_rmsnorm, swiglu, squared_relu, position_embedding_rope,
    // num_query_groups, disable_bias_linear (int64); rotary_base, rotary_percent (float64,
    // with rope). Compared with this run like the model config. Also (any architecture,
    // written when set): kv_channels (--kv-channels, a head size other than C / NH),
    // apply_layernorm_1p (1: zero-centred norm weights, saved as w, the norms use 1 + w).
    int64_t rmsnorm, swiglu, squared_relu, rope, num_query_groups, disable_bias_linear;
    int64_t kv_channels, layernorm_1p;
    int64_t per_token_loss;  // calculate_per_token_loss (1 when set; a run setting, checked too)
    double rotary_base, rotary_percent;
    // Optional (float64, written when --decoupled-lr is given; absent: 0): decoupled_lr,
    // decoupled_min_lr, the embedding and output layer's learning rates. Compared like the
    // model config (Megatron's scheduler also refuses other values without an override).
    double decoupled_lr, decoupled_min_lr;
    // Optional, written with --num-experts (absent: a dense model): num_experts, moe_topk,
    // moe_ffn_hidden_size, moe_router_sigmoid, moe_router_pre_softmax (int64),
    // moe_router_topk_scaling_factor (float64), moe_layer_freq (a string, the flag's text);
    // when set, moe_shared_expert_intermediate_size and moe_router_enable_expert_bias (the
    // expert bias itself: the /state group, ckpt_bias.c).
    int64_t num_experts, moe_topk, moe_ffn_hidden_size, moe_sigmoid, moe_pre_softmax;
    int64_t moe_shared_ffn, moe_expert_bias;
    double moe_topk_scaling;
    char moe_layer_freq[64];
} CkptMeta;

// ckpt_arch.c: the Llama-style attributes above.
// Copies c's Llama-style settings into m (num_query_groups 0 for multi-head). Pure.
void ckpt_arch_from_config(CkptMeta *m, const GPTConfig *c);
// Sets c's Llama-style fields from m. Pure.
void ckpt_arch_to_config(const CkptMeta *m, GPTConfig *c);
// Writes the attributes m has (none for GPT-2). Collective like ckpt_h5_write_meta.
void ckpt_arch_write(hid_t f, const CkptMeta *m);
// Reads them (absent: 0). Never fails.
void ckpt_arch_read(hid_t f, CkptMeta *m);
// Appends " flag N (this run M)" to err (at *used; ", " before it when bad or after the
// first) for every differing setting; returns bad + their count. Pure.
int ckpt_arch_compare(const CkptMeta *got, const CkptMeta *want, char *err, size_t n, size_t *used,
                      int bad);
// 1 if name is one of the attributes above (readers that list the known ones). Pure.
int ckpt_arch_is_attr(const char *name);

// The three groups of datasets, in file order.
typedef enum { CKPT_MODEL, CKPT_EXP_AVG, CKPT_EXP_AVG_SQ, CKPT_NGROUPS } CkptGroup;

// "/model", "/optim/exp_avg", "/optim/exp_avg_sq". Pure.
const char *ckpt_group_path(CkptGroup g);

// The parameter table of the whole, unsharded model (tp = 1, every layer, both ends): the
// names and full shapes of all datasets. Caller frees. Never fails.
ParamInfo *ckpt_full_table(const GPTConfig *c, int *n);

// About the size of the checkpoint file of model c: 3 float32 tensors per parameter, plus
// 2 % and 2 KiB per dataset for chunk indices, checksums and attributes. Pure.
double ckpt_h5_file_bytes(const GPTConfig *c);

// Sets the file format every checkpoint is created with on fapl: HDF5 1.8's object headers
// and later (superblock v2+), whose metadata (object headers with the attributes, chunk
// indices) carries HDF5's own checksums, so a damaged header or attribute fails to read
// instead of being read as other values. HDF5 1.10+ reads such files. Aborts on an HDF5
// failure.
void ckpt_h5_set_format(hid_t fapl);

// Writes the format name and every CkptMeta attribute on the root group of f. Collective
// under parallel HDF5 (every rank passes the same values). Aborts on an HDF5 failure.
void ckpt_h5_write_meta(hid_t f, const CkptMeta *m);

// Reads the format name and the attributes (the optional loss-scale ones when present:
// has_loss_scale says so). Returns 0, or -1 with one line in err naming
// the missing or malformed attribute. Changes nothing on the HDF5 error stack's printing.
int ckpt_h5_read_meta(hid_t f, CkptMeta *m, char *err, size_t errlen);

// Creates the groups and one float32 dataset per group and table entry, full shape
// ((rows) when cols == 1, else (rows, cols)), chunked (about CKPT_CHUNK_ELEMS elements,
// whole rows) with HDF5's Fletcher-32 filter. Collective: every rank makes every call even
// after a failure of its own. Returns 0, or -1 with the first failure in err (a full disk
// can fail a metadata write); aborts on any other HDF5 failure.
int ckpt_h5_create_datasets(hid_t f, const ParamInfo *full, int n, char *err, size_t errlen);

// The expert bias of --moe-router-enable-expert-bias (ckpt_bias.c): bias (num_layers, E)
// host, the same on every rank, as one float32 dataset (E) per MoE layer L,
// CKPT_STATE_GROUP/layers.L.mlp.router.expert_bias (no-ops when bias is NULL). Write:
// collective (every rank creates, rank0 writes), every call made even after a failure.
// Read: the rows of the MoE layers, every rank on its own file handle. Both return 0, or -1
// with one line in err naming the dataset (read: missing, wrong shape or not finite).
#define CKPT_STATE_GROUP "/state"
int ckpt_bias_write(hid_t f, const GPTConfig *c, const float *bias, int rank0, char *err,
                    size_t errlen);
int ckpt_bias_read(hid_t f, const GPTConfig *c, float *bias, char *err, size_t errlen);

// Moves local elements [e0, e1) of parameter p, as held by tp_rank of tp, between the host
// buffer buf (buf[0] is element e0) and dataset ds (full shape): write = 1 stores buf into
// the file, 0 reads the file into buf. Elements outside every slice of p (vocabulary
// padding rows) are skipped. Independent I/O: reads, and writes only to a file opened by one
// process (tests, tools); parallel HDF5 writes the checksummed (filtered) datasets only
// collectively, through ckpt_h5_write_ranges. Returns 0, or -1 on an HDF5 failure.
int ckpt_h5_transfer(hid_t ds, const ParamInfo *p, int tp, int tp_rank, size_t e0, size_t e1,
                     float *buf, int write);

// Writes local elements [e0[i], e1[i]) of parameter p from bufs[i], i < nr (nr may be 0),
// into dataset ds in one collective H5Dwrite: every rank calls it for every dataset, in the
// same order (parallel HDF5 writes checksummed, chunked datasets only collectively).
// Returns 0, or -1 on an HDF5 failure (the error stack kept for the caller).
int ckpt_h5_write_ranges(hid_t ds, const ParamInfo *p, int tp, int tp_rank, const size_t *e0,
                         const size_t *e1, float *const *bufs, int nr);

// Checks dataset p->name of group grp (path gpath, for the message): present, float32, the
// full shape of p. Returns 0, or -1 with one line naming the dataset, the expected and the
// found type and shape in err. Reads no data.
int ckpt_h5_check_dataset(hid_t grp, const char *gpath, const ParamInfo *p, char *err, size_t errlen);

// Reads the iteration named by DIR/latest_checkpointed_iteration.txt into *it. Returns 0,
// or -1 with one line naming the file in err (missing, not a regular file, unreadable, not
// a number). Rank 0's file-system step; no HDF5.
int ckpt_read_latest(const char *dir, int64_t *it, char *err, size_t errlen);

// Rank 0 only, before any rank opens the file: reads DIR/latest, then checks that the named
// checkpoint.h5 opens, has this format and version, matches `want`'s model config and
// global batch size, and holds every dataset of the model with its full shape as float32.
// Fills *got and path (CKPT_PATH_MAX bytes: the file). Returns 0, or -1 with one line
// naming the file in err.
int ckpt_check(const char *dir, const CkptMeta *want, CkptMeta *got, char *path,
               char *err, size_t errlen);

// layers/tp_linear.h: Megatron's column- and row-parallel linear layers, with optional
// sequence parallelism.
//
// Notation of the Megatron-LM paper (Shoeybi et al. 2019): a linear Y = X W^T + b with its
// weight W (OC, C) split over the tensor-parallel group of size tp.
//   ColumnParallelLinear: W split along OC (rows). Rank i computes Y_i = X W_i^T + b_i,
//     its own OC/tp output columns. The input goes through f: identity forward,
//     all-reduce backward (each rank only has the part of dX coming from its columns).
//   RowParallelLinear: W split along C (columns); the input X_i (N, C/tp) is already split
//     (the output of a column-parallel layer). Rank i computes X_i W_i^T, a partial sum;
//     g all-reduces it forward (identity backward). The bias, replicated, is added once.
// A block pairs them: column -> local op (attention heads, GELU) -> row, so the only
// communication is one all-reduce forward (g) and one backward (f) per pair.
//
// Sequence parallelism (Korthikanti et al. 2022): outside the column/row pair, activations
// are split along the rows (tokens) too: each rank holds N/tp rows. Then f becomes an
// all-gather forward / reduce-scatter backward, and g a reduce-scatter forward / all-gather
// backward: the same bytes as one all-reduce, but LayerNorms and residuals work on N/tp
// rows and store N/tp rows.
#pragma once
#include "backend/backend.h"
#include "comm/comm.h"

typedef struct {
    Comm *comm;             // the tensor-parallel group
    int sequence_parallel;  // 1: inputs/outputs outside the pair are (N/tp, C) row shards
    void *gather;           // (N, C) workspace when sequence_parallel, else unused
    void *full;             // (N, C) workspace when sequence_parallel, else unused
} TPGroup;

// Activations (`void *` here and in tp_vocab.h) hold be->act elements and travel over the
// tensor-parallel group in that type: the CommDtype of be->act. Pure.
static inline CommDtype tp_act_dtype(const Backend *be) {
    return be->act == BACKEND_BF16 ? COMM_BF16 : be->act == BACKEND_F16 ? COMM_F16 : COMM_F32;
}

// out (N, OC_tp) = X (N, C) @ w (OC_tp, C)^T + b (OC_tp). f forward: identity, or with
// sequence parallelism inp is this rank's (N/tp, C) rows, all-gathered into X first.
void tp_column_linear_forward(Backend *be, TPGroup *tp, void *out, const void *inp,
                              const void *w, const void *b, int N, int C, int OC_tp);

// dw (OC_tp, C) +=, db (OC_tp) +=; dinp = f backward of the local input gradient:
// all-reduced (N, C), or reduce-scattered to (N/tp, C) rows with sequence parallelism.
// inp as given to the forward (re-gathered here with sequence parallelism).
void tp_column_linear_backward(Backend *be, TPGroup *tp, void *dinp, float *dw, float *db,
                               const void *dout, const void *inp, const void *w,
                               int N, int C, int OC_tp);

// tp_column_linear_forward into pre (N, OC_tp), then out = act(pre): (N, OC_tp), or
// (N, OC_tp/2) for a gated act. One fused op (Backend matmul_act_forward: a GEMM with a GELU
// epilogue on CUDA).
void tp_column_linear_act_forward(Backend *be, TPGroup *tp, void *out, void *pre, const void *inp,
                                  const void *w, const void *b, int N, int C, int OC_tp,
                                  BackendAct act);

// out = g forward of inp (N, C_tp) @ w (OC, C_tp)^T: all-reduced (N, OC), or
// reduce-scattered to (N/tp, OC) rows with sequence parallelism; + b (OC) once (it enters on
// tp rank 0 before the sum).
void tp_row_linear_forward(Backend *be, TPGroup *tp, void *out, const void *inp,
                           const void *w, const void *b, int N, int C_tp, int OC);

// g backward: dout is (N, OC), or (N/tp, OC) rows all-gathered first with sequence
// parallelism. dinp (N, C_tp) = dout @ w; dw (OC, C_tp) +=; db (OC) += on every tp rank
// (from the full dout, so the replicated bias gets the same gradient everywhere).
void tp_row_linear_backward(Backend *be, TPGroup *tp, void *dinp, float *dw, float *db,
                            const void *dout, const void *inp, const void *w,
                            int N, int C_tp, int OC);

// tp_row_linear_backward whose input inp = act(pre) came from tp_column_linear_act_forward
// with a pointwise act: dinp (N, C_tp) = (dout @ w) * act'(pre), the gradient of pre, in one
// fused op (Backend matmul_act_backward: the DGELU epilogue on CUDA). dw, db as
// tp_row_linear_backward.
void tp_row_linear_act_backward(Backend *be, TPGroup *tp, void *dinp, float *dw, float *db,
                                const void *dout, const void *inp, const void *w,
                                const void *pre, int N, int C_tp, int OC, BackendAct act);

// The calls (comm.h's CommCall, in the activation dtype) one forward (backward 0) or one
// backward (1) of a column- or row-parallel linear makes over a tensor-parallel group of tp
// ranks, with sequence parallelism or not, when the activations it moves over the group are
// (N, C) (column: its input; row: its output); returns how many (<= TP_MAX_CALLS). The
// list of the functions above, kept beside them in tp_linear.c (`megac plan` counts it).
// Pure.
typedef enum { TP_COLUMN, TP_ROW } TPLinearKind;
enum { TP_MAX_CALLS = 2 };
int tp_linear_calls(TPLinearKind kind, int sp, int backward, int tp, size_t N, size_t C,
                    CommCall calls[TP_MAX_CALLS]);

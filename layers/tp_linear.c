// layers/tp_linear.c: column- and row-parallel linear layers (see tp_linear.h).
#include "tp_linear.h"

// Rows of this rank's sequence shard.
static size_t shard_rows(const TPGroup *tp, int N) { return (size_t)N / (size_t)tp->comm->size; }

void tp_column_linear_forward(Backend *be, TPGroup *tp, void *out, const void *inp,
                              const void *w, const void *b, int N, int C, int OC_tp) {
    const void *x = inp;  // (N, C)
    if (tp->sequence_parallel) {  // f forward with SP: all-gather the row shards
        comm_all_gather(tp->comm, inp, tp->gather, shard_rows(tp, N) * C, tp_act_dtype(be));
        x = tp->gather;
    }
    be->ops->matmul_forward(be, out, x, w, b, N, C, OC_tp);  // (N, OC_tp)
}

void tp_column_linear_backward(Backend *be, TPGroup *tp, void *dinp, float *dw, float *db,
                               const void *dout, const void *inp, const void *w,
                               int N, int C, int OC_tp) {
    if (!tp->sequence_parallel) {
        be->ops->matmul_backward(be, dinp, dw, db, dout, inp, w, N, C, OC_tp);
        // f backward: each rank holds the gradient through its own OC_tp columns; sum them.
        if (dinp) comm_all_reduce(tp->comm, dinp, (size_t)N * C, tp_act_dtype(be), COMM_SUM);
        return;
    }
    // SP: the full input was not kept (that is the memory saving): gather it again.
    comm_all_gather(tp->comm, inp, tp->gather, shard_rows(tp, N) * C, tp_act_dtype(be));
    be->ops->matmul_backward(be, tp->full, dw, db, dout, tp->gather, w, N, C, OC_tp);
    // f backward with SP: sum the partial input gradients and keep this rank's rows.
    comm_reduce_scatter(tp->comm, tp->full, dinp, shard_rows(tp, N) * C, tp_act_dtype(be), COMM_SUM);
}

void tp_column_linear_act_forward(Backend *be, TPGroup *tp, void *out, void *pre, const void *inp,
                                  const void *w, const void *b, int N, int C, int OC_tp,
                                  BackendAct act) {
    const void *x = inp;  // (N, C)
    if (tp->sequence_parallel) {
        comm_all_gather(tp->comm, inp, tp->gather, shard_rows(tp, N) * C, tp_act_dtype(be));
        x = tp->gather;
    }
    be->ops->matmul_act_forward(be, out, pre, x, w, b, N, C, OC_tp, act);  // pre (N, OC_tp)
}

void tp_row_linear_forward(Backend *be, TPGroup *tp, void *out, const void *inp,
                           const void *w, const void *b, int N, int C_tp, int OC) {
    const void *bias = tp->comm->rank == 0 ? b : NULL;  // enters the sum once
    if (!tp->sequence_parallel) {
        be->ops->matmul_forward(be, out, inp, w, bias, N, C_tp, OC);
        comm_all_reduce(tp->comm, out, (size_t)N * OC, tp_act_dtype(be), COMM_SUM);  // g forward
        return;
    }
    be->ops->matmul_forward(be, tp->full, inp, w, bias, N, C_tp, OC);
    comm_reduce_scatter(tp->comm, tp->full, out, shard_rows(tp, N) * OC, tp_act_dtype(be), COMM_SUM);
}

void tp_row_linear_backward(Backend *be, TPGroup *tp, void *dinp, float *dw, float *db,
                            const void *dout, const void *inp, const void *w,
                            int N, int C_tp, int OC) {
    const void *dy = dout;  // (N, OC)
    if (tp->sequence_parallel) {  // g backward with SP: all-gather the gradient's row shards
        comm_all_gather(tp->comm, dout, tp->gather, shard_rows(tp, N) * OC, tp_act_dtype(be));
        dy = tp->gather;
    }
    be->ops->matmul_backward(be, dinp, dw, db, dy, inp, w, N, C_tp, OC);
}

void tp_row_linear_act_backward(Backend *be, TPGroup *tp, void *dinp, float *dw, float *db,
                                const void *dout, const void *inp, const void *w,
                                const void *pre, int N, int C_tp, int OC, BackendAct act) {
    const void *dy = dout;  // (N, OC)
    if (tp->sequence_parallel) {
        comm_all_gather(tp->comm, dout, tp->gather, shard_rows(tp, N) * OC, tp_act_dtype(be));
        dy = tp->gather;
    }
    be->ops->matmul_act_backward(be, dinp, dw, db, dy, inp, w, pre, N, C_tp, OC, act);
}

// The calls made above, one function at a time (keep the two in step).
int tp_linear_calls(TPLinearKind kind, int sp, int backward, int tp, size_t N, size_t C,
                    CommCall calls[TP_MAX_CALLS]) {
    size_t shard = N / (size_t)tp * C;  // shard_rows(tp, N) * C
    if (kind == TP_COLUMN && !backward) {  // f forward: identity, or the SP all-gather
        if (!sp) return 0;
        calls[0] = (CommCall){COMM_ALL_GATHER, shard, 1, 0};
        return 1;
    }
    if (kind == TP_COLUMN) {  // f backward: all-reduce; SP: re-gather, then reduce-scatter
        if (!sp) calls[0] = (CommCall){COMM_ALL_REDUCE, N * C, 1, 0};
        if (!sp) return 1;
        calls[0] = (CommCall){COMM_ALL_GATHER, shard, 1, 0};
        calls[1] = (CommCall){COMM_REDUCE_SCATTER, shard, 1, 0};
        return 2;
    }
    if (!backward) {  // g forward: all-reduce, or the SP reduce-scatter
        calls[0] = sp ? (CommCall){COMM_REDUCE_SCATTER, shard, 1, 0} : (CommCall){COMM_ALL_REDUCE, N * C, 1, 0};
        return 1;
    }
    if (!sp) return 0;  // g backward: identity, or the SP all-gather
    calls[0] = (CommCall){COMM_ALL_GATHER, shard, 1, 0};
    return 1;
}

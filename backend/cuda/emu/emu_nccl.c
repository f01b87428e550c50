// backend/cuda/emu/emu_nccl.c: the CPU emulator's NCCL, over MPI (host memory, synchronous).
//
// An ncclComm_t is a dup of an MPI communicator (emu_nccl_comm_init_mpi), so its traffic never
// mixes with anything else. Every operation becomes a queued MPI non-blocking call; outside
// a group the queue is run at once, inside ncclGroupStart/ncclGroupEnd (nestable) it runs at
// the outermost ncclGroupEnd: all collectives (MPI_I*, in call order, as NCCL requires of
// every rank) and all sends/receives (MPI_Isend/MPI_Irecv) are posted, then waited for
// together, so a grouped send + recv in any order never deadlocks. When the call returns,
// the operation is complete (the stream argument is ignored).
// ncclAvg is a sum divided by the communicator size afterwards (float, double; integer
// division for integer types). Data movement works for every type; reductions of fp8 return
// ncclInvalidArgument.
// bf16 and fp16 reductions (all-reduce, reduce-scatter) are done here, not by MPI: every
// rank's input is all-gathered, then each element is reduced in fp32 over the ranks in rank
// order (0, 1, 2, ...; ncclAvg divides by the size at the end) and rounded once to the type
// (round to nearest even, emu_half.h). Every rank gets the same bits, independent of timing.
// (Real NCCL rounds to the 16-bit type after each step of its ring/tree, in an order of its
// own; results agree to a few 16-bit ulps.)
// Global state: the group queue, per host thread as in NCCL (depth and pending operations).
#include <nccl.h>

#include "emu_internal.h"  // defines: emu_trace, emu_stream_id
#include "emu_half.h"  // defines: emu_f32_to_bf16, emu_bf16_to_f32, emu_f32_to_f16, emu_f16_to_f32

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ncclComm {
    MPI_Comm comm;  // our own dup: no other traffic on it
    int rank, size;
};

typedef enum { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_BCAST, OP_SEND, OP_RECV } OpKind;
typedef struct {
    OpKind kind;
    ncclComm_t comm;
    const void *send;
    void *recv;
    size_t count;       // elements: per rank for all-gather and reduce-scatter
    ncclDataType_t type;
    ncclRedOp_t op;
    int peer;           // send/recv peer, broadcast root
    void *tmp;          // owned copy of `send` when it overlaps `recv`
    void *gath;         // 16-bit reductions: every rank's input, gathered (owned)
} Op;

static _Thread_local int emu_group_depth;
static _Thread_local Op *emu_group_ops;  // (emu_group_cap) pending operations
static _Thread_local int emu_group_n, emu_group_cap;

static ncclResult_t invalid(const char *call, const char *what) {
    fprintf(stderr, "emu: %s: %s\n", call, what);
    return ncclInvalidArgument;
}

// The MPI type moving `t` (*bytes per element); *reducible: 1 MPI can reduce it, 2 the
// emulator reduces it (bf16, fp16: reduce_half), 0 not emulated.
static MPI_Datatype mpi_type(ncclDataType_t t, size_t *bytes, int *reducible) {
    *reducible = 1;
    switch (t) {
    case ncclInt8: *bytes = 1; return MPI_INT8_T;
    case ncclUint8: *bytes = 1; return MPI_UINT8_T;
    case ncclInt32: *bytes = 4; return MPI_INT32_T;
    case ncclUint32: *bytes = 4; return MPI_UINT32_T;
    case ncclInt64: *bytes = 8; return MPI_INT64_T;
    case ncclUint64: *bytes = 8; return MPI_UINT64_T;
    case ncclFloat32: *bytes = 4; return MPI_FLOAT;
    case ncclFloat64: *bytes = 8; return MPI_DOUBLE;
    case ncclFloat16: case ncclBfloat16: *reducible = 2; *bytes = 2; return MPI_UINT16_T;
    case ncclFloat8e4m3: case ncclFloat8e5m2: *reducible = 0; *bytes = 1; return MPI_UINT8_T;
    default: *bytes = 0; return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(ncclRedOp_t op) {
    switch (op) {
    case ncclSum: case ncclAvg: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_OP_NULL;
    }
}

// 1 if [a, a+na) and [b, b+nb) overlap.
static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

// recv (n elements of t) /= size, for ncclAvg.
static void divide(void *recv, size_t n, ncclDataType_t t, int size) {
    for (size_t i = 0; i < n; i++) {
        switch (t) {
        case ncclFloat32: ((float *)recv)[i] /= (float)size; break;
        case ncclFloat64: ((double *)recv)[i] /= (double)size; break;
        case ncclInt8: ((int8_t *)recv)[i] /= size; break;
        case ncclUint8: ((uint8_t *)recv)[i] /= (unsigned)size; break;
        case ncclInt32: ((int32_t *)recv)[i] /= size; break;
        case ncclUint32: ((uint32_t *)recv)[i] /= (unsigned)size; break;
        case ncclInt64: ((int64_t *)recv)[i] /= size; break;
        case ncclUint64: ((uint64_t *)recv)[i] /= (unsigned)size; break;
        default: return;
        }
    }
}

// A 16-bit (bf16 or fp16) element as float, and a float rounded to one.
static float half_load(const uint16_t *p, size_t i, ncclDataType_t t) {
    return t == ncclBfloat16 ? emu_bf16_to_f32(p[i]) : emu_f16_to_f32(p[i]);
}
static uint16_t half_round(float v, ncclDataType_t t) {
    return t == ncclBfloat16 ? emu_f32_to_bf16(v) : emu_f32_to_f16(v);
}

// Finishes a bf16/fp16 all-reduce or reduce-scatter from o->gath (size ranks' inputs, rank
// order): recv (count) = the ranks' elements combined in fp32 in rank order, rounded once.
static void reduce_half(Op *o) {
    int sz = o->comm->size;
    size_t per = o->count * (o->kind == OP_REDUCESCATTER ? (size_t)sz : 1);  // input elements
    size_t off = o->kind == OP_REDUCESCATTER ? (size_t)o->comm->rank * o->count : 0;
    const uint16_t *g = o->gath;
    for (size_t i = 0; i < o->count; i++) {
        float acc = half_load(g, off + i, o->type);
        for (int r = 1; r < sz; r++) {
            float x = half_load(g, (size_t)r * per + off + i, o->type);
            switch (o->op) {
            case ncclProd: acc *= x; break;
            case ncclMax: acc = x > acc ? x : acc; break;
            case ncclMin: acc = x < acc ? x : acc; break;
            default: acc += x; break;  // ncclSum, ncclAvg
            }
        }
        if (o->op == ncclAvg) acc /= (float)sz;
        ((uint16_t *)o->recv)[i] = half_round(acc, o->type);
    }
}

// Posts op as a non-blocking MPI call into *req. MPI error code.
static int post(Op *o, MPI_Request *req) {
    size_t es;
    int red;
    MPI_Datatype T = mpi_type(o->type, &es, &red);
    MPI_Comm C = o->comm->comm;
    int n = (int)o->count, sz = o->comm->size, me = o->comm->rank;
    size_t in_bytes = o->count * es * (o->kind == OP_REDUCESCATTER ? (size_t)sz : 1);
    size_t out_bytes = o->count * es * (o->kind == OP_ALLGATHER ? (size_t)sz : 1);
    const void *send = o->send;
    if (red == 2 && (o->kind == OP_ALLREDUCE || o->kind == OP_REDUCESCATTER)) {
        // 16-bit reduction: gather every input (send is only read), reduce_half after the wait
        if (!(o->gath = malloc(in_bytes * (size_t)sz + 1))) return MPI_ERR_NO_MEM;
        return MPI_Iallgather(send, (int)(in_bytes / es), T, o->gath, (int)(in_bytes / es), T, C,
                              req);
    }
    if (o->kind == OP_ALLREDUCE && send == o->recv) {
        send = MPI_IN_PLACE;
    } else if (o->kind == OP_ALLGATHER && send == (char *)o->recv + (size_t)me * in_bytes) {
        send = MPI_IN_PLACE;
    } else if ((o->kind == OP_ALLREDUCE || o->kind == OP_ALLGATHER ||
                o->kind == OP_REDUCESCATTER) && overlap(send, in_bytes, o->recv, out_bytes)) {
        if (!(o->tmp = malloc(in_bytes))) return MPI_ERR_NO_MEM;
        send = memcpy(o->tmp, send, in_bytes);
    }
    switch (o->kind) {
    case OP_ALLREDUCE: return MPI_Iallreduce(send, o->recv, n, T, mpi_op(o->op), C, req);
    case OP_ALLGATHER: return MPI_Iallgather(send, n, T, o->recv, n, T, C, req);
    case OP_REDUCESCATTER:
        return MPI_Ireduce_scatter_block(send, o->recv, n, T, mpi_op(o->op), C, req);
    case OP_BCAST:
        if (me == o->peer && send != o->recv) memmove(o->recv, send, in_bytes);
        return MPI_Ibcast(o->recv, n, T, o->peer, C, req);
    case OP_SEND: return MPI_Isend(send, n, T, o->peer, 0, C, req);
    case OP_RECV: return MPI_Irecv(o->recv, n, T, o->peer, 0, C, req);
    }
    return MPI_ERR_OTHER;
}

// Runs the queued operations: posts all, waits for all, finishes ncclAvg, empties the queue.
static ncclResult_t flush(void) {
    int n = emu_group_n, err = MPI_SUCCESS;
    // Statuses are kept: gcc 12 misreads MPI_STATUSES_IGNORE as a zero-size buffer.
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)(n ? n : 1));
    MPI_Status *stats = malloc(sizeof *stats * (size_t)(n ? n : 1));
    if (!reqs || !stats) {
        free(reqs);
        free(stats);
        return ncclSystemError;
    }
    int posted = 0;
    for (; posted < n && err == MPI_SUCCESS; posted++) {
        err = post(&emu_group_ops[posted], &reqs[posted]);
        if (err != MPI_SUCCESS) break;
    }
    int werr = MPI_Waitall(posted, reqs, stats);
    if (err == MPI_SUCCESS) err = werr;
    for (int i = 0; i < n; i++) {
        Op *o = &emu_group_ops[i];
        if (err == MPI_SUCCESS && o->gath) reduce_half(o);
        else if (err == MPI_SUCCESS && o->op == ncclAvg &&
                 (o->kind == OP_ALLREDUCE || o->kind == OP_REDUCESCATTER))
            divide(o->recv, o->count, o->type, o->comm->size);
        free(o->tmp);
        free(o->gath);
    }
    free(reqs);
    free(stats);
    emu_group_n = 0;
    if (err == MPI_SUCCESS) return ncclSuccess;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    fprintf(stderr, "emu: NCCL over MPI failed: %s\n", msg);
    return ncclSystemError;
}

// Checks op, queues it, and runs the queue unless inside a group.
static ncclResult_t enqueue(const char *call, Op o) {
    size_t es;
    int reducible;
    char msg[160];
    if (!o.comm) return invalid(call, "NULL communicator");
    if (mpi_type(o.type, &es, &reducible) == MPI_DATATYPE_NULL)
        return invalid(call, "unknown data type");
    int reduces = o.kind == OP_ALLREDUCE || o.kind == OP_REDUCESCATTER;
    if (reduces && (!reducible || mpi_op(o.op) == MPI_OP_NULL))
        return invalid(call, "reduction of this type or with this op is not emulated");
    if (o.count > INT_MAX || (reduces && reducible == 2 && o.count * (size_t)o.comm->size *
                                              (o.kind == OP_REDUCESCATTER ? (size_t)o.comm->size : 1) > INT_MAX))
        return invalid(call, "count above INT_MAX is not emulated");
    if ((o.kind == OP_BCAST || o.kind == OP_SEND || o.kind == OP_RECV) &&
        (o.peer < 0 || o.peer >= o.comm->size)) {
        snprintf(msg, sizeof msg, "peer/root %d outside the communicator (size %d)", o.peer,
                 o.comm->size);
        return invalid(call, msg);
    }
    int needs_send = o.kind != OP_RECV && (o.kind != OP_BCAST || o.peer == o.comm->rank);
    if (o.count && ((needs_send && !o.send) || (o.kind != OP_SEND && !o.recv)))
        return invalid(call, "NULL buffer");
    if (emu_group_n == emu_group_cap) {
        int cap = emu_group_cap ? 2 * emu_group_cap : 16;
        Op *ops = realloc(emu_group_ops, sizeof *ops * (size_t)cap);
        if (!ops) return ncclSystemError;
        emu_group_ops = ops;
        emu_group_cap = cap;
    }
    o.tmp = NULL;
    o.gath = NULL;
    emu_group_ops[emu_group_n++] = o;
    return emu_group_depth ? ncclSuccess : flush();
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
    emu_trace(emu_stream_id(stream), "nccl", "%s", "ncclAllReduce");
    Op o = {OP_ALLREDUCE, comm, sendbuff, recvbuff, count, datatype, op, 0, NULL, NULL};
    return enqueue("ncclAllReduce", o);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    emu_trace(emu_stream_id(stream), "nccl", "%s", "ncclAllGather");
    Op o = {OP_ALLGATHER, comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, NULL, NULL};
    return enqueue("ncclAllGather", o);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
    emu_trace(emu_stream_id(stream), "nccl", "%s", "ncclReduceScatter");
    Op o = {OP_REDUCESCATTER, comm, sendbuff, recvbuff, recvcount, datatype, op, 0, NULL, NULL};
    return enqueue("ncclReduceScatter", o);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
    emu_trace(emu_stream_id(stream), "nccl", "%s", "ncclBroadcast");
    Op o = {OP_BCAST, comm, sendbuff, recvbuff, count, datatype, ncclSum, root, NULL, NULL};
    return enqueue("ncclBroadcast", o);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    emu_trace(emu_stream_id(stream), "nccl", "%s", "ncclSend");
    Op o = {OP_SEND, comm, sendbuff, NULL, count, datatype, ncclSum, peer, NULL, NULL};
    return enqueue("ncclSend", o);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    emu_trace(emu_stream_id(stream), "nccl", "%s", "ncclRecv");
    Op o = {OP_RECV, comm, NULL, recvbuff, count, datatype, ncclSum, peer, NULL, NULL};
    return enqueue("ncclRecv", o);
}

ncclResult_t ncclGroupStart(void) {
    emu_group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (emu_group_depth == 0) {
        fprintf(stderr, "emu: ncclGroupEnd without ncclGroupStart\n");
        return ncclInvalidUsage;
    }
    return --emu_group_depth ? ncclSuccess : flush();
}

// --- communicators ---------------------------------------------------------------------------
ncclResult_t emu_nccl_comm_init_mpi(ncclComm_t *comm, MPI_Comm mpi_comm) {
    int up = 0;
    MPI_Initialized(&up);
    if (!comm || !up) return invalid("emu_nccl_comm_init_mpi", "NULL comm or MPI not initialised");
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    if (MPI_Comm_dup(mpi_comm, &c->comm) != MPI_SUCCESS) {
        free(c);
        return ncclSystemError;
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    (void)comm, (void)nranks, (void)commId, (void)rank;
    fprintf(stderr, "emu: ncclCommInitRank is not emulated: use emu_nccl_comm_init_mpi "
                    "(MPI_Comm) under MEGAC_CUDA_EMU\n");
    return ncclInvalidUsage;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    if (!uniqueId) return ncclInvalidArgument;
    memset(uniqueId, 0, sizeof *uniqueId);
    snprintf(uniqueId->internal, sizeof uniqueId->internal, "emu-nccl-%ld", (long)getpid());
    return ncclSuccess;
}

// Frees the communicator and its MPI dup (unless MPI is already finalised).
static ncclResult_t comm_free(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Comm_free(&comm->comm);
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return comm_free(comm); }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return comm_free(comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    if (!comm || !asyncError) return ncclInvalidArgument;
    *asyncError = ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    if (!comm || !count) return ncclInvalidArgument;
    *count = comm->size;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    if (!comm || !rank) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclGetVersion(int *version) {
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled CUDA error";
    case ncclSystemError: return "system error (emulator: MPI failed, see stderr)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument (emulator: see the emu: line on stderr)";
    case ncclInvalidUsage: return "invalid usage (emulator: see the emu: line on stderr)";
    case ncclRemoteError: return "remote process exited or network error";
    case ncclInProgress: return "operation in progress";
    default: return "unknown result code";
    }
}

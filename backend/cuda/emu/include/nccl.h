// backend/cuda/emu/include/nccl.h: the CPU emulator's stand-in for NCCL (only what megac uses;
// names, values and signatures as in NCCL 2.28). Implemented by emu_nccl.c over MPI: host
// memory, synchronous operations, one dup'd MPI communicator per ncclComm_t.
// Emulator only: emu_nccl_comm_init_mpi (there is no NCCL bootstrap to fake).
// C11 and C++20.
#pragma once
#include <stddef.h>
#include <mpi.h>           // defines: MPI_Comm (emulator only)
#include <cuda_runtime.h>  // defines: cudaStream_t

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION_CODE 22809
#define NCCL_UNIQUE_ID_BYTES 128

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

// Contracts: NCCL's, for what megac uses, except that every operation has completed when it
// returns (outside a group) or when the outermost ncclGroupEnd returns (emu_nccl.c).
ncclResult_t ncclGetVersion(int *version);  // NCCL_VERSION_CODE
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);  // fills an id nothing uses
// Emulator: always ncclInvalidUsage (use emu_nccl_comm_init_mpi).
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);  // frees the communicator and its MPI dup
ncclResult_t ncclCommAbort(ncclComm_t comm);    // as ncclCommDestroy (nothing is in flight)
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);  // ncclSuccess
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
const char *ncclGetErrorString(ncclResult_t result);

// Collectives: in place when the buffers say so (NCCL's rules); ncclAvg = sum / size.
// Reductions of bf16 and fp16: in fp32 over the ranks in rank order, rounded once (emu_nccl.c).
// Reductions of fp8 and counts above INT_MAX: ncclInvalidArgument.
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
// Point to point: outside a group each completes before returning (a send whose receive is
// not yet posted may wait for it); inside, all are posted together at the outermost
// ncclGroupEnd, so their order does not matter.
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart(void);  // nestable, per host thread
ncclResult_t ncclGroupEnd(void);    // ncclInvalidUsage without a matching ncclGroupStart

// Emulator only. Collective over mpi_comm: *comm becomes an NCCL communicator with the same
// ranks, over its own dup of mpi_comm (the real path is ncclGetUniqueId on rank 0, MPI_Bcast
// of the id, ncclCommInitRank). Returns ncclInvalidArgument if MPI is not initialised.
ncclResult_t emu_nccl_comm_init_mpi(ncclComm_t *comm, MPI_Comm mpi_comm);

#ifdef __cplusplus
}
#endif

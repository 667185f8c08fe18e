/*
 * dev/cuda/emu/include/nccl.h - NCCL for the CPU emulator (../emu_nccl.cpp): the calls the project makes, run as
 * MPI collectives on a duplicate of MPI_COMM_WORLD over the (host-resident) device buffers, queued on their
 * stream like any other work (emu::enqueue), so that the --comm nccl paths of cuda/dist.cu and
 * cuda/dist_scape.cuh run with 2 emulated GPUs (EMU_DEVICES=2) under mpirun. Calls between ncclGroupStart and
 * ncclGroupEnd are posted together as nonblocking MPI operations and completed together at ncclGroupEnd, in their
 * stream's order. Sums are MPI's (for two ranks: the same as NCCL's, one addition).
 */
#ifndef EMU_NCCL_H
#define EMU_NCCL_H
#include "emu.h"

typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
               ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
#define ncclFloat ncclFloat32
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef struct emu_nccl_comm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

const char *ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
                           cudaStream_t s);
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s);
#endif

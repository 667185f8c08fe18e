/*
 * dev/cuda/emu/emu_nccl.cpp - the emulator's NCCL (include/nccl.h): each call becomes MPI on the communicator's
 * own duplicate of MPI_COMM_WORLD (so it never matches the project's host-side MPI traffic), queued on its stream.
 * A group's calls are one queued operation that posts them all as nonblocking MPI and waits for all of them, so
 * sends and receives to each other cannot deadlock; outside a group a call is a group of one. The communicator's
 * ranks must be MPI_COMM_WORLD's (one communicator per process, as the project uses it). Built with mpicxx
 * flags, linked only into the emulator's MPI programs (cuda/mk/emu.mk).
 */
#include "nccl.h"
#include <mpi.h>
#include <memory>
#include <vector>

struct emu_nccl_comm {
    MPI_Comm mpi;
    int rank, nranks;
};

namespace {
struct Call {
    enum { ALLREDUCE, REDUCE, REDUCE_SCATTER, BCAST, SEND, RECV } kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dt;
    int root_or_peer;
    ncclComm_t comm;
    cudaStream_t stream;
};
int group_depth;
std::vector<Call> pending;

MPI_Datatype mpi_type(ncclDataType_t dt) {
    switch (dt) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: emu::die("NCCL emulation: data type %d has no MPI equivalent here (bf16/fp16 reductions are not emulated)", (int)dt);
    }
}
size_t type_size(ncclDataType_t dt) {
    int s = 0;
    MPI_Type_size(mpi_type(dt), &s);
    return (size_t)s;
}
void mpi_check(int rc, const char *what) {
    if (rc != MPI_SUCCESS) emu::die("NCCL emulation: %s failed (MPI error %d)", what, rc);
}
/* posts one call as nonblocking MPI into reqs */
void post(const Call &c, std::vector<MPI_Request> &reqs) {
    MPI_Request r;
    const MPI_Datatype t = mpi_type(c.dt);
    const int n = (int)c.count;
    if (c.count > 2147483647u) emu::die("NCCL emulation: count %zu beyond MPI's int", c.count);
    switch (c.kind) {
    case Call::ALLREDUCE:
        mpi_check(MPI_Iallreduce(c.send == c.recv ? MPI_IN_PLACE : c.send, c.recv, n, t, MPI_SUM, c.comm->mpi, &r), "MPI_Iallreduce");
        break;
    case Call::REDUCE: {
        const int at_root = c.comm->rank == c.root_or_peer;
        mpi_check(MPI_Ireduce(at_root && c.send == c.recv ? MPI_IN_PLACE : c.send, c.recv, n, t, MPI_SUM,
                              c.root_or_peer, c.comm->mpi, &r), "MPI_Ireduce");
        break;
    }
    case Call::REDUCE_SCATTER:
        mpi_check(MPI_Ireduce_scatter_block(c.send, c.recv, n, t, MPI_SUM, c.comm->mpi, &r), "MPI_Ireduce_scatter_block");
        break;
    case Call::BCAST:
        if (c.comm->rank == c.root_or_peer && c.send != c.recv) memcpy(c.recv, c.send, c.count * type_size(c.dt));
        mpi_check(MPI_Ibcast(c.recv, n, t, c.root_or_peer, c.comm->mpi, &r), "MPI_Ibcast");
        break;
    case Call::SEND:
        mpi_check(MPI_Isend(c.send, n, t, c.root_or_peer, 0, c.comm->mpi, &r), "MPI_Isend");
        break;
    case Call::RECV:
        mpi_check(MPI_Irecv(c.recv, n, t, c.root_or_peer, 0, c.comm->mpi, &r), "MPI_Irecv");
        break;
    }
    reqs.push_back(r);
}
/* the calls of one group, queued on the first call's stream (a group spanning streams is not emulated) */
void flush() {
    if (pending.empty()) return;
    auto calls = std::make_shared<std::vector<Call>>(std::move(pending));
    pending.clear();
    for (const Call &c : *calls)
        if (c.stream != (*calls)[0].stream) emu::die("NCCL emulation: one group's calls on different streams");
    emu::enqueue((*calls)[0].stream, "NCCL group", [calls]() {
        std::vector<MPI_Request> reqs;
        for (const Call &c : *calls) post(c, reqs);
        mpi_check(MPI_Waitall((int)reqs.size(), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    });
}
ncclResult_t add(const Call &c) {
    if (!c.comm) return ncclInvalidArgument;
    if (c.count == 0) return ncclSuccess;
    pending.push_back(c);
    if (group_depth == 0) flush();
    return ncclSuccess;
}
}  // namespace

const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "NCCL emulation error"; }
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    memcpy(id->internal, "emu-nccl", 8);
    return ncclSuccess;
}
/* collective over MPI_COMM_WORLD (MPI_Comm_dup): every rank calls it at the same point, as with NCCL */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    int inited = 0, wr = -1, ws = 0;
    MPI_Initialized(&inited);
    if (!inited) emu::die("ncclCommInitRank: the NCCL emulation needs MPI (run under mpirun)");
    if (memcmp(id.internal, "emu-nccl", 8)) return ncclInvalidArgument;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    if (rank != wr || nranks != ws)
        emu::die("ncclCommInitRank: rank %d of %d, but MPI_COMM_WORLD says %d of %d (the emulation maps one to the other)",
                 rank, nranks, wr, ws);
    *comm = new emu_nccl_comm{MPI_COMM_NULL, rank, nranks};
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &(*comm)->mpi), "MPI_Comm_dup");
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    cudaDeviceSynchronize(); /* its queued calls run first */
    MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}
ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    if (group_depth <= 0) return ncclInvalidUsage;
    if (--group_depth == 0) flush();
    return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t s) {
    if (op != ncclSum) emu::die("NCCL emulation: only ncclSum is emulated");
    return add(Call{Call::ALLREDUCE, send, recv, count, dt, 0, comm, s});
}
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t s) {
    if (op != ncclSum) emu::die("NCCL emulation: only ncclSum is emulated");
    return add(Call{Call::REDUCE, send, recv, count, dt, root, comm, s});
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t s) {
    if (op != ncclSum) emu::die("NCCL emulation: only ncclSum is emulated");
    return add(Call{Call::REDUCE_SCATTER, send, recv, recvcount, dt, 0, comm, s});
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root, ncclComm_t comm,
                           cudaStream_t s) {
    return add(Call{Call::BCAST, send, recv, count, dt, root, comm, s});
}
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s) {
    return add(Call{Call::SEND, send, nullptr, count, dt, peer, comm, s});
}
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t s) {
    return add(Call{Call::RECV, nullptr, recv, count, dt, peer, comm, s});
}

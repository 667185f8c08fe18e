/*
 * cuda/dist.cu - the device-resident parameter update of the CUDA trainers (cuda/dist.h), its entry: the choice of
 * collectives (NCCL, host-staged MPI, none), shared helpers, and the device rules' table (device_rules: one row per
 * optimizer kind with a device update, pointing into the file of its rule, the device counterparts of optim/'s):
 *   cuda/dist_dense.cuh        dense AdamW / AdamS, plain or ZeRO-1          (optim/dist_dense.c)
 *   cuda/dist_scape.cuh        SCAPE                                         (optim/dist_scape.c)
 *   cuda/dist_scape_state.cuh  SCAPE's create, free, sync check, checkpoint  (optim/dist_state.c, dist.c)
 *   cuda/dist_mask_stats.cuh   mask statistics of the device SCAPE           (optim/dist_mask_stats.c)
 *   cuda/dist_scape_zero.cuh   SCAPE with ZeRO-1: reduce-scatter, sparse sync (optim/dist_scape_zero.c)
 * The rule files are included below: one translation unit per precision (floatX), compiled by cuda/mk/dist.mk.
 * The other rules have no row (create returns NULL: the host path runs them). Kernels: cuda/optimizer.cuh
 * (optim/optim.c's formulas) and cuda/scape.cuh (optim/scape.c's).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/dist.h"
#include "cuda/optimizer.cuh"
#include "cuda/scape.cuh"
#ifdef ENABLE_NCCL
#include <nccl.h>
#endif
extern "C" {
#include "common/hash.h"
#include "common/util.h"
#include "comm/comm.h"
#include "optim/dist.h"
#include "optim/scape.h"
}

#ifdef ENABLE_NCCL
static void nccl_check_(ncclResult_t r, const char *what, const char *file, int line) {
    if (r != ncclSuccess) fatal("NCCL: %s failed at %s:%d: %s", what, file, line, ncclGetErrorString(r));
}
#define ncclCheck(call) nccl_check_((call), #call, __FILE__, __LINE__)
#endif

int device_updater_has_nccl(void) {
#ifdef ENABLE_NCCL
    return 1;
#else
    return 0;
#endif
}

/* 1 if every rank of this node computes on a GPU of its own (their PCI bus ids differ: a launcher's
 * CUDA_VISIBLE_DEVICES per task counts, not the number of visible devices), for NCCL. A collective. */
static int gpu_per_rank(void) {
    int dev = 0;
    char bus[64] = "";
    cudaCheck(cudaGetDevice(&dev));
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != cudaSuccess) snprintf(bus, sizeof bus, "device %d", dev);
    return comm_node_keys_distinct(bus);
}

static void *dmalloc(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        fatal("cannot allocate %.2f GiB of GPU memory for %s (%s); use a smaller model or --zero", bytes / 1073741824.0,
              what, cudaGetErrorString(e));
    return p;
}
static void *hmalloc_pinned(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        fatal("cannot allocate %.2f GiB of pinned host memory for %s (%s)", bytes / 1073741824.0, what,
              cudaGetErrorString(e));
    return p;
}

/* The collectives for this run (the same answer on every rank): 1 for NCCL, 0 for MPI (host-staged) or one rank.
 * fatal() on --comm nccl without NCCL in the build or with ranks sharing a GPU. */
static int choose_nccl(const UpdaterConfig *cfg, int world) {
    int ndev = 0, nccl = 0;
    cudaCheck(cudaGetDeviceCount(&ndev));
    if (cfg->comm == COMM_BACKEND_NCCL && !device_updater_has_nccl())
        fatal("--comm nccl: this build has no NCCL (nccl.h was not found at build time); use --comm mpi, or rebuild "
              "with NCCL installed (cuda/mk/dist.mk: NCCL_HOME)");
    if (world > 1) {
        int own = gpu_per_rank(); /* the same answer on every rank */
        if (cfg->comm == COMM_BACKEND_NCCL) nccl = 1;
        if (cfg->comm == COMM_BACKEND_AUTO) {
            /* the same choice on every rank (nodes may differ in GPUs): NCCL only if every rank can use it */
            int64_t cannot = !(device_updater_has_nccl() && own);
            comm_allreduce_max_i64(&cannot, 1);
            nccl = !cannot;
        }
        if (nccl && !own)
            fatal("--comm nccl: %d ranks on this node share %d visible GPU%s, and NCCL needs one GPU per rank; use "
                  "--comm mpi (host-staged) or at most one rank per GPU", comm_local_size(), ndev, ndev == 1 ? "" : "s");
    }
    return nccl;
}


/* FNV-1a 64 (common/hash.h), under the name the rule files call */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) { return hash_fnv1a64(h, p, n); }

/* The host-staged (MPI) hand-off of every rule: copies `bytes` of device memory src into pinned host memory dst on
 * stream cs and waits for it, so the communication job queued next (comm_i*) may read dst at once. */
static void stage_to_host(void *dst, const void *src, size_t bytes, cudaStream_t cs) {
    if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cs));
    cudaCheck(cudaStreamSynchronize(cs)); /* the job reads dst as soon as it is queued */
}


#ifdef ENABLE_NCCL
/* One peer of an all-to-all of bf16 values, inside an NCCL group on cs: sends c values at src to rank r and receives
 * m values from it into dst; where r is this rank, the device copy of its own m values (c == m) instead. */
static void nccl_exchange_bf16(ncclComm_t nc, cudaStream_t cs, int rank, int r, const uint16_t *src, size_t c,
                               uint16_t *dst, size_t m) {
    if (r != rank) {
        if (c) ncclCheck(ncclSend(src, c * sizeof(uint16_t), ncclUint8, r, nc, cs));
        if (m) ncclCheck(ncclRecv(dst, m * sizeof(uint16_t), ncclUint8, r, nc, cs));
    } else if (m) {
        cudaCheck(cudaMemcpyAsync(dst, src, m * sizeof(uint16_t), cudaMemcpyDeviceToDevice, cs));
    }
}

/* comm_iallreduce_avg_bf16 (optim/comm.h) over NCCL on the communication stream, with the same parts and the same
 * arithmetic: an all-to-all of the parts (grouped send/recv; this rank's own part by a device copy), the owner's
 * mean (scape_bf16_mean) into its part of p16 and of err, then every part broadcast from its owner. err (n) gets
 * 0 outside this rank's part. recv16: scratch of world * (the largest part, comm_part) values. Used by the device SCAPE's bf16
 * payload (cuda/dist_scape.cuh). */
static void nccl_allreduce_avg_bf16(ncclComm_t nc, cudaStream_t cs, int rank, int world, uint16_t *recv16, uint16_t *p16,
                                    float *err, size_t n) {
    const int N = world;
    size_t my_off, off;
    const size_t mine = comm_part(n, N, rank, &my_off);
    cudaCheck(cudaMemsetAsync(err, 0, n * sizeof(float), cs));
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < N; r++) {
        const size_t c = comm_part(n, N, r, &off);
        nccl_exchange_bf16(nc, cs, rank, r, p16 + off, c, recv16 + (size_t)r * mine, mine);
    }
    ncclCheck(ncclGroupEnd());
    scape_bf16_mean(p16 + my_off, err + my_off, recv16, (long long)mine, N, cs);
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < N; r++) {
        const size_t c = comm_part(n, N, r, &off);
        if (c) ncclCheck(ncclBroadcast(p16 + off, p16 + off, c * sizeof(uint16_t), ncclUint8, r, nc, cs));
    }
    ncclCheck(ncclGroupEnd());
}
#endif

/* the update rules (each includes nothing of its own: this file's includes and helpers are theirs) */
#include "cuda/dist_dense.cuh"
#include "cuda/dist_scape.cuh"
#include "cuda/dist_mask_stats.cuh"
#include "cuda/dist_scape_zero.cuh"
#include "cuda/dist_scape_state.cuh"

/* The device rules, one row each (the host rules' table is optim/rules.c): the optimizer kind a row serves, its
 * creator (nccl: 1 for NCCL, 0 for host-staged MPI), and whether it sends the bf16 payload. A kind without a row
 * (topk-ef, powersgd, onebit-adam, demo, diloco, sparseloco) runs the host update. */
typedef struct {
    OptimizerKind kind;
    Updater *(*create)(const DeviceModel *dm, const UpdaterConfig *cfg, int nccl);
    int payload_bf16_ok;
} DeviceRule;

static const DeviceRule device_rules[] = {
    {OPT_ADAMW, dense_updater_create, 0}, /* cuda/dist_dense.cuh */
    {OPT_ADAMS, dense_updater_create, 0},
    {OPT_SCAPE, scape_updater_create, 1}, /* cuda/dist_scape*.cuh */
};

static const DeviceRule *device_rule(OptimizerKind kind) {
    for (size_t i = 0; i < sizeof device_rules / sizeof device_rules[0]; i++)
        if (device_rules[i].kind == kind) return &device_rules[i];
    return NULL;
}

int device_updater_supports(OptimizerKind kind) { return device_rule(kind) != NULL; }

Updater *device_updater_create(const DeviceModel *dm, const UpdaterConfig *cfg) {
    const DeviceRule *rule = device_rule(cfg->dist.opt.kind);
    if (!rule) return NULL;
    if (cfg->dist.payload_bf16 && !rule->payload_bf16_ok)
        fatal("--scape-payload bf16 applies to --optimizer scape only; drop it or use --optimizer scape");
    if (!(cfg->dist.opt.beta1 >= 0 && cfg->dist.opt.beta1 < 1)) fatal("beta1 %g is outside [0, 1)", cfg->dist.opt.beta1);
    return rule->create(dm, cfg, choose_nccl(cfg, comm_world()));
}

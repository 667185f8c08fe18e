/*
 * cuda/dist.h - the device-resident parameter update of the CUDA trainers (optim/updater.h's Updater) for
 * adamw, adams and SCAPE (cuda/dist_scape.cuh): fp32 master weights, first (and second) moments on the GPU; gradient
 * all-reduce per bucket while backward runs (NCCL on a communication stream ordered by events, or host-staged
 * MPI through comm/comm.h so several ranks can share a GPU); with ZeRO-1 a reduce-scatter into the owner
 * shards, the sharded update, then a parameter all-gather. Norm, clipping, skip-on-non-finite, moments and the
 * checkpoint blob are bit-identical to optim/dist_dense.c (the CPU trainers' update). SCAPE has its own
 * device update (cuda/dist_scape.cuh, compiled into cuda/dist.cu), bit-identical to optim/dist_scape.c's in
 * fp32, optionally with the residual in pinned host memory (UpdaterConfig.scape_offload_residual) or with ZeRO-1
 * (cuda/dist_scape_zero.cuh, bit-identical to optim/dist_scape_zero.c and to the unsharded SCAPE); topk-ef stays on
 * the host path (create returns NULL for it).
 * Build: cuda/dist.cu once per precision (floatX); -DENABLE_NCCL with NCCL (cuda/mk/dist.mk).
 */
#ifndef CUDA_DIST_H
#define CUDA_DIST_H

#include "cuda/device_model.h"
#include "optim/updater.h"

/* Creates the update for this rank over dm's buffers (which must outlive it), or returns NULL when cfg asks for an
 * optimizer other than adamw/adams/scape. Broadcasts rank 0's dm->host_params, uploads them into dm->master and writes
 * dm->params from them (stochastic rounding with step 0's seeds). The collectives: with one rank none; else
 * cfg->comm NCCL (bootstrapped over MPI: rank 0's ncclUniqueId goes out with comm_bcast) or MPI, AUTO picking
 * NCCL when the build has it and every rank on the node has a GPU of its own. fatal() on --comm nccl without
 * NCCL in the build, on CUDA/NCCL errors and when memory runs out. Needs comm_init (comm/comm.h). */
Updater *device_updater_create(const DeviceModel *dm, const UpdaterConfig *cfg);

/* 1 when kind has a device update (a row of cuda/dist.cu's device_rules: adamw, adams, scape), 0 when it runs the
 * host update. */
int device_updater_supports(OptimizerKind kind);

/* 1 when this build can use NCCL (compiled with ENABLE_NCCL). */
int device_updater_has_nccl(void);

#endif

/*
 * optim/updater.h - the parameter update as the training loop (trainer/train.c) sees it: a small table of
 * functions called once per step (bucket_ready during the last micro-step's backward, then step), plus the
 * checkpoint and mask-statistics hooks. Two implementations:
 *   host   (updater_host_create, optim/updater_host.c): optim/dist.h's DistOptim on the model's host params/grads,
 *          unchanged: what the CPU trainers use, and the CUDA trainers for topk-ef (or --update host);
 *   device (cuda/dist.h): fp32 master weights and optimizer state on the GPU, NCCL or host-staged MPI,
 *          for adamw/adams/scape in the CUDA trainers (Model.create_updater, common/model.h).
 * Both write the same checkpoint blob for the same optimizer, world and ZeRO setting.
 * Not for: update formulas (optim/optim.h, cuda/optimizer.cuh) or collectives (comm/comm.h).
 */
#ifndef OPTIM_UPDATER_H
#define OPTIM_UPDATER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "common/params.h"
#include "optim/dist.h"

/* Which collectives carry gradients and parameters (--comm). AUTO: the device update picks NCCL when there are
 * several ranks, each with its own GPU, and the build has NCCL; MPI otherwise. The host update always uses MPI
 * (comm/comm.h). */
typedef enum { COMM_BACKEND_AUTO = 0, COMM_BACKEND_MPI = 1, COMM_BACKEND_NCCL = 2 } CommBackend;

typedef struct UpdaterConfig {
    DistConfig dist;   /* optimizer, clip, ZeRO-1, SCAPE settings (optim/dist.h) */
    CommBackend comm;  /* --comm */
    uint64_t seed;     /* --seed: the device update derives its stochastic-rounding seeds from it */
    int scape_offload_residual; /* device SCAPE: r in pinned host memory, staged per slice (SCAPE.md section 7) */
} UpdaterConfig;

typedef struct Updater Updater;
struct Updater {
    char desc[96]; /* one line for the log, e.g. "host (MPI)", "device (NCCL, ZeRO-1)" */
    /* BucketReadyFn (common/model.h) for the last micro-step's backward; ctx is this Updater. */
    void (*bucket_ready)(void *ctx, int bucket);
    /* distopt_step's contract (optim/dist.h): finishes step t >= 1 with rate lr, *grad_norm = global gradient
     * norm before clipping; returns 1 (state unchanged) when it was not finite, else 0. */
    int (*step)(Updater *u, int t, float lr, float *grad_norm);
    float (*density)(const Updater *u, int t);
    /* checkpoint blob of this rank (distopt_state_bytes/save/load's layout and semantics) */
    size_t (*state_bytes)(const Updater *u);
    void (*save)(const Updater *u, void *blob);
    void (*load)(Updater *u, const void *const *blobs, const size_t *sizes, int n_blobs);
    /* bytes of optimizer state this rank holds now (distopt_state_memory: moments, residual, masks; not gradient
     * staging buffers); NULL where the updater does not report it (the device updates for now) */
    size_t (*memory_bytes)(const Updater *u);
    /* mask-stability statistics (distopt_mask_stats_enable / distopt_mask_stats); NULL stats where none */
    void (*mask_stats_enable)(Updater *u, int on);
    const DistMaskStats *(*mask_stats)(const Updater *u);
    /* local-update rules (distopt_use_synced): on = 1 puts the synchronized model into the model's parameters for
     * validation, samples, tasks and the checkpoint's model file, on = 0 puts this rank's own back; NULL where the
     * parameters are always synchronized */
    void (*use_synced)(Updater *u, int on);
    void (*free)(Updater *u);
};

/* The host update: distopt_create(tab, params, grads, cfg) behind the table above (optim/updater_host.c).
 * Parameters are broadcast from rank 0 as distopt_create does. */
Updater *updater_host_create(const ParamTable *tab, float *params, float *grads, const DistConfig *cfg);
/* The DistOptim inside a host Updater (tests), or NULL for any other kind. */
DistOptim *updater_host_distopt(Updater *u);

#ifdef __cplusplus
}
#endif
#endif

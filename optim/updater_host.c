/*
 * optim/updater_host.c - the host update behind the loop's Updater (optim/updater.h): optim/dist.h's DistOptim
 * on the model's host params/grads, each table entry one call of dist.h. What the CPU trainers use, and the CUDA
 * trainers for topk-ef or --update host.
 * Not for: the update itself (optim/dist.c and the rule files beside it).
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"
#include "comm/comm.h"
#include "optim/dist.h"
#include "optim/updater.h"

typedef struct {
    Updater base;
    DistOptim *d;
} HostUpdater;

static DistOptim *hu(const Updater *u) { return ((const HostUpdater *)u)->d; }
static void hu_bucket_ready(void *ctx, int bucket) { distopt_bucket_ready(hu(ctx), bucket); }
static int hu_step(Updater *u, int t, float lr, float *grad_norm) { return distopt_step(hu(u), t, lr, grad_norm); }
static float hu_density(const Updater *u, int t) { return distopt_density(hu(u), t); }
static size_t hu_state_bytes(const Updater *u) { return distopt_state_bytes(hu(u)); }
static size_t hu_memory_bytes(const Updater *u) { return distopt_state_memory(hu(u)); }
static void hu_save(const Updater *u, void *blob) { distopt_save(hu(u), blob); }
static void hu_load(Updater *u, const void *const *blobs, const size_t *sizes, int n_blobs) {
    distopt_load(hu(u), blobs, sizes, n_blobs);
}
static void hu_mask_stats_enable(Updater *u, int on) { distopt_mask_stats_enable(hu(u), on); }
static const DistMaskStats *hu_mask_stats(const Updater *u) { return distopt_mask_stats(hu(u)); }
static void hu_use_synced(Updater *u, int on) { distopt_use_synced(hu(u), on); }
static void hu_free(Updater *u) {
    if (!u) return;
    distopt_free(hu(u));
    free(u);
}

/* the host update's Updater table (fields in declaration order, desc filled at create) */
static const Updater hu_ops = {
    .desc = "",
    .bucket_ready = hu_bucket_ready,
    .step = hu_step,
    .density = hu_density,
    .state_bytes = hu_state_bytes,
    .save = hu_save,
    .load = hu_load,
    .memory_bytes = hu_memory_bytes,
    .mask_stats_enable = hu_mask_stats_enable,
    .mask_stats = hu_mask_stats,
    .use_synced = hu_use_synced,
    .free = hu_free,
};

Updater *updater_host_create(const ParamTable *tab, float *params, float *grads, const DistConfig *cfg) {
    HostUpdater *h = xcalloc(1, sizeof *h, "host updater");
    h->d = distopt_create(tab, params, grads, cfg);
    Updater *u = &h->base;
    *u = hu_ops;
    snprintf(u->desc, sizeof u->desc, "host (%s%s)", comm_using_mpi() ? "MPI" : "1 rank", cfg->zero ? ", ZeRO-1" : "");
    return u;
}

DistOptim *updater_host_distopt(Updater *u) { return u && u->step == hu_step ? hu(u) : NULL; }

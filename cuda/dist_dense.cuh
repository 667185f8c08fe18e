/*
 * cuda/dist_dense.cuh - the device-resident dense update (AdamW / AdamS, plain or ZeRO-1): optim/dist_dense.c's
 * path (buckets, averaging all-reduce or ZeRO-1 reduce-scatter, norm, clip, skip, AdamW/AdamS, all-gather, zeroed
 * gradients) with the state on the GPU, step for step in the same order and with the same rounding, so that master
 * weights, moments and checkpoint blobs equal the CPU update's bit for bit (given the same gradients and ranks).
 * Part of cuda/dist.cu's translation unit (it uses that file's helpers: dmalloc, choose_nccl, fnv1a, ncclCheck);
 * cuda/dist.cu's device_rules hand adamw and adams to dense_updater_create.
 *
 * Streams and events (NCCL): bucket_ready(b) records ev_ready[b] on the compute stream, right after the model
 * enqueued the bucket's last gradient write; the communication stream waits on it and runs the bucket's grouped
 * collective, one call per slice (a bucket's slices are not contiguous in the llm.c layout): ncclAllReduce (sum),
 * or with ZeRO-1 ncclReduce to each slice's owner (the owner table is a reduce-scatterv over whole slices, which
 * NCCL's equal-count ncclReduceScatter cannot express), then the division by N in place. step() makes the compute
 * stream wait on ev_comm (recorded after the last bucket), so norm and update see averaged gradients; with ZeRO-1
 * the parameter all-gather (ncclBroadcast from each owner of its range) waits on ev_update, recorded after the
 * update, and the compute stream waits on ev_gather before it rebuilds the floatX copy of the other ranks' slices.
 * MPI (host-staged): bucket_ready downloads the bucket's slices into pinned memory on the communication stream,
 * waits for that, and queues comm/comm.h's averaging all-reduce (or reduce-scatter) on the communication thread;
 * step() waits for the jobs and uploads the results. One rank: no collective at all. step() ends by zeroing the
 * gradients on the compute stream and recording dm.grads_free after it (cuda/device_model.h's protocol).
 * Gradients travel in fp32, as on the host path, so comm_bytes_* in log.jsonl mean the same on both.
 *
 * The floatX copy is always SR(master, sr_seed(seed, last_t, tensor)): written by the update kernels, rebuilt
 * identically after a ZeRO-1 all-gather and after a resume (load), which is what makes resume bit-exact.
 * Not for: SCAPE (cuda/dist_scape.cuh), topk-ef (host path), the kernels themselves (cuda/optimizer.cuh).
 */

typedef struct {
    Updater base;
    DeviceModel dm;
    UpdaterConfig cfg;
    const ParamTable *tab;
    OptimConfig opt;
    floatX *copy;          /* dm.params, or NULL in fp32 builds (the master is what the forward reads) */
    int rank, world, zero, nccl;
    size_t P, slo, shi;    /* this rank's state range: [own.lo, own.hi) with ZeRO-1, else [0, P) */
    OwnerTable own;
    int nb;
    int *bn, **bslices;    /* per bucket: its slices in memory order */
    size_t *bucket_numel;
    size_t **bcounts;      /* ZeRO-1, per bucket: elements owned by each rank (the reduce-scatter counts) */
    size_t *hoff;          /* MPI: per bucket, offset of its packed slices in h_stage */
    size_t *rs_off;        /* MPI ZeRO-1: per bucket, offset of this rank's part in h_rs */
    float *h_stage;        /* MPI: (P) pinned, the packed buckets */
    float *h_rs;           /* MPI ZeRO-1: (owned elements) pinned, the reduce-scatter results */
    float *h_master;       /* MPI ZeRO-1: (P) pinned, the parameter all-gather */
    float *d_m, *d_v;      /* (shi - slo) device moments */
    double *d_part, *h_part; /* norm partials (sumsq_chunks of shi - slo) device / pinned */
    long nch;
    int *bstate;           /* per bucket: 0 nothing, 1 queued */
    CommHandle *bh;        /* MPI: per bucket, its job */
    cudaStream_t cs;       /* communication stream (NCCL, and the MPI downloads) */
    cudaEvent_t *ev_ready; /* per bucket: its gradients are final on the compute stream */
    cudaEvent_t ev_comm, ev_update, ev_gather;
    int last_t;
#ifdef ENABLE_NCCL
    ncclComm_t nc;
#endif
} DevUpdater;

static DevUpdater *du(const void *p) { return (DevUpdater *)p; }

static int owner_of(const DevUpdater *u, int slice) { return owner_table_owner(&u->own, slice); }
static int owned(const DevUpdater *u, int slice) { return owner_of(u, slice) == u->rank; }

/* ---- buckets ---- */

/* Hands bucket b's gradients to the collectives (optim/dist_dense.c's dense_queue_bucket). */
static void queue_bucket(DevUpdater *u, int b) {
    const ParamTable *tab = u->tab;
    size_t n = u->bucket_numel[b];
    u->bstate[b] = 1;
    if (u->world == 1) {
        /* counted like the host path's one-rank collectives: a call, zero bytes */
        comm_stats_add(u->zero ? COMM_REDUCE_SCATTER : COMM_ALLREDUCE, 4ull * n, 0.0);
        return;
    }
    cudaCheck(cudaEventRecord(u->ev_ready[b], u->dm.stream));
    cudaCheck(cudaStreamWaitEvent(u->cs, u->ev_ready[b], 0));
    if (u->nccl) {
#ifdef ENABLE_NCCL
        ncclCheck(ncclGroupStart());
        for (int k = 0; k < u->bn[b]; k++) {
            int i = u->bslices[b][k];
            float *g = u->dm.grads + tab->slices[i].offset;
            size_t cnt = tab->slices[i].numel;
            if (!u->zero) ncclCheck(ncclAllReduce(g, g, cnt, ncclFloat, ncclSum, u->nc, u->cs));
            else ncclCheck(ncclReduce(g, g, cnt, ncclFloat, ncclSum, owner_of(u, i), u->nc, u->cs));
        }
        ncclCheck(ncclGroupEnd());
        for (int k = 0; k < u->bn[b]; k++) {
            int i = u->bslices[b][k];
            if (u->zero && !owned(u, i)) continue; /* a non-root's buffer is left as it was: not ours to use */
            div_f32(u->dm.grads + tab->slices[i].offset, (long)tab->slices[i].numel, (float)u->world, u->cs);
        }
        comm_stats_add(u->zero ? COMM_REDUCE_SCATTER : COMM_ALLREDUCE, 4ull * n, 0.0);
#endif
        return;
    }
    /* MPI: pack the slices into pinned memory in memory order, then the host collective */
    float *h = u->h_stage + u->hoff[b];
    size_t o = 0;
    for (int k = 0; k < u->bn[b]; k++) {
        const ParamSlice *s = &tab->slices[u->bslices[b][k]];
        cudaCheck(cudaMemcpyAsync(h + o, u->dm.grads + s->offset, s->numel * sizeof(float), cudaMemcpyDeviceToHost,
                                  u->cs));
        o += s->numel;
    }
    cudaCheck(cudaStreamSynchronize(u->cs)); /* the job reads h as soon as it is queued */
    if (!u->zero) u->bh[b] = comm_iallreduce_avg_f32(h, n);
    else u->bh[b] = comm_ireduce_scatter_avg_f32(h, u->h_rs + u->rs_off[b], u->bcounts[b]);
}

static void du_bucket_ready(void *ctx, int bucket) {
    DevUpdater *u = du(ctx);
    if (bucket < 0 || bucket >= u->nb) fatal("device update: bucket %d outside 0..%d", bucket, u->nb - 1);
    if (u->bstate[bucket]) return;
    queue_bucket(u, bucket);
}

/* After the step's collectives: the averaged gradients (this rank's owned slices with ZeRO-1) in dm.grads,
 * ordered before whatever the compute stream does next (optim/dist_dense.c's dense_unpack_bucket). */
static void finish_buckets(DevUpdater *u) {
    if (u->world == 1) return;
    if (u->nccl) {
        cudaCheck(cudaEventRecord(u->ev_comm, u->cs));
        cudaCheck(cudaStreamWaitEvent(u->dm.stream, u->ev_comm, 0));
        return;
    }
    for (int b = 0; b < u->nb; b++) {
        comm_wait(u->bh[b]);
        const float *h = u->zero ? u->h_rs + u->rs_off[b] : u->h_stage + u->hoff[b];
        for (int k = 0; k < u->bn[b]; k++) {
            int i = u->bslices[b][k];
            if (u->zero && !owned(u, i)) continue;
            const ParamSlice *s = &u->tab->slices[i];
            cudaCheck(cudaMemcpyAsync(u->dm.grads + s->offset, h, s->numel * sizeof(float), cudaMemcpyHostToDevice,
                                      u->dm.stream));
            h += s->numel;
        }
    }
}

/* zeroed gradients for the next step, then dm.grads_free (on the compute stream, as the zeroing: the model's
 * wait on it is a no-op here, but the protocol of cuda/device_model.h is the same for every update); buckets
 * unqueued (optim/dist.c's dist_end_step) */
static void end_step(DevUpdater *u) {
    cudaCheck(cudaMemsetAsync(u->dm.grads, 0, u->P * sizeof(float), u->dm.stream));
    cudaCheck(cudaEventRecord(u->dm.grads_free, u->dm.stream));
    for (int b = 0; b < u->nb; b++) {
        u->bstate[b] = 0;
        u->bh[b] = 0;
    }
}

/* copy <- SR(master, sr_seed(seed, t, k)) for every slice k (all == 1) or the slices other ranks own */
static void rebuild_copy(DevUpdater *u, int t, int all) {
    if (!u->copy) return;
    for (int k = 0; k < u->tab->n; k++) {
        if (!all && owned(u, k)) continue;
        const ParamSlice *s = &u->tab->slices[k];
        sr_copy(u->copy + s->offset, u->dm.master + s->offset, (long)s->numel, sr_seed(u->cfg.seed, t, k),
                u->dm.stream);
    }
}

/* ZeRO-1: every rank's updated range to every rank (optim/dist_dense.c: comm_iallgatherv of params) */
static void gather_params(DevUpdater *u, int t) {
    if (u->world == 1) {
        comm_stats_add(COMM_ALLGATHER, 4ull * u->P, 0.0);
        return;
    }
    if (u->nccl) {
#ifdef ENABLE_NCCL
        cudaCheck(cudaEventRecord(u->ev_update, u->dm.stream));
        cudaCheck(cudaStreamWaitEvent(u->cs, u->ev_update, 0));
        ncclCheck(ncclGroupStart());
        for (int r = 0; r < u->world; r++) {
            size_t lo = u->own.lo[r], hi = u->own.hi[r];
            if (hi > lo) ncclCheck(ncclBroadcast(u->dm.master + lo, u->dm.master + lo, hi - lo, ncclFloat, r, u->nc, u->cs));
        }
        ncclCheck(ncclGroupEnd());
        cudaCheck(cudaEventRecord(u->ev_gather, u->cs));
        cudaCheck(cudaStreamWaitEvent(u->dm.stream, u->ev_gather, 0));
        comm_stats_add(COMM_ALLGATHER, 4ull * u->P, 0.0);
#endif
    } else {
        size_t *counts = (size_t *)xmalloc((size_t)u->world * sizeof(size_t), "shard counts");
        for (int r = 0; r < u->world; r++) counts[r] = u->own.hi[r] - u->own.lo[r];
        if (u->shi > u->slo)
            cudaCheck(cudaMemcpyAsync(u->h_master + u->slo, u->dm.master + u->slo, (u->shi - u->slo) * sizeof(float),
                                      cudaMemcpyDeviceToHost, u->dm.stream));
        cudaCheck(cudaStreamSynchronize(u->dm.stream));
        comm_wait(comm_iallgatherv(u->h_master, counts, sizeof(float)));
        free(counts);
        cudaCheck(cudaMemcpyAsync(u->dm.master, u->h_master, u->P * sizeof(float), cudaMemcpyHostToDevice,
                                  u->dm.stream));
    }
    rebuild_copy(u, t, 0);
}

/* optim/dist_dense.c's dense_step on the device */
static int du_step(Updater *base, int t, float lr, float *grad_norm) {
    DevUpdater *u = du(base);
    if (t < 1) fatal("device update: step %d < 1; steps count from 1", t);
    for (int b = 0; b < u->nb; b++)
        if (!u->bstate[b]) queue_bucket(u, b);
    finish_buckets(u);
    /* the global norm of the averaged gradient over this rank's range, partials on the device, added here */
    long n = (long)(u->shi - u->slo);
    sumsq_partials(u->d_part, u->dm.grads + u->slo, n, u->dm.stream);
    if (u->nch) cudaCheck(cudaMemcpyAsync(u->h_part, u->d_part, (size_t)u->nch * sizeof(double), cudaMemcpyDeviceToHost,
                                          u->dm.stream));
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    double ss = 0;
    for (long c = 0; c < u->nch; c++) ss += u->h_part[c];
    if (u->zero) comm_allreduce_sum_f64(&ss, 1);
    float norm = (float)sqrt(ss);
    *grad_norm = norm;
    if (!isfinite(norm)) {
        end_step(u);
        return 1;
    }
    if (u->cfg.dist.clip > 0 && norm > u->cfg.dist.clip) {
        float sc = u->cfg.dist.clip / (norm + 1e-6f);
        scale_f32(u->dm.grads + u->slo, n, sc, u->dm.stream);
    }
    const OptimConfig *o = &u->opt;
    for (int k = 0; k < u->tab->n; k++) {
        const ParamSlice *s = &u->tab->slices[k];
        size_t first = s->offset > u->slo ? s->offset : u->slo;
        size_t last = s->offset + s->numel < u->shi ? s->offset + s->numel : u->shi;
        if (first >= last) continue;
        /* the state range is whole slices (the owner table cuts at slice starts), so the copy's rounding index
         * counts from the slice start, as rebuild_copy's does */
        if (first != s->offset || last != s->offset + s->numel)
            fatal("device update: slice %s of layer %d is split by the state range [%zu, %zu)", s->name, s->layer,
                  u->slo, u->shi);
        float wd = s->decay ? o->weight_decay : 0.0f;
        uint32_t seed = sr_seed(u->cfg.seed, t, k);
        float *mm = u->d_m + (first - u->slo);
        floatX *cp = u->copy ? u->copy + first : NULL;
        if (o->kind == OPT_ADAMW)
            adamw_update_tensor(u->dm.master + first, cp, (const float *)(u->dm.grads + first), mm,
                                u->d_v + (first - u->slo), (long)s->numel, t, lr, o->beta1, o->beta2, o->eps, wd,
                                seed, u->dm.stream);
        else
            adams_update_tensor(u->dm.master + first, cp, (const float *)(u->dm.grads + first), mm, (long)s->numel, t,
                                lr, o->beta1, o->beta2, o->eps, wd, seed, u->dm.stream);
    }
    if (u->zero) gather_params(u, t);
    end_step(u);
    u->last_t = t;
    return 0;
}

static float du_density(const Updater *u, int t) { return 1.0f; }
/* dense optimizers have no masks: no statistics, as distopt_mask_stats answers for adamw/adams (SCAPE's are in
 * cuda/dist_scape.cuh) */
static void du_mask_stats_enable(Updater *u, int on) {}
static const DistMaskStats *du_mask_stats(const Updater *u) { return NULL; }

/* ---- checkpoint blob: distopt_save's dense layout, through optim/dist_state.c's helpers ---- */

static size_t du_state_bytes(const Updater *base) {
    const DevUpdater *u = du(base);
    return distopt_dense_blob_bytes(u->opt.kind, u->slo, u->shi);
}

static void du_save(const Updater *base, void *blob) {
    const DevUpdater *u = du(base);
    size_t n = u->shi - u->slo;
    float *m = (float *)xmalloc((n ? n : 1) * sizeof(float), "optimizer state download");
    float *v = u->opt.kind == OPT_ADAMW ? (float *)xmalloc((n ? n : 1) * sizeof(float), "optimizer state download")
                                        : NULL;
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    cudaCheck(cudaMemcpy(m, u->d_m, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (v) cudaCheck(cudaMemcpy(v, u->d_v, n * sizeof(float), cudaMemcpyDeviceToHost));
    distopt_dense_blob_save(blob, u->opt.kind, u->world, u->rank, u->zero, u->last_t, u->P, u->slo, u->shi, m, v);
    free(m);
    free(v);
}

static void du_load(Updater *base, const void *const *blobs, const size_t *sizes, int n_blobs) {
    DevUpdater *u = du(base);
    size_t n = u->shi - u->slo;
    float *m = (float *)xmalloc((n ? n : 1) * sizeof(float), "optimizer state upload");
    float *v = u->opt.kind == OPT_ADAMW ? (float *)xmalloc((n ? n : 1) * sizeof(float), "optimizer state upload")
                                        : NULL;
    int last_t = distopt_dense_blob_load(u->opt.kind, u->P, u->world, u->slo, u->shi, m, v, blobs, sizes, n_blobs);
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    cudaCheck(cudaMemcpy(u->d_m, m, n * sizeof(float), cudaMemcpyHostToDevice));
    if (v) cudaCheck(cudaMemcpy(u->d_v, v, n * sizeof(float), cudaMemcpyHostToDevice));
    free(m);
    free(v);
    for (int b = 0; b < u->nb; b++) {
        u->bstate[b] = 0;
        u->bh[b] = 0;
    }
    u->last_t = last_t;
    /* the copy the uninterrupted run would hold after step last_t (the master came from the checkpoint's model) */
    rebuild_copy(u, last_t, 1);
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
}

/* SCAPE_CHECK_SYNC=1 (comm_sync_check of comm/comm.h): master weights and floatX copy hashed on every rank and compared;
 * one line on rank 0, or fatal() naming the rank that differs. A collective: every rank calls it from free. */
static void sync_check(DevUpdater *u) {
    if (!comm_sync_check_enabled()) return;
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    float *h = (float *)xmalloc(u->P * sizeof(float), "sync check");
    cudaCheck(cudaMemcpy(h, u->dm.master, u->P * sizeof(float), cudaMemcpyDeviceToHost));
    uint64_t hash = fnv1a(1469598103934665603ull, h, u->P * sizeof(float));
    if (u->copy) {
        cudaCheck(cudaMemcpy(h, u->copy, u->P * sizeof(floatX), cudaMemcpyDeviceToHost));
        hash = fnv1a(hash, h, u->P * sizeof(floatX));
    }
    free(h);
    comm_sync_check(hash, "device parameters", "device parameters");
}

static void du_free(Updater *base) {
    DevUpdater *u = du(base);
    if (!u) return;
    sync_check(u);
    for (int b = 0; b < u->nb; b++) comm_wait(u->bh[b]);
    cudaCheck(cudaStreamSynchronize(u->cs));
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
#ifdef ENABLE_NCCL
    if (u->nccl) ncclCheck(ncclCommDestroy(u->nc));
#endif
    for (int b = 0; b < u->nb; b++) {
        cudaCheck(cudaEventDestroy(u->ev_ready[b]));
        if (u->bcounts) free(u->bcounts[b]);
    }
    cudaCheck(cudaEventDestroy(u->ev_comm));
    cudaCheck(cudaEventDestroy(u->ev_update));
    cudaCheck(cudaEventDestroy(u->ev_gather));
    cudaCheck(cudaStreamDestroy(u->cs));
    cudaCheck(cudaFree(u->d_m));
    if (u->d_v) cudaCheck(cudaFree(u->d_v));
    cudaCheck(cudaFree(u->d_part));
    cudaCheck(cudaFreeHost(u->h_part));
    if (u->h_stage) cudaCheck(cudaFreeHost(u->h_stage));
    if (u->h_rs) cudaCheck(cudaFreeHost(u->h_rs));
    if (u->h_master) cudaCheck(cudaFreeHost(u->h_master));
    param_table_bucket_slices_free(u->nb, u->bn, u->bslices);
    free(u->ev_ready); free(u->bucket_numel); free(u->bcounts); free(u->hoff);
    free(u->rs_off); free(u->bstate); free(u->bh);
    owner_table_free(&u->own);
    free(u);
}

/* the dense device update's Updater table (optim/updater.h; fields in declaration order, desc filled at create);
 * no memory_bytes yet */
static const Updater du_ops = {
    .desc = "",
    .bucket_ready = du_bucket_ready,
    .step = du_step,
    .density = du_density,
    .state_bytes = du_state_bytes,
    .save = du_save,
    .load = du_load,
    .memory_bytes = NULL,
    .mask_stats_enable = du_mask_stats_enable,
    .mask_stats = du_mask_stats,
    .use_synced = NULL, /* the device rules are synchronous */
    .free = du_free,
};

/* The dense device update over dm's buffers (device_updater_create's contract, cuda/dist.h), collectives NCCL when
 * nccl, else host-staged MPI or none (one rank). */
static Updater *dense_updater_create(const DeviceModel *dm, const UpdaterConfig *cfg, int nccl) {
    OptimizerKind kind = cfg->dist.opt.kind;
    DevUpdater *u = (DevUpdater *)xcalloc(1, sizeof *u, "device update");
    u->dm = *dm;
    u->cfg = *cfg;
    u->tab = dm->table;
    u->opt = cfg->dist.opt;
    u->P = dm->table->total;
    u->copy = (void *)dm->params == (void *)dm->master ? NULL : dm->params;
    u->rank = comm_rank();
    u->world = comm_world();
    u->zero = cfg->dist.zero;
    const ParamTable *tab = u->tab;
    u->nccl = nccl;

    /* buckets (dist.c's tables) and the ZeRO-1 owner layout */
    owner_table_build(&u->own, tab, u->world);
    if (u->own.lo[0] != 0 || u->own.hi[u->world - 1] != u->P)
        fatal("internal: the owner table does not tile [0, %zu)", u->P);
    for (int r = 0; r + 1 < u->world; r++)
        if (u->own.hi[r] != u->own.lo[r + 1]) fatal("internal: the owner table is not contiguous at rank %d", r);
    u->slo = u->zero ? u->own.lo[u->rank] : 0;
    u->shi = u->zero ? u->own.hi[u->rank] : u->P;
    u->nb = tab->num_buckets;
    param_table_bucket_slices(tab, &u->bn, &u->bslices);
    u->bucket_numel = (size_t *)xcalloc((size_t)u->nb, sizeof(size_t), "bucket sizes");
    u->hoff = (size_t *)xcalloc((size_t)u->nb, sizeof(size_t), "bucket offsets");
    u->rs_off = (size_t *)xcalloc((size_t)u->nb, sizeof(size_t), "bucket offsets");
    u->bstate = (int *)xcalloc((size_t)u->nb, sizeof(int), "bucket state");
    u->bh = (CommHandle *)xcalloc((size_t)u->nb, sizeof(CommHandle), "bucket handles");
    u->ev_ready = (cudaEvent_t *)xcalloc((size_t)u->nb, sizeof(cudaEvent_t), "bucket events");
    for (int i = 0; i < tab->n; i++) u->bucket_numel[tab->slices[i].bucket] += tab->slices[i].numel;
    size_t off = 0, roff = 0, owned_total = 0;
    if (u->zero) u->bcounts = (size_t **)xcalloc((size_t)u->nb, sizeof(size_t *), "bucket counts");
    for (int b = 0; b < u->nb; b++) {
        u->hoff[b] = off;
        off += u->bucket_numel[b];
        u->rs_off[b] = roff;
        if (u->zero) u->bcounts[b] = (size_t *)xcalloc((size_t)u->world, sizeof(size_t), "bucket counts");
        for (int k = 0; k < u->bn[b]; k++) {
            int i = u->bslices[b][k];
            int r = owner_of(u, i);
            if (u->zero) u->bcounts[b][r] += tab->slices[i].numel;
            if (r == u->rank) {
                roff += tab->slices[i].numel;
                owned_total += tab->slices[i].numel;
            }
        }
    }

    /* state and scratch */
    size_t n = u->shi - u->slo;
    u->d_m = (float *)dmalloc(n * sizeof(float), "the first moment");
    cudaCheck(cudaMemset(u->d_m, 0, n * sizeof(float)));
    if (kind == OPT_ADAMW) {
        u->d_v = (float *)dmalloc(n * sizeof(float), "the second moment");
        cudaCheck(cudaMemset(u->d_v, 0, n * sizeof(float)));
    }
    u->nch = sumsq_chunks((long)n);
    u->d_part = (double *)dmalloc((size_t)(u->nch ? u->nch : 1) * sizeof(double), "norm partials");
    u->h_part = (double *)hmalloc_pinned((size_t)(u->nch ? u->nch : 1) * sizeof(double), "norm partials");
    if (u->world > 1 && !u->nccl) {
        u->h_stage = (float *)hmalloc_pinned(u->P * sizeof(float), "the gradient staging buffer");
        if (u->zero) {
            u->h_rs = (float *)hmalloc_pinned(owned_total * sizeof(float), "the ZeRO gradient shard");
            u->h_master = (float *)hmalloc_pinned(u->P * sizeof(float), "the parameter all-gather");
        }
    }
    cudaCheck(cudaStreamCreateWithFlags(&u->cs, cudaStreamNonBlocking));
    for (int b = 0; b < u->nb; b++) cudaCheck(cudaEventCreateWithFlags(&u->ev_ready[b], cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&u->ev_comm, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&u->ev_update, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&u->ev_gather, cudaEventDisableTiming));

#ifdef ENABLE_NCCL
    if (u->nccl) {
        ncclUniqueId id;
        memset(&id, 0, sizeof id);
        if (u->rank == 0) ncclCheck(ncclGetUniqueId(&id));
        comm_bcast(&id, sizeof id, 0);
        ncclCheck(ncclCommInitRank(&u->nc, u->world, id, u->rank));
    }
#endif

    /* identical parameters on every rank (distopt_create broadcasts too), then master and copy on the device */
    comm_bcast(dm->host_params, u->P * sizeof(float), 0);
    cudaCheck(cudaStreamSynchronize(dm->stream));
    cudaCheck(cudaMemcpy(dm->master, dm->host_params, u->P * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemsetAsync(dm->grads, 0, u->P * sizeof(float), dm->stream));
    rebuild_copy(u, 0, 1);
    cudaCheck(cudaStreamSynchronize(dm->stream));

    Updater *b = &u->base;
    *b = du_ops;
    snprintf(b->desc, sizeof b->desc, "device %s (%s%s)", kind == OPT_ADAMW ? "AdamW" : "AdamS",
             u->world == 1 ? "1 rank" : u->nccl ? "NCCL" : "MPI, host-staged", u->zero ? ", ZeRO-1" : "");
    return b;
}

/*
 * cuda/dist_scape_state.cuh - the device SCAPE's life cycle and checkpoint: scape_updater_create (state, streams,
 * events, plans, the collectives' buffers), the checkpoint blob through optim/dist_state.c's distopt_scape_blob_*
 * (the host's exact layout, so either path resumes the other's checkpoints), the SCAPE_CHECK_SYNC check and free.
 * Part of cuda/dist.cu's translation unit, after cuda/dist_scape.cuh and cuda/dist_mask_stats.cuh.
 */

/* ---- checkpoint blob: distopt_save's SCAPE layout through optim/dist_state.c's distopt_scape_blob_* ---- */

static unsigned long long scape_dev_count_cur(ScapeDev *u) {
    if (!u->have_cur) return 0;
    unsigned long long *d = (unsigned long long *)dmalloc(sizeof *d, "a mask count"), h = 0;
    scape_mask_count(d, u->d_cur, 0, (long long)u->P, u->dm.stream);
    cudaCheck(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, u->dm.stream));
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    cudaCheck(cudaFree(d));
    return h;
}

static size_t sd_state_bytes(const Updater *base) {
    ScapeDev *u = sdu(base); /* the pending mask all-gather must land before the state is complete */
    scape_dev_collect_next(u);
    return distopt_scape_blob_bytes(u->P, u->have_cur, u->have_next, (size_t)scape_dev_count_cur(u));
}

/* Bytes of SCAPE state this rank holds (Updater.memory_bytes, distopt_state_memory's measure): m (dense, or with
 * ZeRO-1 compact on the owned part of the mask, its two buffers), r (on the device or in pinned host memory), the
 * three masks (M_t, M_{t+1}, the owner segments); not the payload and staging buffers. */
static size_t sd_memory_bytes(const Updater *base) {
    const ScapeDev *u = sdu(base);
    const size_t m_n = u->zero ? u->mc_cap + u->mc_new_cap : u->P;
    size_t seg_words = 0;
    for (int r = 0; r < u->world; r++) seg_words += (size_t)scape_mask_words((long long)(u->own.hi[r] - u->own.lo[r]));
    const size_t ez_n = u->zero && u->bf16 ? u->P : 0; /* the bf16 payload's residual on the mask (ZeRO-1) */
    return (m_n + u->P + ez_n) * sizeof(float) +
           (2 * (size_t)scape_mask_words((long long)u->P) + seg_words) * sizeof(uint32_t);
}

/* host copy of a device mask in scape.h's byte layout (little-endian words are its bytes), MASK_PAD slack */
static uint8_t *scape_dev_download_mask(const ScapeDev *u, const uint32_t *d) {
    uint8_t *h = (uint8_t *)xcalloc(mask_bytes(u->P) + MASK_PAD, 1, "mask download");
    cudaCheck(cudaMemcpy(h, d, mask_bytes(u->P), cudaMemcpyDeviceToHost));
    return h;
}

static void sd_save(const Updater *base, void *blob) {
    ScapeDev *u = sdu(base);
    scape_dev_collect_next(u);
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    float *r = (float *)xmalloc(u->P * sizeof(float), "residual download");
    float *m = (float *)xmalloc(u->P * sizeof(float), "moment download");
    if (u->offload) {
        cudaCheck(cudaStreamSynchronize(u->cps)); /* the last update's r is back in h_r */
        memcpy(r, u->h_r, u->P * sizeof(float));
    } else {
        cudaCheck(cudaMemcpy(r, u->d_r, u->P * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (u->zero) scape_zero_save_state(u, m, r); /* m from the owners (a collective), r unfolded */
    else cudaCheck(cudaMemcpy(m, u->d_m, u->P * sizeof(float), cudaMemcpyDeviceToHost));
    uint8_t *mc = u->have_cur ? scape_dev_download_mask(u, u->d_cur) : NULL;
    uint8_t *mn = u->have_next ? scape_dev_download_mask(u, u->d_next) : NULL;
    distopt_scape_blob_save(blob, u->world, u->rank, u->last_t, u->P, r, mc, mn, m);
    free(r); free(m); free(mc); free(mn);
}

static void sd_load(Updater *base, const void *const *blobs, const size_t *sizes, int n_blobs) {
    ScapeDev *u = sdu(base);
    /* a pending all-gather is finished first (every rank queued it), then forgotten */
    scape_dev_collect_next(u);
    float *r = (float *)xmalloc(u->P * sizeof(float), "residual upload");
    float *m = (float *)xmalloc(u->P * sizeof(float), "moment upload");
    uint8_t *mc = (uint8_t *)xcalloc(mask_bytes(u->P) + MASK_PAD, 1, "mask upload");
    uint8_t *mn = (uint8_t *)xcalloc(mask_bytes(u->P) + MASK_PAD, 1, "mask upload");
    int hc = 0, hn = 0;
    int last_t = distopt_scape_blob_load(u->P, u->world, u->rank, r, mc, mn, &hc, &hn, m, blobs, sizes, n_blobs);
    const size_t wb = (size_t)scape_mask_words((long long)u->P) * sizeof(uint32_t);
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    if (u->zero) scape_zero_load_state(u, m, r, mc, hc); /* this rank's m, beta1 m folded into r */
    else cudaCheck(cudaMemcpy(u->d_m, m, u->P * sizeof(float), cudaMemcpyHostToDevice));
    if (u->offload) {
        cudaCheck(cudaStreamSynchronize(u->cps)); /* no copy in flight touches h_r */
        memcpy(u->h_r, r, u->P * sizeof(float));
    } else {
        cudaCheck(cudaMemcpy(u->d_r, r, u->P * sizeof(float), cudaMemcpyHostToDevice));
    }
    cudaCheck(cudaMemset(u->d_cur, 0, wb));
    cudaCheck(cudaMemset(u->d_next, 0, wb));
    cudaCheck(cudaMemcpy(u->d_cur, mc, mask_bytes(u->P), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(u->d_next, mn, mask_bytes(u->P), cudaMemcpyHostToDevice));
    if (u->zero) scape_zero_load_m(u, m, mc, hc); /* m compact on mc, this rank's part */
    free(r); free(m); free(mc); free(mn);
    u->have_cur = hc;
    u->have_next = hn;
    u->cur_dens = u->next_dens = -1.0; /* made by another run, maybe with another schedule: count on the device */
    u->last_t = last_t;
    u->st_gprev_t = -1; /* the Jaccard of the first step after a resume has no previous mask (as distopt_load) */
    for (int b = 0; b < u->nb; b++) {
        u->bstate[b] = 0;
        u->bh[b] = 0;
    }
    u->step_begun = 0;
    /* the copy the uninterrupted run would hold after step last_t (the master came from the checkpoint's model) */
    if (u->copy)
        for (int k = 0; k < u->tab->n; k++) {
            const ParamSlice *sl = &u->tab->slices[k];
            sr_copy(u->copy + sl->offset, u->dm.master + sl->offset, (long)sl->numel, sr_seed(u->cfg.seed, last_t, k),
                    u->dm.stream);
        }
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
}

/* SCAPE_CHECK_SYNC=1: master, floatX copy, m (not with ZeRO-1: each rank holds its own part) and masks hashed on
 * every rank and compared (comm_sync_check of comm/comm.h). */
static void scape_dev_sync_check(ScapeDev *u) {
    if (!comm_sync_check_enabled()) return;
    scape_dev_collect_next(u);
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    float *h = (float *)xmalloc(u->P * sizeof(float), "sync check");
    cudaCheck(cudaMemcpy(h, u->dm.master, u->P * sizeof(float), cudaMemcpyDeviceToHost));
    uint64_t hash = fnv1a(1469598103934665603ull, h, u->P * sizeof(float));
    if (!u->zero) {
        cudaCheck(cudaMemcpy(h, u->d_m, u->P * sizeof(float), cudaMemcpyDeviceToHost));
        hash = fnv1a(hash, h, u->P * sizeof(float));
    }
    if (u->copy) {
        cudaCheck(cudaMemcpy(h, u->copy, u->P * sizeof(floatX), cudaMemcpyDeviceToHost));
        hash = fnv1a(hash, h, u->P * sizeof(floatX));
    }
    if (u->have_cur) {
        cudaCheck(cudaMemcpy(h, u->d_cur, mask_bytes(u->P), cudaMemcpyDeviceToHost));
        hash = fnv1a(hash, h, mask_bytes(u->P));
    }
    if (u->have_next) {
        cudaCheck(cudaMemcpy(h, u->d_next, mask_bytes(u->P), cudaMemcpyDeviceToHost));
        hash = fnv1a(hash, h, mask_bytes(u->P));
    }
    free(h);
    comm_sync_check(hash, "device parameters/SCAPE state", "device parameters and shared SCAPE state");
}

static void sd_free(Updater *base) {
    ScapeDev *u = sdu(base);
    if (!u) return;
    scape_dev_sync_check(u);
    for (int b = 0; b < u->nb; b++) comm_wait(u->bh[b]);
    scape_dev_collect_next(u); /* finishes a pending all-gather (every rank queued it) */
    cudaCheck(cudaStreamSynchronize(u->cs));
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    scape_dev_stats_free(u); /* after the stream: its g copies and statistics kernels are done */
    scape_zero_free(u);
    if (u->offload) {
        cudaCheck(cudaStreamSynchronize(u->cps));
        cudaCheck(cudaStreamDestroy(u->cps));
        for (int i = 0; i < 2; i++) {
            cudaCheck(cudaEventDestroy(u->ev_stage_free[i]));
            cudaCheck(cudaEventDestroy(u->ev_stage_ready[i]));
            cudaCheck(cudaFree(u->d_stage[i]));
        }
        cudaCheck(cudaFreeHost(u->h_r));
    }
#ifdef ENABLE_NCCL
    if (u->nccl) ncclCheck(ncclCommDestroy(u->nc));
#endif
    for (int b = 0; b < u->nb; b++) {
        cudaCheck(cudaEventDestroy(u->ev_ready[b]));
        scape_plan_free(&u->plan[b]);
    }
    cudaCheck(cudaEventDestroy(u->ev_comm));
    cudaCheck(cudaEventDestroy(u->ev_c));
    cudaCheck(cudaEventDestroy(u->ev_gather));
    cudaCheck(cudaEventDestroy(u->ev_used));
    cudaCheck(cudaStreamDestroy(u->cs));
    scape_topk_work_free(&u->topk);
    if (u->d_m) cudaCheck(cudaFree(u->d_m));
    if (u->d_r) cudaCheck(cudaFree(u->d_r));
    cudaCheck(cudaFree(u->d_cur));
    cudaCheck(cudaFree(u->d_next));
    cudaCheck(cudaFree(u->d_seg));
    cudaCheck(cudaFree(u->d_payload));
    cudaCheck(cudaFree(u->d_part));
    cudaCheck(cudaFree(u->d_ctl));
    cudaCheck(cudaFreeHost(u->h_ctl));
    cudaCheck(cudaFreeHost(u->h_kb));
    cudaCheck(cudaFreeHost(u->h_kb_dev));
    if (u->h_seg) cudaCheck(cudaFreeHost(u->h_seg));
    if (u->h_payload) cudaCheck(cudaFreeHost(u->h_payload));
    if (u->d_payload16) cudaCheck(cudaFree(u->d_payload16));
    if (u->d_qerr) cudaCheck(cudaFree(u->d_qerr));
    if (u->d_recv16) cudaCheck(cudaFree(u->d_recv16));
    if (u->h_payload16) cudaCheck(cudaFreeHost(u->h_payload16));
    if (u->h_qerr) cudaCheck(cudaFreeHost(u->h_qerr));
    param_table_bucket_slices_free(u->nb, u->bn, u->bslices);
    free(u->ev_ready); free(u->bucket_off); free(u->plan); free(u->part_off);
    free(u->seg_woff); free(u->seg_bytes); free(u->seg_off); free(u->bstate); free(u->bh);
    owner_table_free(&u->own);
    free(u);
}

/* the device SCAPE's Updater table (optim/updater.h; fields in declaration order, desc filled at create) */
static const Updater sd_ops = {
    .desc = "",
    .bucket_ready = sd_bucket_ready,
    .step = sd_step,
    .density = sd_density,
    .state_bytes = sd_state_bytes,
    .save = sd_save,
    .load = sd_load,
    .memory_bytes = sd_memory_bytes,
    .mask_stats_enable = sd_mask_stats_enable,
    .mask_stats = sd_mask_stats,
    .use_synced = NULL, /* the device rules are synchronous */
    .free = sd_free,
};

/* scape_updater_create's state and scratch: m (unless ZeRO-1 keeps it compact), r (or its pinned host copy and two
 * staging buffers with --scape-offload-residual), the two masks, the mask segments (seg_words words), payload, norm
 * partials, the step's control values, the payload counts; the host staging buffers of host-staged MPI and the bf16
 * payload's buffers. m, r, the masks, the segments and the control values start at zero. */
static void sd_alloc_state(ScapeDev *u, size_t seg_words) {
    const ParamTable *tab = u->tab;
    const size_t wo = seg_words, so = u->seg_total;
    const size_t wb = (size_t)scape_mask_words((long long)u->P) * sizeof(uint32_t);
    /* m: dense over the parameters (with ZeRO-1 compact on the owners instead, cuda/dist_scape_zero.cuh) */
    if (!u->zero) u->d_m = (float *)dmalloc(u->P * sizeof(float), "the SCAPE first moment");
    size_t max_slice = 1;
    for (int i = 0; i < tab->n; i++)
        if (tab->slices[i].numel > max_slice) max_slice = tab->slices[i].numel;
    if (u->offload) {
        u->h_r = (float *)hmalloc_pinned(u->P * sizeof(float), "the offloaded SCAPE residual");
        memset(u->h_r, 0, u->P * sizeof(float));
        for (int i = 0; i < 2; i++) {
            u->d_stage[i] = (float *)dmalloc(max_slice * sizeof(float), "a residual staging buffer");
            cudaCheck(cudaEventCreateWithFlags(&u->ev_stage_free[i], cudaEventDisableTiming));
            cudaCheck(cudaEventCreateWithFlags(&u->ev_stage_ready[i], cudaEventDisableTiming));
        }
        cudaCheck(cudaStreamCreateWithFlags(&u->cps, cudaStreamNonBlocking));
    } else {
        u->d_r = (float *)dmalloc(u->P * sizeof(float), "the SCAPE residual");
    }
    u->d_cur = (uint32_t *)dmalloc(wb, "a SCAPE mask");
    u->d_next = (uint32_t *)dmalloc(wb, "a SCAPE mask");
    u->d_seg = (uint32_t *)dmalloc((wo ? wo : 1) * sizeof(uint32_t), "the mask segments");
    u->d_payload = (float *)dmalloc(u->P * sizeof(float), "the SCAPE payload");
    u->d_part = (double *)dmalloc((size_t)(u->npart ? u->npart : 1) * sizeof(double), "norm partials");
    u->d_ctl = (ScapeCtl *)dmalloc(sizeof(ScapeCtl), "the step's control values");
    if (u->d_m) cudaCheck(cudaMemset(u->d_m, 0, u->P * sizeof(float)));
    if (u->d_r) cudaCheck(cudaMemset(u->d_r, 0, u->P * sizeof(float)));
    cudaCheck(cudaMemset(u->d_cur, 0, wb));
    cudaCheck(cudaMemset(u->d_next, 0, wb));
    cudaCheck(cudaMemset(u->d_seg, 0, (wo ? wo : 1) * sizeof(uint32_t)));
    cudaCheck(cudaMemset(u->d_ctl, 0, sizeof(ScapeCtl)));
    u->h_ctl = (ScapeCtl *)hmalloc_pinned(sizeof(ScapeCtl), "the step's control values");
    u->h_kb = (long long *)hmalloc_pinned((size_t)(u->nb ? u->nb : 1) * sizeof(long long), "payload counts");
    memset(u->h_kb, 0, (size_t)(u->nb ? u->nb : 1) * sizeof(long long));
    u->h_kb_dev = (long long *)hmalloc_pinned((size_t)(u->nb ? u->nb : 1) * sizeof(long long), "payload counts");
    u->cur_dens = u->next_dens = -1.0;
    if (u->world > 1 && !u->nccl) {
        u->h_seg = (uint8_t *)hmalloc_pinned(so ? so : 1, "the mask segments");
        memset(u->h_seg, 0, so ? so : 1);
        u->h_payload = (float *)hmalloc_pinned(u->P * sizeof(float), "the payload staging buffer");
    }
    if (u->bf16 && u->world > 1) {
        u->d_payload16 = (uint16_t *)dmalloc(u->P * sizeof(uint16_t), "the bf16 SCAPE payload");
        u->d_qerr = (float *)dmalloc(u->P * sizeof(float), "the bf16 payload's rounding errors");
        if (u->nccl) {
            size_t max_part = 1;
            for (int b = 0; b < u->nb; b++) {
                size_t part = scape_bucket_numel(u, b) / (size_t)u->world + 1;
                if (part > max_part) max_part = part;
            }
            u->d_recv16 = (uint16_t *)dmalloc((size_t)u->world * max_part * sizeof(uint16_t), "the bf16 all-to-all buffer");
        } else {
            u->h_payload16 = (uint16_t *)hmalloc_pinned(u->P * sizeof(uint16_t), "the bf16 payload staging buffer");
            u->h_qerr = (float *)hmalloc_pinned(u->P * sizeof(float), "the bf16 rounding error staging buffer");
        }
    }
}

/* The device SCAPE update over dm's buffers (see the top of this file); the collectives chosen as
 * device_updater_create does (nccl: 1 for NCCL, 0 for host-staged MPI; ignored with one rank). dist.c's checks
 * of the SCAPE settings (fatal() with the flag to fix). */
static Updater *scape_updater_create(const DeviceModel *dm, const UpdaterConfig *cfg, int nccl) {
    const DistConfig *dc = &cfg->dist;
    if (!(dc->density > 0 && dc->density <= 1)) fatal("--density %g is outside (0, 1]; 0.1 means 90%% sparsity", dc->density);
    if (!(dc->density_start > 0 && dc->density_start <= 1))
        fatal("density start %g is outside (0, 1]; use 1 for the default warm-up from dense", dc->density_start);
    if (dc->zero && cfg->scape_offload_residual)
        fatal("--zero 1 with --scape-offload-residual is not built for the device SCAPE; drop one of them");
    ScapeDev *u = (ScapeDev *)xcalloc(1, sizeof *u, "device SCAPE");
    u->dm = *dm;
    u->cfg = *cfg;
    u->tab = dm->table;
    u->opt = dc->opt;
    u->P = dm->table->total;
    u->copy = (void *)dm->params == (void *)dm->master ? NULL : dm->params;
    u->rank = comm_rank();
    u->world = comm_world();
    u->nccl = u->world > 1 && nccl;
    u->offload = cfg->scape_offload_residual != 0;
    u->bf16 = dc->payload_bf16 != 0;
    u->zero = dc->zero != 0;
    const ParamTable *tab = u->tab;
    owner_table_build(&u->own, tab, u->world);

    /* buckets in dist.c's order: slices in memory order, payload offsets = elements of the earlier buckets */
    u->nb = tab->num_buckets;
    param_table_bucket_slices(tab, &u->bn, &u->bslices);
    u->bucket_off = (size_t *)xcalloc((size_t)u->nb, sizeof(size_t), "bucket offsets");
    u->plan = (ScapeBucketPlan *)xcalloc((size_t)u->nb, sizeof(ScapeBucketPlan), "bucket plans");
    u->part_off = (int *)xcalloc((size_t)u->nb, sizeof(int), "norm partial offsets");
    u->bstate = (int *)xcalloc((size_t)u->nb, sizeof(int), "bucket state");
    u->bh = (CommHandle *)xcalloc((size_t)u->nb, sizeof(CommHandle), "bucket handles");
    u->ev_ready = (cudaEvent_t *)xcalloc((size_t)u->nb, sizeof(cudaEvent_t), "bucket events");
    size_t off = 0;
    for (int b = 0; b < u->nb; b++) {
        u->bucket_off[b] = off;
        for (int k = 0; k < u->bn[b]; k++) off += tab->slices[u->bslices[b][k]].numel;
        scape_plan_build(&u->plan[b], tab, u->bslices[b], u->bn[b]);
        u->part_off[b] = u->npart;
        u->npart += scape_norm_partials(&u->plan[b]);
    }

    /* owner segments: word-aligned on the device, dist.c's bytes on the host */
    u->seg_woff = (size_t *)xcalloc((size_t)u->world, sizeof(size_t), "mask segments");
    u->seg_bytes = (size_t *)xcalloc((size_t)u->world, sizeof(size_t), "mask segments");
    u->seg_off = (size_t *)xcalloc((size_t)u->world, sizeof(size_t), "mask segments");
    size_t wo = 0, so = 0, maxn = 1;
    for (int r = 0; r < u->world; r++) {
        size_t n = u->own.hi[r] - u->own.lo[r];
        u->seg_woff[r] = wo;
        wo += (size_t)scape_mask_words((long long)n);
        u->seg_off[r] = so;
        u->seg_bytes[r] = mask_bytes(n);
        so += u->seg_bytes[r];
    }
    u->seg_total = so;
    for (int i = u->own.first[u->rank]; i < u->own.first[u->rank + 1]; i++)
        if (tab->slices[i].numel > maxn) maxn = tab->slices[i].numel;

    sd_alloc_state(u, wo);
    scape_topk_work_create(&u->topk, (long long)maxn);
    if (u->zero) scape_zero_setup(u);
    cudaCheck(cudaStreamCreateWithFlags(&u->cs, cudaStreamNonBlocking));
    for (int b = 0; b < u->nb; b++) cudaCheck(cudaEventCreateWithFlags(&u->ev_ready[b], cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&u->ev_comm, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&u->ev_c, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&u->ev_gather, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&u->ev_used, cudaEventDisableTiming));

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
    if (u->copy)
        for (int k = 0; k < tab->n; k++) {
            const ParamSlice *sl = &tab->slices[k];
            sr_copy(u->copy + sl->offset, dm->master + sl->offset, (long)sl->numel, sr_seed(cfg->seed, 0, k), dm->stream);
        }
    cudaCheck(cudaStreamSynchronize(dm->stream));

    Updater *b = &u->base;
    *b = sd_ops;
    snprintf(b->desc, sizeof b->desc, "device SCAPE (%s%s%s%s)", u->world == 1 ? "1 rank" : u->nccl ? "NCCL" : "MPI, host-staged",
             u->offload ? ", residual offloaded" : "", u->bf16 ? ", bf16 payload" : "", u->zero ? ", ZeRO-1" : "");
    return b;
}

/*
 * cuda/dist_scape_zero.cuh - the device SCAPE with ZeRO-1 (--zero 1; issue 17): the parts of cuda/dist_scape.cuh's
 * step that differ, the counterpart of optim/dist_scape_zero.c with the same arithmetic, so that in fp32 the
 * master weights, masks and checkpoint blobs equal the host's sharded (and so the unsharded) SCAPE bit for bit.
 * Part of cuda/dist.cu's translation unit, after cuda/dist_scape.cuh.
 *
 * What each rank holds on the device (the owner table of SCAPE.md section 4 is the shard layout):
 *   r       (P)          its residual, with fl(beta1 m_{t-1}) folded in on the mask m is on (M_t after a step)
 *   m       K_r values   the first moment of its owned coordinates on that mask, compact in memory order (d_mc;
 *                        the update writes m_t into d_mc_new, resized as the density falls, then they swap): the
 *                        kernels find m_{t-1} of a tile from the memory-order plan's offsets of m's mask (d_mq) and
 *                        a second block count over that mask (ScapeCompactM, cuda/scape.cuh)
 *   masks, payload       as unsharded
 * The step, per rank (cuda/dist_scape.cuh runs the rest as unsharded):
 *   c          (omb1 g + r) + 0 (scape_momentum_compact with m NULL): the unsharded bits (the fold's argument)
 *   payload    per bucket, a reduce-scatter to the owners: each owner's values are consecutive in the bucket's
 *              payload (the bucket's slices are in memory order, the owners own memory ranges), so NCCL reduces
 *              them in place with one ncclReduce per owner in a group (ncclReduceScatter needs equal counts),
 *              host-staged MPI with comm_ireduce_scatter_avg_f32 into h_rs, uploaded back to the same place;
 *              the averaged values then sit where the unsharded all-reduce leaves them, on this rank's part only
 *   norm       the owners' tiles only, one sum per tile (scape_zero_norm); the host adds a chunk's tiles in order
 *              into the host's per-chunk layout (a chunk of SCAPE_CHUNK is whole tiles) and sends the chunk sums
 *              and the bad-c flag in the one control all-reduce scape_zero_reduce_norm makes: the same bytes
 *   update     the owned tiles: masked AdamS from the compact m_{t-1}, m_t compact, r = fl(beta1 m_t) on M_t; the others'
 *              tiles: error feedback and decay off the mask, r = 0 on it (ScapeUpdateArgs.zero)
 *   sync       right after the update, before the next mask's top-k is queued on cs (so the next forward waits
 *              for the sync alone; the host queues its mask all-gather first, which changes no value): the owners' m_t
 *              on M_t in memory order (a plan over every slice, mo) all-gathered through the payload buffer
 *              (NCCL: one broadcast per owner in a group on cs; MPI: comm_iallgatherv through h_payload), folded
 *              into the others' r; then the owners' updated params the same way, scattered into the master
 *              weights and the floatX copy (rounded as the owner rounded its own)
 * Collectives per step: the host's exactly (calls and bytes per kind), so log.jsonl reads the same.
 * Checkpoints keep the unsharded layout (optim/dist_state.c): m gathered from the owners at the save (a
 * collective: every rank saves), r saved unfolded; a load folds beta1 m into r. So either path, sharded or
 * not, resumes the other's checkpoints, on any number of ranks.
 * The bf16 payload (--scape-payload bf16): the owners reduce in bf16 as comm_ireduce_scatter_avg_bf16 does (NCCL:
 * grouped send/recv to the owner, scape_bf16_mean), the mean's error goes to the owner's residual, and what the
 * unsharded r holds on the mask (this rank's rounding losses) lives in d_ez (P floats) so that the fold stays
 * exact, as the host's ez: bitwise the host's sharded bf16 path (which tracks the unsharded one on > 1 rank).
 * Not built: the residual offload with --zero (scape_updater_create refuses it). The state per rank is the host's:
 * 4P of r, 8 K_r of m, the masks (with the bf16 payload ez: 4P more here, 4K on the host).
 */

/* cuda/dist_scape_state.cuh, read after this file */
static uint8_t *scape_dev_download_mask(const ScapeDev *u, const uint32_t *d);

/* The rank owning slice i. */
static int scape_zero_owner(const ScapeDev *u, int i) { return owner_table_owner(&u->own, i); }

/* Tables and buffers of the sharded step; called by scape_updater_create once the plans exist. */
static void scape_zero_setup(ScapeDev *u) {
    const ParamTable *tab = u->tab;
    const int W = u->world;
    u->mlo = u->own.lo[u->rank];
    u->mhi = u->own.hi[u->rank];
    u->bt0 = (int *)xcalloc((size_t)u->nb, sizeof(int), "owned tiles");
    u->bt1 = (int *)xcalloc((size_t)u->nb, sizeof(int), "owned tiles");
    u->tile_base = (int *)xcalloc((size_t)u->nb, sizeof(int), "tile offsets");
    u->rs_k = (size_t *)xcalloc((size_t)(u->nb ? u->nb : 1) * (size_t)W, sizeof(size_t), "reduce-scatter counts");
    u->rs_pre = (size_t *)xcalloc((size_t)(u->nb ? u->nb : 1), sizeof(size_t), "reduce-scatter offsets");
    u->rs_off = (size_t *)xcalloc((size_t)(u->nb ? u->nb : 1), sizeof(size_t), "reduce-scatter offsets");
    u->h_sk = (long long *)xcalloc((size_t)(tab->n ? tab->n : 1), sizeof(long long), "slice counts");
    u->kr = (size_t *)xcalloc((size_t)W, sizeof(size_t), "sync counts");
    /* the host's chunks: bucket after bucket, slices in memory order, SCAPE_CHUNK elements (dist_scape.c) */
    static_assert(SCAPE_CHUNK % SCAPE_TILE == 0, "a host chunk is whole device tiles");
    int nt = 0;
    for (int b = 0; b < u->nb; b++) {
        u->tile_base[b] = nt;
        nt += u->plan[b].ntiles;
    }
    u->ntiles_all = nt;
    u->tile_chunk = (int *)xcalloc((size_t)(nt ? nt : 1), sizeof(int), "tile chunks");
    size_t ch = 0;
    for (int b = 0; b < u->nb; b++) {
        const ScapeBucketPlan *pl = &u->plan[b];
        int k0 = -1, k1 = -1;
        for (int k = 0; k < pl->nslices; k++) {
            const int i = u->bslices[b][k];
            const size_t numel = tab->slices[i].numel;
            for (int t = pl->slice_tile[k]; t < pl->slice_tile[k + 1]; t++)
                u->tile_chunk[u->tile_base[b] + t] = (int)(ch + (size_t)(t - pl->slice_tile[k]) * SCAPE_TILE / SCAPE_CHUNK);
            ch += (numel + SCAPE_CHUNK - 1) / SCAPE_CHUNK;
            if (scape_zero_owner(u, i) == u->rank) {
                if (k0 < 0) k0 = k;
                k1 = k + 1;
            }
        }
        /* the owned slices of a bucket are consecutive (memory order, owners own memory ranges) */
        u->bt0[b] = k0 < 0 ? 0 : pl->slice_tile[k0];
        u->bt1[b] = k0 < 0 ? 0 : pl->slice_tile[k1];
        for (int k = k0 < 0 ? pl->nslices : k0; k < k1; k++)
            if (scape_zero_owner(u, u->bslices[b][k]) != u->rank)
                fatal("device SCAPE --zero: bucket %d's owned slices are not consecutive (an internal error); please "
                      "report it", b);
    }
    u->nch = ch;
    u->d_tpart = (double *)dmalloc((size_t)(nt ? nt : 1) * sizeof(double), "per-tile norm sums");
    u->h_tpart = (double *)hmalloc_pinned((size_t)(nt ? nt : 1) * sizeof(double), "per-tile norm sums");
    u->zred = (double *)xcalloc(ch + 1, sizeof(double), "norm chunk sums");
    /* the sync's layout: every slice in memory order */
    int *all = (int *)xmalloc((size_t)(tab->n ? tab->n : 1) * sizeof(int), "slices");
    for (int i = 0; i < tab->n; i++) all[i] = i;
    scape_plan_build(&u->mo, tab, all, tab->n);
    free(all);
    u->mo_t0 = (int *)xcalloc((size_t)W + 1, sizeof(int), "sync tiles");
    for (int r = 0; r <= W; r++) u->mo_t0[r] = u->mo.slice_tile[u->own.first[r]];
    /* each bucket tile's index in mo (the same tiles: both cut every slice from its start) */
    int *tm = (int *)xcalloc((size_t)(nt ? nt : 1), sizeof(int), "tile map");
    for (int b = 0; b < u->nb; b++) {
        const ScapeBucketPlan *pl = &u->plan[b];
        for (int k = 0; k < pl->nslices; k++)
            for (int t = pl->slice_tile[k]; t < pl->slice_tile[k + 1]; t++)
                tm[u->tile_base[b] + t] = u->mo.slice_tile[u->bslices[b][k]] + (t - pl->slice_tile[k]);
    }
    u->d_tile_mo = (int *)dmalloc((size_t)(nt ? nt : 1) * sizeof(int), "the tile map");
    cudaCheck(cudaMemcpy(u->d_tile_mo, tm, (size_t)(nt ? nt : 1) * sizeof(int), cudaMemcpyHostToDevice));
    free(tm);
    u->d_mq = (long long *)dmalloc(((size_t)u->mo.ntiles + 1) * sizeof(long long), "the first moment's offsets");
    cudaCheck(cudaMemset(u->d_mq, 0, ((size_t)u->mo.ntiles + 1) * sizeof(long long)));
    const size_t n_own = u->mhi - u->mlo;
    if (W > 1 && !u->nccl) {
        u->h_rs = (float *)hmalloc_pinned((n_own ? n_own : 1) * sizeof(float), "the owned payload");
        if (u->bf16) {
            u->h_rs16 = (uint16_t *)hmalloc_pinned((n_own ? n_own : 1) * sizeof(uint16_t), "the owned bf16 payload");
            u->h_rs_err = (float *)hmalloc_pinned((n_own ? n_own : 1) * sizeof(float), "the owned rounding errors");
        }
    }
    if (u->bf16) {
        u->d_ez = (float *)dmalloc(u->P * sizeof(float), "the bf16 payload's residual on the mask");
        cudaCheck(cudaMemset(u->d_ez, 0, u->P * sizeof(float)));
        if (W > 1 && u->nccl) {
            /* the owner's receive buffer: per round, world parts of at most zchunk values (4 Mi: 8 MiB a rank;
             * SCAPE_TEST_ZERO_CHUNK sets it, for tests of several rounds) */
            u->zchunk = (size_t)1 << 22;
            const char *e = getenv("SCAPE_TEST_ZERO_CHUNK");
            if (e && atol(e) > 0) u->zchunk = (size_t)atol(e);
            size_t most = 1; /* the largest owned part of a bucket */
            for (int b = 0; b < u->nb; b++) {
                size_t n = 0;
                for (int k = 0; k < u->bn[b]; k++)
                    if (scape_zero_owner(u, u->bslices[b][k]) == u->rank) n += tab->slices[u->bslices[b][k]].numel;
                if (n > most) most = n;
            }
            if (most > u->zchunk) most = u->zchunk;
            u->d_zrecv16 = (uint16_t *)dmalloc((size_t)W * most * sizeof(uint16_t), "the owner's bf16 receive buffer");
        }
    }
    cudaCheck(cudaEventCreateWithFlags(&u->ev_zsync, cudaEventDisableTiming));
}

static void scape_zero_free(ScapeDev *u) {
    if (!u->zero) return;
    cudaCheck(cudaEventDestroy(u->ev_zsync));
    scape_plan_free(&u->mo);
    cudaCheck(cudaFree(u->d_tpart));
    cudaCheck(cudaFree(u->d_tile_mo));
    cudaCheck(cudaFree(u->d_mq));
    if (u->d_mc) cudaCheck(cudaFreeAsync(u->d_mc, u->dm.stream));
    if (u->d_mc_new) cudaCheck(cudaFreeAsync(u->d_mc_new, u->dm.stream));
    cudaCheck(cudaStreamSynchronize(u->dm.stream));
    cudaCheck(cudaFreeHost(u->h_tpart));
    if (u->h_rs) cudaCheck(cudaFreeHost(u->h_rs));
    if (u->h_rs16) cudaCheck(cudaFreeHost(u->h_rs16));
    if (u->h_rs_err) cudaCheck(cudaFreeHost(u->h_rs_err));
    if (u->d_ez) cudaCheck(cudaFree(u->d_ez));
    if (u->d_zrecv16) cudaCheck(cudaFree(u->d_zrecv16));
    free(u->bt0); free(u->bt1); free(u->tile_base); free(u->tile_chunk); free(u->zred); free(u->h_sk);
    free(u->rs_k); free(u->rs_pre); free(u->rs_off); free(u->kr); free(u->mo_t0);
}

/* M_t's count per slice: predicted from the density it was made with (scape_predict_counts' rule), or for a
 * loaded mask counted on the host (one download); then K_b, the counts per bucket and owner, this rank's offsets
 * and the sync's counts per owner, and the sync layout's offsets on the device. */
static void scape_zero_counts(ScapeDev *u) {
    const ParamTable *tab = u->tab;
    const size_t W = (size_t)u->world;
    if (u->kb_predicted) {
        for (int i = 0; i < tab->n; i++) {
            const ParamSlice *sl = &tab->slices[i];
            u->h_sk[i] = sl->numel ? (long long)(scape_slice_sparse(u, sl) ? scape_k(u->cur_dens, sl->numel) : sl->numel) : 0;
        }
    } else {
        cudaCheck(cudaStreamSynchronize(u->dm.stream));
        uint8_t *h = scape_dev_download_mask(u, u->d_cur);
        for (int i = 0; i < tab->n; i++)
            u->h_sk[i] = (long long)mask_count(h, tab->slices[i].offset, tab->slices[i].offset + tab->slices[i].numel);
        free(h);
    }
    memset(u->kr, 0, W * sizeof(size_t));
    size_t ro = 0;
    for (int b = 0; b < u->nb; b++) {
        size_t *rk = u->rs_k + (size_t)b * W;
        memset(rk, 0, W * sizeof(size_t));
        long long K = 0;
        for (int k = 0; k < u->bn[b]; k++) {
            const int i = u->bslices[b][k];
            rk[scape_zero_owner(u, i)] += (size_t)u->h_sk[i];
            K += u->h_sk[i];
        }
        u->h_kb[b] = K;
        u->rs_pre[b] = 0;
        for (int r = 0; r < u->rank; r++) u->rs_pre[b] += rk[r];
        u->rs_off[b] = ro;
        ro += rk[u->rank];
        for (size_t r = 0; r < W; r++) u->kr[r] += rk[r];
    }
    u->Qcur = 0;
    for (int r = 0; r < u->rank; r++) u->Qcur += (long long)u->kr[r];
    scape_payload_offsets(&u->mo, u->d_cur, u->dm.stream);
}

/* The compact first moment as the kernels of bucket b's owned tiles see it: m_{t-1} on its mask (M_{t-1}: d_next
 * once the step swapped its masks, else d_cur, which is then both) and m_t into d_mc_new on M_t. */
static ScapeCompactM scape_zero_cm(const ScapeDev *u, int b) {
    ScapeCompactM cm;
    cm.mc = u->have_m ? u->d_mc : NULL;
    cm.mmask = u->swapped ? u->d_next : u->d_cur;
    cm.mq = u->d_mq;
    cm.Qm = u->Qm;
    cm.mc_new = u->d_mc_new;
    cm.mq_new = u->mo.q;
    cm.Qn = u->Qcur;
    cm.tile_mo = u->d_tile_mo + u->tile_base[b] + u->bt0[b];
    return cm;
}

/* The payload of bucket b (K_b values at bucket_off[b], c compacted on the compute stream, which cs waits for)
 * reduce-scattered to the owners, averaged: NCCL in place on cs, MPI from h_payload into h_rs (uploaded by
 * scape_zero_receive). world > 1. */
static void scape_zero_comm_bucket(ScapeDev *u, int b, size_t K) {
    const size_t W = (size_t)u->world, *rk = u->rs_k + (size_t)b * W;
    float *pay = u->d_payload + u->bucket_off[b];
    if (u->nccl) {
#ifdef ENABLE_NCCL
        if (K) {
            size_t off = 0;
            ncclCheck(ncclGroupStart());
            for (int r = 0; r < u->world; r++) {
                if (rk[r]) ncclCheck(ncclReduce(pay + off, pay + off, rk[r], ncclFloat, ncclSum, r, u->nc, u->cs));
                off += rk[r];
            }
            ncclCheck(ncclGroupEnd());
            if (rk[u->rank]) div_f32(pay + u->rs_pre[b], (long)rk[u->rank], (float)u->world, u->cs);
        }
        comm_stats_add(COMM_REDUCE_SCATTER, 4ull * K, 0.0);
#endif
        return;
    }
    float *h = u->h_payload + u->bucket_off[b];
    stage_to_host(h, pay, K * sizeof(float), u->cs);
    u->bh[b] = comm_ireduce_scatter_avg_f32(h, u->h_rs + u->rs_off[b], rk);
}

/* The bf16 payload of bucket b (scape_zero_comm_bucket with --scape-payload bf16), as comm_ireduce_scatter_avg_bf16
 * reduces it: rounded to bf16 on cs; each owner receives every rank's bf16 values of its part (NCCL: grouped
 * send/recv into d_zrecv16, its own part by a device copy), sums them in fp32 in rank order, divides by N and
 * rounds (scape_bf16_mean) into d_payload16 at its place, the error into d_qerr there, in rounds of zchunk values
 * so the receive buffer stays small; MPI: the host's function
 * from h_payload16 into h_rs16 / h_rs_err, uploaded by scape_zero_receive. world > 1. */
static void scape_zero_comm_bucket_bf16(ScapeDev *u, int b, size_t K) {
    const size_t W = (size_t)u->world, *rk = u->rs_k + (size_t)b * W;
    float *pay = u->d_payload + u->bucket_off[b];
    uint16_t *p16 = u->d_payload16 + u->bucket_off[b];
    scape_bf16_round(p16, pay, NULL, (long long)K, (long long)K, 0, u->cs);
    if (u->nccl) {
#ifdef ENABLE_NCCL
        /* in rounds of at most zchunk values of each owner's part, so the receive buffer stays world * zchunk
         * values whatever the tensors' sizes; every value's N terms still meet in one place, summed in rank order */
        const size_t mine = rk[u->rank], CH = u->zchunk;
        size_t most = 0;
        for (size_t r = 0; r < W; r++)
            if (rk[r] > most) most = rk[r];
        for (size_t c0 = 0; c0 < most; c0 += CH) {
            const size_t mc = mine > c0 ? (mine - c0 < CH ? mine - c0 : CH) : 0;
            size_t off = 0;
            ncclCheck(ncclGroupStart());
            for (int r = 0; r < u->world; r++) {
                const size_t rc = rk[r] > c0 ? (rk[r] - c0 < CH ? rk[r] - c0 : CH) : 0;
                nccl_exchange_bf16(u->nc, u->cs, u->rank, r, p16 + off + c0, rc, u->d_zrecv16 + (size_t)r * mc, mc);
                off += rk[r];
            }
            ncclCheck(ncclGroupEnd());
            if (mc)
                scape_bf16_mean(p16 + u->rs_pre[b] + c0, u->d_qerr + u->bucket_off[b] + u->rs_pre[b] + c0,
                                u->d_zrecv16, (long long)mc, u->world, u->cs);
        }
        comm_stats_add(COMM_REDUCE_SCATTER, 2ull * K, 0.0);
#endif
        return;
    }
    uint16_t *h = u->h_payload16 + u->bucket_off[b];
    stage_to_host(h, p16, K * sizeof(uint16_t), u->cs);
    u->bh[b] = comm_ireduce_scatter_avg_bf16(h, u->h_rs16 + u->rs_off[b], u->h_rs_err + u->rs_off[b], rk);
}

/* MPI: waits for every bucket's reduce-scatter and uploads this rank's averaged part to where the unsharded
 * all-reduce leaves it in d_payload (bf16: d_payload16, its errors to d_qerr) (compute stream). */
static void scape_zero_receive(ScapeDev *u) {
    for (int b = 0; b < u->nb; b++) {
        comm_wait(u->bh[b]);
        const size_t n = u->rs_k[(size_t)b * (size_t)u->world + (size_t)u->rank], o = u->bucket_off[b] + u->rs_pre[b];
        if (!n) continue;
        if (u->bf16) {
            cudaCheck(cudaMemcpyAsync(u->d_payload16 + o, u->h_rs16 + u->rs_off[b], n * sizeof(uint16_t),
                                      cudaMemcpyHostToDevice, u->dm.stream));
            cudaCheck(cudaMemcpyAsync(u->d_qerr + o, u->h_rs_err + u->rs_off[b], n * sizeof(float),
                                      cudaMemcpyHostToDevice, u->dm.stream));
        } else {
            cudaCheck(cudaMemcpyAsync(u->d_payload + o, u->h_rs + u->rs_off[b], n * sizeof(float),
                                      cudaMemcpyHostToDevice, u->dm.stream));
        }
    }
}

/* optim/dist_scape_zero.c's scape_zero_reduce_norm: the owners' per-tile sums of g_hat^2, added per host chunk
 * in tile order, and this rank's bad-c flag (u->h_ctl, already downloaded and synchronised by the caller's
 * stream sync: call scape_zero_norm_enqueue before it) in the one control all-reduce; returns the sum of the
 * chunk sums in chunk order, *bad = some rank saw a non-finite c. */
static void scape_zero_norm_enqueue(ScapeDev *u) {
    cudaStream_t s = u->dm.stream;
    for (int b = 0; b < u->nb; b++) {
        const ScapeCompactM cm = scape_zero_cm(u, b);
        scape_zero_norm(u->d_tpart + u->tile_base[b] + u->bt0[b], &u->plan[b], u->bt0[b], u->bt1[b],
                        u->d_payload + u->bucket_off[b], u->d_cur, &cm, u->opt.beta1, s);
    }
    if (u->ntiles_all)
        cudaCheck(cudaMemcpyAsync(u->h_tpart, u->d_tpart, (size_t)u->ntiles_all * sizeof(double), cudaMemcpyDeviceToHost, s));
}
static double scape_zero_norm_finish(ScapeDev *u, int *bad) {
    memset(u->zred, 0, (u->nch + 1) * sizeof(double));
    for (int b = 0; b < u->nb; b++)
        for (int t = u->bt0[b]; t < u->bt1[b]; t++) {
            const int i = u->tile_base[b] + t;
            u->zred[u->tile_chunk[i]] += u->h_tpart[i];
        }
    u->zred[u->nch] = u->h_ctl->bad ? 1.0 : 0.0;
    comm_allreduce_sum_f64(u->zred, u->nch + 1); /* one contributor per chunk: exact in any order */
    double ss = 0;
    for (size_t c = 0; c < u->nch; c++) ss += u->zred[c];
    *bad = u->zred[u->nch] > 0;
    return ss;
}

/* K floats (at least 1) for the compact first moment, stream-ordered on s; fatal() naming the size if the device
 * is out of memory. */
static float *scape_zero_alloc_m(size_t K, cudaStream_t s) {
    void *p = NULL;
    const size_t bytes = (K ? K : 1) * sizeof(float);
    cudaError_t e = cudaMallocAsync(&p, bytes, s);
    if (e != cudaSuccess)
        fatal("out of GPU memory allocating the SCAPE first moment (%.1f MiB): %s", (double)bytes / 1048576.0,
              cudaGetErrorString(e));
    return (float *)p;
}

/* The step's update (every bucket): AdamS on the owned tiles (m_t compact into d_mc_new, the fold into r), error
 * feedback and decay on the others; then m_t becomes m (its mask M_t). d_mc_new grows to K_r, or shrinks by a
 * third or more as the density falls (as the host's m_new), stream-ordered (cudaMallocAsync / cudaFreeAsync). */
static void scape_zero_update(ScapeDev *u, const ScapeUpdateArgs *step_args) {
    cudaStream_t s = u->dm.stream;
    const size_t K = u->kr[u->rank];
    if (!u->d_mc_new || K > u->mc_new_cap || u->mc_new_cap > K + K / 2) {
        /* stream-ordered: its last readers (the step before last) are on this stream; no device synchronisation */
        if (u->d_mc_new) cudaCheck(cudaFreeAsync(u->d_mc_new, s));
        u->d_mc_new = scape_zero_alloc_m(K, s);
        u->mc_new_cap = K;
    }
    for (int b = 0; b < u->nb; b++) {
        const ScapeBucketPlan *pl = &u->plan[b];
        const float *payload = u->d_payload + u->bucket_off[b];
        ScapeUpdateArgs a = *step_args;
        if (u->bf16) { /* the residual on M_t into ez (scape_dev_update's bf16 arguments otherwise) */
            a.payload_bf16 = 1;
            a.fN = (float)u->world;
            a.qerr = u->world > 1 ? u->d_qerr + u->bucket_off[b] : NULL;
            a.ez = u->d_ez;
        }
        a.zero = 1;
        scape_update_tiles(u->dm.master, u->copy, NULL, u->d_r, u->dm.grads, pl, 0, u->bt0[b], payload, u->d_cur, &a, s);
        scape_update_tiles(u->dm.master, u->copy, NULL, u->d_r, u->dm.grads, pl, u->bt1[b], pl->ntiles, payload,
                           u->d_cur, &a, s);
        const ScapeCompactM cm = scape_zero_cm(u, b);
        scape_zero_update_owned(u->dm.master, u->copy, u->d_r, u->dm.grads, pl, u->bt0[b], u->bt1[b], payload, u->d_cur,
                                &a, &cm, s);
    }
    float *tm = u->d_mc;
    u->d_mc = u->d_mc_new;
    u->d_mc_new = tm;
    const size_t tc = u->mc_cap;
    u->mc_cap = u->mc_new_cap;
    u->mc_new_cap = tc;
    cudaCheck(cudaMemcpyAsync(u->d_mq, u->mo.q, ((size_t)u->mo.ntiles + 1) * sizeof(long long), cudaMemcpyDeviceToDevice, s));
    u->Qm = u->Qcur;
    u->have_m = 1;
}

/* One all-gather of the sync, in place in d_payload (M_t's values in memory order, rank r's kr[r] after the
 * earlier ranks'): NCCL on cs between the compute stream's writes and reads, MPI through h_payload. Counted as
 * the host's comm_iallgatherv of the same values. */
static void scape_zero_allgather(ScapeDev *u) {
    cudaStream_t s = u->dm.stream;
    size_t K = 0, mine = 0;
    for (int r = 0; r < u->world; r++) {
        if (r == u->rank) mine = K;
        K += u->kr[r];
    }
    if (u->world == 1) {
        comm_stats_add(COMM_ALLGATHER, 0, 0.0); /* the host's one-rank all-gather: a call, no bytes */
    } else if (u->nccl) {
#ifdef ENABLE_NCCL
        cudaCheck(cudaEventRecord(u->ev_zsync, s));
        cudaCheck(cudaStreamWaitEvent(u->cs, u->ev_zsync, 0));
        size_t off = 0;
        ncclCheck(ncclGroupStart());
        for (int r = 0; r < u->world; r++) {
            if (u->kr[r])
                ncclCheck(ncclBroadcast(u->d_payload + off, u->d_payload + off, u->kr[r], ncclFloat, r, u->nc, u->cs));
            off += u->kr[r];
        }
        ncclCheck(ncclGroupEnd());
        cudaCheck(cudaEventRecord(u->ev_zsync, u->cs));
        cudaCheck(cudaStreamWaitEvent(s, u->ev_zsync, 0));
        comm_stats_add(COMM_ALLGATHER, 4ull * K, 0.0);
#endif
    } else {
        const size_t n = u->kr[u->rank];
        if (n)
            cudaCheck(cudaMemcpyAsync(u->h_payload + mine, u->d_payload + mine, n * sizeof(float), cudaMemcpyDeviceToHost, s));
        cudaCheck(cudaStreamSynchronize(s));
        comm_wait(comm_iallgatherv(u->h_payload, u->kr, sizeof(float)));
        if (K) cudaCheck(cudaMemcpyAsync(u->d_payload, u->h_payload, K * sizeof(float), cudaMemcpyHostToDevice, s));
    }
}

/* optim/dist_scape_zero.c's scape_zero_sync after the update: the owners' m_t folded into the others' r
 * (r = fl(beta1 m_t) on M_t; the owners wrote theirs in the update), then their params on M_t into the others'
 * master weights and floatX copies. Compute stream; d_payload is free (the update has read the averages). */
static void scape_zero_sync(ScapeDev *u, const ScapeUpdateArgs *a) {
    cudaStream_t s = u->dm.stream;
    const int t0 = u->mo_t0[u->rank], t1 = u->mo_t0[u->rank + 1], nt = u->mo.ntiles;
    if (u->kr[u->rank]) /* m_t is already this rank's part of the layout */
        cudaCheck(cudaMemcpyAsync(u->d_payload + u->Qcur, u->d_mc, u->kr[u->rank] * sizeof(float),
                                  cudaMemcpyDeviceToDevice, s));
    scape_zero_allgather(u);
    scape_zero_fold(u->d_r, &u->mo, 0, t0, u->d_payload, u->d_cur, a, s);
    scape_zero_fold(u->d_r, &u->mo, t1, nt, u->d_payload, u->d_cur, a, s);
    scape_gather_tiles(u->d_payload, &u->mo, t0, t1, u->dm.master, u->d_cur, s);
    scape_zero_allgather(u);
    scape_zero_scatter(u->dm.master, u->copy, &u->mo, 0, t0, u->d_payload, u->d_cur, a, s);
    scape_zero_scatter(u->dm.master, u->copy, &u->mo, t1, nt, u->d_payload, u->d_cur, a, s);
}

/* The checkpoint's dense m (P floats, 0 off the mask) from the owners (a collective: every rank calls it) and
 * r without the fold (on M_t 0 with the fp32 payload, ez with bf16: what the unsharded r holds). Compute stream
 * synchronised by the caller. */
static void scape_zero_save_state(ScapeDev *u, float *m, float *r) {
    memset(m, 0, u->P * sizeof(float));
    /* m's mask is d_cur between steps; every rank's values in memory order, then spread over it */
    uint8_t *mc = u->have_m ? scape_dev_download_mask(u, u->d_cur) : NULL;
    size_t *cnt = (size_t *)xcalloc((size_t)u->world, sizeof(size_t), "gather counts"), total = 0, mine = 0;
    for (int q = 0; q < u->world; q++) {
        if (mc) cnt[q] = mask_count(mc, u->own.lo[q], u->own.hi[q]);
        if (q == u->rank) mine = total;
        total += cnt[q];
    }
    float *v = (float *)xmalloc((total ? total : 1) * sizeof(float), "moment gather");
    if (cnt[u->rank])
        cudaCheck(cudaMemcpy(v + mine, u->d_mc, cnt[u->rank] * sizeof(float), cudaMemcpyDeviceToHost));
    comm_wait(comm_iallgatherv(v, cnt, sizeof(float)));
    free(cnt);
    if (!mc) {
        free(v);
        return;
    }
    size_t q = 0;
    for (size_t j = 0; j < u->P; j++)
        if (mask_get(mc, j)) m[j] = v[q++];
    free(v);
    float *ez = NULL;
    if (u->d_ez) {
        ez = (float *)xmalloc(u->P * sizeof(float), "residual download");
        cudaCheck(cudaMemcpy(ez, u->d_ez, u->P * sizeof(float), cudaMemcpyDeviceToHost));
    }
    for (size_t j = 0; j < u->P; j++)
        if (mask_get(mc, j)) r[j] = ez ? ez[j] : 0.0f;
    free(ez);
    free(mc);
}

/* A loaded state into the sharded layout, part 1 (before r is uploaded): r += beta1 m on the mask m is on (mc,
 * when hc), optim/dist_scape_zero.c's scape_zero_r_fold (bf16: r there moves to ez, r = beta1 m). */
static void scape_zero_load_state(ScapeDev *u, const float *m, float *r, const uint8_t *mc, int hc) {
    if (u->d_ez) cudaCheck(cudaMemset(u->d_ez, 0, u->P * sizeof(float)));
    if (!hc) return;
    const float b1 = u->opt.beta1;
    if (u->d_ez) { /* bf16: r on the mask (the rounding losses) -> ez, r = beta1 m there */
        float *ez = (float *)xcalloc(u->P, sizeof(float), "residual upload");
        for (size_t j = 0; j < u->P; j++)
            if (mask_get(mc, j)) {
                ez[j] = r[j];
                r[j] = b1 * m[j];
            }
        cudaCheck(cudaMemcpy(u->d_ez, ez, u->P * sizeof(float), cudaMemcpyHostToDevice));
        free(ez);
        return;
    }
    for (size_t j = 0; j < u->P; j++)
        if (mask_get(mc, j)) r[j] += b1 * m[j];
}

/* Part 2 (after d_cur holds the loaded mc): this rank's m compact on mc over its owned range, and its layout (mo's
 * offsets for mc, where this rank's values start). Synchronous. */
static void scape_zero_load_m(ScapeDev *u, const float *m, const uint8_t *mc, int hc) {
    u->have_m = hc;
    if (!hc) return;
    const size_t n = mask_count(mc, u->mlo, u->mhi);
    float *v = (float *)xmalloc((n ? n : 1) * sizeof(float), "moment upload");
    size_t q = 0;
    for (size_t j = u->mlo; j < u->mhi; j++)
        if (mask_get(mc, j)) v[q++] = m[j];
    if (u->d_mc) cudaCheck(cudaFreeAsync(u->d_mc, u->dm.stream));
    u->d_mc = scape_zero_alloc_m(n, u->dm.stream);
    u->mc_cap = n;
    if (n) cudaCheck(cudaMemcpyAsync(u->d_mc, v, n * sizeof(float), cudaMemcpyHostToDevice, u->dm.stream));
    u->Qm = (long long)mask_count(mc, 0, u->mlo);
    scape_payload_offsets(&u->mo, u->d_cur, u->dm.stream);
    cudaCheck(cudaMemcpyAsync(u->d_mq, u->mo.q, ((size_t)u->mo.ntiles + 1) * sizeof(long long), cudaMemcpyDeviceToDevice,
                              u->dm.stream));
    cudaCheck(cudaStreamSynchronize(u->dm.stream)); /* before v goes */
    free(v);
}

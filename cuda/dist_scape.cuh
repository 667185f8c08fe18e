/*
 * cuda/dist_scape.cuh - SCAPE (../shared/SCAPE.md) as a device-resident Updater (optim/updater.h): optim/dist_scape.c's
 * SCAPE path (scape_begin, scape_c_bucket, scape_queue_bucket, scape_make_mask, scape_collect_next,
 * scape_norm_pass, scape_update_pass, scape_step, the SCAPE checkpoint blob) with r, m, masks and payload on the
 * GPU and cuda/scape.cuh's kernels doing the arithmetic, in the same order and with the same rounding, so that in
 * fp32 the master weights, m, r, masks and checkpoint blobs equal the host DistOptim's bit for bit (given the same
 * gradients and ranks; the g_hat norm is summed in another order, so the reported norm - and the clip factor,
 * when clipping bites - agree to the last bit of a double sum rounded to float, which in practice is all bits).
 * Included by cuda/dist.cu (one translation unit: it reuses that file's helpers); cuda/dist.cu's device_rules
 * hand --optimizer scape to scape_updater_create.
 *
 * Per step t (mirroring optim/dist_scape.c):
 *   first bucket (begin):  wait for M_t's all-gather (made at t-1), OR the owners' segments into the next-mask
 *                          words, swap it in as M_t; per bucket the payload offsets of M_t; K_b on the host (the
 *                          collectives need the counts) from the density M_t was made with, checked against the
 *                          device's counts at the step's one synchronisation (a mask loaded from a checkpoint is
 *                          counted instead: one stream sync)
 *   bucket_ready(b):       c = b1 m + (1-b1) g + r into the fp32 gradient buffer (c replaces g there, as on the
 *                          host) and c on M_t compacted into the payload (bucket b's part starts at the bucket's
 *                          element offset in bucket order, dist.c's bucket_off); then the averaging all-reduce of
 *                          K_b values: NCCL on the communication stream (sum, then / N), or host-staged MPI
 *                          (download on the communication stream, comm/comm.h's job), or nothing with one rank
 *   step():                (step 1 without a mask: c for all buckets, M_1 = all ones or the owners' top-k gathered
 *                          at once); wait for the payloads; sum g_hat^2 on M_t; the non-finite check of c (any
 *                          rank, one control all-reduce as dist.c); skip, or clip factor; the masked AdamS update
 *                          with r = c off the mask and 0 on it (compute stream); then on the communication stream,
 *                          overlapping the update and the next forward, the owners' top-k of |c| for M_{t+1} into
 *                          their segments and its all-gather (NCCL broadcasts there, or MPI from pinned memory),
 *                          collected at step t+1's first bucket, and the gradients zeroed once the top-k and the
 *                          update have read c, with dm.grads_free after it (cuda/device_model.h).
 * Streams: the compute stream (dm.stream) runs c and its compaction, the norm, the update and the masks' assembly;
 * the communication stream (cs, with one rank too) the payload collectives, the owners' top-k (u->topk is used
 * there only; the step-1 bootstrap's too, the compute stream then waits for it), the mask all-gather and the
 * zeroing of dm.grads; the copy stream (cps) the residual offload (below). The cross-stream orders of a step:
 *   ev_ready[b]    compute, after bucket b's c and payload -> cs, before its collective (world > 1)
 *   ev_comm        cs, after the last payload collective (NCCL) -> compute, before the norm
 *   ev_c           compute, once c is final (after the step's synchronisation; step 1: after all of c) -> cs,
 *                  before the owners' top-k
 *   ev_gather      cs, after the top-k and the broadcasts (NCCL) or the segment's download (MPI) -> compute,
 *                  before scape_dev_collect_next's OR of the segments into d_next
 *   ev_used        compute, after the update (the step's last read of dm.grads) -> cs, before zeroing dm.grads
 *   dm.grads_free  cs, after zeroing dm.grads -> the model's compute stream, before its next write into dm.grads
 * Step t+1's payload collectives queue on cs behind step t's top-k and zeroing (they need M_{t+1} anyway).
 * Masks on the device are uint32 words (cuda/scape.cuh); owner segments live word-aligned in d_seg (rank r at
 * seg_woff[r] words), so each owner's top-k writes whole words of its own, and an OR kernel moves each segment to
 * its (unaligned) bit offset own.lo[r] of the mask. On the host the segments are dist.c's byte layout (seg_off),
 * so the MPI all-gather moves the same bytes as the host path and the counters match.
 * Residual offload (UpdaterConfig.scape_offload_residual, SCAPE.md section 7): r lives in pinned host memory
 * (h_r) and never whole on the device. r is read once per step (by c, per bucket during backward) and written once
 * (by the update), so each slice passes through one of two device staging buffers (d_stage, the largest slice
 * each): for c, its r is copied in on the copy stream (cps) as soon as the buffer's previous user is done, which
 * prefetches slice k+1 while slice k's kernel runs; the update writes the slice's new r into a buffer, and the copy
 * stream takes it back to h_r. ev_stage_free[i] follows the last use of buffer i (kernel or copy) on whichever
 * stream; ev_stage_ready[i] the last hand-over. Same kernels (the per-slice variants), same arithmetic: results
 * equal those without offload bit for bit.
 * bf16 payload (--scape-payload bf16, optim/dist.h): each bucket's payload is rounded to bf16 on the
 * communication stream and averaged exactly as comm_iallreduce_avg_bf16 does (host-staged: that function; NCCL:
 * scape_nccl_allreduce_bf16, an all-to-all, the owner's mean kernel, broadcasts of the parts), the rounding errors
 * go to r in the update (cuda/scape.cuh); one rank rounds in place. Bitwise the host's in fp32.
 * ZeRO-1 (--zero 1, cuda/dist_scape_zero.cuh): m compact on this rank's part of the mask, beta1 m folded into r, the
 * payload reduce-scattered to the owners instead of all-reduced, the owners' norm sums in one control all-reduce,
 * the owners' masked update, then their m_t and p on M_t synchronised (two all-gathers of K values) before the next
 * mask's top-k is queued on cs (the next forward waits for the sync, not for the top-k); the branches below call it
 * where the step differs.
 * Mask statistics (sd_mask_stats_enable, sd_mask_stats: distopt_mask_stats_enable / distopt_mask_stats of
 * optim/dist.h, same values): rank 0 copies g_i per bucket while enabled, and at the step computes G_t (the top-k
 * of scape.cuh) and the per-slice popcounts and energies on the device (scape_mask_stats); the host only divides.
 * Jaccards equal dist.c's exactly; energies to the rounding of double sums added in another order. Nothing is
 * allocated or run while they are off.
 */

typedef struct {
    double ss;      /* sum of g_hat^2 on M_t */
    int bad;        /* some c was not finite */
    int pad;
} ScapeCtl;

typedef struct {
    Updater base;
    DeviceModel dm;
    UpdaterConfig cfg;
    const ParamTable *tab;
    OptimConfig opt;
    floatX *copy;          /* dm.params, or NULL in fp32 builds */
    int rank, world, nccl;
    size_t P;
    OwnerTable own;
    int nb;
    int *bn, **bslices;    /* per bucket: its slices in memory order (dist.c's payload order) */
    size_t *bucket_off;    /* per bucket: first payload index (elements of the earlier buckets) */
    ScapeBucketPlan *plan; /* per bucket */
    int *part_off, npart;  /* per bucket: its norm partials in d_part; total */
    float *d_m, *d_r;      /* (P) first moment (0 off M_t; NULL with ZeRO-1), residual (NULL with offload) */
    int offload;           /* residual offload: r in h_r, staged per slice through d_stage */
    float *h_r;            /* pinned (P) residual (offload) */
    float *d_stage[2];     /* (largest slice) staging buffers (offload) */
    int stage_next;        /* the buffer the next slice uses */
    cudaStream_t cps;      /* copy stream (offload) */
    cudaEvent_t ev_stage_free[2], ev_stage_ready[2];
    uint32_t *d_cur, *d_next; /* (scape_mask_words(P)) M_t and the gathered M_{t+1} */
    uint32_t *d_seg;       /* owner segments, word-aligned: rank r's at seg_woff[r] */
    size_t *seg_woff;
    uint8_t *h_seg;        /* pinned (world > 1, MPI): dist.c's segment bytes, rank r's at seg_off[r] */
    size_t *seg_bytes, *seg_off, seg_total;
    float *d_payload;      /* (P) compact payload by bucket */
    float *h_payload;      /* pinned (P) (world > 1, MPI) */
    int bf16;              /* --scape-payload bf16 (optim/dist.h: payload_bf16) */
    uint16_t *d_payload16; /* (P) bf16: the payload as sent, then b (world > 1) */
    float *d_qerr;         /* (P) bf16: the mean's rounding errors on this rank's parts, 0 elsewhere (world > 1) */
    uint16_t *d_recv16;    /* bf16, NCCL: one bucket's part of every rank (world * the largest part) */
    uint16_t *h_payload16; /* pinned (P) (bf16, world > 1, MPI) */
    float *h_qerr;         /* pinned (P) (bf16, world > 1, MPI) */
    long long *h_kb;       /* pinned (nb): K_b of the step in progress */
    long long *h_kb_dev;   /* pinned (nb): the device's own counts of K_b, to check the predicted ones */
    double cur_dens, next_dens; /* the density d_cur / d_next were made with (top-k), -1: unknown (loaded) */
    int kb_predicted;      /* h_kb of this step came from cur_dens, not from the device */
    double *d_part;        /* (npart) norm partials */
    ScapeCtl *d_ctl, *h_ctl; /* device / pinned */
    ScapeTopkWork topk;    /* the owners' top-k, used on cs only */
    int *bstate;           /* per bucket: 0 nothing, 1 c computed (step 1), 2 queued */
    CommHandle *bh;        /* MPI: per bucket, its payload all-reduce */
    CommHandle next_h;     /* MPI: the mask all-gather */
    int next_pending;      /* a mask all-gather was started and not yet collected */
    int step_begun, have_cur, have_next, swapped, last_t;
    size_t last_k;
    cudaStream_t cs;       /* communication stream: payload collectives, the owners' top-k, the gradients' zeroing */
    cudaEvent_t *ev_ready, ev_comm;
    cudaEvent_t ev_c;      /* compute stream, once c in dm.grads is final: cs waits for it before the owners' top-k */
    cudaEvent_t ev_gather; /* cs, after the owners' top-k (and NCCL's broadcasts): d_seg holds M_{t+1}'s segments */
    cudaEvent_t ev_used;   /* compute stream, after the step's last read of dm.grads: cs waits before zeroing it */
    /* SCAPE with ZeRO-1 (--zero 1; optim/dist_scape_zero.c, see the top of this file) */
    int zero;
    size_t mlo, mhi;       /* this rank's owned range */
    /* m compact (as the host's): this rank's m_{t-1} on its mask in memory order; see ScapeCompactM (scape.cuh) */
    float *d_mc, *d_mc_new; /* m, and the buffer the update writes m_t into */
    size_t mc_cap, mc_new_cap; /* their capacities (values) */
    int have_m;            /* m exists (after the first update or a load) */
    long long *d_mq;       /* (mo tiles + 1) mo's payload offsets for m's mask */
    long long Qm, Qcur;    /* where this rank's values start in memory order: m's mask, M_t */
    int *d_tile_mo;        /* (ntiles_all) each bucket tile's index in mo */
    int *bt0, *bt1;        /* per bucket: this rank's tiles in plan[b], [bt0, bt1) */
    int *tile_base, ntiles_all; /* per bucket: its first tile among all buckets' tiles; their number */
    int *tile_chunk;       /* (ntiles_all) the host's chunk (optim/dist_scape.c) of each tile */
    size_t nch;            /* the host's number of chunks */
    float *d_ez;           /* (P) bf16 payload: what the unsharded r holds on m's mask (the rounding losses), 0 off it */
    uint16_t *h_rs16;      /* pinned (bf16, MPI, world > 1): the owned bf16 means the reduce-scatters deliver */
    float *h_rs_err;       /* pinned (bf16, MPI, world > 1): their rounding errors */
    uint16_t *d_zrecv16;   /* (bf16, NCCL) the owner's receive buffer: world * min(zchunk, largest owned part) */
    size_t zchunk;         /* (bf16, NCCL) values of each owner's part reduced per round */
    double *d_tpart, *h_tpart; /* (ntiles_all) per-tile sums of g_hat^2: device, pinned */
    double *zred;          /* (nch + 1) the control all-reduce: per-chunk sums, then the bad-c flag */
    long long *h_sk;       /* (tab->n) M_t's count per slice */
    size_t *rs_k;          /* (nb * world) payload values per bucket and owner */
    size_t *rs_pre;        /* (nb) where this rank's values start in the bucket's payload */
    size_t *rs_off;        /* (nb) where the bucket's owned part goes in h_rs */
    float *h_rs;           /* pinned (MPI, world > 1): the owned parts the reduce-scatters deliver */
    size_t *kr;            /* (world) M_t's values per owner: the sync's counts */
    ScapeBucketPlan mo;    /* every slice in memory order: the sync's layout (rank r's values after the earlier ranks') */
    int *mo_t0;            /* (world + 1) rank r's tiles in mo: [mo_t0[r], mo_t0[r + 1]) */
    cudaEvent_t ev_zsync;  /* NCCL: compute -> cs before a sync all-gather, cs -> compute after it */
#ifdef ENABLE_NCCL
    ncclComm_t nc;
#endif
    /* mask statistics (DistMaskStats, rank 0): allocated by the first sd_mask_stats_enable(1), see scape_dev_stats */
    int st_on;             /* enabled for the following steps */
    int st_step;           /* st_on as it was when the step in progress began: g is being copied */
    int st_pending;        /* the last completed step's sums are on their way to h_st (ev_st) */
    int st_valid;          /* st holds the last completed step's values */
    int st_gprev_t;        /* step of d_st_gprev, -1 none */
    int st_have_mprev;     /* the pending step had M_{t-1} (else jaccard_m is NAN) */
    int st_have_gprev;     /* ... and G_{t-1} (else jaccard_g is NAN) */
    DistMaskStats st;
    int *st_slice;         /* (st_plan.nslices) the sparse slices, ParamTable order */
    double *st_jm, *st_em, *st_jg, *st_eg;
    ScapeBucketPlan st_plan;   /* tiles of the sparse slices */
    int *d_st_slice_tile;      /* device copy of st_plan.slice_tile */
    float *d_st_g;             /* (P) copy of this rank's g_i, made per bucket before c replaces it */
    uint32_t *d_st_gcur, *d_st_gprev; /* raw-gradient masks G_t, G_{t-1} */
    ScapeMaskStatsSums *d_st_part, *d_st_sums, *h_st; /* tile scratch; (2 n) per-slice sums, M then G; pinned */
    ScapeTopkWork st_topk;     /* sized for the largest sparse slice (the owners' topk covers owned ones only);
                                * G_t's top-k runs on the compute stream, so it has its own (topk is cs's) */
    cudaEvent_t ev_st;         /* after the sums' download */
} ScapeDev;

static ScapeDev *sdu(const void *p) { return (ScapeDev *)p; }

static int scape_slice_sparse(const ScapeDev *u, const ParamSlice *s) {
    return !(u->cfg.dist.exclude_norms && s->dense_only);
}

/* K_b of every bucket for the current mask, as the device counted them, into kb (pinned, nb); with sync = 1
 * waits for them. */
static void scape_fetch_counts(ScapeDev *u, long long *kb, int sync) {
    for (int b = 0; b < u->nb; b++) {
        if (u->plan[b].ntiles == 0) {
            kb[b] = 0;
            continue;
        }
        cudaCheck(cudaMemcpyAsync(&kb[b], scape_plan_count_ptr(&u->plan[b]), sizeof(long long), cudaMemcpyDeviceToHost,
                                  u->dm.stream));
    }
    if (sync) cudaCheck(cudaStreamSynchronize(u->dm.stream));
}

/* K_b without asking the device: a mask made by the owners' top-k at density d has exactly k_s = scape_k(d, |s|)
 * bits in every sparse slice and all |s| in the dense ones (SCAPE.md 9.4; all ones at d = 1). */
static void scape_predict_counts(ScapeDev *u, double dens) {
    for (int b = 0; b < u->nb; b++) {
        long long K = 0;
        for (int k = 0; k < u->bn[b]; k++) {
            const ParamSlice *sl = &u->tab->slices[u->bslices[b][k]];
            if (sl->numel) K += (long long)(scape_slice_sparse(u, sl) ? scape_k(dens, sl->numel) : sl->numel);
        }
        u->h_kb[b] = K;
    }
}

/* payload offsets of M_t in every bucket, and K_b on the host for the collectives: predicted from the density
 * the mask was made with (no synchronisation in backward; sd_step checks the prediction against the device's
 * counts at its one synchronisation), or for a mask loaded from a checkpoint, counted (one stream sync) */
static void scape_zero_counts(ScapeDev *u);
static void scape_offsets(ScapeDev *u) {
    for (int b = 0; b < u->nb; b++) scape_payload_offsets(&u->plan[b], u->d_cur, u->dm.stream);
    u->kb_predicted = u->cur_dens >= 0;
    if (u->zero) scape_zero_counts(u); /* per slice: the owners' counts too */
    else if (u->kb_predicted) scape_predict_counts(u, u->cur_dens);
    else if (u->world > 1) scape_fetch_counts(u, u->h_kb, 1);
}

/* d_cur <-> d_next, with the densities they were made with */
static void scape_swap_masks(ScapeDev *u) {
    uint32_t *tmp = u->d_cur;
    u->d_cur = u->d_next;
    u->d_next = tmp;
    const double td = u->cur_dens;
    u->cur_dens = u->next_dens;
    u->next_dens = td;
}

/* optim/dist_scape.c's scape_collect_next: wait for the all-gather of the mask made last step, assemble d_next on the compute
 * stream, which waits for ev_gather first (the owners' top-k and NCCL's broadcasts on cs; host-staged, the host
 * synchronised cs after the top-k already, and the other ranks' segments come from the host here). Every
 * scape_dev_make_mask is followed by one call of this, so a caller that then synchronises the compute stream
 * (save, load, the sync check, free) finds d_seg, d_next and d_cur complete and u->topk idle. */
static void scape_dev_collect_next(ScapeDev *u) {
    if (!u->next_pending) return;
    u->next_pending = 0;
    cudaStream_t s = u->dm.stream;
    cudaCheck(cudaStreamWaitEvent(s, u->ev_gather, 0));
    if (u->world > 1 && !u->nccl) {
        comm_wait(u->next_h);
        u->next_h = 0;
        for (int r = 0; r < u->world; r++)
            if (r != u->rank && u->seg_bytes[r])
                cudaCheck(cudaMemcpyAsync(u->d_seg + u->seg_woff[r], u->h_seg + u->seg_off[r], u->seg_bytes[r],
                                          cudaMemcpyHostToDevice, s));
    }
    cudaCheck(cudaMemsetAsync(u->d_next, 0, scape_mask_words((long long)u->P) * sizeof(uint32_t), s));
    for (int r = 0; r < u->world; r++)
        scape_or_segment(u->d_next, (long long)u->own.lo[r], u->d_seg + u->seg_woff[r],
                         (long long)(u->own.hi[r] - u->own.lo[r]), s);
    u->have_next = 1;
}

/* optim/dist_scape.c's scape_make_mask on the communication stream, which first waits for ev_c (the caller records it on the
 * compute stream once c is final in dm.grads; the compute stream may run on meanwhile, it only reads c): top-k
 * of |c| over this rank's owned slices at density dens into its segment, then the all-gather of all segments
 * (NCCL broadcasts on cs, or the own segment downloaded on cs for the host's), then ev_gather on cs; collected by
 * scape_dev_collect_next. */
static void scape_dev_make_mask(ScapeDev *u, double dens) {
    cudaStream_t cs = u->cs;
    const size_t base = u->own.lo[u->rank], n_mine = u->own.hi[u->rank] - base;
    uint32_t *mine = u->d_seg + u->seg_woff[u->rank];
    u->next_dens = dens;
    cudaCheck(cudaStreamWaitEvent(cs, u->ev_c, 0));
    if (n_mine)
        cudaCheck(cudaMemsetAsync(mine, 0, scape_mask_words((long long)n_mine) * sizeof(uint32_t), cs));
    for (int i = u->own.first[u->rank]; i < u->own.first[u->rank + 1]; i++) {
        const ParamSlice *sl = &u->tab->slices[i];
        if (!scape_slice_sparse(u, sl)) scape_mask_set_range(mine, (long long)(sl->offset - base), (long long)sl->numel, cs);
        else
            scape_topk_mask_gpu(mine, (long long)(sl->offset - base), u->dm.grads + sl->offset, (long long)sl->numel,
                                (long long)scape_k(dens, sl->numel), &u->topk, cs);
    }
    u->next_pending = 1;
    if (u->world == 1) {
        comm_stats_add(COMM_ALLGATHER, u->seg_total, 0.0); /* dist.c's one-rank all-gather: a call, no bytes */
    } else if (u->nccl) {
#ifdef ENABLE_NCCL
        ncclCheck(ncclGroupStart());
        for (int r = 0; r < u->world; r++) {
            size_t nw = (size_t)scape_mask_words((long long)(u->own.hi[r] - u->own.lo[r]));
            if (nw)
                ncclCheck(ncclBroadcast(u->d_seg + u->seg_woff[r], u->d_seg + u->seg_woff[r], nw * sizeof(uint32_t),
                                        ncclUint8, r, u->nc, cs));
        }
        ncclCheck(ncclGroupEnd());
        comm_stats_add(COMM_ALLGATHER, u->seg_total, 0.0);
#endif
    } else {
        stage_to_host(u->h_seg + u->seg_off[u->rank], mine, u->seg_bytes[u->rank], cs);
        u->next_h = comm_iallgatherv(u->h_seg, u->seg_bytes, 1);
    }
    cudaCheck(cudaEventRecord(u->ev_gather, cs));
}

/* cuda/dist_scape_zero.cuh, read after this file: SCAPE with ZeRO-1 */
static void scape_zero_comm_bucket(ScapeDev *u, int b, size_t K);
static void scape_zero_comm_bucket_bf16(ScapeDev *u, int b, size_t K);
static void scape_zero_receive(ScapeDev *u);
static void scape_zero_norm_enqueue(ScapeDev *u);
static double scape_zero_norm_finish(ScapeDev *u, int *bad);
static void scape_zero_update(ScapeDev *u, const ScapeUpdateArgs *step_args);
static void scape_zero_sync(ScapeDev *u, const ScapeUpdateArgs *a);

/* elements of bucket b (the most payload values it can have) */
static size_t scape_bucket_numel(const ScapeDev *u, int b) {
    return (b + 1 < u->nb ? u->bucket_off[b + 1] : u->P) - u->bucket_off[b];
}

/* the bf16 payload of bucket b (scape_dev_comm_bucket with --scape-payload bf16, world > 1): rounded on the
 * communication stream, then reduced by NCCL or by the host-staged comm_iallreduce_avg_bf16 */
static void scape_dev_comm_bucket_bf16(ScapeDev *u, int b, size_t K) {
    float *pay = u->d_payload + u->bucket_off[b];
    uint16_t *p16 = u->d_payload16 + u->bucket_off[b];
    scape_bf16_round(p16, pay, NULL, (long long)K, (long long)K, 0, u->cs);
    if (u->nccl) {
#ifdef ENABLE_NCCL
        if (K) nccl_allreduce_avg_bf16(u->nc, u->cs, u->rank, u->world, u->d_recv16, p16, u->d_qerr + u->bucket_off[b], K);
        comm_stats_add(COMM_ALLREDUCE, 2ull * K, 0.0);
#endif
        return;
    }
    uint16_t *h = u->h_payload16 + u->bucket_off[b];
    stage_to_host(h, p16, K * sizeof(uint16_t), u->cs);
    u->bh[b] = comm_iallreduce_avg_bf16(h, K, u->h_qerr + u->bucket_off[b]);
}

/* the payload all-reduce of bucket b (K_b values at bucket_off[b]), after its c and compaction on the stream */
static void scape_dev_comm_bucket(ScapeDev *u, int b) {
    u->bstate[b] = 2;
    if (u->world == 1) {
        /* bf16 with one rank: the mean is the rounded payload itself (no error) */
        if (u->bf16 && u->plan[b].ntiles)
            scape_bf16_round(NULL, u->d_payload + u->bucket_off[b], scape_plan_count_ptr(&u->plan[b]), 0,
                             (long long)scape_bucket_numel(u, b), 1, u->dm.stream);
        /* dist.c's one-rank all-reduce (reduce-scatter with ZeRO-1): a call, no bytes */
        comm_stats_add(u->zero ? COMM_REDUCE_SCATTER : COMM_ALLREDUCE, 0, 0.0);
        return;
    }
    const size_t K = (size_t)u->h_kb[b];
    float *pay = u->d_payload + u->bucket_off[b];
    cudaCheck(cudaEventRecord(u->ev_ready[b], u->dm.stream));
    cudaCheck(cudaStreamWaitEvent(u->cs, u->ev_ready[b], 0));
    if (u->zero) {
        if (u->bf16) scape_zero_comm_bucket_bf16(u, b, K);
        else scape_zero_comm_bucket(u, b, K);
        return;
    }
    if (u->bf16) {
        scape_dev_comm_bucket_bf16(u, b, K);
        return;
    }
    if (u->nccl) {
#ifdef ENABLE_NCCL
        if (K) {
            ncclCheck(ncclAllReduce(pay, pay, K, ncclFloat, ncclSum, u->nc, u->cs));
            div_f32(pay, (long)K, (float)u->world, u->cs);
        }
        comm_stats_add(COMM_ALLREDUCE, 4ull * K, 0.0);
#endif
        return;
    }
    float *h = u->h_payload + u->bucket_off[b];
    stage_to_host(h, pay, K * sizeof(float), u->cs);
    u->bh[b] = comm_iallreduce_avg_f32(h, K);
}

/* c = b1 m + (1-b1) g + r into dm.grads for bucket b, its values on mask compacted into the bucket's payload
 * (scape_momentum_compact); with offload slice by slice, r staged in from h_r on the copy stream */
static void scape_dev_momentum(ScapeDev *u, int b, const uint32_t *mask) {
    cudaStream_t s = u->dm.stream;
    float *payload = u->d_payload + u->bucket_off[b];
    const ScapeBucketPlan *pl = &u->plan[b];
    if (u->st_step) /* the statistics' g_i, before c overwrites it (optim/dist_scape.c's scape_c_bucket) */
        for (int k = 0; k < u->bn[b]; k++) {
            const ParamSlice *sl = &u->tab->slices[u->bslices[b][k]];
            if (sl->numel)
                cudaCheck(cudaMemcpyAsync(u->d_st_g + sl->offset, u->dm.grads + sl->offset, sl->numel * sizeof(float),
                                          cudaMemcpyDeviceToDevice, s));
        }
    if (!u->offload) {
        scape_momentum_compact<float>(u->dm.grads, payload, &u->d_ctl->bad, pl, u->dm.grads, u->zero ? NULL : u->d_m,
                                      u->d_r, mask, u->opt.beta1, s, u->d_ez);
        return;
    }
    for (int k = 0; k < pl->nslices; k++) {
        const ParamSlice *sl = &u->tab->slices[u->bslices[b][k]];
        if (sl->numel == 0) continue;
        const int i = u->stage_next;
        u->stage_next ^= 1;
        float *st = u->d_stage[i];
        /* copy stream: once the buffer's last user is done, r of this slice in (a prefetch: the host runs ahead) */
        cudaCheck(cudaStreamWaitEvent(u->cps, u->ev_stage_free[i], 0));
        cudaCheck(cudaMemcpyAsync(st, u->h_r + sl->offset, sl->numel * sizeof(float), cudaMemcpyHostToDevice, u->cps));
        cudaCheck(cudaEventRecord(u->ev_stage_ready[i], u->cps));
        cudaCheck(cudaStreamWaitEvent(s, u->ev_stage_ready[i], 0));
        /* c_slice = dm.grads + offset: c lands in dm.grads[j] (the kernel indexes c and r by j - offset) */
        scape_momentum_compact_slice<float>(u->dm.grads + sl->offset, payload, &u->d_ctl->bad, pl, k, u->dm.grads,
                                            u->d_m, st, mask, u->opt.beta1, s);
        cudaCheck(cudaEventRecord(u->ev_stage_free[i], s));
    }
}

/* the masked update of bucket b (scape_update); with offload slice by slice, the new r written into a staging
 * buffer and taken back to h_r on the copy stream */
static void scape_dev_update(ScapeDev *u, int b, const ScapeUpdateArgs *step_args) {
    cudaStream_t s = u->dm.stream;
    ScapeUpdateArgs ab = *step_args;
    if (u->bf16) {
        ab.payload_bf16 = 1;
        ab.fN = (float)u->world;
        ab.qerr = u->world > 1 ? u->d_qerr + u->bucket_off[b] : NULL;
    }
    const ScapeUpdateArgs *a = &ab;
    const float *payload = u->d_payload + u->bucket_off[b];
    const ScapeBucketPlan *pl = &u->plan[b];
    if (!u->offload) {
        scape_update(u->dm.master, u->copy, u->d_m, u->d_r, u->dm.grads, pl, payload, u->d_cur, a, s);
        return;
    }
    for (int k = 0; k < pl->nslices; k++) {
        const ParamSlice *sl = &u->tab->slices[u->bslices[b][k]];
        if (sl->numel == 0) continue;
        const int i = u->stage_next;
        u->stage_next ^= 1;
        float *st = u->d_stage[i];
        cudaCheck(cudaStreamWaitEvent(s, u->ev_stage_free[i], 0)); /* its last copy out has finished */
        /* every element of the slice gets its new r (0 on the mask, c off it), so nothing is copied in */
        scape_update_slice(u->dm.master, u->copy, u->d_m, st, u->dm.grads + sl->offset, pl, k, payload, u->d_cur, a, s);
        cudaCheck(cudaEventRecord(u->ev_stage_ready[i], s));
        cudaCheck(cudaStreamWaitEvent(u->cps, u->ev_stage_ready[i], 0));
        cudaCheck(cudaMemcpyAsync(u->h_r + sl->offset, st, sl->numel * sizeof(float), cudaMemcpyDeviceToHost, u->cps));
        cudaCheck(cudaEventRecord(u->ev_stage_free[i], u->cps));
    }
}

/* scape_c_bucket + scape_queue_bucket with the mask known: c into dm.grads, its masked values into the payload */
static void scape_dev_c_and_queue(ScapeDev *u, int b) {
    scape_dev_momentum(u, b, u->d_cur);
    scape_dev_comm_bucket(u, b);
}

/* optim/dist_scape.c's scape_begin: at the step's first bucket M_t becomes the current mask */
static void scape_dev_begin(ScapeDev *u) {
    u->step_begun = 1;
    u->swapped = 0;
    u->st_step = u->st_on;
    /* the last step zeroed dm.grads on cs: the model's writes waited for that (cuda/device_model.h), and so does
     * this step's own use of dm.grads on the compute stream, whatever the model wrote */
    cudaCheck(cudaStreamWaitEvent(u->dm.stream, u->dm.grads_free, 0));
    cudaCheck(cudaMemsetAsync(u->d_ctl, 0, sizeof(ScapeCtl), u->dm.stream)); /* the step's non-finite flag */
    scape_dev_collect_next(u);
    if (u->have_next) {
        scape_swap_masks(u);
        u->have_next = 0;
        u->have_cur = 1;
        u->swapped = 1;
    }
    if (u->have_cur) scape_offsets(u);
}

static void sd_bucket_ready(void *ctx, int bucket) {
    ScapeDev *u = sdu(ctx);
    if (bucket < 0 || bucket >= u->nb) fatal("device SCAPE: bucket %d outside 0..%d", bucket, u->nb - 1);
    if (u->bstate[bucket]) return;
    if (!u->step_begun) scape_dev_begin(u);
    if (!u->have_cur) return; /* step 1: the mask is made from all of c in step() */
    scape_dev_c_and_queue(u, bucket);
}

/* optim/dist.c's dist_end_step: dm.grads zeroed on the communication stream, after the compute stream's reads of this step
 * (ev_used: the update's c, the statistics) and after whatever cs has queued (the owners' top-k reads c there),
 * then dm.grads_free recorded on cs for the model's next writes (cuda/device_model.h); the buckets unqueued. */
static void scape_dev_end_step(ScapeDev *u) {
    cudaCheck(cudaEventRecord(u->ev_used, u->dm.stream));
    cudaCheck(cudaStreamWaitEvent(u->cs, u->ev_used, 0));
    cudaCheck(cudaMemsetAsync(u->dm.grads, 0, u->P * sizeof(float), u->cs));
    cudaCheck(cudaEventRecord(u->dm.grads_free, u->cs));
    for (int b = 0; b < u->nb; b++) {
        u->bstate[b] = 0;
        u->bh[b] = 0;
    }
    u->step_begun = 0;
}

/* cuda/dist_mask_stats.cuh, read after this file: the statistics of step t, enqueued by sd_step */
static void scape_dev_stats(ScapeDev *u, int t, int have_mprev);

/* ---- the step ---- */

/* optim/dist_scape.c's scape_step on the device */
static int sd_step(Updater *base, int t, float lr, float *grad_norm) {
    ScapeDev *u = sdu(base);
    if (t < 1) fatal("distopt_step: step %d < 1; steps count from 1", t);
    cudaStream_t s = u->dm.stream;
    const float b1 = u->opt.beta1;
    const DistConfig *dc = &u->cfg.dist;
    u->st_valid = 0;
    u->st_pending = 0;
    if (!u->step_begun) scape_dev_begin(u);
    int bootstrapped = 0;
    if (!u->have_cur) {
        /* first step: c for everything (an empty mask: nothing compacted), then M_1 = all ones (d(1) = 1) or the
         * owners' top-k, gathered now */
        cudaCheck(cudaMemsetAsync(u->d_cur, 0, scape_mask_words((long long)u->P) * sizeof(uint32_t), s));
        for (int b = 0; b < u->nb; b++) {
            scape_dev_momentum(u, b, u->d_cur);
            u->bstate[b] = 1;
        }
        double d1 = dist_density(dc, t);
        if (d1 >= 1.0) {
            scape_mask_set_range(u->d_cur, 0, (long long)u->P, s);
            u->cur_dens = 1.0;
        } else {
            cudaCheck(cudaEventRecord(u->ev_c, s));
            scape_dev_make_mask(u, d1);
            scape_dev_collect_next(u); /* the compute stream waits for the top-k: M_1 is needed now */
            scape_swap_masks(u);
            u->have_next = 0;
        }
        u->have_cur = 1;
        bootstrapped = 1;
        scape_offsets(u);
    }
    for (int b = 0; b < u->nb; b++) {
        if (u->bstate[b] == 0) scape_dev_c_and_queue(u, b);
        else if (u->bstate[b] == 1) {
            scape_gather(u->d_payload + u->bucket_off[b], &u->plan[b], u->dm.grads, u->d_cur, s);
            scape_dev_comm_bucket(u, b);
        }
    }
    /* the averaged payloads, ordered before the norm and the update */
    if (u->world > 1 && u->nccl) {
        cudaCheck(cudaEventRecord(u->ev_comm, u->cs));
        cudaCheck(cudaStreamWaitEvent(s, u->ev_comm, 0));
    } else if (u->world > 1 && u->zero) {
        scape_zero_receive(u);
    } else if (u->world > 1) {
        for (int b = 0; b < u->nb; b++) {
            comm_wait(u->bh[b]);
            const size_t K = (size_t)u->h_kb[b], o = u->bucket_off[b];
            if (!K) continue;
            if (u->bf16) {
                cudaCheck(cudaMemcpyAsync(u->d_payload16 + o, u->h_payload16 + o, K * sizeof(uint16_t),
                                          cudaMemcpyHostToDevice, s));
                cudaCheck(cudaMemcpyAsync(u->d_qerr + o, u->h_qerr + o, K * sizeof(float), cudaMemcpyHostToDevice, s));
            } else {
                cudaCheck(cudaMemcpyAsync(u->d_payload + o, u->h_payload + o, K * sizeof(float), cudaMemcpyHostToDevice, s));
            }
        }
    }
    if (u->world > 1 && u->bf16) /* b in bf16 -> the fp32 payload the norm and the update read (ZeRO-1: the owned part) */
        for (int b = 0; b < u->nb; b++) {
            const size_t o = u->bucket_off[b] + (u->zero ? u->rs_pre[b] : 0);
            const long long n = u->zero ? (long long)u->rs_k[(size_t)b * (size_t)u->world + (size_t)u->rank] : u->h_kb[b];
            scape_bf16_widen(u->d_payload + o, u->d_payload16 + o, n, s);
        }

    /* g_hat = (m_t - beta1 m_{t-1}) / (1 - beta1) on M_t; the sum of its squares (scape_norm_pass) */
    if (u->zero) { /* the owners' tiles, summed per chunk on the host (cuda/dist_scape_zero.cuh) */
        scape_zero_norm_enqueue(u);
    } else {
        for (int b = 0; b < u->nb; b++)
            scape_norm_partial(u->d_part + u->part_off[b], &u->plan[b], u->d_payload + u->bucket_off[b], u->d_m,
                               u->d_cur, b1, s);
        if (u->npart) scape_norm_finish(&u->d_ctl->ss, u->d_part, u->npart, s);
    }
    cudaCheck(cudaMemcpyAsync(u->h_ctl, u->d_ctl, sizeof(ScapeCtl), cudaMemcpyDeviceToHost, s));
    if (u->kb_predicted) scape_fetch_counts(u, u->h_kb_dev, 0);
    else if (u->world == 1) scape_fetch_counts(u, u->h_kb, 0);
    cudaCheck(cudaStreamSynchronize(s));
    size_t K = 0;
    for (int b = 0; b < u->nb; b++) {
        if (u->kb_predicted && u->h_kb_dev[b] != u->h_kb[b])
            fatal("device SCAPE: step %d's mask has %lld payload values in bucket %d where its density %g implies %lld "
                  "(an internal error: the mask is not the owners' exact top-k); please report it", t,
                  u->h_kb_dev[b], b, u->cur_dens, u->h_kb[b]);
        K += (size_t)u->h_kb[b];
    }
    /* a non-finite c anywhere (any rank) skips the step, as dist.c's control all-reduce decides (with ZeRO-1 the
     * same all-reduce brings the owners' norm sums) */
    float norm;
    int64_t bad = u->h_ctl->bad ? 1 : 0;
    if (u->zero) {
        int zbad = 0;
        norm = (float)sqrt(scape_zero_norm_finish(u, &zbad));
        bad = zbad;
    } else {
        norm = (float)sqrt(u->h_ctl->ss);
        comm_allreduce_max_i64(&bad, 1);
    }
    if (bad) norm = NAN;
    *grad_norm = norm;
    if (!isfinite(norm)) {
        /* skipped: the masks as before the step, so m stays supported on d_cur */
        if (bootstrapped) u->have_cur = 0;
        else if (u->swapped) {
            scape_swap_masks(u);
            u->have_next = 1;
        }
        scape_dev_end_step(u);
        return 1;
    }
    float sc = 1.0f;
    int clipped = dc->clip > 0 && norm > dc->clip;
    if (clipped) sc = dc->clip / (norm + 1e-6f);

    cudaCheck(cudaEventRecord(u->ev_c, s)); /* c is final (the compute stream only reads it from here) */
    if (u->st_step) scape_dev_stats(u, t, u->swapped && !bootstrapped);

    /* error feedback, then AdamS on M_t and decay only elsewhere (SCAPE.md section 3 items 3-7) */
    ScapeUpdateArgs a = scape_update_args(t, lr, b1, u->opt.beta2, u->opt.eps, u->opt.weight_decay, clipped, sc,
                                          u->cfg.seed);
    if (u->zero) scape_zero_update(u, &a);
    else
        for (int b = 0; b < u->nb; b++) scape_dev_update(u, b, &a);
    /* ZeRO-1: the owners' m_t and p on M_t to every rank, queued on cs before the top-k below so that the next
     * forward waits for the sync only, not for the top-k */
    if (u->zero) scape_zero_sync(u, &a);
    /* next mask from |c| (c stays in dm.grads until end_step zeroes it after the top-k) on the communication
     * stream, after ev_c: it overlaps the update, and its all-gather the next forward/backward */
    scape_dev_make_mask(u, dist_density(dc, t + 1));
    u->last_k = K;
    scape_dev_end_step(u);
    u->last_t = t;
    return 0;
}

static float sd_density(const Updater *base, int t) {
    const DistConfig *dc = &sdu(base)->cfg.dist;
    return (float)dist_density(dc, t);
}

/*
 * cuda/dist_mask_stats.cuh - mask statistics of the device SCAPE (optim/dist_mask_stats.c on the device, the same
 * DistMaskStats values): while enabled, rank 0 copies g_i per bucket, and at the step computes G_t (scape.cuh's
 * top-k) and the per-slice popcounts and energies on the device (scape_mask_stats); the host only divides.
 * Jaccards equal the host's exactly; energies to the rounding of double sums added in another order. Nothing is
 * allocated or run while they are off. Part of cuda/dist.cu's translation unit, after cuda/dist_scape.cuh (ScapeDev).
 */
/* distopt_mask_stats_enable on the device: rank 0 only; the first enable allocates what the statistics need (a
 * copy of g (P floats), two masks, a top-k scratch for the largest sparse slice, the sums), nothing before. */
static void sd_mask_stats_enable(Updater *base, int on) {
    ScapeDev *u = sdu(base);
    u->st_on = on && u->rank == 0;
    if (!u->st_on || u->st_slice) return;
    const ParamTable *tab = u->tab;
    int n = 0;
    long long maxn = 1;
    u->st_slice = (int *)xmalloc((size_t)(tab->n ? tab->n : 1) * sizeof(int), "mask statistics");
    for (int i = 0; i < tab->n; i++)
        if (scape_slice_sparse(u, &tab->slices[i])) {
            u->st_slice[n++] = i;
            if ((long long)tab->slices[i].numel > maxn) maxn = (long long)tab->slices[i].numel;
        }
    const size_t nn = (size_t)(n ? n : 1);
    u->st_jm = (double *)xmalloc(nn * sizeof(double), "mask statistics");
    u->st_em = (double *)xmalloc(nn * sizeof(double), "mask statistics");
    u->st_jg = (double *)xmalloc(nn * sizeof(double), "mask statistics");
    u->st_eg = (double *)xmalloc(nn * sizeof(double), "mask statistics");
    scape_plan_build(&u->st_plan, tab, u->st_slice, n);
    u->d_st_slice_tile = (int *)dmalloc((size_t)(n + 1) * sizeof(int), "mask statistics");
    cudaCheck(cudaMemcpy(u->d_st_slice_tile, u->st_plan.slice_tile, (size_t)(n + 1) * sizeof(int),
                         cudaMemcpyHostToDevice));
    const size_t wb = (size_t)scape_mask_words((long long)u->P) * sizeof(uint32_t);
    u->d_st_g = (float *)dmalloc(u->P * sizeof(float), "the mask statistics' gradient copy");
    u->d_st_gcur = (uint32_t *)dmalloc(wb, "a mask statistics mask");
    u->d_st_gprev = (uint32_t *)dmalloc(wb, "a mask statistics mask");
    u->d_st_part = (ScapeMaskStatsSums *)dmalloc((size_t)(u->st_plan.ntiles ? u->st_plan.ntiles : 1) *
                                                 sizeof(ScapeMaskStatsSums), "mask statistics");
    u->d_st_sums = (ScapeMaskStatsSums *)dmalloc(2 * nn * sizeof(ScapeMaskStatsSums), "mask statistics");
    u->h_st = (ScapeMaskStatsSums *)hmalloc_pinned(2 * nn * sizeof(ScapeMaskStatsSums), "mask statistics");
    scape_topk_work_create(&u->st_topk, maxn);
    cudaCheck(cudaEventCreateWithFlags(&u->ev_st, cudaEventDisableTiming));
    u->st_gprev_t = -1;
}

/* optim/dist_mask_stats.c's stats_scape at step t on the device, enqueued after the skip decision and before the update: G_t =
 * top-k_s of |g_i| (the density in force at t) per sparse slice from d_st_g, then per slice the popcounts and
 * energies of (M_t, M_{t-1}, c_i) and (G_t, G_{t-1}, g_i) (c_i is still in dm.grads; M_{t-1} is d_next after
 * this step's swap, have_mprev) and their download; sd_mask_stats waits for it. G_t becomes G_{t-1}. */
static void scape_dev_stats(ScapeDev *u, int t, int have_mprev) {
    cudaStream_t s = u->dm.stream;
    const DistConfig *dc = &u->cfg.dist;
    const int n = u->st_plan.nslices;
    const double dens = dist_density(dc, t);
    cudaCheck(cudaMemsetAsync(u->d_st_gcur, 0, (size_t)scape_mask_words((long long)u->P) * sizeof(uint32_t), s));
    for (int k = 0; k < n; k++) {
        const ParamSlice *sl = &u->tab->slices[u->st_slice[k]];
        scape_topk_mask_gpu(u->d_st_gcur, (long long)sl->offset, u->d_st_g + sl->offset, (long long)sl->numel,
                            (long long)scape_k(dens, sl->numel), &u->st_topk, s);
    }
    u->st_have_mprev = have_mprev;
    u->st_have_gprev = u->st_gprev_t == t - 1;
    scape_mask_stats(u->d_st_sums, u->d_st_part, &u->st_plan, u->d_st_slice_tile, u->d_cur,
                     have_mprev ? u->d_next : NULL, u->dm.grads, s);
    scape_mask_stats(u->d_st_sums + n, u->d_st_part, &u->st_plan, u->d_st_slice_tile, u->d_st_gcur,
                     u->st_have_gprev ? u->d_st_gprev : NULL, u->d_st_g, s);
    if (n) cudaCheck(cudaMemcpyAsync(u->h_st, u->d_st_sums, 2 * (size_t)n * sizeof(ScapeMaskStatsSums),
                                     cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaEventRecord(u->ev_st, s));
    uint32_t *tmp = u->d_st_gprev; /* stream order: the kernels above read G_{t-1} before anything rewrites it */
    u->d_st_gprev = u->d_st_gcur;
    u->d_st_gcur = tmp;
    u->st_gprev_t = t;
    u->st.step = t;
    u->st_pending = 1;
}

/* dist.h's |A n B| / |A u B| (1 when the union is empty) and kept / all energy (1 when x is 0 on the slice) */
static double scape_dev_jaccard(const ScapeMaskStatsSums *x) { return x->uni ? (double)x->inter / (double)x->uni : 1.0; }
static double scape_dev_energy(const ScapeMaskStatsSums *x) { return x->all > 0 ? x->kept / x->all : 1.0; }

/* distopt_mask_stats on the device: the last completed step's statistics (waits for their download the first
 * time it is asked), or NULL (off, skipped step, ranks other than 0). Means by optim/dist_mask_stats.c's distopt_mask_stats_means. */
static const DistMaskStats *sd_mask_stats(const Updater *base) {
    ScapeDev *u = sdu(base);
    if (u->st_pending) {
        cudaCheck(cudaEventSynchronize(u->ev_st));
        const int n = u->st_plan.nslices;
        for (int k = 0; k < n; k++) {
            u->st_jm[k] = u->st_have_mprev ? scape_dev_jaccard(&u->h_st[k]) : NAN;
            u->st_em[k] = scape_dev_energy(&u->h_st[k]);
            u->st_jg[k] = u->st_have_gprev ? scape_dev_jaccard(&u->h_st[n + k]) : NAN;
            u->st_eg[k] = scape_dev_energy(&u->h_st[n + k]);
        }
        u->st.n = n;
        u->st.slice = u->st_slice;
        u->st.jaccard_m = u->st_jm;
        u->st.energy_m = u->st_em;
        u->st.jaccard_g = u->st_jg;
        u->st.energy_g = u->st_eg;
        distopt_mask_stats_means(&u->st, u->tab);
        u->st_pending = 0;
        u->st_valid = 1;
    }
    return u->st_valid ? &u->st : NULL;
}

/* frees what sd_mask_stats_enable allocated (nothing if it never was); the compute stream must be idle */
static void scape_dev_stats_free(ScapeDev *u) {
    if (!u->st_slice) return;
    cudaCheck(cudaEventDestroy(u->ev_st));
    scape_topk_work_free(&u->st_topk);
    scape_plan_free(&u->st_plan);
    cudaCheck(cudaFree(u->d_st_slice_tile));
    cudaCheck(cudaFree(u->d_st_g));
    cudaCheck(cudaFree(u->d_st_gcur));
    cudaCheck(cudaFree(u->d_st_gprev));
    cudaCheck(cudaFree(u->d_st_part));
    cudaCheck(cudaFree(u->d_st_sums));
    cudaCheck(cudaFreeHost(u->h_st));
    free(u->st_slice); free(u->st_jm); free(u->st_em); free(u->st_jg); free(u->st_eg);
}

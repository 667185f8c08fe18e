/*
 * optim/dist_mask_stats.c - mask stability for SCAPE and topk-ef (DistMaskStats in optim/dist.h): per sparse slice
 * the Jaccard of consecutive masks and the energy a mask keeps, for SCAPE's first-moment mask M_t and for the
 * raw-gradient top-k G_t it is compared with (topk-ef: its own selection). Rank 0 only, nothing while off.
 * Not for: choosing masks (dist_scape.c, dist_topk_ef.c); the device version is cuda/dist_mask_stats.cuh.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_impl.h"

/* |A n B| / |A u B| over bits [lo, hi) (1 when the union is empty) */
static double mask_jaccard(const uint8_t *a, const uint8_t *b, size_t lo, size_t hi) {
    uint64_t in = 0, un = 0;
    for (size_t j = lo; j < hi; j += 64) {
        size_t n = hi - j < 64 ? hi - j : 64;
        uint64_t full = n == 64 ? ~0ull : (1ull << n) - 1;
        uint64_t x = mask_load64(a, j) & full, y = mask_load64(b, j) & full;
        in += (uint64_t)__builtin_popcountll(x & y);
        un += (uint64_t)__builtin_popcountll(x | y);
    }
    return un ? (double)in / (double)un : 1.0;
}

/* sum of x^2 on the mask over sum of x^2, over [lo, hi), in double (1 when x is 0 there) */
static double mask_energy(const uint8_t *M, const float *x, size_t lo, size_t hi) {
    double kept = 0, all = 0;
    for (size_t j = lo; j < hi; j++) {
        double v = (double)x[j] * (double)x[j];
        all += v;
        if (mask_get(M, j)) kept += v;
    }
    return all > 0 ? kept / all : 1.0;
}

extern const UpdateRule rule_scape;

/* the sparse rules (SCAPE, topk-ef) have masks to compare */
void distopt_mask_stats_enable(DistOptim *d, int on) {
    d->st_on = on && d->rank == 0 && d->rule->sparse;
    if (!d->st_on || d->st_slice) return;
    int n = d->tab->n;
    d->st_slice = xmalloc((size_t)n * sizeof(int), "mask statistics");
    d->st_jm = xmalloc((size_t)n * sizeof(double), "mask statistics");
    d->st_em = xmalloc((size_t)n * sizeof(double), "mask statistics");
    d->st_jg = xmalloc((size_t)n * sizeof(double), "mask statistics");
    d->st_eg = xmalloc((size_t)n * sizeof(double), "mask statistics");
    d->st_gprev = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "mask statistics");
    d->st_gprev_t = -1;
    if (d->rule == &rule_scape) {
        size_t maxn = 1;
        for (int i = 0; i < n; i++)
            if (d->tab->slices[i].numel > maxn) maxn = d->tab->slices[i].numel;
        d->st_g = xmalloc(d->P * sizeof(float), "mask statistics");
        d->st_gcur = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "mask statistics");
        d->st_tmp = xmalloc(maxn * sizeof(uint32_t), "mask statistics");
    }
}

const DistMaskStats *distopt_mask_stats(const DistOptim *d) { return d->st_valid ? &d->st : NULL; }

void distopt_mask_stats_means(DistMaskStats *st, const ParamTable *tab) {
    double w = 0, sjm = 0, sem = 0, sjg = 0, seg = 0;
    for (int k = 0; k < st->n; k++) {
        double numel = (double)tab->slices[st->slice[k]].numel;
        if (st->jaccard_m) sjm += numel * st->jaccard_m[k];
        if (st->energy_m) sem += numel * st->energy_m[k];
        if (st->jaccard_g) sjg += numel * st->jaccard_g[k];
        if (st->energy_g) seg += numel * st->energy_g[k];
        w += numel;
    }
    st->mean_jaccard_m = st->jaccard_m && w > 0 ? sjm / w : NAN;
    st->mean_energy_m = st->energy_m && w > 0 ? sem / w : NAN;
    st->mean_jaccard_g = st->jaccard_g && w > 0 ? sjg / w : NAN;
    st->mean_energy_g = st->energy_g && w > 0 ? seg / w : NAN;
}


void stats_compute(DistOptim *d, int t, const uint8_t *gmask, const float *gvec, const uint8_t *mcur,
                   const uint8_t *mprev, const float *c) {
    int scape = mcur != NULL;
    int have_gprev = d->st_gprev_t == t - 1;
    int n = 0;
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        if (!dist_slice_sparse(d, s)) continue;
        size_t lo = s->offset, hi = s->offset + s->numel;
        d->st_slice[n] = i;
        d->st_jg[n] = have_gprev ? mask_jaccard(gmask, d->st_gprev, lo, hi) : NAN;
        d->st_eg[n] = mask_energy(gmask, gvec, lo, hi);
        if (scape) {
            d->st_jm[n] = mprev ? mask_jaccard(mcur, mprev, lo, hi) : NAN;
            d->st_em[n] = mask_energy(mcur, c, lo, hi);
        }
        n++;
    }
    d->st.step = t;
    d->st.n = n;
    d->st.slice = d->st_slice;
    d->st.jaccard_m = scape ? d->st_jm : NULL;
    d->st.energy_m = scape ? d->st_em : NULL;
    d->st.jaccard_g = d->st_jg;
    d->st.energy_g = d->st_eg;
    distopt_mask_stats_means(&d->st, d->tab);
    memcpy(d->st_gprev, gmask, mask_bytes(d->P));
    d->st_gprev_t = t;
    d->st_valid = 1;
}

void stats_scape(DistOptim *d, int t, const uint8_t *mcur, const uint8_t *mprev) {
    double dens = dist_density(&d->cfg, t);
    memset(d->st_gcur, 0, mask_bytes(d->P));
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        if (!dist_slice_sparse(d, s)) continue;
        scape_topk_mask(d->st_g + s->offset, s->numel, scape_k(dens, s->numel), d->st_gcur, s->offset, d->st_tmp);
    }
    stats_compute(d, t, d->st_gcur, d->st_g, mcur, mprev, d->grads);
}

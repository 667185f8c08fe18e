/*
 * optim/dist_topk_ef.c - the baseline SCAPE is compared with (--optimizer topk-ef): per-slice top-k of each rank's
 * raw gradient plus error feedback, exchanged as (index, value) pairs on one all-gather per bucket, and their mean
 * fed into dense AdamW. Formulas and sources at distopt_create in optim/dist.h. Unlike SCAPE's, the selections
 * differ per rank, so the support of the mean grows with N (the "fill-in") and the indices go on the wire.
 * State (TopkState below): e_i, m, v (AdamW's, P each), this rank's selection S_t, every rank's pairs by bucket;
 * DistOptim's stage holds acc_i (P, flat). Its blob: e, m, v (dist_state.c's dist_emv_save).
 * Not for: top-k itself (scape.c), AdamW (optim.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_impl.h"

/* topk-ef's own state (DistOptim's state): e_i, m, v (EmvState, first); this rank's selection S_t (P bits) and
 * whether a completed step made it (sel_valid); every rank's pairs by bucket, bucket b's world parts of K_b pairs
 * from world * pair_off[b] (pair_off[b]: sum of K_b' over earlier buckets; pairs_cap allocated); the step whose
 * buckets are on the wire (cur_t, -1 none); the top-k scratch (the largest slice). */
typedef struct {
    EmvState emv;
    uint8_t *sel;
    int sel_valid;
    TopkPair *pairs;
    size_t pairs_cap, *pair_off;
    int cur_t;
    uint32_t *topk_tmp;
} TopkState;
static inline TopkState *topk(const DistOptim *d) { return (TopkState *)d->state; }

/* e, AdamW's m and v, the selection bits and the top-k scratch; the pairs buffer grows at the first step. */
static void topk_init(DistOptim *d, size_t owned_total) {
    const ParamTable *tab = d->tab;
    d->state = xcalloc(1, sizeof(TopkState), "topk-ef state");
    dist_emv_init(d);
    topk(d)->sel = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "topk-ef selection");
    topk(d)->pair_off = xcalloc((size_t)d->nb, sizeof(size_t), "topk-ef bucket offsets");
    size_t maxn = 1;
    for (int i = 0; i < tab->n; i++)
        if (tab->slices[i].numel > maxn) maxn = tab->slices[i].numel;
    topk(d)->topk_tmp = xmalloc(maxn * sizeof(uint32_t), "top-k scratch");
}

/* Start of step t's communication: K_b per bucket from the density at t, room for the all-gathers, S_t cleared. */
static void topk_begin(DistOptim *d, int t) {
    double dens = dist_density(&d->cfg, t);
    size_t K = 0;
    for (int b = 0; b < d->nb; b++) {
        topk(d)->pair_off[b] = K;
        size_t kb = 0;
        for (int k = 0; k < d->bn[b]; k++) {
            const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
            kb += dist_slice_sparse(d, s) ? scape_k(dens, s->numel) : s->numel;
        }
        d->bucket_k[b] = kb;
        K += kb;
    }
    size_t need = K * (size_t)d->world;
    if (need > topk(d)->pairs_cap) { /* nothing is in flight at a step's start, so the buffer may move */
        free(topk(d)->pairs);
        topk(d)->pairs = xmalloc((need ? need : 1) * sizeof(TopkPair), "topk-ef all-gather buffer");
        topk(d)->pairs_cap = need;
    }
    memset(topk(d)->sel, 0, mask_bytes(d->P));
    topk(d)->cur_t = t;
    d->step_begun = 1;
}

/* acc = e + g over bucket b into stage, S_t of its slices, this rank's pairs, and the bucket's all-gather. */
static void topk_queue_bucket(DistOptim *d, int b) {
    double dens = dist_density(&d->cfg, topk(d)->cur_t);
    float *acc = d->stage;
    TopkPair *all = topk(d)->pairs + (size_t)d->world * topk(d)->pair_off[b];
    TopkPair *out = all + (size_t)d->rank * d->bucket_k[b];
    size_t q = 0;
    for (int k = 0; k < d->bn[b]; k++) {
        const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
        size_t lo = s->offset, hi = s->offset + s->numel;
        for (size_t j = lo; j < hi; j++) acc[j] = topk(d)->emv.e[j] + d->grads[j];
        if (!dist_slice_sparse(d, s)) mask_set_range(topk(d)->sel, lo, s->numel);
        else scape_topk_mask(acc + lo, s->numel, scape_k(dens, s->numel), topk(d)->sel, lo, topk(d)->topk_tmp);
        for (size_t j = lo; j < hi; j++)
            if (mask_get(topk(d)->sel, j)) out[q++] = (TopkPair){(uint32_t)j, acc[j]};
    }
    if (q != d->bucket_k[b]) fatal("topk-ef: bucket %d selected %zu coordinates, expected %zu", b, q, d->bucket_k[b]);
    d->bh[b] = comm_iallgather(all, d->bucket_k[b], sizeof(TopkPair));
    d->bstate[b] = 2;
}

/* The bucket hand-off (distopt_bucket_ready). The step number is not passed here: it is the one after the last
 * completed step; topk_step redoes the selection if the loop's t differs (after a skipped step). */
static void topk_bucket_ready(DistOptim *d, int b) {
    if (!d->step_begun) topk_begin(d, d->last_t + 1);
    topk_queue_bucket(d, b);
}

/* Step t: the buckets backward did not send, the wait, the mean of every rank's pairs in rank order, the skip
 * decision (any rank's non-finite acc), statistics, e_i, the clip and AdamW. */
static int topk_step(DistOptim *d, int t, float lr, float *grad_norm) {
    /* buckets that went out for another step number (the loop retried or skipped one) are redone for t */
    if (d->step_begun && topk(d)->cur_t != t) dist_drop_buckets(d, NULL);
    if (!d->step_begun) topk_begin(d, t);
    dist_gather_buckets(d, topk_queue_bucket, NULL);
    const float *acc = d->stage;
    if (d->dbg_c) memcpy(d->dbg_c, acc, d->P * sizeof(float));
    if (d->dbg_s)
        for (size_t j = 0; j < d->P; j++) d->dbg_s[j] = mask_get(topk(d)->sel, j) ? acc[j] : 0.0f;
    /* a non-finite acc anywhere would poison e forever even if unselected: every rank must agree to skip */
    int64_t bad = 0;
    for (size_t j = 0; j < d->P; j++) bad |= !isfinite(acc[j]);
    comm_allreduce_max_i64(&bad, 1);
    /* g = (1/N) sum_i scatter(pairs of rank i), summed in rank order; rank 0's values are assigned, so at density 1
     * g is bit for bit what the dense all-reduce gives for N <= 2 */
    float *g = d->grads;
    memset(g, 0, d->P * sizeof(float));
    const float fN = (float)d->world;
    for (int b = 0; b < d->nb; b++) {
        const TopkPair *all = topk(d)->pairs + (size_t)d->world * topk(d)->pair_off[b];
        size_t kb = d->bucket_k[b];
        for (size_t q = 0; q < kb; q++) g[all[q].idx] = all[q].val;
        for (int r = 1; r < d->world; r++)
            for (size_t q = 0; q < kb; q++) g[all[(size_t)r * kb + q].idx] += all[(size_t)r * kb + q].val;
    }
    if (d->world > 1)
        for (size_t j = 0; j < d->P; j++) g[j] /= fN;
    if (d->dbg_ghat) memcpy(d->dbg_ghat, g, d->P * sizeof(float));
    double ss = dist_sumsq(g, 0, d->P);
    float norm = bad ? NAN : (float)sqrt(ss);
    *grad_norm = norm;
    topk(d)->cur_t = -1;
    if (!isfinite(norm)) {
        return dist_end_step(d, t, 1);
    }
    if (d->st_on) stats_compute(d, t, topk(d)->sel, acc, NULL, NULL, NULL);
    for (size_t j = 0; j < d->P; j++) topk(d)->emv.e[j] = mask_get(topk(d)->sel, j) ? 0.0f : acc[j];
    float sc = dist_clip_scale(d->cfg.clip, norm);
    if (sc != 1.0f)
        for (size_t j = 0; j < d->P; j++) g[j] *= sc;
    adamw_update(d->tab, d->params, g, topk(d)->emv.m, topk(d)->emv.v, 0, d->P, t, lr, &d->cfg.opt);
    d->last_k = dist_bucket_k_total(d);
    topk(d)->sel_valid = 1;
    return dist_end_step(d, t, 0);
}

/* e, m, v */
static size_t topk_state_memory(const DistOptim *d) { return 3 * d->P * sizeof(float); }

/* the memory check's bytes per parameter: e, m, v */
static double topk_bytes_per_param(const DistConfig *cfg) { return 12; }

/* the last completed step's selection S_t (no next mask: it is chosen at the step) */
static const uint8_t *topk_mask(DistOptim *d, int next) { return !next && topk(d)->sel_valid ? topk(d)->sel : NULL; }

/* e (P), m (P), v (P); the header's have_cur records whether the selection exists (not restored: a resumed run
 * makes its own at its first step) */
static size_t topk_state_bytes(const DistOptim *d) { return sizeof(BlobHeader) + 3 * d->P * sizeof(float); }
static void topk_save(const DistOptim *d, void *blob) {
    BlobHeader h;
    dist_emv_save(d, blob, &h);
    h.have_cur = topk(d)->sel_valid;
    memcpy(blob, &h, sizeof h);
}
static size_t topk_blob_payload(const BlobHeader *h, int i) { return 3 * h->P * sizeof(float); }
static void topk_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs) {
    dist_emv_load(d, h0, blobs, n_blobs);
    topk(d)->sel_valid = 0;
}

static void topk_free(DistOptim *d) {
    TopkState *s = topk(d);
    if (!s) return;
    dist_emv_free(&s->emv);
    free(s->sel); free(s->pairs); free(s->pair_off); free(s->topk_tmp);
    free(s);
}

const UpdateRule rule_topk_ef = {
    .name = "topk-ef", .kind = OPT_TOPK_EF, .sparse = 1, .index32 = 1, .stage = 1,
    .dense_as = "AdamW", .bytes_per_param = topk_bytes_per_param,
    .init = topk_init, .bucket_ready = topk_bucket_ready, .step = topk_step,
    .state_bytes = topk_state_bytes, .save = topk_save, .blob_payload = topk_blob_payload, .load = topk_load,
    .state_memory = topk_state_memory, .sync_hash = dist_sync_hash_mv, .mask = topk_mask,
    .moment = dist_emv_moment, .residual = dist_emv_residual, .free = topk_free,
};

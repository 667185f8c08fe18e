/*
 * optim/dist_loco.c - what the local-update rules share (dist_diloco.c, dist_sparseloco.c; issue 45): each rank's
 * inner steps on its own gradient, the synchronized model theta_prev beside each rank's own parameters, the common
 * part of their checkpoint blobs (optim/dist_loco.h declares them).
 * The inner step of rank i at step t (LocoState, optim/dist_loco.h): n_i = |g_i| (no gradient all-reduce), the gradient
 * clipped by clip / (n_i + 1e-6) when n_i > clip, one AdamW (or AdamS) step of optim/optim.h at rate lr_t with the
 * run's step t for the bias correction (the inner state is never reset); one control all-reduce of (n_i^2, non-finite
 * flag) makes every rank take the same skip decision and gives the logged norm sqrt(mean_i n_i^2).
 * An outer step is due when t is a multiple of H and at the run's last step (DistConfig.last_step), so a run ends
 * synchronized; the rule's outer step ends with loco_synchronize (theta_prev and every rank's parameters to theta).
 * Blob (after the BlobHeader, whose K is the number of P-vectors): a 32-byte record (at_sync, H, inner AdamS, then
 * 5 words of the rule's own parameters), then theta_i, theta_prev, the outer state (DiLoCo's momentum, SparseLoCo's
 * error feedback), the inner m and, for AdamW, the inner v.
 * Not for: the outer steps themselves (each rule's file).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_loco.h"

/* ---- state, inner step, synchronized model ---- */

void loco_init(DistOptim *d, LocoState *s, int h, const char *inner) {
    s->h = h;
    s->adams = strcmp(inner, "adams") == 0;
    size_t n = d->P ? d->P : 1;
    d->slo = 0;
    d->shi = d->P;
    s->prev = xmalloc(n * sizeof(float), "the synchronized model");
    s->outer = xcalloc(n, sizeof(float), "the outer state");
    s->m = xcalloc(n, sizeof(float), "the inner first moment");
    if (!s->adams) s->v = xcalloc(n, sizeof(float), "the inner second moment");
    s->at_sync = 1;
}

void loco_free(LocoState *s) {
    free(s->prev); free(s->outer); free(s->m); free(s->v);
}

int loco_inner_step(DistOptim *d, int t, float lr, float *grad_norm) {
    LocoState *s = loco(d);
    if (d->synced_in) fatal("distopt_step: the synchronized model is still swapped in (distopt_use_synced)");
    if (!s->have_prev) { /* the first step: params, as broadcast at creation, are theta_prev */
        memcpy(s->prev, d->params, d->P * sizeof(float));
        s->have_prev = 1;
    }
    dist_gather_buckets(d, NULL, NULL); /* the step's opening: the inner steps send nothing per bucket */
    double own = dist_sumsq(d->grads, 0, d->P);
    double ctl[2] = {own, !isfinite(own)};
    comm_allreduce_sum_f64(ctl, 2);
    if (ctl[1] != 0) {
        *grad_norm = NAN;
        return dist_end_step(d, t, 1);
    }
    *grad_norm = (float)sqrt(ctl[0] / d->world);
    float sc = dist_clip_scale(d->cfg.clip, (float)sqrt(own));
    if (s->adams) adams_update_and_zero(d->tab, d->params, d->grads, s->m, 0, d->P, t, lr, &d->cfg.opt, sc);
    else adamw_update_and_zero(d->tab, d->params, d->grads, s->m, s->v, 0, d->P, t, lr, &d->cfg.opt, sc);
    d->grads_clear = 1;
    s->at_sync = 0;
    return 0;
}

int loco_outer_due(const DistOptim *d, int t) { return t % loco(d)->h == 0 || t == d->cfg.last_step; }

void loco_synchronize(DistOptim *d) {
    LocoState *s = loco(d);
    memcpy(d->params, s->prev, d->P * sizeof(float));
    s->at_sync = 1;
}

float *loco_synced(DistOptim *d) { return loco(d)->at_sync ? NULL : loco(d)->prev; }

/* ---- the blob's common part ---- */

_Static_assert(sizeof(LocoRecord) == 32, "the local-update rules' blob record is part of the checkpoint format");

size_t loco_state_bytes(const DistOptim *d) {
    return sizeof(BlobHeader) + sizeof(LocoRecord) + (loco(d)->adams ? 4 : 5) * d->P * sizeof(float);
}

void loco_save(const DistOptim *d, void *blob, LocoRecord rec) {
    const LocoState *s = loco(d);
    if (d->synced_in) fatal("distopt_save: the synchronized model is still swapped in (distopt_use_synced)");
    BlobHeader h = dist_blob_header(d);
    h.K = s->adams ? 4 : 5;
    rec.at_sync = s->at_sync;
    rec.h = s->h;
    rec.adams = s->adams;
    char *o = (char *)blob + sizeof h;
    memcpy(o, &rec, sizeof rec);
    float *f = (float *)(o + sizeof rec);
    const size_t P = d->P;
    memcpy(f, d->params, P * sizeof(float));
    memcpy(f + P, s->have_prev ? s->prev : d->params, P * sizeof(float));
    memcpy(f + 2 * P, s->outer, P * sizeof(float));
    memcpy(f + 3 * P, s->m, P * sizeof(float));
    if (!s->adams) memcpy(f + 4 * P, s->v, P * sizeof(float));
    memcpy(blob, &h, sizeof h);
}

size_t loco_blob_payload(const BlobHeader *h, int i) {
    if (h->K != 4 && h->K != 5)
        fatal("optimizer state of rank %d: %llu vectors, a local-update rule writes 4 or 5; the checkpoint is corrupt",
              i, (unsigned long long)h->K);
    return sizeof(LocoRecord) + h->K * h->P * sizeof(float);
}

LocoRecord loco_record(const void *blob) {
    LocoRecord rec;
    memcpy(&rec, (const char *)blob + sizeof(BlobHeader), sizeof rec);
    return rec;
}

static const float *loco_vectors(const void *blob) {
    return (const float *)((const char *)blob + sizeof(BlobHeader) + sizeof(LocoRecord));
}

void loco_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, int n_blobs, int outer_shared,
               const char *name) {
    LocoState *s = loco(d);
    const size_t P = d->P;
    int other_world = h0->world != d->world;
    for (int i = 0; i < n_blobs; i++) {
        LocoRecord rec = loco_record(blobs[i]);
        if (rec.h != s->h || rec.adams != s->adams)
            fatal("optimizer state of rank %d was written with %s-h %d, %s-inner %s; this run has %d, %s: resume with "
                  "the checkpoint's settings", i, name, rec.h, name, rec.adams ? "adams" : "adamw", s->h,
                  s->adams ? "adams" : "adamw");
        if (other_world && !rec.at_sync)
            fatal("%s checkpoint at step %d lies between outer steps, where each of its %d ranks has its own "
                  "parameters; resume it on %d ranks, or resume a checkpoint of an outer step (a multiple of "
                  "%s-h %d) on %d", name, h0->last_t, h0->world, h0->world, name, s->h, d->world);
    }
    /* this rank's own blob on the same world, else blob 0's synchronized model and the mean of the per-rank state */
    int src = !other_world && n_blobs > 1 ? d->rank : 0;
    const float *f0 = loco_vectors(blobs[src]);
    memcpy(d->params, f0, P * sizeof(float));
    memcpy(s->prev, f0 + P, P * sizeof(float));
    s->have_prev = 1;
    s->at_sync = loco_record(blobs[src]).at_sync;
    if (!other_world || outer_shared) memcpy(s->outer, f0 + 2 * P, P * sizeof(float));
    if (!other_world) {
        memcpy(s->m, f0 + 3 * P, P * sizeof(float));
        if (!s->adams) memcpy(s->v, f0 + 4 * P, P * sizeof(float));
        return;
    }
    /* the per-rank vectors (the inner moments; the outer state unless shared) as the mean over the saved ranks,
     * summed in rank order */
    float *acc[3] = {s->m, s->adams ? NULL : s->v, outer_shared ? NULL : s->outer};
    size_t at[3] = {3 * P, 4 * P, 2 * P};
    for (int k = 0; k < 3; k++) {
        if (!acc[k]) continue;
        memset(acc[k], 0, P * sizeof(float));
        for (int i = 0; i < n_blobs; i++) {
            const float *fi = loco_vectors(blobs[i]) + at[k];
            for (size_t j = 0; j < P; j++) acc[k][j] += fi[j];
        }
        for (size_t j = 0; j < P; j++) acc[k][j] /= (float)n_blobs;
    }
}

/* theta_prev, the outer state, m (and v) */
size_t loco_state_memory(const DistOptim *d) { return (loco(d)->adams ? 3 : 4) * d->P * sizeof(float); }

/*
 * optim/dist_dense.c - dense data-parallel AdamW / AdamS (optim/optim.h's formulas) on every coordinate:
 *   plain:   each gradient bucket is copied into stage and averaged by one all-reduce as soon as backward has
 *            finished it; at the step every rank holds the mean gradient g, takes its norm, clips and updates
 *            every parameter (identical results on every rank, no parameter traffic).
 *   ZeRO-1:  the buckets are reduce-scattered instead, each rank receiving the mean of its owned slices (the
 *            owner table of optim/scape.h, the same one SCAPE's top-k uses); m (and v) exist for the owned shard
 *            only; the norm takes one more all-reduce of a double; each rank updates its shard and the parameters
 *            are all-gathered.
 * Bytes per rank and step (comm.h's ring model): 2 * 4P (N-1)/N for either; ZeRO-1 moves them as a reduce-scatter
 * and an all-gather of 4P (N-1)/N each.
 * Its blob: m (and v) over the range of the state (dist_state.c's distopt_dense_blob_save, which the device update
 * writes too).
 * Not for: the update formulas (optim.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_impl.h"

/* The dense rules' own state (DistOptim's state): m (and v for AdamW) over [slo, shi), everything or with ZeRO-1
 * this rank's shard, indexed from slo; with ZeRO-1 the shard's mean gradients as the reduce-scatter writes them
 * (rs_out, owned_total floats; bucket b's owned slices from rs_off[b]). */
typedef struct {
    float *m, *v, *rs_out;
    size_t *rs_off;
} DenseState;
static inline DenseState *dense(const DistOptim *d) { return (DenseState *)d->state; }

extern const UpdateRule rule_adamw, rule_adams;

/* A dense update (AdamW, AdamS) on one rank without ZeRO-1: the mean over one rank is the gradient itself (x / 1
 * == x), so the buckets stay where backward wrote them: no staging buffer, no copy into it and back. (1-bit Adam's
 * warm-up queues its buckets here too, and stages them.) */
static int dense_in_place(const DistOptim *d) {
    return (d->rule == &rule_adamw || d->rule == &rule_adams) && d->world == 1 && !d->cfg.zero;
}

static void dense_init(DistOptim *d, size_t owned_total) {
    DenseState *s = d->state = xcalloc(1, sizeof(DenseState), "dense state");
    if (d->cfg.zero) {
        d->slo = d->own.lo[d->rank];
        d->shi = d->own.hi[d->rank];
    }
    size_t n = d->shi - d->slo;
    s->m = xcalloc(n ? n : 1, sizeof(float), "first moment");
    if (d->rule == &rule_adamw) s->v = xcalloc(n ? n : 1, sizeof(float), "second moment");
    if (d->cfg.zero) {
        s->rs_out = xmalloc((owned_total ? owned_total : 1) * sizeof(float), "ZeRO gradient shard");
        s->rs_off = xcalloc((size_t)(d->nb ? d->nb : 1), sizeof(size_t), "ZeRO bucket offsets");
        size_t roff = 0;
        for (int b = 0; b < d->nb; b++) {
            s->rs_off[b] = roff;
            for (int k = 0; k < d->bn[b]; k++) {
                int i = d->bslices[b][k];
                if (dist_is_owned_slice(d, i)) roff += d->tab->slices[i].numel;
            }
        }
    }
    if (!dense_in_place(d)) d->stage = xmalloc(d->P * sizeof(float), "gradient staging buffer");
}

/* Bucket b's gradients into stage and its collective: the averaging all-reduce, or the reduce-scatter to owners. */
void dense_queue_bucket(DistOptim *d, int b) {
    if (dense_in_place(d)) {
        /* counted as the bucket's averaging all-reduce, which moves 0 bytes on one rank, so the per-kind statistics
         * read the same as the device update's (test/gpu/test_updater.cu compares them) */
        comm_stats_add(COMM_ALLREDUCE, d->bucket_numel[b] * sizeof(float), 0.0);
        d->bh[b] = 0;
        d->bstate[b] = 2;
        return;
    }
    float *st = d->stage + d->bucket_off[b];
    size_t o = 0;
    for (int k = 0; k < d->bn[b]; k++) {
        const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
        memcpy(st + o, d->grads + s->offset, s->numel * sizeof(float));
        o += s->numel;
    }
    if (!d->cfg.zero) {
        d->bh[b] = comm_iallreduce_avg_f32(st, o);
    } else {
        size_t *counts = xcalloc((size_t)d->world, sizeof(size_t), "bucket counts");
        for (int k = 0; k < d->bn[b]; k++) {
            int i = d->bslices[b][k];
            for (int r = 0; r < d->world; r++)
                if (i >= d->own.first[r] && i < d->own.first[r + 1]) counts[r] += d->tab->slices[i].numel;
        }
        d->bh[b] = comm_ireduce_scatter_avg_f32(st, dense(d)->rs_out + dense(d)->rs_off[b], counts);
        free(counts);
    }
    d->bstate[b] = 2;
}


/* The reduced bucket b back into grads: all of it, or with ZeRO-1 the owned slices. */
void dense_unpack_bucket(DistOptim *d, int b) {
    if (dense_in_place(d)) return;
    if (!d->cfg.zero) {
        const float *st = d->stage + d->bucket_off[b];
        for (int k = 0; k < d->bn[b]; k++) {
            const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
            memcpy(d->grads + s->offset, st, s->numel * sizeof(float));
            st += s->numel;
        }
    } else {
        const float *st = dense(d)->rs_out + dense(d)->rs_off[b];
        for (int k = 0; k < d->bn[b]; k++) {
            int i = d->bslices[b][k];
            if (!dist_is_owned_slice(d, i)) continue;
            const ParamSlice *s = &d->tab->slices[i];
            memcpy(d->grads + s->offset, st, s->numel * sizeof(float));
            st += s->numel;
        }
    }
}

/* Step t: the buckets not yet sent go out, all are waited for and unpacked, then the global norm (skip when not
 * finite), the clip, the update of [slo, shi) and with ZeRO-1 the all-gather of the parameters. */
static int dense_step(DistOptim *d, int t, float lr, float *grad_norm) {
    dist_gather_buckets(d, dense_queue_bucket, dense_unpack_bucket);
    double ss = dist_sumsq(d->grads, d->slo, d->shi);
    if (d->cfg.zero) comm_allreduce_sum_f64(&ss, 1);
    float norm = (float)sqrt(ss);
    *grad_norm = norm;
    if (!isfinite(norm)) {
        return dist_end_step(d, t, 1);
    }
    /* m, v hold [slo, shi); the update indexes them by flat element, hence the shifted base. Without ZeRO-1 it
     * covers every gradient, so it scales them by the clip factor and clears them as it reads them (the same bits
     * as a pass for each; dist_end_step then skips its own) */
    int whole = d->slo == 0 && d->shi == d->P;
    float sc = dist_clip_scale(d->cfg.clip, norm);
    if (sc != 1.0f && !whole) {
        float *g = d->grads;
        #pragma omp parallel for schedule(static)
        for (size_t j = d->slo; j < d->shi; j++) g[j] *= sc;
    }
    float *m = dense(d)->m, *v = dense(d)->v;
    if (v && whole)
        adamw_update_and_zero(d->tab, d->params, d->grads, m, v, 0, d->P, t, lr, &d->cfg.opt, sc);
    else if (v)
        adamw_update(d->tab, d->params, d->grads, m - d->slo, v - d->slo, d->slo, d->shi, t, lr, &d->cfg.opt);
    else if (whole)
        adams_update_and_zero(d->tab, d->params, d->grads, m, 0, d->P, t, lr, &d->cfg.opt, sc);
    else
        adams_update(d->tab, d->params, d->grads, m - d->slo, d->slo, d->shi, t, lr, &d->cfg.opt);
    d->grads_clear = whole;
    if (d->cfg.zero) {
        size_t *counts = xmalloc((size_t)d->world * sizeof(size_t), "shard counts");
        for (int r = 0; r < d->world; r++) counts[r] = d->own.hi[r] - d->own.lo[r];
        comm_wait(comm_iallgatherv(d->params, counts, sizeof(float)));
        free(counts);
    }
    return dist_end_step(d, t, 0);
}

/* m and v (AdamW) or m (AdamS) over [slo, shi) */
static size_t dense_state_memory(const DistOptim *d) {
    return (d->rule == &rule_adamw ? 2 : 1) * (d->shi - d->slo) * sizeof(float);
}

/* distopt_moment: m over [slo, shi) (the owned shard with ZeRO-1); no residual */
static const float *dense_moment(const DistOptim *d) { return dense(d)->m; }

/* the blob: distopt_dense_blob_save's layout over [slo, shi); a load assembles [slo, shi) from whichever saved
 * blobs cover it (any_shard), after distopt_load's checks */
static size_t dense_state_bytes(const DistOptim *d) {
    return distopt_dense_blob_bytes(d->cfg.opt.kind, d->slo, d->shi);
}
static void dense_save(const DistOptim *d, void *blob) {
    distopt_dense_blob_save(blob, d->cfg.opt.kind, d->world, d->rank, d->cfg.zero, d->last_t, d->P, d->slo, d->shi,
                            dense(d)->m, dense(d)->v);
}
static size_t dense_blob_payload(const BlobHeader *h, int i) {
    if (h->lo > h->hi || h->hi > h->P)
        fatal("optimizer state of rank %d: bad range [%llu, %llu)", i, (unsigned long long)h->lo, (unsigned long long)h->hi);
    return distopt_dense_blob_bytes((OptimizerKind)h->kind, h->lo, h->hi) - sizeof(BlobHeader);
}
static void dense_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs) {
    dist_dense_assemble(d->cfg.opt.kind, d->slo, d->shi, dense(d)->m, dense(d)->v, blobs, n_blobs);
}

static void dense_free(DistOptim *d) {
    DenseState *s = dense(d);
    if (!s) return;
    free(s->m); free(s->v); free(s->rs_out); free(s->rs_off);
    free(s);
}

/* the memory check's bytes per parameter: m and v (AdamW) or m (AdamS) */
static double adamw_bytes_per_param(const DistConfig *cfg) { return 8; }
static double adams_bytes_per_param(const DistConfig *cfg) { return 4; }

const UpdateRule rule_adamw = {
    .name = "adamw", .kind = OPT_ADAMW, .zero_ok = 1, .any_shard = 1, .bytes_per_param = adamw_bytes_per_param,
    .init = dense_init, .bucket_ready = dense_queue_bucket, .step = dense_step,
    .state_bytes = dense_state_bytes, .save = dense_save, .blob_payload = dense_blob_payload, .load = dense_load,
    .state_memory = dense_state_memory, .moment = dense_moment, .free = dense_free,
};
const UpdateRule rule_adams = {
    .name = "adams", .kind = OPT_ADAMS, .zero_ok = 1, .any_shard = 1, .bytes_per_param = adams_bytes_per_param,
    .init = dense_init, .bucket_ready = dense_queue_bucket, .step = dense_step,
    .state_bytes = dense_state_bytes, .save = dense_save, .blob_payload = dense_blob_payload, .load = dense_load,
    .state_memory = dense_state_memory, .moment = dense_moment, .free = dense_free,
};

/*
 * scape/dist.c - the data-parallel parameter update (see dist.h): gradient buckets are packed and handed to the
 * communication thread as backward finishes them; distopt_step waits, clips, updates and zeroes the gradients.
 *   dense:        per-bucket averaging all-reduce; every rank updates everything (identical results).
 *   dense ZeRO-1: per-bucket reduce-scatter over the owner table, update of the owned shard (m, v kept for the
 *                 shard only), all-gather of the parameters.
 *   SCAPE:        SCAPE.md section 3: per bucket c_i into the gradient buffer and one averaging all-reduce of
 *                 the masked values; at the step, the next mask (owners' top-k) goes out on an asynchronous
 *                 all-gather that the next step's first bucket waits for, then error feedback and the masked
 *                 AdamS update. m is stored densely (P floats, zero off the mask); checkpoints hold it compactly.
 *   topk-ef:      per bucket acc = e + g into stage (flat), per-slice top-k of |acc|, the (index, value) pairs on
 *                 one all-gather; at the step the average of all ranks' pairs, e = acc off the selection, AdamW.
 *   Optionally (distopt_mask_stats_enable) rank 0 measures mask stability (Jaccard, kept energy) per slice.
 * Built with -ffp-contract=off (scape/module.mk) so every rank and every run rounds identically.
 * Not for: the collectives themselves (comm.c), top-k and masks (scape.c), the dense update formulas (optim.c).
 */
#include "scape/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/updater.h"
#include "common/util.h"
#include "scape/scape.h"

#define DIST_MAGIC 0x45504353u /* "SCPE" */
#define DIST_VERSION 1

/* one selected coordinate of topk-ef on the wire: flat index and value, 8 bytes */
typedef struct {
    uint32_t idx;
    float val;
} TopkPair;
_Static_assert(sizeof(TopkPair) == 8, "topk-ef pairs are 8 bytes on the wire");

struct DistOptim {
    const ParamTable *tab;
    float *params, *grads; /* (P) the model's buffers */
    DistConfig cfg;
    int rank, world;
    size_t P;
    OwnerTable own;
    /* buckets: slices of each bucket in memory order, packed consecutively into stage at bucket_off */
    int nb;
    int **bslices;
    int *bn;
    size_t *bucket_off, *bucket_numel;
    float *stage;          /* (P) packed gradients / SCAPE payload, by bucket */
    uint16_t *stage16;     /* SCAPE bf16 payload: (P) the payload as sent, then b, by bucket like stage */
    float *qerr;           /* SCAPE bf16 payload: (P) e = fp32 mean - b on this rank's parts, 0 elsewhere */
    float *rs_out;         /* ZeRO: the owned part of each bucket after reduce-scatter */
    size_t *rs_off;        /* ZeRO: offset of bucket b's owned part in rs_out */
    CommHandle *bh;        /* per bucket: its collective */
    int *bstate;           /* per bucket: 0 nothing, 1 c computed (SCAPE), 2 queued */
    int step_begun;
    /* dense state over [slo, shi): the whole buffer, or the owned shard with ZeRO-1 */
    size_t slo, shi;
    float *m, *v;          /* m: (P) for SCAPE */
    /* SCAPE */
    float *r;              /* (P) residual */
    uint8_t *mask_cur, *mask_next; /* (P bits) */
    uint8_t *seg;          /* owners' packed segments, concatenated in rank order */
    size_t *seg_bytes, *seg_off;
    uint32_t *topk_tmp;
    size_t *bucket_k;      /* K_b of the step in progress */
    size_t last_k;
    int have_cur, have_next;
    CommHandle next_h;
    int swapped;           /* mask_next became mask_cur at this step (undone if the step is skipped) */
    int last_t;
    float *dbg_c, *dbg_s, *dbg_ghat;
    /* SCAPE step passes: the slices in payload order cut into chunks of at most SCAPE_CHUNK elements, processed
     * in parallel; per-chunk partial sums are added in chunk order, so results do not depend on thread count */
    size_t nch;
    size_t *ch_lo, *ch_hi, *ch_q;  /* element range; first compact payload index (per step) */
    int *ch_slice, *ch_bucket;
    double *ch_ss;
    int *ch_bad;
    /* topk-ef: r is e_i, m and v AdamW's; mask_cur this rank's selection S_t, stage acc_i (P, flat) */
    TopkPair *pairs;       /* per bucket: world consecutive parts of K_b pairs, at world * pair_off[b] */
    size_t pairs_cap;      /* pairs allocated */
    size_t *pair_off;      /* per bucket: sum of K_b' over earlier buckets */
    int cur_t;             /* the step whose buckets are on the wire */
    /* mask statistics (rank 0) */
    int st_on;
    int st_valid;          /* st holds the last completed step's values */
    DistMaskStats st;
    int *st_slice;
    double *st_jm, *st_em, *st_jg, *st_eg;
    float *st_g;           /* SCAPE: copy of rank 0's g_i */
    uint8_t *st_gcur, *st_gprev; /* raw-gradient masks G_t, G_{t-1} (SCAPE); topk-ef keeps S_{t-1} in st_gprev */
    int st_gprev_t;        /* step of st_gprev, -1 none */
    uint32_t *st_tmp;      /* top-k scratch, max slice numel */
};

#define SCAPE_CHUNK 16384

static int slice_sparse(const DistOptim *d, const ParamSlice *s) {
    return !(d->cfg.exclude_norms && s->dense_only);
}

DistOptim *distopt_create(const ParamTable *tab, float *params, float *grads, const DistConfig *cfg) {
    if (cfg->opt.kind != OPT_ADAMW && cfg->opt.kind != OPT_ADAMS && cfg->opt.kind != OPT_SCAPE && cfg->opt.kind != OPT_TOPK_EF)
        fatal("distopt_create: optimizer kind %d is not supported; use adamw, adams, scape or topk-ef", cfg->opt.kind);
    int sparse = cfg->opt.kind == OPT_SCAPE || cfg->opt.kind == OPT_TOPK_EF;
    if (sparse && !(cfg->density > 0 && cfg->density <= 1))
        fatal("--density %g is outside (0, 1]; 0.1 means 90%% sparsity", cfg->density);
    if (sparse && !(cfg->density_start > 0 && cfg->density_start <= 1))
        fatal("density start %g is outside (0, 1]; use 1 for the default warm-up from dense", cfg->density_start);
    if (cfg->payload_bf16 && cfg->opt.kind != OPT_SCAPE)
        fatal("--scape-payload bf16 applies to --optimizer scape only; drop it or use --optimizer scape");
    if (sparse && cfg->zero)
        fatal("--zero 1 applies to the dense optimizers adamw/adams; drop --zero for scape and topk-ef");
    if (cfg->opt.kind == OPT_TOPK_EF && tab->total > UINT32_MAX)
        fatal("topk-ef sends 32-bit indices but the model has %zu parameters; use a model under 2^32 parameters", tab->total);
    if (!(cfg->opt.beta1 >= 0 && cfg->opt.beta1 < 1)) fatal("beta1 %g is outside [0, 1)", cfg->opt.beta1);
    DistOptim *d = xcalloc(1, sizeof *d, "DistOptim");
    d->tab = tab;
    d->params = params;
    d->grads = grads;
    d->cfg = *cfg;
    d->rank = comm_rank();
    d->world = comm_world();
    d->P = tab->total;
    owner_table_build(&d->own, tab, d->world);

    d->nb = tab->num_buckets;
    param_table_bucket_slices(tab, &d->bn, &d->bslices);
    d->bucket_off = xcalloc((size_t)d->nb, sizeof(size_t), "bucket offsets");
    d->bucket_numel = xcalloc((size_t)d->nb, sizeof(size_t), "bucket sizes");
    d->rs_off = xcalloc((size_t)d->nb, sizeof(size_t), "bucket offsets");
    d->bucket_k = xcalloc((size_t)d->nb, sizeof(size_t), "bucket payload sizes");
    d->bh = xcalloc((size_t)d->nb, sizeof(CommHandle), "bucket handles");
    d->bstate = xcalloc((size_t)d->nb, sizeof(int), "bucket state");
    size_t owned_total = 0;
    for (int i = 0; i < tab->n; i++) {
        d->bucket_numel[tab->slices[i].bucket] += tab->slices[i].numel;
        if (i >= d->own.first[d->rank] && i < d->own.first[d->rank + 1]) owned_total += tab->slices[i].numel;
    }
    size_t off = 0, roff = 0;
    for (int b = 0; b < d->nb; b++) {
        d->bucket_off[b] = off;
        off += d->bucket_numel[b];
        d->rs_off[b] = roff;
        for (int k = 0; k < d->bn[b]; k++) {
            int i = d->bslices[b][k];
            if (i >= d->own.first[d->rank] && i < d->own.first[d->rank + 1]) roff += tab->slices[i].numel;
        }
    }
    d->stage = xmalloc(d->P * sizeof(float), "gradient staging buffer");

    if (cfg->opt.kind == OPT_SCAPE) {
        d->slo = 0;
        d->shi = d->P;
        d->m = xcalloc(d->P, sizeof(float), "SCAPE first moment");
        d->r = xcalloc(d->P, sizeof(float), "SCAPE residual");
        d->mask_cur = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "SCAPE mask");
        d->mask_next = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "SCAPE mask");
        if (cfg->payload_bf16) {
            d->stage16 = xmalloc(d->P * sizeof(uint16_t), "SCAPE bf16 payload");
            d->qerr = xmalloc(d->P * sizeof(float), "SCAPE bf16 rounding errors");
        }
        size_t nch = 0;
        for (int i = 0; i < tab->n; i++) nch += (tab->slices[i].numel + SCAPE_CHUNK - 1) / SCAPE_CHUNK;
        d->nch = nch;
        d->ch_lo = xmalloc((nch ? nch : 1) * sizeof(size_t), "SCAPE chunks");
        d->ch_hi = xmalloc((nch ? nch : 1) * sizeof(size_t), "SCAPE chunks");
        d->ch_q = xmalloc((nch ? nch : 1) * sizeof(size_t), "SCAPE chunks");
        d->ch_slice = xmalloc((nch ? nch : 1) * sizeof(int), "SCAPE chunks");
        d->ch_bucket = xmalloc((nch ? nch : 1) * sizeof(int), "SCAPE chunks");
        d->ch_ss = xmalloc((nch ? nch : 1) * sizeof(double), "SCAPE chunks");
        d->ch_bad = xmalloc((nch ? nch : 1) * sizeof(int), "SCAPE chunks");
        size_t c = 0;
        for (int b = 0; b < d->nb; b++)
            for (int k = 0; k < d->bn[b]; k++) {
                const ParamSlice *sl = &tab->slices[d->bslices[b][k]];
                for (size_t a = sl->offset; a < sl->offset + sl->numel; a += SCAPE_CHUNK, c++) {
                    d->ch_lo[c] = a;
                    d->ch_hi[c] = a + SCAPE_CHUNK < sl->offset + sl->numel ? a + SCAPE_CHUNK : sl->offset + sl->numel;
                    d->ch_slice[c] = d->bslices[b][k];
                    d->ch_bucket[c] = b;
                }
            }
        d->seg_bytes = xmalloc((size_t)d->world * sizeof(size_t), "mask segments");
        d->seg_off = xmalloc((size_t)d->world * sizeof(size_t), "mask segments");
        size_t so = 0, maxn = 1;
        for (int r = 0; r < d->world; r++) {
            d->seg_off[r] = so;
            d->seg_bytes[r] = mask_bytes(d->own.hi[r] - d->own.lo[r]);
            so += d->seg_bytes[r];
        }
        d->seg = xcalloc(so ? so : 1, 1, "mask segments");
        for (int i = d->own.first[d->rank]; i < d->own.first[d->rank + 1]; i++)
            if (tab->slices[i].numel > maxn) maxn = tab->slices[i].numel;
        d->topk_tmp = xmalloc(maxn * sizeof(uint32_t), "top-k scratch");
    } else if (cfg->opt.kind == OPT_TOPK_EF) {
        d->slo = 0;
        d->shi = d->P;
        d->m = xcalloc(d->P, sizeof(float), "AdamW first moment");
        d->v = xcalloc(d->P, sizeof(float), "AdamW second moment");
        d->r = xcalloc(d->P, sizeof(float), "topk-ef error feedback");
        d->mask_cur = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "topk-ef selection");
        d->pair_off = xcalloc((size_t)d->nb, sizeof(size_t), "topk-ef bucket offsets");
        size_t maxn = 1;
        for (int i = 0; i < tab->n; i++)
            if (tab->slices[i].numel > maxn) maxn = tab->slices[i].numel;
        d->topk_tmp = xmalloc(maxn * sizeof(uint32_t), "top-k scratch");
    } else {
        d->slo = cfg->zero ? d->own.lo[d->rank] : 0;
        d->shi = cfg->zero ? d->own.hi[d->rank] : d->P;
        size_t n = d->shi - d->slo;
        d->m = xcalloc(n ? n : 1, sizeof(float), "first moment");
        if (cfg->opt.kind == OPT_ADAMW) d->v = xcalloc(n ? n : 1, sizeof(float), "second moment");
        if (cfg->zero) d->rs_out = xmalloc((owned_total ? owned_total : 1) * sizeof(float), "ZeRO gradient shard");
    }
    comm_bcast(params, d->P * sizeof(float), 0);
    return d;
}

static void scape_collect_next(DistOptim *d);

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* SCAPE.md section 9.3 at the end of a run, for multi-rank tests of whole trainers: with SCAPE_CHECK_SYNC=1 in
 * the environment, hashes params (and SCAPE's m and masks, which are shared too) on every rank, compares them,
 * and prints one line on rank 0, or fatal() naming the first rank that differs. A collective: every rank calls
 * it from distopt_free. */
static void sync_check(DistOptim *d) {
    const char *e = getenv("SCAPE_CHECK_SYNC");
    if (!e || strcmp(e, "1") != 0) return;
    uint64_t h = fnv1a(1469598103934665603ull, d->params, d->P * sizeof(float));
    if (d->cfg.opt.kind == OPT_SCAPE) {
        scape_collect_next(d);
        h = fnv1a(h, d->m, d->P * sizeof(float));
        if (d->have_cur) h = fnv1a(h, d->mask_cur, mask_bytes(d->P));
        if (d->have_next) h = fnv1a(h, d->mask_next, mask_bytes(d->P));
    } else if (d->cfg.opt.kind == OPT_TOPK_EF) {
        h = fnv1a(h, d->m, d->P * sizeof(float));
        h = fnv1a(h, d->v, d->P * sizeof(float));
    }
    uint64_t *all = xmalloc((size_t)d->world * sizeof(uint64_t), "sync check");
    comm_allgather(&h, all, sizeof h);
    for (int r = 1; r < d->world; r++)
        if (all[r] != all[0])
            fatal("sync check: rank %d's parameters/optimizer state hash %016llx differs from rank 0's %016llx; "
                  "the ranks diverged", r, (unsigned long long)all[r], (unsigned long long)all[0]);
    if (d->rank == 0)
        printf("sync check: parameters and shared optimizer state identical on %d ranks (hash %016llx)\n", d->world,
               (unsigned long long)all[0]);
    fflush(stdout);
    free(all);
}

void distopt_free(DistOptim *d) {
    if (!d) return;
    sync_check(d);
    comm_wait(d->next_h);
    for (int b = 0; b < d->nb; b++) comm_wait(d->bh[b]);
    param_table_bucket_slices_free(d->nb, d->bn, d->bslices);
    free(d->bucket_off); free(d->bucket_numel); free(d->rs_off);
    free(d->bucket_k); free(d->bh); free(d->bstate); free(d->stage); free(d->stage16); free(d->qerr); free(d->rs_out);
    free(d->m); free(d->v); free(d->r); free(d->mask_cur); free(d->mask_next); free(d->seg);
    free(d->seg_bytes); free(d->seg_off); free(d->topk_tmp);
    free(d->ch_lo); free(d->ch_hi); free(d->ch_q); free(d->ch_slice); free(d->ch_bucket); free(d->ch_ss); free(d->ch_bad);
    free(d->pairs); free(d->pair_off);
    free(d->st_slice); free(d->st_jm); free(d->st_em); free(d->st_jg); free(d->st_eg); free(d->st_g);
    free(d->st_gcur); free(d->st_gprev); free(d->st_tmp);
    owner_table_free(&d->own);
    free(d);
}

float distopt_density(const DistOptim *d, int t) {
    if (d->cfg.opt.kind != OPT_SCAPE && d->cfg.opt.kind != OPT_TOPK_EF) return 1.0f;
    return (float)scape_density(d->cfg.density, d->cfg.density_start, d->cfg.density_warmup, t);
}

/* ---- SCAPE pieces ---- */

/* Waits for the all-gather of the mask computed last step and assembles it into mask_next. */
static void scape_collect_next(DistOptim *d) {
    if (!d->next_h) return;
    comm_wait(d->next_h);
    d->next_h = 0;
    memset(d->mask_next, 0, mask_bytes(d->P));
    for (int r = 0; r < d->world; r++)
        mask_or_bits(d->mask_next, d->own.lo[r], d->seg + d->seg_off[r], d->own.hi[r] - d->own.lo[r]);
    d->have_next = 1;
}

/* Top-k of |c| (c in grads) over this rank's owned slices with density dens, into its segment of seg, then the
 * all-gather of all segments (asynchronous; waited for by scape_collect_next). */
static CommHandle scape_make_mask(DistOptim *d, double dens) {
    uint8_t *mine = d->seg + d->seg_off[d->rank];
    size_t base = d->own.lo[d->rank];
    memset(mine, 0, d->seg_bytes[d->rank]);
    for (int i = d->own.first[d->rank]; i < d->own.first[d->rank + 1]; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        if (!slice_sparse(d, s)) mask_set_range(mine, s->offset - base, s->numel);
        else scape_topk_mask(d->grads + s->offset, s->numel, scape_k(dens, s->numel), mine, s->offset - base, d->topk_tmp);
    }
    return comm_iallgatherv(d->seg, d->seg_bytes, 1);
}

static void scape_c_bucket(DistOptim *d, int b) {
    for (int k = 0; k < d->bn[b]; k++) {
        const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
        if (d->st_on) memcpy(d->st_g + s->offset, d->grads + s->offset, s->numel * sizeof(float));
        scape_corrected_momentum(d->grads, d->m, d->r, s->offset, s->offset + s->numel, d->cfg.opt.beta1);
    }
    d->bstate[b] = 1;
}

static void scape_queue_bucket(DistOptim *d, int b) {
    float *out = d->stage + d->bucket_off[b];
    size_t K = 0;
    for (int k = 0; k < d->bn[b]; k++) {
        const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
        K += scape_gather_masked(d->grads, d->mask_cur, s->offset, s->offset + s->numel, out + K);
    }
    d->bucket_k[b] = K;
    uint16_t *out16 = d->stage16 ? d->stage16 + d->bucket_off[b] : NULL;
    if (out16) {
        /* what goes on the wire: s_i rounded to bf16 (the error goes to r in scape_update_pass) */
        #pragma omp parallel for schedule(static) if (K > 65536)
        for (size_t q = 0; q < K; q++) out16[q] = bf16_from_f32(out[q]);
    }
    if (d->dbg_s) {
        size_t q = 0;
        for (int k = 0; k < d->bn[b]; k++) {
            const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
            for (size_t j = s->offset; j < s->offset + s->numel; j++) {
                if (!mask_get(d->mask_cur, j)) {
                    d->dbg_s[j] = 0.0f;
                    continue;
                }
                d->dbg_s[j] = out16 ? bf16_to_f32(out16[q]) : out[q];
                q++;
            }
        }
    }
    d->bh[b] = out16 ? comm_iallreduce_avg_bf16(out16, K, d->qerr + d->bucket_off[b]) : comm_iallreduce_avg_f32(out, K);
    d->bstate[b] = 2;
}

/* Start of a SCAPE step at its first bucket: M_t becomes the current mask (SCAPE.md section 3, first line). */
static void scape_begin(DistOptim *d) {
    d->step_begun = 1;
    d->swapped = 0;
    scape_collect_next(d);
    if (d->have_next) {
        uint8_t *t = d->mask_cur;
        d->mask_cur = d->mask_next;
        d->mask_next = t;
        d->have_next = 0;
        d->have_cur = 1;
        d->swapped = 1;
    }
}

/* ---- dense pieces ---- */

static int is_owned_slice(const DistOptim *d, int i) {
    return i >= d->own.first[d->rank] && i < d->own.first[d->rank + 1];
}

static void dense_queue_bucket(DistOptim *d, int b) {
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
        d->bh[b] = comm_ireduce_scatter_avg_f32(st, d->rs_out + d->rs_off[b], counts);
        free(counts);
    }
    d->bstate[b] = 2;
}

static void dense_unpack_bucket(DistOptim *d, int b) {
    if (!d->cfg.zero) {
        const float *st = d->stage + d->bucket_off[b];
        for (int k = 0; k < d->bn[b]; k++) {
            const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
            memcpy(d->grads + s->offset, st, s->numel * sizeof(float));
            st += s->numel;
        }
    } else {
        const float *st = d->rs_out + d->rs_off[b];
        for (int k = 0; k < d->bn[b]; k++) {
            int i = d->bslices[b][k];
            if (!is_owned_slice(d, i)) continue;
            const ParamSlice *s = &d->tab->slices[i];
            memcpy(d->grads + s->offset, st, s->numel * sizeof(float));
            st += s->numel;
        }
    }
}

static void topk_begin(DistOptim *d, int t);
static void topk_queue_bucket(DistOptim *d, int b);

void distopt_bucket_ready(void *ctx, int bucket) {
    DistOptim *d = ctx;
    if (bucket < 0 || bucket >= d->nb) fatal("distopt_bucket_ready: bucket %d outside 0..%d", bucket, d->nb - 1);
    if (d->bstate[bucket]) return;
    if (d->cfg.opt.kind == OPT_TOPK_EF) {
        /* the step number is not passed here: the one after the last completed step; distopt_step redoes the
         * selection if the loop's t differs (after a skipped step) */
        if (!d->step_begun) topk_begin(d, d->last_t + 1);
        topk_queue_bucket(d, bucket);
        return;
    }
    if (d->cfg.opt.kind != OPT_SCAPE) {
        dense_queue_bucket(d, bucket);
        return;
    }
    if (!d->step_begun) scape_begin(d);
    if (!d->have_cur) return; /* step 1: the mask is made from all gradients in distopt_step */
    scape_c_bucket(d, bucket);
    scape_queue_bucket(d, bucket);
}

/* Sum of squares in double over [lo, hi) in fixed 64Ki chunks added in order: the same bits for any thread
 * count, so every rank takes the same clip and skip decisions. */
static double sumsq(const float *x, size_t lo, size_t hi) {
    const size_t CH = 65536;
    size_t nch = (hi - lo + CH - 1) / CH;
    if (nch == 0) return 0;
    double *part = xmalloc(nch * sizeof(double), "norm partials");
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nch; c++) {
        size_t a = lo + c * CH, e = a + CH < hi ? a + CH : hi;
        double s = 0;
        for (size_t j = a; j < e; j++) s += (double)x[j] * (double)x[j];
        part[c] = s;
    }
    double s = 0;
    for (size_t c = 0; c < nch; c++) s += part[c];
    free(part);
    return s;
}

static void end_step(DistOptim *d) {
    const size_t CH = 1 << 18;
    #pragma omp parallel for schedule(static)
    for (size_t a = 0; a < d->P; a += CH) memset(d->grads + a, 0, (d->P - a < CH ? d->P - a : CH) * sizeof(float));
    for (int b = 0; b < d->nb; b++) {
        d->bstate[b] = 0;
        d->bh[b] = 0;
    }
    d->step_begun = 0;
}

static int dense_step(DistOptim *d, int t, float lr, float *grad_norm) {
    for (int b = 0; b < d->nb; b++)
        if (!d->bstate[b]) dense_queue_bucket(d, b);
    for (int b = 0; b < d->nb; b++) {
        comm_wait(d->bh[b]);
        dense_unpack_bucket(d, b);
    }
    double ss = sumsq(d->grads, d->slo, d->shi);
    if (d->cfg.zero) comm_allreduce_sum_f64(&ss, 1);
    float norm = (float)sqrt(ss);
    *grad_norm = norm;
    if (!isfinite(norm)) {
        end_step(d);
        return 1;
    }
    if (d->cfg.clip > 0 && norm > d->cfg.clip) {
        float sc = d->cfg.clip / (norm + 1e-6f);
        for (size_t j = d->slo; j < d->shi; j++) d->grads[j] *= sc;
    }
    /* m, v hold [slo, shi); the update indexes them by flat element, hence the shifted base */
    if (d->cfg.opt.kind == OPT_ADAMW)
        adamw_update(d->tab, d->params, d->grads, d->m - d->slo, d->v - d->slo, d->slo, d->shi, t, lr, &d->cfg.opt);
    else
        adams_update(d->tab, d->params, d->grads, d->m - d->slo, d->slo, d->shi, t, lr, &d->cfg.opt);
    if (d->cfg.zero) {
        size_t *counts = xmalloc((size_t)d->world * sizeof(size_t), "shard counts");
        for (int r = 0; r < d->world; r++) counts[r] = d->own.hi[r] - d->own.lo[r];
        comm_wait(comm_iallgatherv(d->params, counts, sizeof(float)));
        free(counts);
    }
    end_step(d);
    d->last_t = t;
    return 0;
}

/* ---- mask statistics ---- */

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

void distopt_mask_stats_enable(DistOptim *d, int on) {
    d->st_on = on && d->rank == 0 && (d->cfg.opt.kind == OPT_SCAPE || d->cfg.opt.kind == OPT_TOPK_EF);
    if (!d->st_on || d->st_slice) return;
    int n = d->tab->n;
    d->st_slice = xmalloc((size_t)n * sizeof(int), "mask statistics");
    d->st_jm = xmalloc((size_t)n * sizeof(double), "mask statistics");
    d->st_em = xmalloc((size_t)n * sizeof(double), "mask statistics");
    d->st_jg = xmalloc((size_t)n * sizeof(double), "mask statistics");
    d->st_eg = xmalloc((size_t)n * sizeof(double), "mask statistics");
    d->st_gprev = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "mask statistics");
    d->st_gprev_t = -1;
    if (d->cfg.opt.kind == OPT_SCAPE) {
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

/* Fills d->st for step t. gmask/gvec: the raw-gradient mask of this step and the vector its energy is of (SCAPE:
 * made here from st_g; topk-ef: the selection and acc). mprev: M_{t-1} (SCAPE, NULL if none). */
static void stats_compute(DistOptim *d, int t, const uint8_t *gmask, const float *gvec, const uint8_t *mprev,
                          const float *c) {
    int scape = d->cfg.opt.kind == OPT_SCAPE;
    int have_gprev = d->st_gprev_t == t - 1;
    int n = 0;
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        if (!slice_sparse(d, s)) continue;
        size_t lo = s->offset, hi = s->offset + s->numel;
        d->st_slice[n] = i;
        d->st_jg[n] = have_gprev ? mask_jaccard(gmask, d->st_gprev, lo, hi) : NAN;
        d->st_eg[n] = mask_energy(gmask, gvec, lo, hi);
        if (scape) {
            d->st_jm[n] = mprev ? mask_jaccard(d->mask_cur, mprev, lo, hi) : NAN;
            d->st_em[n] = mask_energy(d->mask_cur, c, lo, hi);
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

/* SCAPE's statistics at step t, before the next mask goes out: the hypothetical raw-gradient mask G_t from the
 * copy of g made per bucket, M_t vs M_{t-1}. */
static void scape_stats(DistOptim *d, int t, int have_prev) {
    double dens = scape_density(d->cfg.density, d->cfg.density_start, d->cfg.density_warmup, t);
    memset(d->st_gcur, 0, mask_bytes(d->P));
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        if (!slice_sparse(d, s)) continue;
        scape_topk_mask(d->st_g + s->offset, s->numel, scape_k(dens, s->numel), d->st_gcur, s->offset, d->st_tmp);
    }
    stats_compute(d, t, d->st_gcur, d->st_g, have_prev ? d->mask_next : NULL, d->grads);
}

/* ---- topk-ef pieces (formulas at distopt_create in dist.h) ---- */

/* Start of step t's communication: K_b per bucket from the density at t, room for the all-gathers, S_t cleared. */
static void topk_begin(DistOptim *d, int t) {
    double dens = scape_density(d->cfg.density, d->cfg.density_start, d->cfg.density_warmup, t);
    size_t K = 0;
    for (int b = 0; b < d->nb; b++) {
        d->pair_off[b] = K;
        size_t kb = 0;
        for (int k = 0; k < d->bn[b]; k++) {
            const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
            kb += slice_sparse(d, s) ? scape_k(dens, s->numel) : s->numel;
        }
        d->bucket_k[b] = kb;
        K += kb;
    }
    size_t need = K * (size_t)d->world;
    if (need > d->pairs_cap) { /* nothing is in flight at a step's start, so the buffer may move */
        free(d->pairs);
        d->pairs = xmalloc((need ? need : 1) * sizeof(TopkPair), "topk-ef all-gather buffer");
        d->pairs_cap = need;
    }
    memset(d->mask_cur, 0, mask_bytes(d->P));
    d->cur_t = t;
    d->step_begun = 1;
}

/* acc = e + g over bucket b into stage, S_t of its slices, this rank's pairs, and the bucket's all-gather. */
static void topk_queue_bucket(DistOptim *d, int b) {
    double dens = scape_density(d->cfg.density, d->cfg.density_start, d->cfg.density_warmup, d->cur_t);
    float *acc = d->stage;
    TopkPair *all = d->pairs + (size_t)d->world * d->pair_off[b];
    TopkPair *out = all + (size_t)d->rank * d->bucket_k[b];
    size_t q = 0;
    for (int k = 0; k < d->bn[b]; k++) {
        const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
        size_t lo = s->offset, hi = s->offset + s->numel;
        for (size_t j = lo; j < hi; j++) acc[j] = d->r[j] + d->grads[j];
        if (!slice_sparse(d, s)) mask_set_range(d->mask_cur, lo, s->numel);
        else scape_topk_mask(acc + lo, s->numel, scape_k(dens, s->numel), d->mask_cur, lo, d->topk_tmp);
        for (size_t j = lo; j < hi; j++)
            if (mask_get(d->mask_cur, j)) out[q++] = (TopkPair){(uint32_t)j, acc[j]};
    }
    if (q != d->bucket_k[b]) fatal("topk-ef: bucket %d selected %zu coordinates, expected %zu", b, q, d->bucket_k[b]);
    size_t *counts = xmalloc((size_t)d->world * sizeof(size_t), "topk-ef counts");
    for (int r = 0; r < d->world; r++) counts[r] = d->bucket_k[b];
    d->bh[b] = comm_iallgatherv(all, counts, sizeof(TopkPair));
    free(counts);
    d->bstate[b] = 2;
}

static int topk_step(DistOptim *d, int t, float lr, float *grad_norm) {
    if (d->step_begun && d->cur_t != t) {
        /* buckets went out for another step number (the loop retried or skipped one): redo them for t */
        for (int b = 0; b < d->nb; b++) {
            comm_wait(d->bh[b]);
            d->bstate[b] = 0;
        }
        d->step_begun = 0;
    }
    if (!d->step_begun) topk_begin(d, t);
    for (int b = 0; b < d->nb; b++)
        if (!d->bstate[b]) topk_queue_bucket(d, b);
    for (int b = 0; b < d->nb; b++) comm_wait(d->bh[b]);
    const float *acc = d->stage;
    if (d->dbg_c) memcpy(d->dbg_c, acc, d->P * sizeof(float));
    if (d->dbg_s)
        for (size_t j = 0; j < d->P; j++) d->dbg_s[j] = mask_get(d->mask_cur, j) ? acc[j] : 0.0f;
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
        const TopkPair *all = d->pairs + (size_t)d->world * d->pair_off[b];
        size_t kb = d->bucket_k[b];
        for (size_t q = 0; q < kb; q++) g[all[q].idx] = all[q].val;
        for (int r = 1; r < d->world; r++)
            for (size_t q = 0; q < kb; q++) g[all[(size_t)r * kb + q].idx] += all[(size_t)r * kb + q].val;
    }
    if (d->world > 1)
        for (size_t j = 0; j < d->P; j++) g[j] /= fN;
    if (d->dbg_ghat) memcpy(d->dbg_ghat, g, d->P * sizeof(float));
    double ss = sumsq(g, 0, d->P);
    float norm = bad ? NAN : (float)sqrt(ss);
    *grad_norm = norm;
    d->cur_t = -1;
    if (!isfinite(norm)) {
        end_step(d);
        return 1;
    }
    if (d->st_on) stats_compute(d, t, d->mask_cur, acc, NULL, NULL);
    for (size_t j = 0; j < d->P; j++) d->r[j] = mask_get(d->mask_cur, j) ? 0.0f : acc[j];
    if (d->cfg.clip > 0 && norm > d->cfg.clip) {
        float sc = d->cfg.clip / (norm + 1e-6f);
        for (size_t j = 0; j < d->P; j++) g[j] *= sc;
    }
    adamw_update(d->tab, d->params, g, d->m, d->v, 0, d->P, t, lr, &d->cfg.opt);
    d->last_k = 0;
    for (int b = 0; b < d->nb; b++) d->last_k += d->bucket_k[b];
    d->have_cur = 1;
    end_step(d);
    d->last_t = t;
    return 0;
}

/* Calls fn for every masked coordinate in payload order (bucket by bucket, slices in memory order, indices
 * ascending) with its compact index q. Written as a macro so the hot loops stay inlined. */
#define FOR_MASKED(d, s, j, q, ...)                                                                          \
    do {                                                                                                      \
        size_t q = 0;                                                                                         \
        for (int b_ = 0; b_ < (d)->nb; b_++) {                                                                \
            q = (d)->bucket_off[b_];                                                                          \
            for (int k_ = 0; k_ < (d)->bn[b_]; k_++) {                                                        \
                const ParamSlice *s = &(d)->tab->slices[(d)->bslices[b_][k_]];                                \
                for (size_t j = s->offset; j < s->offset + s->numel; j++) {                                   \
                    __VA_ARGS__                                                                               \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    } while (0)

/* ch_q: each chunk's first index into the compact payload (stage): bucket b's values start at bucket_off[b]
 * and follow its slices in memory order, as scape_queue_bucket packed them. */
static void scape_chunk_offsets(DistOptim *d) {
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < d->nch; c++) d->ch_q[c] = mask_count(d->mask_cur, d->ch_lo[c], d->ch_hi[c]);
    size_t q = 0;
    for (size_t c = 0; c < d->nch; c++) {
        if (c == 0 || d->ch_bucket[c] != d->ch_bucket[c - 1]) q = d->bucket_off[d->ch_bucket[c]];
        size_t n = d->ch_q[c];
        d->ch_q[c] = q;
        q += n;
    }
}

/* Bits [j, j + n) of the current mask (n <= 64), and the word with all n bits set. */
static inline uint64_t mask_word(const uint8_t *M, size_t j, size_t n, uint64_t *full) {
    *full = n == 64 ? ~0ull : (1ull << n) - 1;
    return mask_load64(M, j) & *full;
}

/* One pass over every coordinate, word by word over the mask: per chunk, the sum of g_hat^2 on M_t (double) and
 * whether any c (in grads) is not finite. Returns the sum of the chunk sums in chunk order. */
static double scape_norm_pass(DistOptim *d) {
    const float b1 = d->cfg.opt.beta1, omb1 = 1.0f - b1;
    const float *c = d->grads, *m = d->m, *bv = d->stage;
    const uint8_t *M = d->mask_cur;
    #pragma omp parallel for schedule(dynamic, 4)
    for (size_t ch = 0; ch < d->nch; ch++) {
        size_t q = d->ch_q[ch], hi = d->ch_hi[ch];
        double ss = 0;
        int bad = 0;
        for (size_t j = d->ch_lo[ch]; j < hi; j += 64) {
            size_t n = hi - j < 64 ? hi - j : 64;
            uint64_t full, w = mask_word(M, j, n, &full);
            for (size_t i = 0; i < n; i++) bad |= !isfinite(c[j + i]);
            if (w == full) {
                for (size_t i = 0; i < n; i++) {
                    float gh = (bv[q + i] - b1 * m[j + i]) / omb1;
                    ss += (double)gh * (double)gh;
                }
                q += n;
            } else {
                for (; w; w &= w - 1) {
                    size_t i = (size_t)__builtin_ctzll(w);
                    float gh = (bv[q++] - b1 * m[j + i]) / omb1;
                    ss += (double)gh * (double)gh;
                }
            }
        }
        d->ch_ss[ch] = ss;
        d->ch_bad[ch] = bad;
    }
    double ss = 0;
    for (size_t ch = 0; ch < d->nch; ch++) ss += d->ch_ss[ch];
    return ss;
}

/* Error feedback r <- c (1 - M_t), then the update of every coordinate: AdamS on M_t, decoupled weight decay
 * only (and m = 0) off it. Word by word over the mask, chunks in parallel; every coordinate's arithmetic is
 * independent of the others, so the thread count cannot change a bit. */
static void scape_update_pass(DistOptim *d, int t, float lr, int clipped, float sc) {
    const float b1 = d->cfg.opt.beta1, b2 = d->cfg.opt.beta2, eps = d->cfg.opt.eps, omb1 = 1.0f - b1;
    const float bc1 = (float)(1.0 - pow((double)b1, t));
    const float sqrt_bc2 = (float)sqrt(1.0 - pow((double)b2, t));
    float *p = d->params, *m = d->m, *r = d->r;
    const float *c = d->grads, *bv = d->stage, *qe = d->qerr;
    const float fN = (float)d->world;
    const uint8_t *M = d->mask_cur;
    /* the residual on M_t: 0, or with the bf16 payload what rounding lost (distopt_create's comment) */
#define RESIDUAL_ON(j, q) (qe ? (c[j] - bf16_to_f32(bf16_from_f32(c[j]))) + fN * qe[q] : 0.0f)
    #pragma omp parallel for schedule(dynamic, 4)
    for (size_t ch = 0; ch < d->nch; ch++) {
        const ParamSlice *s = &d->tab->slices[d->ch_slice[ch]];
        const float wd = s->decay ? d->cfg.opt.weight_decay : 0.0f;
        size_t q = d->ch_q[ch], hi = d->ch_hi[ch];
        for (size_t j = d->ch_lo[ch]; j < hi; j += 64) {
            size_t n = hi - j < 64 ? hi - j : 64;
            uint64_t full, w = mask_word(M, j, n, &full);
            if (w == full) {
                for (size_t i = 0; i < n; i++) {
                    r[j + i] = RESIDUAL_ON(j + i, q + i);
                    scape_update_on(&p[j + i], &m[j + i], bv[q + i], sc, clipped, b1, omb1, b2, eps, bc1, sqrt_bc2, lr, wd);
                }
                q += n;
            } else {
                for (size_t i = 0; i < n; i++) {
                    if ((w >> i) & 1) {
                        r[j + i] = RESIDUAL_ON(j + i, q);
                        scape_update_on(&p[j + i], &m[j + i], bv[q++], sc, clipped, b1, omb1, b2, eps, bc1, sqrt_bc2, lr, wd);
                    } else {
                        r[j + i] = c[j + i];
                        m[j + i] = 0.0f;
                        p[j + i] -= lr * (wd * p[j + i]);
                    }
                }
            }
        }
    }
#undef RESIDUAL_ON
}

static int scape_step(DistOptim *d, int t, float lr, float *grad_norm) {
    const float b1 = d->cfg.opt.beta1, omb1 = 1.0f - b1;
    if (!d->step_begun) scape_begin(d);
    int bootstrapped = 0;
    if (!d->have_cur) {
        /* first step: c for everything, then M_1 = all ones (d(1) = 1) or the owners' top-k, gathered now */
        for (int b = 0; b < d->nb; b++) scape_c_bucket(d, b);
        double d1 = scape_density(d->cfg.density, d->cfg.density_start, d->cfg.density_warmup, t);
        if (d1 >= 1.0) {
            mask_set_range(d->mask_cur, 0, d->P);
        } else {
            d->next_h = scape_make_mask(d, d1);
            scape_collect_next(d);
            uint8_t *tmp = d->mask_cur;
            d->mask_cur = d->mask_next;
            d->mask_next = tmp;
            d->have_next = 0;
        }
        d->have_cur = 1;
        bootstrapped = 1;
    }
    for (int b = 0; b < d->nb; b++) {
        if (d->bstate[b] == 0) scape_c_bucket(d, b);
        if (d->bstate[b] == 1) scape_queue_bucket(d, b);
    }
    size_t K = 0;
    for (int b = 0; b < d->nb; b++) {
        comm_wait(d->bh[b]);
        K += d->bucket_k[b];
        if (d->stage16) {
            /* b in bf16 -> the fp32 payload buffer the passes below read */
            float *bv = d->stage + d->bucket_off[b];
            const uint16_t *b16 = d->stage16 + d->bucket_off[b];
            size_t Kb = d->bucket_k[b];
            #pragma omp parallel for schedule(static) if (Kb > 65536)
            for (size_t q = 0; q < Kb; q++) bv[q] = bf16_to_f32(b16[q]);
        }
    }
    if (d->dbg_c) memcpy(d->dbg_c, d->grads, d->P * sizeof(float));

    /* g_hat = (m_t - beta1 m_{t-1}) / (1 - beta1) on M_t (SCAPE.md section 3 item 5); its norm for clipping */
    scape_chunk_offsets(d);
    double ss = scape_norm_pass(d);
    if (d->dbg_ghat) {
        memset(d->dbg_ghat, 0, d->P * sizeof(float));
        FOR_MASKED(d, s, j, q, {
            if (mask_get(d->mask_cur, j)) {
                d->dbg_ghat[j] = (d->stage[q] - b1 * d->m[j]) / omb1;
                q++;
            }
        });
    }
    float norm = (float)sqrt(ss);
    /* A non-finite c off the mask would never reach g_hat but would poison r forever: skip on it too (the norm
     * pass flagged it per chunk). Any rank may hold one, so the decision takes one tiny control all-reduce. */
    int64_t bad = 0;
    for (size_t c = 0; c < d->nch; c++) bad |= d->ch_bad[c];
    comm_allreduce_max_i64(&bad, 1);
    if (bad) norm = NAN;
    *grad_norm = norm;
    if (!isfinite(norm)) {
        /* skipped: put the masks back as they were before the step, so m stays supported on mask_cur */
        if (bootstrapped) d->have_cur = 0;
        else if (d->swapped) {
            uint8_t *tmp = d->mask_cur;
            d->mask_cur = d->mask_next;
            d->mask_next = tmp;
            d->have_next = 1;
        }
        end_step(d);
        return 1;
    }
    float sc = 1.0f;
    int clipped = d->cfg.clip > 0 && norm > d->cfg.clip;
    if (clipped) sc = d->cfg.clip / (norm + 1e-6f);

    if (d->st_on) scape_stats(d, t, d->swapped && !bootstrapped);
    /* next mask from |c| (c still in grads), gathered while the update and the next forward/backward run */
    d->next_h = scape_make_mask(d, scape_density(d->cfg.density, d->cfg.density_start, d->cfg.density_warmup, t + 1));

    /* error feedback, then AdamS on M_t and decay only elsewhere (SCAPE.md section 3 items 3-7) */
    scape_update_pass(d, t, lr, clipped, sc);
    d->last_k = K;
    end_step(d);
    d->last_t = t;
    return 0;
}

int distopt_step(DistOptim *d, int t, float lr, float *grad_norm) {
    if (t < 1) fatal("distopt_step: step %d < 1; steps count from 1", t);
    float gn = 0;
    d->st_valid = 0;
    int skipped = d->cfg.opt.kind == OPT_SCAPE     ? scape_step(d, t, lr, &gn)
                  : d->cfg.opt.kind == OPT_TOPK_EF ? topk_step(d, t, lr, &gn)
                                                   : dense_step(d, t, lr, &gn);
    if (grad_norm) *grad_norm = gn;
    return skipped;
}

/* ---- inspection ---- */

size_t distopt_payload_count(const DistOptim *d) { return d->last_k; }

void distopt_owner_range(const DistOptim *d, int rank, size_t *lo, size_t *hi) {
    *lo = d->own.lo[rank];
    *hi = d->own.hi[rank];
}

const float *distopt_moment(const DistOptim *d) { return d->m; }
const float *distopt_residual(const DistOptim *d) { return d->r; }

const uint8_t *distopt_mask(DistOptim *d, int next) {
    if (d->cfg.opt.kind == OPT_TOPK_EF) return !next && d->have_cur ? d->mask_cur : NULL;
    if (d->cfg.opt.kind != OPT_SCAPE) return NULL;
    if (!next) return d->have_cur ? d->mask_cur : NULL;
    scape_collect_next(d);
    return d->have_next ? d->mask_next : NULL;
}

void distopt_debug_capture(DistOptim *d, float *c, float *s, float *ghat) {
    d->dbg_c = c;
    d->dbg_s = s;
    d->dbg_ghat = ghat;
}

/* ---- checkpoint blob ----
 * header, then
 *   adamw/adams: m (and v) over [lo, hi) (the owned shard with ZeRO-1, else everything)
 *   scape:       r (P), mask_cur (P bits, if have_cur), mask_next (P bits, if have_next), m on mask_cur (K)
 *   topk-ef:     e (P), m (P), v (P)
 * Every rank's blob holds the shared SCAPE state (masks, m) too, so a rank can resume from its own file alone. */
typedef struct {
    uint32_t magic, version;
    int32_t kind, world, rank, zero, last_t, have_cur, have_next, pad;
    uint64_t P, lo, hi, K;
} BlobHeader;
_Static_assert(sizeof(BlobHeader) == 72, "the blob header layout is part of the checkpoint format");

/* masks are padded to 8 bytes in the blob so the floats after them stay aligned */
static size_t blob_mask_bytes(size_t P) { return (mask_bytes(P) + 7) / 8 * 8; }

static size_t scape_m_count(const DistOptim *d) { return d->have_cur ? mask_count(d->mask_cur, 0, d->P) : 0; }

size_t distopt_state_bytes(const DistOptim *d) {
    DistOptim *dm = (DistOptim *)d; /* the pending mask all-gather must land before the state is complete */
    size_t n = sizeof(BlobHeader);
    if (d->cfg.opt.kind == OPT_SCAPE) {
        scape_collect_next(dm);
        n += d->P * sizeof(float);
        if (d->have_cur) n += blob_mask_bytes(d->P);
        if (d->have_next) n += blob_mask_bytes(d->P);
        n += scape_m_count(d) * sizeof(float);
    } else if (d->cfg.opt.kind == OPT_TOPK_EF) {
        n += 3 * d->P * sizeof(float);
    } else {
        n += (d->shi - d->slo) * sizeof(float) * (d->cfg.opt.kind == OPT_ADAMW ? 2 : 1);
    }
    return n;
}

void distopt_save(const DistOptim *d, void *blob) {
    DistOptim *dm = (DistOptim *)d;
    if (d->cfg.opt.kind == OPT_SCAPE) scape_collect_next(dm);
    BlobHeader h = {.magic = DIST_MAGIC, .version = DIST_VERSION, .kind = (int32_t)d->cfg.opt.kind,
                    .world = d->world, .rank = d->rank, .zero = d->cfg.zero, .last_t = d->last_t,
                    .have_cur = d->have_cur, .have_next = d->have_next, .P = d->P, .lo = d->slo, .hi = d->shi};
    char *p = (char *)blob + sizeof h;
    if (d->cfg.opt.kind == OPT_SCAPE) {
        distopt_scape_blob_save(blob, d->world, d->rank, d->last_t, d->P, d->r, d->have_cur ? d->mask_cur : NULL,
                                d->have_next ? d->mask_next : NULL, d->m);
        return;
    } else if (d->cfg.opt.kind == OPT_TOPK_EF) {
        memcpy(p, d->r, d->P * sizeof(float));
        memcpy(p + d->P * sizeof(float), d->m, d->P * sizeof(float));
        memcpy(p + 2 * d->P * sizeof(float), d->v, d->P * sizeof(float));
    } else {
        distopt_dense_blob_save(blob, d->cfg.opt.kind, d->world, d->rank, d->cfg.zero, d->last_t, d->P, d->slo,
                                d->shi, d->m, d->v);
        return;
    }
    memcpy(blob, &h, sizeof h);
}

static BlobHeader check_blob_kind(OptimizerKind kind, size_t P, const void *blob, size_t size, int i) {
    BlobHeader h;
    if (size < sizeof h) fatal("optimizer state of rank %d is %zu bytes, shorter than its header; the checkpoint is truncated", i, size);
    memcpy(&h, blob, sizeof h);
    if (h.magic != DIST_MAGIC || h.version != DIST_VERSION)
        fatal("optimizer state of rank %d: bad magic/version (%08x v%u); not a checkpoint of this runtime", i, h.magic, h.version);
    if (h.kind != (int32_t)kind)
        fatal("optimizer state of rank %d was written by optimizer kind %d, this run uses %d; resume with the same --optimizer", i, h.kind, (int)kind);
    if (h.P != P)
        fatal("optimizer state of rank %d covers %llu parameters, the model has %zu; resume with the same --model", i, (unsigned long long)h.P, P);
    size_t want = sizeof h;
    if (h.kind == OPT_SCAPE) {
        want += h.P * sizeof(float) + (h.have_cur ? blob_mask_bytes(h.P) : 0) + (h.have_next ? blob_mask_bytes(h.P) : 0) + h.K * sizeof(float);
    } else if (h.kind == OPT_TOPK_EF) {
        want += 3 * h.P * sizeof(float);
    } else {
        if (h.lo > h.hi || h.hi > h.P) fatal("optimizer state of rank %d: bad range [%llu, %llu)", i, (unsigned long long)h.lo, (unsigned long long)h.hi);
        want += (h.hi - h.lo) * sizeof(float) * (h.kind == OPT_ADAMW ? 2 : 1);
    }
    if (want != size) fatal("optimizer state of rank %d is %zu bytes, expected %zu from its header; the checkpoint is corrupt", i, size, want);
    return h;
}

static BlobHeader check_blob(const DistOptim *d, const void *blob, size_t size, int i) {
    return check_blob_kind(d->cfg.opt.kind, d->P, blob, size, i);
}

/* ---- the dense blob from explicit views (shared with the device updater, cuda/updater.cu) ---- */

size_t distopt_dense_blob_bytes(OptimizerKind kind, size_t lo, size_t hi) {
    return sizeof(BlobHeader) + (hi - lo) * sizeof(float) * (kind == OPT_ADAMW ? 2 : 1);
}

void distopt_dense_blob_save(void *blob, OptimizerKind kind, int world, int rank, int zero, int last_t, size_t P,
                             size_t lo, size_t hi, const float *m, const float *v) {
    if (kind != OPT_ADAMW && kind != OPT_ADAMS) fatal("distopt_dense_blob_save: optimizer kind %d is not dense", (int)kind);
    BlobHeader h = {.magic = DIST_MAGIC, .version = DIST_VERSION, .kind = (int32_t)kind, .world = world,
                    .rank = rank, .zero = zero, .last_t = last_t, .have_cur = 0, .have_next = 0, .P = P, .lo = lo,
                    .hi = hi};
    char *p = (char *)blob + sizeof h;
    size_t n = hi - lo;
    memcpy(p, m, n * sizeof(float));
    if (kind == OPT_ADAMW) memcpy(p + n * sizeof(float), v, n * sizeof(float));
    memcpy(blob, &h, sizeof h);
}

/* Assembles [lo, hi) of m (and v) from whichever blobs cover it; fatal() if they do not. */
static void dense_assemble(OptimizerKind kind, size_t lo, size_t hi, float *m, float *v, const void *const *blobs,
                           int n_blobs) {
    size_t n = hi - lo;
    size_t covered = 0;
    for (int i = 0; i < n_blobs; i++) {
        BlobHeader h;
        memcpy(&h, blobs[i], sizeof h);
        size_t a = h.lo > lo ? h.lo : lo, e = h.hi < hi ? h.hi : hi;
        if (a >= e) continue;
        const float *bm = (const float *)((const char *)blobs[i] + sizeof h);
        const float *bv = bm + (h.hi - h.lo);
        memcpy(m + (a - lo), bm + (a - h.lo), (e - a) * sizeof(float));
        if (kind == OPT_ADAMW) memcpy(v + (a - lo), bv + (a - h.lo), (e - a) * sizeof(float));
        covered += e - a;
        if (h.lo <= lo && h.hi >= hi) break; /* one blob covers everything (non-ZeRO runs) */
    }
    if (covered < n) fatal("optimizer state does not cover this rank's parameters [%zu, %zu); pass the state of all saved ranks", lo, hi);
}

int distopt_dense_blob_load(OptimizerKind kind, size_t P, int world, size_t lo, size_t hi, float *m, float *v,
                            const void *const *blobs, const size_t *sizes, int n_blobs) {
    if (kind != OPT_ADAMW && kind != OPT_ADAMS) fatal("distopt_dense_blob_load: optimizer kind %d is not dense", (int)kind);
    if (n_blobs < 1) fatal("distopt_load: no optimizer state given");
    BlobHeader h0 = check_blob_kind(kind, P, blobs[0], sizes[0], 0);
    for (int i = 1; i < n_blobs; i++) check_blob_kind(kind, P, blobs[i], sizes[i], i);
    if (n_blobs == 1 && h0.world != world && (h0.lo > lo || h0.hi < hi))
        fatal("optimizer state was saved by %d ranks, this run has %d; pass the state of all %d saved ranks", h0.world, world, h0.world);
    dense_assemble(kind, lo, hi, m, v, blobs, n_blobs);
    return h0.last_t;
}

/* The per-rank residual (SCAPE's r, topk-ef's e) that every state blob starts with: this rank's own when the world
 * is unchanged, else the mean over all saved ranks, summed in rank order (SCAPE.md section 8: the mean residual is
 * what the algorithm sees). r: (P). */
static void load_residual_into(float *r, size_t P, int world, int rank, const void *const *blobs, int n_blobs,
                               int saved_world) {
    if (n_blobs == 1 || saved_world == world) {
        int src = n_blobs == 1 ? 0 : rank;
        memcpy(r, (const char *)blobs[src] + sizeof(BlobHeader), P * sizeof(float));
        return;
    }
    memset(r, 0, P * sizeof(float));
    for (int i = 0; i < n_blobs; i++) {
        const float *ri = (const float *)((const char *)blobs[i] + sizeof(BlobHeader));
        for (size_t j = 0; j < P; j++) r[j] += ri[j];
    }
    for (size_t j = 0; j < P; j++) r[j] /= (float)n_blobs;
}
static void load_residual(DistOptim *d, const void *const *blobs, int n_blobs, int saved_world) {
    load_residual_into(d->r, d->P, d->world, d->rank, blobs, n_blobs, saved_world);
}

/* ---- the SCAPE blob from explicit views (shared with the device updater, cuda/scape_updater.cuh) ---- */

size_t distopt_scape_blob_bytes(size_t P, int have_cur, int have_next, size_t K) {
    return sizeof(BlobHeader) + P * sizeof(float) + (have_cur ? blob_mask_bytes(P) : 0) +
           (have_next ? blob_mask_bytes(P) : 0) + (have_cur ? K : 0) * sizeof(float);
}

void distopt_scape_blob_save(void *blob, int world, int rank, int last_t, size_t P, const float *r,
                             const uint8_t *mask_cur, const uint8_t *mask_next, const float *m) {
    BlobHeader h = {.magic = DIST_MAGIC, .version = DIST_VERSION, .kind = (int32_t)OPT_SCAPE, .world = world,
                    .rank = rank, .zero = 0, .last_t = last_t, .have_cur = mask_cur != NULL,
                    .have_next = mask_next != NULL, .P = P, .lo = 0, .hi = P};
    char *p = (char *)blob + sizeof h;
    h.K = mask_cur ? mask_count(mask_cur, 0, P) : 0;
    memcpy(p, r, P * sizeof(float));
    p += P * sizeof(float);
    if (mask_cur) {
        memset(p, 0, blob_mask_bytes(P));
        memcpy(p, mask_cur, mask_bytes(P));
        p += blob_mask_bytes(P);
    }
    if (mask_next) {
        memset(p, 0, blob_mask_bytes(P));
        memcpy(p, mask_next, mask_bytes(P));
        p += blob_mask_bytes(P);
    }
    if (mask_cur) scape_gather_masked(m, mask_cur, 0, P, (float *)p);
    memcpy(blob, &h, sizeof h);
}

int distopt_scape_blob_load(size_t P, int world, int rank, float *r, uint8_t *mask_cur, uint8_t *mask_next,
                            int *have_cur, int *have_next, float *m, const void *const *blobs, const size_t *sizes,
                            int n_blobs) {
    if (n_blobs < 1) fatal("distopt_load: no optimizer state given");
    BlobHeader h0 = check_blob_kind(OPT_SCAPE, P, blobs[0], sizes[0], 0);
    for (int i = 1; i < n_blobs; i++) check_blob_kind(OPT_SCAPE, P, blobs[i], sizes[i], i);
    if (n_blobs == 1 && h0.world != world)
        fatal("optimizer state was saved by %d ranks, this run has %d; pass the state of all %d saved ranks", h0.world, world, h0.world);
    const size_t PB = mask_bytes(P);
    load_residual_into(r, P, world, rank, blobs, n_blobs, h0.world);
    const char *p = (const char *)blobs[0] + sizeof(BlobHeader) + P * sizeof(float);
    *have_cur = h0.have_cur;
    *have_next = h0.have_next;
    memset(mask_cur, 0, PB);
    memset(mask_next, 0, PB);
    if (h0.have_cur) {
        memcpy(mask_cur, p, PB);
        p += blob_mask_bytes(P);
    }
    if (h0.have_next) {
        memcpy(mask_next, p, PB);
        p += blob_mask_bytes(P);
    }
    memset(m, 0, P * sizeof(float));
    if (h0.have_cur) {
        if (mask_count(mask_cur, 0, P) != h0.K) fatal("optimizer state of rank 0: mask and moment sizes disagree; the checkpoint is corrupt");
        const float *mv = (const float *)p;
        size_t q = 0;
        for (size_t j = 0; j < P; j++)
            if (mask_get(mask_cur, j)) m[j] = mv[q++];
    }
    return h0.last_t;
}

void distopt_load(DistOptim *d, const void *const *blobs, const size_t *sizes, int n_blobs) {
    if (n_blobs < 1) fatal("distopt_load: no optimizer state given");
    BlobHeader h0 = check_blob(d, blobs[0], sizes[0], 0);
    for (int i = 1; i < n_blobs; i++) check_blob(d, blobs[i], sizes[i], i);
    if (n_blobs == 1 && h0.world != d->world && (h0.kind == OPT_SCAPE || h0.kind == OPT_TOPK_EF || h0.lo > d->slo || h0.hi < d->shi))
        fatal("optimizer state was saved by %d ranks, this run has %d; pass the state of all %d saved ranks", h0.world, d->world, h0.world);
    comm_wait(d->next_h);
    d->next_h = 0;
    d->last_t = h0.last_t;
    for (int b = 0; b < d->nb; b++) d->bstate[b] = 0;
    d->step_begun = 0;
    d->st_gprev_t = -1; /* the Jaccard of the first step after a resume has no previous mask */
    if (d->cfg.opt.kind == OPT_TOPK_EF) {
        /* e_i: this rank's own when the world is unchanged, else the mean over the saved ranks (as SCAPE's r) */
        load_residual(d, blobs, n_blobs, h0.world);
        const float *mv = (const float *)((const char *)blobs[0] + sizeof(BlobHeader)) + d->P;
        memcpy(d->m, mv, d->P * sizeof(float));
        memcpy(d->v, mv + d->P, d->P * sizeof(float));
        d->have_cur = 0;
        return;
    }
    if (d->cfg.opt.kind == OPT_SCAPE) {
        distopt_scape_blob_load(d->P, d->world, d->rank, d->r, d->mask_cur, d->mask_next, &d->have_cur,
                                &d->have_next, d->m, blobs, sizes, n_blobs);
        return;
    }
    /* dense: assemble [slo, shi) from whichever blobs cover it */
    dense_assemble(d->cfg.opt.kind, d->slo, d->shi, d->m, d->v, blobs, n_blobs);
}

/* ---- the host Updater (common/updater.h): DistOptim behind the loop's table of functions ---- */

typedef struct {
    Updater base;
    DistOptim *d;
} HostUpdater;

static DistOptim *hu(const Updater *u) { return ((const HostUpdater *)u)->d; }
static void hu_bucket_ready(void *ctx, int bucket) { distopt_bucket_ready(hu(ctx), bucket); }
static int hu_step(Updater *u, int t, float lr, float *grad_norm) { return distopt_step(hu(u), t, lr, grad_norm); }
static float hu_density(const Updater *u, int t) { return distopt_density(hu(u), t); }
static size_t hu_state_bytes(const Updater *u) { return distopt_state_bytes(hu(u)); }
static void hu_save(const Updater *u, void *blob) { distopt_save(hu(u), blob); }
static void hu_load(Updater *u, const void *const *blobs, const size_t *sizes, int n_blobs) {
    distopt_load(hu(u), blobs, sizes, n_blobs);
}
static void hu_mask_stats_enable(Updater *u, int on) { distopt_mask_stats_enable(hu(u), on); }
static const DistMaskStats *hu_mask_stats(const Updater *u) { return distopt_mask_stats(hu(u)); }
static void hu_free(Updater *u) {
    if (!u) return;
    distopt_free(hu(u));
    free(u);
}

Updater *updater_host_create(const ParamTable *tab, float *params, float *grads, const DistConfig *cfg) {
    HostUpdater *h = xcalloc(1, sizeof *h, "host updater");
    h->d = distopt_create(tab, params, grads, cfg);
    Updater *u = &h->base;
    snprintf(u->desc, sizeof u->desc, "host (%s%s)", comm_using_mpi() ? "MPI" : "1 rank", cfg->zero ? ", ZeRO-1" : "");
    u->bucket_ready = hu_bucket_ready;
    u->step = hu_step;
    u->density = hu_density;
    u->state_bytes = hu_state_bytes;
    u->save = hu_save;
    u->load = hu_load;
    u->mask_stats_enable = hu_mask_stats_enable;
    u->mask_stats = hu_mask_stats;
    u->free = hu_free;
    return u;
}

DistOptim *updater_host_distopt(Updater *u) { return u && u->step == hu_step ? hu(u) : NULL; }

/*
 * optim/dist.c - the data-parallel parameter update of optim/dist.h, its entry: creation, the hand-off of each
 * gradient bucket as backward finishes it, and the dispatch of each step on the optimizer kind to the file of
 * that update rule (all of them share DistOptim, optim/dist_impl.h):
 *   dist_dense.c       dense AdamW/AdamS: per-bucket averaging all-reduce, or ZeRO-1 (reduce-scatter to the
 *                      owners, update of the owned shard, all-gather of the parameters)
 *   dist_scape.c       SCAPE (SCAPE.md section 3): c_i per bucket, the compact payload all-reduce, error feedback,
 *                      the masked AdamS update and the owners' next mask on an asynchronous all-gather
 *   dist_scape_zero.c  SCAPE with ZeRO-1: m on the owners only, the payload reduce-scattered to them, their
 *                      updated m and p values all-gathered on the mask
 *   dist_topk_ef.c     the top-k error-feedback baseline (raw-gradient top-k, index/value all-gather, AdamW)
 *   dist_powersgd.c    PowerSGD (rank-r approximations with error feedback, into AdamW)
 *   dist_onebit_adam.c 1-bit Adam (AdamW for a warm-up, then the momentum in 1 bit with error compensation)
 *   dist_demo.c        DeMo (local momentum, top-k DCT coefficients per block all-gathered, sign step)
 *   dist_mask_stats.c  mask stability (Jaccard, kept energy) per slice, on rank 0, when enabled
 *   dist_state.c       every optimizer's checkpoint blob (save, load, other world sizes)
 * Here too: the zeroing at the end of every step, the gradient norm's fixed-order sum, the SCAPE_CHECK_SYNC
 * check and the inspection functions of dist.h.
 * Built with -ffp-contract=off (optim/module.mk) so every rank and every run rounds identically.
 * Not for: the collectives themselves (comm.c), top-k and masks (scape.c), the dense update formulas (optim.c).
 */
#include "optim/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_impl.h"
#include "optim/scape.h"

static const char *const variant_names[] = {"faithful", "catchup", "tensor-nu", "residual-decay"};

const char *scape_variant_name(int variant) {
    return variant >= 0 && variant < (int)(sizeof variant_names / sizeof variant_names[0]) ? variant_names[variant] : "?";
}

int scape_variant_parse(const char *name) {
    for (int i = 0; i < (int)(sizeof variant_names / sizeof variant_names[0]); i++)
        if (strcmp(name, variant_names[i]) == 0) return i;
    return -1;
}

DistOptim *distopt_create(const ParamTable *tab, float *params, float *grads, const DistConfig *cfg) {
    if (cfg->opt.kind != OPT_ADAMW && cfg->opt.kind != OPT_ADAMS && cfg->opt.kind != OPT_SCAPE &&
        cfg->opt.kind != OPT_TOPK_EF && cfg->opt.kind != OPT_POWERSGD && cfg->opt.kind != OPT_ONEBIT_ADAM &&
        cfg->opt.kind != OPT_DEMO)
        fatal("distopt_create: optimizer kind %d is not supported; use adamw, adams, scape, topk-ef, powersgd, "
              "onebit-adam or demo", cfg->opt.kind);
    if (cfg->opt.kind == OPT_DEMO && cfg->zero) fatal("--zero 1 applies to adamw, adams and scape; drop --zero for demo");
    if (cfg->opt.kind == OPT_DEMO && !(cfg->demo_chunk >= 1 && cfg->demo_chunk <= 256 && cfg->demo_topk >= 1 &&
                                       cfg->demo_decay >= 0 && cfg->demo_decay <= 1))
        fatal("DeMo: --demo-chunk %d must be in 1..256, --demo-topk %d >= 1, --demo-decay %g in [0, 1]", cfg->demo_chunk,
              cfg->demo_topk, cfg->demo_decay);
    if (cfg->opt.kind == OPT_DEMO && tab->total > UINT32_MAX)
        fatal("demo sends 32-bit indices but the model has %zu parameters; use a model under 2^32 parameters", tab->total);
    if (cfg->opt.kind == OPT_POWERSGD && cfg->zero) fatal("--zero 1 applies to adamw, adams and scape; drop --zero for powersgd");
    if (cfg->opt.kind == OPT_ONEBIT_ADAM && cfg->zero) fatal("--zero 1 applies to adamw, adams and scape; drop --zero for onebit-adam");
    if (cfg->opt.kind == OPT_ONEBIT_ADAM && cfg->onebit_freeze < 1)
        fatal("--onebit-freeze %d: 1-bit Adam needs at least 1 step of Adam before its variance freezes", cfg->onebit_freeze);
    if (cfg->opt.kind == OPT_POWERSGD && cfg->powersgd_rank < 1)
        fatal("--powersgd-rank %d: the approximation's rank must be >= 1 (1 is the PyTorch hook's default)", cfg->powersgd_rank);
    if (cfg->opt.kind == OPT_POWERSGD && !(cfg->powersgd_eps >= 0))
        fatal("--powersgd-eps %g must be >= 0", cfg->powersgd_eps);
    int sparse = cfg->opt.kind == OPT_SCAPE || cfg->opt.kind == OPT_TOPK_EF;
    if (sparse && !(cfg->density > 0 && cfg->density <= 1))
        fatal("--density %g is outside (0, 1]; 0.1 means 90%% sparsity", cfg->density);
    if (sparse && !(cfg->density_start > 0 && cfg->density_start <= 1))
        fatal("density start %g is outside (0, 1]; use 1 for the default warm-up from dense", cfg->density_start);
    if (cfg->double_residual && (cfg->opt.kind != OPT_SCAPE || cfg->zero))
        fatal("--scape-double-residual-defect reproduces the authors' SCAPE reducer: it needs --optimizer scape "
              "without --zero");
    if (cfg->variant < SCAPE_FAITHFUL || cfg->variant > SCAPE_RESIDUAL_DECAY)
        fatal("distopt_create: SCAPE variant %d is not known; use faithful, catchup, tensor-nu or residual-decay", cfg->variant);
    if (cfg->variant != SCAPE_FAITHFUL && (cfg->opt.kind != OPT_SCAPE || cfg->zero || cfg->payload_bf16 || cfg->double_residual))
        fatal("--scape-variant %s changes SCAPE's update: it needs --optimizer scape with the fp32 payload, without --zero "
              "and --scape-double-residual-defect", scape_variant_name(cfg->variant));
    if (cfg->variant == SCAPE_FAITHFUL && (cfg->variant_cap != 0 || cfg->residual_decay != 0))
        fatal("--scape-variant-cap and --scape-residual-decay belong to --scape-variant catchup, tensor-nu and "
              "residual-decay; drop them or name the variant");
    if ((cfg->variant == SCAPE_CATCHUP || cfg->variant == SCAPE_TENSOR_NU) && !(cfg->variant_cap >= 1 && cfg->variant_cap <= 255))
        fatal("--scape-variant-cap %g is outside [1, 255]; 1 makes %s the faithful update", cfg->variant_cap,
              scape_variant_name(cfg->variant));
    if (cfg->variant == SCAPE_RESIDUAL_DECAY && !(cfg->residual_decay >= 0 && cfg->residual_decay <= 1))
        fatal("--scape-residual-decay %g is outside [0, 1]; 1 keeps the whole residual (faithful)", cfg->residual_decay);
    if (cfg->payload_bf16 && cfg->opt.kind != OPT_SCAPE)
        fatal("--scape-payload bf16 applies to --optimizer scape only; drop it or use --optimizer scape");
    if (cfg->opt.kind == OPT_TOPK_EF && cfg->zero)
        fatal("--zero 1 applies to adamw, adams and scape; drop --zero for topk-ef");
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
        if (dist_is_owned_slice(d, i)) owned_total += tab->slices[i].numel;
    }
    size_t off = 0, roff = 0;
    for (int b = 0; b < d->nb; b++) {
        d->bucket_off[b] = off;
        off += d->bucket_numel[b];
        d->rs_off[b] = roff;
        for (int k = 0; k < d->bn[b]; k++) {
            int i = d->bslices[b][k];
            if (dist_is_owned_slice(d, i)) roff += tab->slices[i].numel;
        }
    }
    /* the staging buffer: not for SCAPE (scape_init sizes its own to the payload) nor for one rank's dense update,
     * which leaves the gradients in place (dist_dense.c) */
    if (cfg->opt.kind != OPT_SCAPE && cfg->opt.kind != OPT_POWERSGD && !dist_dense_in_place(d)) d->stage = xmalloc(d->P * sizeof(float), "gradient staging buffer");

    if (cfg->opt.kind == OPT_SCAPE) scape_init(d);
    else if (cfg->opt.kind == OPT_TOPK_EF) topk_init(d);
    else if (cfg->opt.kind == OPT_POWERSGD) psgd_init(d);
    else if (cfg->opt.kind == OPT_ONEBIT_ADAM) onebit_init(d);
    else if (cfg->opt.kind == OPT_DEMO) demo_init(d);
    else dense_init(d, owned_total);
    comm_bcast(params, d->P * sizeof(float), 0);
    return d;
}

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
        if (!d->cfg.zero) h = fnv1a(h, d->m, d->m_n * sizeof(float)); /* ZeRO-1: each owner's own part */
        if (d->have_m) h = fnv1a(h, d->mask_m, mask_bytes(d->P));
        if (d->have_cur) h = fnv1a(h, d->mask_cur, mask_bytes(d->P));
        if (d->have_next) h = fnv1a(h, d->mask_next, mask_bytes(d->P));
    } else if (d->cfg.opt.kind == OPT_TOPK_EF || d->cfg.opt.kind == OPT_POWERSGD || d->cfg.opt.kind == OPT_ONEBIT_ADAM) {
        h = fnv1a(h, d->m, d->P * sizeof(float));
        h = fnv1a(h, d->v, d->P * sizeof(float));
        if (d->psgd_q) h = fnv1a(h, d->psgd_q, d->psgd_kq * sizeof(float));
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
    free(d->pay_off);
    free(d->m_new); free(d->mask_m); free(d->ch_qm); free(d->slice_ch0); free(d->m_dense);
    free(d->ch_qo); free(d->ch_qs); free(d->rs_k); free(d->rs16); free(d->rs_err); free(d->ez); free(d->ch_qe); free(d->zred); free(d->r_plain);
    free(d->seg_bytes); free(d->seg_off); free(d->topk_tmp);
    free(d->code_mine); free(d->code_all); free(d->code_sizes);
    free(d->ch_lo); free(d->ch_hi); free(d->ch_q); free(d->ch_slice); free(d->ch_bucket); free(d->ch_ss); free(d->ch_bad);
    free(d->psgd_rank); free(d->psgd_qoff); free(d->psgd_poff); free(d->psgd_q); free(d->psgd_qbuf);
    free(d->ob_es); free(d->ob_boff); free(d->ob_send); free(d->ob_recv);
    if (d->demo_dct)
        for (int b = 0; b <= d->cfg.demo_chunk; b++) free(d->demo_dct[b]);
    free(d->demo_dct); free(d->demo_koff); free(d->demo_cnt); free(d->demo_tmp); free(d->demo_bits);
    free(d->age); free(d->ch_ss_stay); free(d->ch_n_stay); free(d->slice_s2);
    free(d->pairs); free(d->pair_off);
    free(d->st_slice); free(d->st_jm); free(d->st_em); free(d->st_jg); free(d->st_eg); free(d->st_g);
    free(d->st_gcur); free(d->st_gprev); free(d->st_tmp);
    owner_table_free(&d->own);
    free(d);
}

float distopt_density(const DistOptim *d, int t) {
    if (d->cfg.opt.kind != OPT_SCAPE && d->cfg.opt.kind != OPT_TOPK_EF) return 1.0f;
    return (float)dist_density(&d->cfg, t);
}

void distopt_bucket_ready(void *ctx, int bucket) {
    DistOptim *d = ctx;
    if (bucket < 0 || bucket >= d->nb) fatal("distopt_bucket_ready: bucket %d outside 0..%d", bucket, d->nb - 1);
    if (d->bstate[bucket]) return;
    if (d->cfg.opt.kind == OPT_SCAPE) scape_bucket_ready(d, bucket);
    else if (d->cfg.opt.kind == OPT_TOPK_EF) topk_bucket_ready(d, bucket);
    else if (d->cfg.opt.kind == OPT_POWERSGD) psgd_bucket_ready(d, bucket);
    else if (d->cfg.opt.kind == OPT_ONEBIT_ADAM) onebit_bucket_ready(d, bucket);
    else if (d->cfg.opt.kind == OPT_DEMO) demo_bucket_ready(d, bucket);
    else dense_queue_bucket(d, bucket);
}

double dist_sumsq(const float *x, size_t lo, size_t hi) {
    enum { CH = 65536, LANES = 256 };
    size_t nch = (hi - lo + CH - 1) / CH;
    if (nch == 0) return 0;
    double *part = xmalloc(nch * sizeof(double), "norm partials");
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nch; c++) {
        size_t a = lo + c * CH, e = a + CH < hi ? a + CH : hi;
        double lane[LANES] = {0};
        size_t j = a;
        for (; j + LANES <= e; j += LANES) /* a row of LANES: lane l takes element l (vectorises over l) */
            for (int l = 0; l < LANES; l++) lane[l] += (double)x[j + l] * (double)x[j + l];
        for (int l = 0; j + l < e; l++) lane[l] += (double)x[j + l] * (double)x[j + l];
        for (int w = LANES / 2; w > 0; w >>= 1)
            for (int l = 0; l < w; l++) lane[l] += lane[l + w];
        part[c] = lane[0];
    }
    double s = 0;
    for (size_t c = 0; c < nch; c++) s += part[c];
    free(part);
    return s;
}

void dist_end_step(DistOptim *d) {
    const size_t CH = 1 << 18;
    if (!d->grads_clear) {
        #pragma omp parallel for schedule(static)
        for (size_t a = 0; a < d->P; a += CH) memset(d->grads + a, 0, (d->P - a < CH ? d->P - a : CH) * sizeof(float));
    }
    d->grads_clear = 0;
    for (int b = 0; b < d->nb; b++) {
        d->bstate[b] = 0;
        d->bh[b] = 0;
    }
    d->step_begun = 0;
}

int distopt_step(DistOptim *d, int t, float lr, float *grad_norm) {
    if (t < 1) fatal("distopt_step: step %d < 1; steps count from 1", t);
    float gn = 0;
    d->st_valid = 0;
    int skipped = d->cfg.opt.kind == OPT_SCAPE     ? scape_step(d, t, lr, &gn)
                  : d->cfg.opt.kind == OPT_TOPK_EF ? topk_step(d, t, lr, &gn)
                  : d->cfg.opt.kind == OPT_POWERSGD ? psgd_step(d, t, lr, &gn)
                  : d->cfg.opt.kind == OPT_ONEBIT_ADAM ? onebit_step(d, t, lr, &gn)
                  : d->cfg.opt.kind == OPT_DEMO ? demo_step(d, t, lr, &gn)
                                                   : dense_step(d, t, lr, &gn);
    if (grad_norm) *grad_norm = gn;
    return skipped;
}

/* ---- inspection ---- */

size_t distopt_payload_count(const DistOptim *d) { return d->last_k; }

size_t distopt_state_memory(const DistOptim *d) {
    const size_t F = sizeof(float);
    switch (d->cfg.opt.kind) {
    case OPT_SCAPE: return d->P * F + (d->m_cap + d->m_new_cap + d->ez_cap) * F + 3 * mask_bytes(d->P);
    case OPT_TOPK_EF: return 3 * d->P * F;
    case OPT_POWERSGD: return 3 * d->P * F + d->psgd_kq * F;
    case OPT_ONEBIT_ADAM: return 4 * d->P * F;
    case OPT_DEMO: return d->P * F;
    case OPT_ADAMW: return 2 * (d->shi - d->slo) * F;
    case OPT_ADAMS: return (d->shi - d->slo) * F;
    }
    return 0;
}

void distopt_owner_range(const DistOptim *d, int rank, size_t *lo, size_t *hi) {
    *lo = d->own.lo[rank];
    *hi = d->own.hi[rank];
}

const float *distopt_moment(const DistOptim *d) {
    if (d->cfg.opt.kind != OPT_SCAPE) return d->m;
    DistOptim *dm = (DistOptim *)d; /* SCAPE keeps m compact: a dense copy in a scratch buffer */
    if (!dm->m_dense) dm->m_dense = xmalloc(d->P * sizeof(float), "dense first moment");
    scape_m_expand(d, dm->m_dense);
    return dm->m_dense;
}
const float *distopt_residual(const DistOptim *d) {
    if (d->cfg.opt.kind != OPT_SCAPE || !d->cfg.zero) return d->r;
    DistOptim *dm = (DistOptim *)d; /* ZeRO-1 keeps beta1 m folded into r: the unfolded view in a scratch buffer */
    if (!dm->r_plain) dm->r_plain = xmalloc(d->P * sizeof(float), "SCAPE residual view");
    scape_zero_r_unfold(d, dm->r_plain);
    return dm->r_plain;
}

const float *distopt_powersgd_q(const DistOptim *d, size_t *n) {
    *n = d->cfg.opt.kind == OPT_POWERSGD ? d->psgd_kq : 0;
    return d->cfg.opt.kind == OPT_POWERSGD ? d->psgd_q : NULL;
}

const float *distopt_onebit_server_error(const DistOptim *d) {
    return d->cfg.opt.kind == OPT_ONEBIT_ADAM ? d->ob_es : NULL;
}

const uint8_t *distopt_mask(DistOptim *d, int next) {
    if (d->cfg.opt.kind == OPT_TOPK_EF) return !next && d->have_cur ? d->mask_cur : NULL;
    if (d->cfg.opt.kind != OPT_SCAPE) return NULL;
    if (!next) return d->have_cur ? d->mask_cur : NULL;
    scape_collect_next(d);
    return d->have_next ? d->mask_next : NULL;
}

void distopt_debug_capture(DistOptim *d, float *c, float *s, float *ghat) {
    if (ghat && d->cfg.zero) fatal("distopt_debug_capture: g_hat is not captured with --zero 1 (only the owners hold b)");
    d->dbg_c = c;
    d->dbg_s = s;
    d->dbg_ghat = ghat;
}

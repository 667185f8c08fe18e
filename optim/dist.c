/*
 * optim/dist.c - the data-parallel parameter update of optim/dist.h, its entry: creation, the hand-off of each
 * gradient bucket as backward finishes it, and each step, all through the chosen rule's row of the rule table
 * (optim/rule.h, listed in optim/rules.c; the rules share DistOptim, optim/dist_impl.h):
 *   dist_dense.c       dense AdamW/AdamS: per-bucket averaging all-reduce, or ZeRO-1 (reduce-scatter to the
 *                      owners, update of the owned shard, all-gather of the parameters)
 *   dist_scape.c       SCAPE (SCAPE.md section 3): c_i per bucket, the compact payload all-reduce, error feedback,
 *                      the masked AdamS update and the owners' next mask on an asynchronous all-gather
 *   dist_scape_row.c   SCAPE's row: its settings, variants, state size, sync hash, inspection
 *   dist_scape_zero.c  SCAPE with ZeRO-1: m on the owners only, the payload reduce-scattered to them, their
 *                      updated m and p values all-gathered on the mask
 *   dist_topk_ef.c     the top-k error-feedback baseline (raw-gradient top-k, index/value all-gather, AdamW)
 *   dist_powersgd.c    PowerSGD (rank-r approximations with error feedback, into AdamW)
 *   dist_onebit_adam.c 1-bit Adam (AdamW for a warm-up, then the momentum in 1 bit with error compensation)
 *   dist_demo.c        DeMo (local momentum, top-k DCT coefficients per block all-gathered, sign step)
 *   dist_loco.c        what the local-update rules share: inner steps, synchronized model, blob (dist_loco.h)
 *   dist_diloco.c      DiLoCo (H local inner AdamW steps, then the averaged pseudo-gradient by outer Nesterov SGD)
 *   dist_sparseloco.c  SparseLoCo (DiLoCo with per-rank error feedback, chunked top-k in 2 bits all-gathered)
 *   dist_mask_stats.c  mask stability (Jaccard, kept energy) per slice, on rank 0, when enabled
 *   dist_state.c       what the checkpoint blobs share (header checks, other world sizes) and the dense and SCAPE
 *                      layouts the device update writes too; each rule's blob hooks are in its own file
 * Here too, shared by the rules: the opening of every step (the buckets sent, waited for and unpacked), its end
 * (the zeroing, the last completed step), the gradient norm's fixed-order sum, the hash of the SCAPE_CHECK_SYNC
 * check (comm_sync_check compares it), and the inspection functions of dist.h.
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

DistOptim *distopt_create(const ParamTable *tab, float *params, float *grads, const DistConfig *cfg) {
    const UpdateRule *rule = update_rule(cfg->opt.kind);
    if (!rule)
        fatal("distopt_create: optimizer kind %d is not supported; use adamw, adams, scape, topk-ef, powersgd, "
              "onebit-adam, demo, diloco or sparseloco", cfg->opt.kind);
    if (cfg->zero && !rule->zero_ok) fatal("--zero 1 applies to adamw, adams and scape; drop --zero for %s", rule->name);
    if (rule->index32 && tab->total > UINT32_MAX)
        fatal("%s sends 32-bit indices but the model has %zu parameters; use a model under 2^32 parameters", rule->name,
              tab->total);
    if (rule->sparse && !(cfg->density > 0 && cfg->density <= 1))
        fatal("--density %g is outside (0, 1]; 0.1 means 90%% sparsity", cfg->density);
    if (rule->sparse && !(cfg->density_start > 0 && cfg->density_start <= 1))
        fatal("density start %g is outside (0, 1]; use 1 for the default warm-up from dense", cfg->density_start);
    /* every rule checks its own settings, and refuses those it owns when another rule is chosen */
    for (int k = 0; k < update_rule_count; k++)
        if (update_rules[k]->check) update_rules[k]->check(cfg, rule);
    if (!(cfg->opt.beta1 >= 0 && cfg->opt.beta1 < 1)) fatal("beta1 %g is outside [0, 1)", cfg->opt.beta1);
    DistOptim *d = xcalloc(1, sizeof *d, "DistOptim");
    d->tab = tab;
    d->params = params;
    d->grads = grads;
    d->cfg = *cfg;
    d->rule = rule;
    d->rank = comm_rank();
    d->world = comm_world();
    d->P = tab->total;
    owner_table_build(&d->own, tab, d->world);

    d->nb = tab->num_buckets;
    param_table_bucket_slices(tab, &d->bn, &d->bslices);
    d->bucket_off = xcalloc((size_t)d->nb, sizeof(size_t), "bucket offsets");
    d->bucket_numel = xcalloc((size_t)d->nb, sizeof(size_t), "bucket sizes");
    d->bucket_k = xcalloc((size_t)d->nb, sizeof(size_t), "bucket payload sizes");
    d->bh = xcalloc((size_t)d->nb, sizeof(CommHandle), "bucket handles");
    d->bstate = xcalloc((size_t)d->nb, sizeof(int), "bucket state");
    size_t owned_total = 0;
    for (int i = 0; i < tab->n; i++) {
        d->bucket_numel[tab->slices[i].bucket] += tab->slices[i].numel;
        if (dist_is_owned_slice(d, i)) owned_total += tab->slices[i].numel;
    }
    size_t off = 0;
    for (int b = 0; b < d->nb; b++) {
        d->bucket_off[b] = off;
        off += d->bucket_numel[b];
    }
    d->slo = 0; /* the state covers every parameter unless the rule's init says otherwise (ZeRO-1) */
    d->shi = d->P;
    /* the staging buffer, for the rules that pack buckets into one of P floats (SCAPE and PowerSGD size their own
     * to the payload; the dense rules allocate it unless they leave the gradients in place) */
    if (rule->stage) d->stage = xmalloc(d->P * sizeof(float), "gradient staging buffer");
    rule->init(d, owned_total);
    comm_bcast(params, d->P * sizeof(float), 0);
    return d;
}


/* ---- e, m, v of the rules that feed AdamW (dist_impl.h) ---- */

void dist_emv_init(DistOptim *d) {
    EmvState *s = dist_emv(d);
    size_t n = d->P ? d->P : 1;
    s->e = xcalloc(n, sizeof(float), "error feedback");
    s->m = xcalloc(n, sizeof(float), "AdamW first moment");
    s->v = xcalloc(n, sizeof(float), "AdamW second moment");
}

void dist_emv_free(EmvState *s) {
    free(s->e); free(s->m); free(s->v);
}

uint64_t dist_sync_hash_mv(DistOptim *d, uint64_t h) {
    h = hash_fnv1a64(h, dist_emv(d)->m, d->P * sizeof(float));
    h = hash_fnv1a64(h, dist_emv(d)->v, d->P * sizeof(float));
    return h;
}

const float *dist_emv_moment(const DistOptim *d) { return dist_emv(d)->m; }
const float *dist_emv_residual(const DistOptim *d) { return dist_emv(d)->e; }

/* SCAPE.md section 9.3 at the end of a run, for multi-rank tests of whole trainers: with SCAPE_CHECK_SYNC=1 in
 * the environment, hashes params (the synchronized model of a local-update rule: distopt_synced) and the rule's
 * shared state (e.g. SCAPE's m and masks) on every rank, compares
 * them, and prints one line on rank 0, or fatal() naming the first rank that differs. A collective: every rank
 * calls it from distopt_free. */
static void sync_check(DistOptim *d) {
    if (!comm_sync_check_enabled()) return;
    uint64_t h = hash_fnv1a64(1469598103934665603ull, distopt_synced(d), d->P * sizeof(float));
    if (d->rule->sync_hash) h = d->rule->sync_hash(d, h);
    comm_sync_check(h, "parameters/optimizer state", "parameters and shared optimizer state");
}

void distopt_free(DistOptim *d) {
    if (!d) return;
    sync_check(d);
    for (int b = 0; b < d->nb; b++) comm_wait(d->bh[b]);
    if (d->rule->free) d->rule->free(d); /* after the waits: a collective may still use its buffers */
    param_table_bucket_slices_free(d->nb, d->bn, d->bslices);
    free(d->bucket_off); free(d->bucket_numel);
    free(d->bucket_k); free(d->bh); free(d->bstate); free(d->stage);
    free(d->st_slice); free(d->st_jm); free(d->st_em); free(d->st_jg); free(d->st_eg); free(d->st_g);
    free(d->st_gcur); free(d->st_gprev); free(d->st_tmp);
    owner_table_free(&d->own);
    free(d);
}

float distopt_density(const DistOptim *d, int t) {
    if (!d->rule->sparse) return 1.0f;
    return (float)dist_density(&d->cfg, t);
}

void distopt_bucket_ready(void *ctx, int bucket) {
    DistOptim *d = ctx;
    if (bucket < 0 || bucket >= d->nb) fatal("distopt_bucket_ready: bucket %d outside 0..%d", bucket, d->nb - 1);
    if (d->bstate[bucket]) return;
    d->rule->bucket_ready(d, bucket);
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

/* Chunk offsets of mask's bits, SCAPE's payload layout (dist_impl.h). */
size_t dist_chunk_offsets(const size_t *lo, const size_t *hi, size_t nch, const uint8_t *mask, size_t *off) {
    #pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nch; c++) off[c] = mask_count(mask, lo[c], hi[c]);
    size_t q = 0;
    for (size_t c = 0; c < nch; c++) {
        size_t n = off[c];
        off[c] = q;
        q += n;
    }
    return q;
}

void dist_gather_buckets(DistOptim *d, void (*queue)(DistOptim *d, int b), void (*unpack)(DistOptim *d, int b)) {
    if (queue)
        for (int b = 0; b < d->nb; b++)
            if (d->bstate[b] < 2) queue(d, b);
    for (int b = 0; b < d->nb; b++) {
        comm_wait(d->bh[b]);
        if (unpack) unpack(d, b);
    }
}

void dist_drop_buckets(DistOptim *d, void (*undo)(DistOptim *d, int b)) {
    for (int b = 0; b < d->nb; b++) {
        comm_wait(d->bh[b]);
        if (undo && d->bstate[b]) undo(d, b);
        d->bstate[b] = 0;
    }
    d->step_begun = 0;
}

size_t dist_bucket_k_total(const DistOptim *d) {
    size_t K = 0;
    for (int b = 0; b < d->nb; b++) K += d->bucket_k[b];
    return K;
}

int dist_end_step(DistOptim *d, int t, int skipped) {
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
    if (!skipped) d->last_t = t;
    return skipped;
}

int distopt_step(DistOptim *d, int t, float lr, float *grad_norm) {
    if (t < 1) fatal("distopt_step: step %d < 1; steps count from 1", t);
    float gn = 0;
    d->st_valid = 0;
    int skipped = d->rule->step(d, t, lr, &gn);
    if (grad_norm) *grad_norm = gn;
    return skipped;
}

/* ---- inspection ---- */

size_t distopt_payload_count(const DistOptim *d) { return d->last_k; }

size_t distopt_state_memory(const DistOptim *d) { return d->rule->state_memory(d); }

void distopt_owner_range(const DistOptim *d, int rank, size_t *lo, size_t *hi) {
    *lo = d->own.lo[rank];
    *hi = d->own.hi[rank];
}

const float *distopt_moment(const DistOptim *d) { return d->rule->moment ? d->rule->moment(d) : NULL; }
const float *distopt_residual(const DistOptim *d) { return d->rule->residual ? d->rule->residual(d) : NULL; }
const uint8_t *distopt_mask(DistOptim *d, int next) { return d->rule->mask ? d->rule->mask(d, next) : NULL; }

const float *distopt_synced(DistOptim *d) {
    float *s = d->rule->synced && !d->synced_in ? d->rule->synced(d) : NULL;
    return s ? s : d->params;
}

void distopt_use_synced(DistOptim *d, int on) {
    if (!d->rule->synced || !on == !d->synced_in) return;
    if (on && !d->rule->synced(d)) return; /* the parameters are the synchronized model now */
    float *s = d->rule->synced(d), *p = d->params;
    #pragma omp parallel for schedule(static)
    for (size_t j = 0; j < d->P; j++) {
        float x = p[j];
        p[j] = s[j];
        s[j] = x;
    }
    d->synced_in = on;
}

void distopt_debug_capture(DistOptim *d, float *c, float *s, float *ghat) {
    if (ghat && d->cfg.zero) fatal("distopt_debug_capture: g_hat is not captured with --zero 1 (only the owners hold b)");
    d->dbg_c = c;
    d->dbg_s = s;
    d->dbg_ghat = ghat;
}

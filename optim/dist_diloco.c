/*
 * optim/dist_diloco.c - DiLoCo, distributed low-communication training (--optimizer diloco; Douillard et al.,
 * "DiLoCo: Distributed Low-Communication Training of Language Models", arXiv 2311.08105, Algorithm 1): each rank
 * takes H inner steps alone on its own data with an inner AdamW (or AdamS), then the ranks average their
 * pseudo-gradients and an outer Nesterov SGD moves the shared model. Per rank i at step t, with H = diloco-h,
 * lr_out = diloco-outer-lr, mu = diloco-outer-momentum:
 *   inner (every step): n_i = |g_i| (this rank's own gradient: no gradient all-reduce), clipped by clip / (n_i + 1e-6)
 *     when n_i > clip; theta_i, m_i (, v_i) <- one AdamW (AdamS) step of optim/optim.h at rate lr_t with the run's
 *     step t for the bias correction (the inner state is never reset: Algorithm 1 keeps it across outer steps);
 *     one control all-reduce of (n_i^2, non-finite flag) makes every rank take the same skip decision and gives the
 *     logged norm sqrt(mean_i n_i^2)
 *   outer (when t is a multiple of H, and at the run's last step, cfg.last_step, so a run ends synchronized):
 *     Delta = mean_i (theta_prev - theta_i)                  (one averaging all-reduce of P floats)
 *     v <- mu v + Delta;  theta <- theta_prev - lr_out (Delta + mu v)
 *                                                            (PyTorch SGD nesterov=True, dampening 0, v_0 = 0)
 *     theta_prev <- theta;  theta_i <- theta                 (every rank)
 * Between outer steps the ranks' parameters differ: theta_prev, identical on every rank, is the synchronized model
 * the loop evaluates, samples from, checks (SCAPE_CHECK_SYNC) and writes to the checkpoint's model file
 * (rule.h's synced, distopt_use_synced). Defaults: the paper's H 500, inner AdamW, outer lr 0.7, momentum 0.9.
 * Ours, not the paper's: the clip (per rank, on its own norm), the control all-reduce, and a skipped step (a
 * non-finite norm on any rank) skipping the outer step due at it too: the next one comes at the next multiple of H.
 * Bytes per rank (comm.h's ring model): inner steps 0 in every payload kind (the control all-reduce of 2 doubles is
 * counted as COMM_CONTROL, like every step's loss vote); an outer step 2 * 4P (N-1)/N, dense AdamW's per step.
 * State (private): theta_prev, v (P each), the inner m (and v) (P each); DistOptim's stage holds Delta.
 * Resume: every rank's blob holds its own theta_i and inner moments and the shared theta_prev and v, so a resume on
 * the same number of ranks is bit-identical at any step; on another number only at an outer step (theta_i ==
 * theta_prev), the inner moments then the mean over the saved ranks; between outer steps it is refused.
 * Not for: the collectives (comm/comm.c), the inner formulas (optim/optim.c).
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "common/util.h"
#include "optim/dist_impl.h"

/* The rule's own parameters, as its options set them (diloco_params below; the trainer's table takes them once the
 * rule option rows land: until then distopt_rule_params / SCAPE_RULE_PARAMS, see dist.h). */
typedef struct {
    int h;                /* inner steps per outer step */
    const char *inner;    /* "adamw" or "adams" */
    float outer_lr;       /* lr_out */
    float outer_momentum; /* mu */
} DilocoParams;

/* the options, in the shape of the rule option rows (flag, type, default, range, choices, help, offset) */
static const LocoParamRow diloco_params[] = {
    {"diloco-h", ARG_INT, "500", 1, 1e9, NULL,
     "--optimizer diloco: inner steps per outer step, H (the paper's 500)", offsetof(DilocoParams, h)},
    {"diloco-inner", ARG_STRING, "adamw", 0, 0, "adamw|adams",
     "--optimizer diloco: each rank's inner optimizer (the paper's AdamW)", offsetof(DilocoParams, inner)},
    {"diloco-outer-lr", ARG_FLOAT, "0.7", 0, 10, NULL,
     "--optimizer diloco: learning rate of the outer Nesterov SGD (the paper's 0.7)", offsetof(DilocoParams, outer_lr)},
    {"diloco-outer-momentum", ARG_FLOAT, "0.9", 0, 0.999999, NULL,
     "--optimizer diloco: momentum of the outer Nesterov SGD (the paper's 0.9)",
     offsetof(DilocoParams, outer_momentum)},
};
enum { N_DILOCO_PARAMS = sizeof diloco_params / sizeof diloco_params[0] };

/* DiLoCo's state (DistOptim's state). */
typedef struct {
    int h, adams;          /* resolved parameters */
    float outer_lr, mu;
    float *prev;           /* (P) theta_prev, the synchronized model */
    float *u;              /* (P) the outer momentum v */
    float *m, *v;          /* (P) the inner moments (v NULL for AdamS) */
    int have_prev;         /* prev holds theta_prev (0 before the first step: params are it) */
    int at_sync;           /* params == prev (no inner step since the last outer step) */
} DilocoState;
static inline DilocoState *dl(const DistOptim *d) { return (DilocoState *)d->state; }

extern const UpdateRule rule_diloco;

/* ---- the rule option rows, parsed without the trainer's table (temporary) ---- */

/* row's field in block from text (a number in its range, a string among its choices); fatal() naming who and the flag */
static void loco_param_set(const LocoParamRow *row, char *block, const char *text, const char *who) {
    void *field = block + row->offset;
    if (row->type == ARG_STRING) {
        size_t n = strlen(text);
        for (const char *c = row->choices; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL)
            if (strncmp(c, text, n) == 0 && (c[n] == '|' || c[n] == '\0')) {
                *(const char **)field = text;
                return;
            }
        if (row->choices) fatal("%s: %s=%s is not one of %s", who, row->flag, text, row->choices);
        *(const char **)field = text;
        return;
    }
    char *end;
    double x = strtod(text, &end);
    if (end == text || *end || !(x >= row->min && x <= row->max) || (row->type == ARG_INT && x != floor(x)))
        fatal("%s: %s=%s is not a%s number in [%g, %g]", who, row->flag, text, row->type == ARG_INT ? " whole" : "",
              row->min, row->max);
    if (row->type == ARG_INT) *(int *)field = (int)x;
    else if (row->type == ARG_FLOAT) *(float *)field = (float)x;
    else if (row->type == ARG_DOUBLE) *(double *)field = x;
    else fatal("%s: %s has a type this parser does not take (internal error)", who, row->flag);
}

void *loco_params_parse(const LocoParamRow *rows, int n, size_t bytes, const char *spec, const char *who) {
    size_t sl = spec ? strlen(spec) : 0;
    char *block = xcalloc(1, bytes + sl + 1, "rule parameters");
    char *text = block + bytes; /* the copy string fields point into: it lives as long as the parameters */
    if (spec) memcpy(text, spec, sl);
    for (int i = 0; i < n; i++) loco_param_set(&rows[i], block, rows[i].def, who);
    for (char *save = NULL, *kv = strtok_r(text, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (eq) *eq = '\0';
        int i = 0;
        while (i < n && strcmp(rows[i].flag, kv) != 0) i++;
        if (!eq || i == n)
            fatal("%s: '%s' is not FLAG=VALUE of one of this rule's options (%s%s%s%s); fix the setting", who, kv,
                  rows[0].flag, n > 1 ? ", " : "", n > 1 ? rows[1].flag : "", n > 2 ? ", ..." : "");
        loco_param_set(&rows[i], block, eq + 1, who);
    }
    return block;
}

static void *diloco_params_parse(const char *spec) {
    return loco_params_parse(diloco_params, N_DILOCO_PARAMS, sizeof(DilocoParams), spec, "--optimizer diloco");
}

/* ---- init, step ---- */

static void diloco_init(DistOptim *d, size_t owned_total) {
    (void)owned_total;
    DilocoParams *p = d->cfg.rule_params ? NULL : diloco_params_parse(NULL);
    const DilocoParams *q = d->cfg.rule_params ? d->cfg.rule_params : p;
    DilocoState *s = xcalloc(1, sizeof *s, "DiLoCo state");
    d->state = s;
    s->h = q->h;
    s->adams = strcmp(q->inner, "adams") == 0;
    s->outer_lr = q->outer_lr;
    s->mu = q->outer_momentum;
    free(p);
    size_t n = d->P ? d->P : 1;
    d->slo = 0;
    d->shi = d->P;
    s->prev = xmalloc(n * sizeof(float), "DiLoCo synchronized model");
    s->u = xcalloc(n, sizeof(float), "DiLoCo outer momentum");
    s->m = xcalloc(n, sizeof(float), "DiLoCo inner first moment");
    if (!s->adams) s->v = xcalloc(n, sizeof(float), "DiLoCo inner second moment");
    s->at_sync = 1;
}

/* the settings, when DiLoCo is the chosen rule: clip and weight decay are the inner optimizer's */
static void diloco_check(const DistConfig *cfg, const UpdateRule *chosen) {
    if (chosen != &rule_diloco) return;
    if (cfg->last_step < 0) fatal("DiLoCo: the run's last step %d is negative (internal error)", cfg->last_step);
}

static void diloco_bucket_ready(DistOptim *d, int b) { (void)d; (void)b; /* inner steps communicate nothing */ }

/* The outer step (the header's formulas): Delta averaged over the ranks, Nesterov, then every rank at theta. */
static void diloco_outer(DistOptim *d) {
    DilocoState *s = dl(d);
    float *D = d->stage, *p = d->params;
    const size_t P = d->P;
    #pragma omp parallel for schedule(static)
    for (size_t j = 0; j < P; j++) D[j] = s->prev[j] - p[j];
    comm_wait(comm_iallreduce_avg_f32(D, P));
    const float mu = s->mu, lr = s->outer_lr;
    #pragma omp parallel for schedule(static)
    for (size_t j = 0; j < P; j++) {
        float v = mu * s->u[j] + D[j];
        s->u[j] = v;
        float th = s->prev[j] - lr * (D[j] + mu * v);
        s->prev[j] = th;
        p[j] = th;
    }
    s->at_sync = 1;
}

static int diloco_step(DistOptim *d, int t, float lr, float *grad_norm) {
    DilocoState *s = dl(d);
    if (d->synced_in) fatal("distopt_step: the synchronized model is still swapped in (distopt_use_synced)");
    if (!s->have_prev) { /* the first step: params, as broadcast at creation, are theta_prev */
        memcpy(s->prev, d->params, d->P * sizeof(float));
        s->have_prev = 1;
    }
    double own = dist_sumsq(d->grads, 0, d->P);
    double ctl[2] = {own, !isfinite(own)};
    comm_allreduce_sum_f64(ctl, 2);
    if (ctl[1] != 0) {
        *grad_norm = NAN;
        dist_end_step(d);
        return 1;
    }
    *grad_norm = (float)sqrt(ctl[0] / d->world);
    float sc = dist_clip_scale(d->cfg.clip, (float)sqrt(own));
    if (s->adams) adams_update_and_zero(d->tab, d->params, d->grads, s->m, 0, d->P, t, lr, &d->cfg.opt, sc);
    else adamw_update_and_zero(d->tab, d->params, d->grads, s->m, s->v, 0, d->P, t, lr, &d->cfg.opt, sc);
    d->grads_clear = 1;
    s->at_sync = 0;
    if (t % s->h == 0 || t == d->cfg.last_step) diloco_outer(d);
    dist_end_step(d);
    d->last_t = t;
    return 0;
}

/* theta_prev while a rank's own parameters differ from it, else NULL (params are the synchronized model) */
static float *diloco_synced(DistOptim *d) { return dl(d)->at_sync ? NULL : dl(d)->prev; }

/* ---- checkpoint blob: header (K: the P-vectors that follow), the parameters record, then theta_i, theta_prev, v,
 * m (and the inner v for AdamW) ---- */

typedef struct {
    int32_t h, adams, at_sync, pad;
    float outer_lr, mu, pad2[2];
} DilocoRecord;
_Static_assert(sizeof(DilocoRecord) == 32, "DiLoCo's blob record is part of the checkpoint format");

static size_t diloco_vectors(const DistOptim *d) { return dl(d)->adams ? 4 : 5; }
static size_t diloco_state_bytes(const DistOptim *d) {
    return sizeof(BlobHeader) + sizeof(DilocoRecord) + diloco_vectors(d) * d->P * sizeof(float);
}
static void diloco_save(const DistOptim *d, void *blob) {
    const DilocoState *s = dl(d);
    if (d->synced_in) fatal("distopt_save: the synchronized model is still swapped in (distopt_use_synced)");
    BlobHeader h = dist_blob_header(d);
    h.K = diloco_vectors(d);
    DilocoRecord rec = {.h = s->h, .adams = s->adams, .at_sync = s->at_sync, .outer_lr = s->outer_lr, .mu = s->mu};
    char *o = (char *)blob + sizeof h;
    memcpy(o, &rec, sizeof rec);
    float *f = (float *)(o + sizeof rec);
    const size_t P = d->P;
    memcpy(f, d->params, P * sizeof(float));
    memcpy(f + P, s->have_prev ? s->prev : d->params, P * sizeof(float));
    memcpy(f + 2 * P, s->u, P * sizeof(float));
    memcpy(f + 3 * P, s->m, P * sizeof(float));
    if (!s->adams) memcpy(f + 4 * P, s->v, P * sizeof(float));
    memcpy(blob, &h, sizeof h);
}
static size_t diloco_blob_payload(const BlobHeader *h, int i) {
    if (h->K != 4 && h->K != 5)
        fatal("optimizer state of rank %d: %llu vectors, DiLoCo writes 4 or 5; the checkpoint is corrupt", i,
              (unsigned long long)h->K);
    return sizeof(DilocoRecord) + h->K * h->P * sizeof(float);
}
static void diloco_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes,
                        int n_blobs) {
    (void)sizes;
    DilocoState *s = dl(d);
    const size_t P = d->P;
    int other_world = h0->world != d->world;
    for (int i = 0; i < n_blobs; i++) {
        DilocoRecord rec;
        memcpy(&rec, (const char *)blobs[i] + sizeof(BlobHeader), sizeof rec);
        if (rec.h != s->h || rec.adams != s->adams || rec.outer_lr != s->outer_lr || rec.mu != s->mu)
            fatal("optimizer state of rank %d was written with diloco-h %d, diloco-inner %s, diloco-outer-lr %g, "
                  "diloco-outer-momentum %g; this run has %d, %s, %g, %g: resume with the checkpoint's settings", i,
                  rec.h, rec.adams ? "adams" : "adamw", rec.outer_lr, rec.mu, s->h, s->adams ? "adams" : "adamw",
                  s->outer_lr, s->mu);
        if (other_world && !rec.at_sync)
            fatal("DiLoCo checkpoint at step %d lies between outer steps, where each of its %d ranks has its own "
                  "parameters; resume it on %d ranks, or resume a checkpoint of an outer step (a multiple of "
                  "diloco-h %d) on %d", h0->last_t, h0->world, h0->world, s->h, d->world);
    }
    /* this rank's own blob on the same world, else blob 0's shared part and the mean inner moments */
    int src = !other_world && n_blobs > 1 ? d->rank : 0;
    const float *f0 = (const float *)((const char *)blobs[src] + sizeof(BlobHeader) + sizeof(DilocoRecord));
    DilocoRecord r0;
    memcpy(&r0, (const char *)blobs[src] + sizeof(BlobHeader), sizeof r0);
    memcpy(d->params, f0, P * sizeof(float));
    memcpy(s->prev, f0 + P, P * sizeof(float));
    memcpy(s->u, f0 + 2 * P, P * sizeof(float));
    s->have_prev = 1;
    s->at_sync = r0.at_sync;
    if (!other_world) {
        memcpy(s->m, f0 + 3 * P, P * sizeof(float));
        if (!s->adams) memcpy(s->v, f0 + 4 * P, P * sizeof(float));
        return;
    }
    memset(s->m, 0, P * sizeof(float));
    if (!s->adams) memset(s->v, 0, P * sizeof(float));
    for (int i = 0; i < n_blobs; i++) { /* summed in rank order */
        const float *fi = (const float *)((const char *)blobs[i] + sizeof(BlobHeader) + sizeof(DilocoRecord));
        for (size_t j = 0; j < P; j++) s->m[j] += fi[3 * P + j];
        if (!s->adams)
            for (size_t j = 0; j < P; j++) s->v[j] += fi[4 * P + j];
    }
    for (size_t j = 0; j < P; j++) s->m[j] /= (float)n_blobs;
    if (!s->adams)
        for (size_t j = 0; j < P; j++) s->v[j] /= (float)n_blobs;
}

static void diloco_free(DistOptim *d) {
    DilocoState *s = dl(d);
    if (!s) return;
    free(s->prev); free(s->u); free(s->m); free(s->v);
    free(s);
}

/* theta_prev, v, m (and v) */
static size_t diloco_state_memory(const DistOptim *d) { return (diloco_vectors(d) - 1) * d->P * sizeof(float); }

/* SCAPE_CHECK_SYNC: the outer momentum (the synchronized model is hashed as the parameters) */
static uint64_t diloco_sync_hash(DistOptim *d, uint64_t h) { return hash_fnv1a64(h, dl(d)->u, d->P * sizeof(float)); }

static const float *diloco_moment(const DistOptim *d) { return dl(d)->m; }
static const float *diloco_residual(const DistOptim *d) { return dl(d)->u; }

const float *distopt_loco_inner_v(const DistOptim *d) { return d->rule == &rule_diloco ? dl(d)->v : NULL; }

const UpdateRule rule_diloco = {
    .name = "diloco", .kind = OPT_DILOCO, .stage = 1, .local_params = 1,
    .check = diloco_check, .init = diloco_init, .bucket_ready = diloco_bucket_ready, .step = diloco_step,
    .state_bytes = diloco_state_bytes, .save = diloco_save, .blob_payload = diloco_blob_payload, .load = diloco_load,
    .free = diloco_free, .state_memory = diloco_state_memory, .sync_hash = diloco_sync_hash,
    .moment = diloco_moment, .residual = diloco_residual, .synced = diloco_synced, .params_parse = diloco_params_parse,
};

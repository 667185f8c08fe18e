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
 * State: dist_loco.c's LocoState (theta_prev, v as its outer state, the inner m and v; P each); DistOptim's stage
 * holds Delta. The inner step, the synchronized model and the blob's common part are dist_loco.c's.
 * Resume: every rank's blob holds its own theta_i and inner moments and the shared theta_prev and v, so a resume on
 * the same number of ranks is bit-identical at any step; on another number only at an outer step (theta_i ==
 * theta_prev), the inner moments then the mean over the saved ranks; between outer steps it is refused.
 * Not for: the collectives (comm/comm.c), the inner formulas (optim/optim.c).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_loco.h"

/* DiLoCo's options (its rows below): H, the inner rule, the outer Nesterov SGD's lr_out and mu. */
typedef struct {
    int h;                /* inner steps per outer step */
    const char *inner;    /* "adamw" or "adams" */
    float outer_lr;       /* lr_out */
    float outer_momentum; /* mu */
} DilocoParams;
RULE_PARAMS_FIT(DilocoParams);
static inline const DilocoParams *diloco_params(const RuleParams *b) {
    return (const DilocoParams *)(const void *)b->bytes;
}

/* DiLoCo's state (DistOptim's state): the shared local-update state (its outer state the momentum v), lr_out, mu */
typedef struct {
    LocoState loco;
    float outer_lr, mu;
} DilocoState;
static inline DilocoState *dl(const DistOptim *d) { return (DilocoState *)d->state; }

extern const UpdateRule rule_diloco;

static void diloco_init(DistOptim *d, size_t owned_total) {
    (void)owned_total;
    const DilocoParams *q = diloco_params(&d->cfg.rule_params);
    DilocoState *s = xcalloc(1, sizeof *s, "DiLoCo state");
    d->state = s;
    loco_init(d, &s->loco, q->h, q->inner);
    s->outer_lr = q->outer_lr;
    s->mu = q->outer_momentum;
}

static void diloco_bucket_ready(DistOptim *d, int b) { (void)d; (void)b; /* inner steps communicate nothing */ }

/* The outer step (the header's formulas): Delta averaged over the ranks, Nesterov, then every rank at theta. */
static void diloco_outer(DistOptim *d) {
    DilocoState *s = dl(d);
    float *D = d->stage, *p = d->params, *prev = s->loco.prev, *u = s->loco.outer;
    const size_t P = d->P;
    #pragma omp parallel for schedule(static)
    for (size_t j = 0; j < P; j++) D[j] = prev[j] - p[j];
    comm_wait(comm_iallreduce_avg_f32(D, P));
    const float mu = s->mu, lr = s->outer_lr;
    #pragma omp parallel for schedule(static)
    for (size_t j = 0; j < P; j++) {
        float v = mu * u[j] + D[j];
        u[j] = v;
        prev[j] = prev[j] - lr * (D[j] + mu * v);
    }
    loco_synchronize(d);
}

static int diloco_step(DistOptim *d, int t, float lr, float *grad_norm) {
    if (loco_inner_step(d, t, lr, grad_norm)) return 1;
    if (loco_outer_due(d, t)) diloco_outer(d);
    return dist_end_step(d, t, 0);
}

/* the blob: dist_loco.c's, its record words lr_out and mu (a record of the run that wrote it: a resume may change
 * them, as --diloco-outer-lr and --diloco-outer-momentum are not defining, and takes this run's) */
static void diloco_save(const DistOptim *d, void *blob) {
    LocoRecord rec = {0};
    rec.w[0].f = dl(d)->outer_lr;
    rec.w[1].f = dl(d)->mu;
    loco_save(d, blob, rec);
}
static void diloco_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes,
                        int n_blobs) {
    (void)sizes;
    loco_load(d, h0, blobs, n_blobs, 1, "diloco"); /* v is shared: blob 0's on another world */
}

static void diloco_free(DistOptim *d) {
    DilocoState *s = dl(d);
    if (!s) return;
    loco_free(&s->loco);
    free(s);
}

/* SCAPE_CHECK_SYNC: the outer momentum (the synchronized model is hashed as the parameters) */
static uint64_t diloco_sync_hash(DistOptim *d, uint64_t h) {
    return hash_fnv1a64(h, dl(d)->loco.outer, d->P * sizeof(float));
}

static const float *diloco_moment(const DistOptim *d) { return dl(d)->loco.m; }
static const float *diloco_residual(const DistOptim *d) { return dl(d)->loco.outer; }

const float *distopt_loco_inner_v(const DistOptim *d) { return d->rule->local_params ? loco(d)->v : NULL; }

/* H and the inner rule, when DiLoCo is the chosen rule (the option rows check ranges; a DistConfig filled by hand
 * must start from distopt_default_options) */
static void diloco_check(const DistConfig *cfg, const UpdateRule *chosen) {
    const DilocoParams *p = diloco_params(&cfg->rule_params);
    if (chosen == &rule_diloco && (p->h < 1 || !p->inner))
        fatal("DiLoCo: --diloco-h %d must be >= 1 and --diloco-inner set (adamw or adams); a DistConfig made by hand "
              "takes the defaults from distopt_default_options", p->h);
}

/* The memory check's bytes per parameter (without the staging buffer, which holds Delta): theta_prev 4, the outer
 * momentum 4, the inner m 4 and, with the inner AdamW, v 4: 16 (12 with AdamS), as loco_init allocates. */
static double diloco_bytes_per_param(const DistConfig *cfg) {
    return strcmp(diloco_params(&cfg->rule_params)->inner, "adams") == 0 ? 12 : 16;
}

/* H covering the whole run: one outer step, at the last step (the paper's H 500 on a short run) */
static void diloco_notes(const RuleParams *b, int steps) {
    int h = diloco_params(b)->h;
    if (h >= steps)
        printf("note: --diloco-h %d >= --steps %d, so the ranks synchronize once, at the last step: each trains alone "
               "until then; lower --diloco-h\n", h, steps);
}

static const RuleOption diloco_options[] = {
    {.spec = {"diloco-h", ARG_INT, NULL, "500", 1, 1e9, NULL,
              "--optimizer diloco: inner steps per outer step, H (the paper's 500)", 0},
     .offset = offsetof(DilocoParams, h), .defining = 1},
    {.spec = {"diloco-inner", ARG_STRING, NULL, "adamw", 0, 0, "adamw|adams",
              "--optimizer diloco: each rank's inner optimizer (the paper's AdamW)", 0},
     .offset = offsetof(DilocoParams, inner), .defining = 1},
    {.spec = {"diloco-outer-lr", ARG_FLOAT, NULL, "0.7", 0, 10, NULL,
              "--optimizer diloco: learning rate of the outer Nesterov SGD (the paper's 0.7)", 0},
     .offset = offsetof(DilocoParams, outer_lr)},
    {.spec = {"diloco-outer-momentum", ARG_FLOAT, NULL, "0.9", 0, 0.999999, NULL,
              "--optimizer diloco: momentum of the outer Nesterov SGD (the paper's 0.9)", 0},
     .offset = offsetof(DilocoParams, outer_momentum)},
};

const UpdateRule rule_diloco = {
    .name = "diloco", RULE_OPTIONS(diloco_options), .kind = OPT_DILOCO, .stage = 1, .local_params = 1,
    .notes = diloco_notes, .bytes_per_param = diloco_bytes_per_param, .check = diloco_check,
    .init = diloco_init, .bucket_ready = diloco_bucket_ready, .step = diloco_step,
    .state_bytes = loco_state_bytes, .save = diloco_save, .blob_payload = loco_blob_payload, .load = diloco_load,
    .free = diloco_free, .state_memory = loco_state_memory, .sync_hash = diloco_sync_hash,
    .moment = diloco_moment, .residual = diloco_residual, .synced = loco_synced,
};

/*
 * optim/dist.h - the data-parallel parameter update the training loop calls, for every optimizer and any number
 * of ranks (1 included): dense AdamW/AdamS with bucketed gradient all-reduce overlapping backward (or ZeRO-1:
 * reduce-scatter, sharded update, all-gather), and SCAPE (SCAPE.md) with its compact payload all-reduce,
 * error feedback and one-step-ahead masks; and the baseline SCAPE is compared against, top-k of raw gradients
 * with error feedback feeding AdamW (--optimizer topk-ef, formulas at distopt_create's comment below).
 *
 * Per optimizer step the loop does:
 *   for each micro-step: forward; backward(on_bucket = last micro-step ? distopt_bucket_ready : NULL, ctx = d)
 *   distopt_step(d, t, lr, &grad_norm)
 * grads hold the SUM over micro-steps of loss_scale-weighted gradients, i.e. the local mean gradient g_i.
 */
#ifndef SCAPE_DIST_H
#define SCAPE_DIST_H

#include <stdint.h>

#include "common/params.h"
#include "comm/comm.h"
#include "optim/optim.h"
#include "optim/scape.h"

/* The chosen rule's own options (--powersgd-rank, --demo-topk, ...): its file lays them out in a params struct private
 * to it, which must fit here (RULE_PARAMS_FIT, optim/rule.h), and its option rows give each one's offset. The trainer
 * parses them into one block per rule (trainer/train.h), tests set them with distopt_set_option. */
#define RULE_PARAMS_BYTES 64
typedef union {
    unsigned char bytes[RULE_PARAMS_BYTES];
    double align_; /* 8-byte alignment, in C and in the C++ of the CUDA side */
} RuleParams;

typedef struct {
    OptimConfig opt;       /* kind (adamw, adams, scape, topk-ef, powersgd, onebit-adam, demo, diloco,
                            * sparseloco), beta1, beta2, eps, weight_decay */
    float clip;            /* global-norm clip threshold, 0 = off */
    int zero;              /* 1: ZeRO-1 sharding (adamw, adams; scape with the fp32 payload: dist_scape_zero.c) */
    double density;        /* SCAPE / topk-ef target density d in (0, 1] (double: k = floor(d n) in double) */
    double density_start;  /* d_start, default 1 */
    int density_warmup;    /* W steps of geometric warm-up, 0 = none */
    int double_residual;   /* SCAPE, comparison only: reproduces a defect of the authors' two newest reducers, which
                            * write the residual twice per step off the mask: r <- 2 c - r_old there, i.e.
                            * r_old + 2 (beta1 m_{t-1} + (1 - beta1) g) instead of c (unsharded host update only) */
    int variant;           /* SCAPE only: SCAPE_FAITHFUL (0, the paper's algorithm) or one of the same-bytes variants
                            * of issue 31 (optim/dist_scape.c's header gives their formulas); unsharded host update
                            * with the fp32 payload */
    float variant_cap;     /* catchup, tensor-nu: cap A on the entering step's factor (>= 1) */
    float residual_decay;  /* residual-decay: rho in [0, 1], the old residual's weight in r off the mask */
    RuleParams rule_params; /* the chosen rule's own options (above) */
    int density_dense;     /* S steps at d_start before the warm-up begins (the authors' --topk-adams-start-iter),
                            * 0 = none; see dist_density */
    int exclude_norms;     /* 1 (default): norm gains and biases always dense */
    int payload_bf16;      /* SCAPE only: 1 sends the payload in bf16 (SCAPE.md section 7), see distopt_create */
    int mask_coding;       /* SCAPE only: 1 codes each owner's mask segment for the all-gather (optim/mask_code.h);
                            * the masks, and so every result, are the same as with 0 */
    int last_step;         /* the run's last step (--steps), where a local-update rule (DiLoCo) synchronizes so the
                            * run ends with one model; 0: none */
} DistConfig;

/* SCAPE's update variants (issue 31): same payload, masks and collectives as the faithful algorithm, no state
 * exchanged; formulas at the top of optim/dist_scape.c. */
enum { SCAPE_FAITHFUL = 0, SCAPE_CATCHUP = 1, SCAPE_TENSOR_NU = 2, SCAPE_RESIDUAL_DECAY = 3 };
/* The variant's name as --scape-variant spells it ("faithful", "catchup", "tensor-nu", "residual-decay"), and back
 * (-1 for an unknown name). */
const char *scape_variant_name(int variant);
int scape_variant_parse(const char *name);
/* The test drill SCAPE_TEST_CORRUPT_MASK (test/test_scape_gpt2.sh: that rank sends its coded mask damaged): unset or
 * empty, -1 (none); a rank in 0..world-1, that rank; anything else (junk, a sign, a rank the job lacks) is refused
 * with one line by fatal(), so that no value reads as rank 0. The trainer calls it before it touches --out. */
int distopt_test_corrupt_mask_rank(int world);

typedef struct DistOptim DistOptim;

/* Sets one of the own options of cfg's rule (cfg->opt.kind; flag without "--", e.g. "powersgd-rank") in
 * cfg->rule_params from text, as the trainer's --flag text would (common/args.h args_set: range and choices checked,
 * exit 2 with its one-line error; a string keeps the pointer, so text must outlive cfg). Returns 0, or -1 when the
 * rule has no such option. distopt_default_options sets every own option of the rule to its default. For tests and
 * tools; the trainer parses them with the rest of its options. */
int distopt_set_option(DistConfig *cfg, const char *flag, const char *text);
void distopt_default_options(DistConfig *cfg);

/* Creates the update for this rank; params/grads are the model's flat buffers (tab->total floats).
 * Parameters are broadcast from rank 0 so every rank starts identical.
 *
 * topk-ef (OPT_TOPK_EF), the error-feedback top-k baseline (Stich, Cordonnier, Jaggi 2018 "Sparsified SGD with
 * memory"; Lin et al. 2018 "Deep Gradient Compression"), fed into dense AdamW. Per rank i at step t, per bucket
 * as backward finishes it:
 *   acc_i = e_i + g_i;  S_i[s] = top-k_s of |acc_i[s]| per slice s (k_s = max(1, floor(d(t) |s|)), ties to the
 *   lower index; excluded norms/biases: all of s);  the (uint32 index, fp32 value) pairs of S_i go out on one
 *   all-gather per bucket (every rank sends the same count, sum k_s);
 * at the step:
 *   g = (1/N) sum_i scatter(acc_i on S_i)   (support = union of the S_i: it grows with N, the "fill-in")
 *   e_i <- acc_i with S_i zeroed;  clip g by its global norm;  AdamW (optim.h) with g.
 * Ours, not the papers': the per-slice top-k with SCAPE's density schedule and exclusion (so the two optimizers
 * select the same number of coordinates), AdamW rather than SGD as the consumer, and summation in rank order.
 * Bytes per rank and step: 8 K (N-1), K = sum_s k_s (all-gather of N K pairs, comm.h's ring model). */
/*
 * SCAPE with payload_bf16 (SCAPE.md section 7, reduced-precision payload): each rank sends q_i = bf16(s_i)
 * (round to nearest even) through comm_iallreduce_avg_bf16, which returns b = bf16(mean_i q_i) and, to the owner
 * of each part, e = mean - b. Nothing is lost: on M_t the residual keeps the quantisation error instead of 0,
 *   r_i <- (c_i - q_i) + N e   (e = 0 off this rank's parts of the payload),
 * where c_i - q_i is exact in fp32, so mean_i r_i + b = mean_i c_i up to fp32 rounding; off M_t r_i <- c_i as
 * always. m_t = b (bf16 values). Payload bytes halve: 2 * 2 K (N-1)/N. Density 1 no longer equals dense AdamS
 * exactly (it is within bf16 rounding of it), and r is not 0 on the mask. */
/* Density in force at step t >= 1 under cfg's schedule (SCAPE.md section 5): d_start for t <= S (the dense phase),
 * then scape_density's geometric warm-up shifted by S, d_start * (d / d_start)^min(1, (t - 1 - S) / W), so step
 * S + 1 runs at d_start and steps t > S + W at exactly d. */
static inline double dist_density(const DistConfig *cfg, int t) {
    if (t <= cfg->density_dense) return cfg->density_start;
    return scape_density(cfg->density, cfg->density_start, cfg->density_warmup, t - cfg->density_dense);
}

DistOptim *distopt_create(const ParamTable *tab, float *params, float *grads, const DistConfig *cfg);
void distopt_free(DistOptim *d);

/* BucketReadyFn (common/model.h) for the last micro-step's backward: ctx is the DistOptim. Queues the bucket's
 * communication on the communication thread so it overlaps the rest of backward. */
void distopt_bucket_ready(void *ctx, int bucket);

/* Finishes step t >= 1 with learning rate lr: waits for outstanding communication, clips, updates params
 * (identical on every rank afterwards), zeroes grads. *grad_norm gets the global gradient norm before clipping
 * (dense: of the mean gradient; SCAPE: of g_hat on the mask). Returns 0, or 1 if the norm was not finite and the
 * step was skipped (params and optimizer state unchanged). */
int distopt_step(DistOptim *d, int t, float lr, float *grad_norm);

/* Density in force at step t (SCAPE.md section 5), 1 for dense optimizers. */
float distopt_density(const DistOptim *d, int t);

/* Checkpointing: this rank's whole optimizer state (moments, SCAPE residual, masks, ...) as one blob.
 * distopt_load takes the blobs of all ranks of the saved run when the world size changed (n_blobs = old world),
 * or just this rank's (n_blobs = 1) when it did not; fatal() on a size mismatch. */
size_t distopt_state_bytes(const DistOptim *d);
void distopt_save(const DistOptim *d, void *blob);
void distopt_load(DistOptim *d, const void *const *blobs, const size_t *sizes, int n_blobs);

/* The dense (adamw/adams) state blob from explicit views, the exact layout distopt_save writes for that optimizer,
 * world, rank and ZeRO setting: so the CUDA trainers' device update (cuda/dist.cu) writes checkpoints the CPU
 * trainer resumes from, and the other way round. m and v (v only for adamw, else ignored) hold the elements
 * [lo, hi) of the flat buffer of P (the ZeRO-1 shard, or everything). last_t: the last completed step.
 * distopt_dense_blob_load checks every blob (fatal() on a mismatch, as distopt_load), assembles [lo, hi) of m
 * and v from whichever blobs cover it (n_blobs = 1: this rank's own, else all saved ranks') and returns the
 * saved last_t. */
size_t distopt_dense_blob_bytes(OptimizerKind kind, size_t lo, size_t hi);
void distopt_dense_blob_save(void *blob, OptimizerKind kind, int world, int rank, int zero, int last_t, size_t P,
                             size_t lo, size_t hi, const float *m, const float *v);
int distopt_dense_blob_load(OptimizerKind kind, size_t P, int world, size_t lo, size_t hi, float *m, float *v,
                            const void *const *blobs, const size_t *sizes, int n_blobs);

/* The SCAPE state blob from explicit views, the exact layout distopt_save writes for --optimizer scape (header,
 * r (P), mask_cur (P bits, padded to 8 bytes) if any, mask_next likewise if any, m on mask_cur compacted (K
 * values)): so the CUDA trainers' device SCAPE (cuda/dist_scape.cuh) and the host DistOptim write and read
 * each other's checkpoints. Masks: scape.h's packed bytes (mask_bytes(P)); NULL = none. m: (P) dense, zero off
 * mask_cur; NULL leaves the K values for the caller to write (the host's compact m). K = mask_count(mask_cur)
 * (0 without a mask). last_t: the last completed step.
 * distopt_scape_blob_load checks every blob (fatal() on a mismatch, as distopt_load), fills r (this rank's own, or
 * the mean over all saved ranks when the world changed), both masks (zeroed where absent), the flags and m (P,
 * dense), and returns the saved last_t. */
size_t distopt_scape_blob_bytes(size_t P, int have_cur, int have_next, size_t K);
void distopt_scape_blob_save(void *blob, int world, int rank, int last_t, size_t P, const float *r,
                             const uint8_t *mask_cur, const uint8_t *mask_next, const float *m);
int distopt_scape_blob_load(size_t P, int world, int rank, float *r, uint8_t *mask_cur, uint8_t *mask_next,
                            int *have_cur, int *have_next, float *m, const void *const *blobs, const size_t *sizes,
                            int n_blobs);

/* ---- Inspection, for tests and logs (added by the distributed engineer) ---- */

/* SCAPE: payload values K_t of the last completed step (0 for dense optimizers). */
size_t distopt_payload_count(const DistOptim *d);
/* This rank's owned elements [*lo, *hi) in the owner table / ZeRO-1 shard layout of `rank`. */
void distopt_owner_range(const DistOptim *d, int rank, size_t *lo, size_t *hi);
/* Optimizer state views (NULL where the optimizer has none). m: SCAPE and non-ZeRO dense, (P) floats; SCAPE keeps
 * m compact on its mask (about d P values) and returns a dense copy made at each call, zero off the current mask
 * (for tests); with ZeRO-1 m and v cover the owned range only, except SCAPE's, which is gathered from the owners
 * (a collective: every rank must call it).
 * r: SCAPE residual (P; with ZeRO-1 an unfolded copy, as the unsharded step holds it). Masks: packed bits (P); `next` is the mask computed at the last step for the next
 * one (waits for its all-gather). */
/* Bytes of optimizer state this rank holds now: dense m (and v) over its range; SCAPE's residual r (4P), its compact
 * first moment (the capacity of both buffers the update alternates between, about 2 x 4 d P; with ZeRO-1 the owned
 * part only, about 2 x 4 d P / N) and its three masks
 * (P bits each: current, next, the moment's); topk-ef's e, m, v (12P). Not counted: the gradient staging buffer
 * every rule packs buckets into (4P), the bf16 payload's (6P), the mask segments. Issue 17's memory figures. */
size_t distopt_state_memory(const DistOptim *d);
const float *distopt_moment(const DistOptim *d);
const float *distopt_residual(const DistOptim *d);
/* PowerSGD: the warm-started Q of every compressed slice (*n values: slices in memory order, each m x r_s row-major),
 * the same on every rank; NULL (and *n = 0) for the other rules. */
const float *distopt_powersgd_q(const DistOptim *d, size_t *n);
/* 1-bit Adam: this rank's server error (P floats, nonzero only on the chunks this rank reduces), and the bytes of one
 * block of its all-to-all and all-gather (Bk of optim/dist_onebit_adam.c's header); NULL / 0 for the other rules. */
const float *distopt_onebit_server_error(const DistOptim *d);
size_t distopt_onebit_block_bytes(const DistOptim *d);
/* DeMo: the (index, value) pairs each rank sends per step (K of optim/dist_demo.c's header); 0 for the other rules. */
size_t distopt_demo_count(const DistOptim *d);
const uint8_t *distopt_mask(DistOptim *d, int next);
/* DiLoCo (optim/dist_diloco.c) and SparseLoCo (optim/dist_sparseloco.c): the inner AdamW's second moment (P; NULL
 * with the inner AdamS and for other rules). Their inner first moment is distopt_moment, their outer state (DiLoCo's
 * momentum, SparseLoCo's error feedback e_i) distopt_residual. */
const float *distopt_loco_inner_v(const DistOptim *d);
/* SparseLoCo: the bytes of one rank's message at an outer step (sum over chunks of 4 + 2 k_c + ceil(k_c b / 8)); 0 for
 * the other rules. */
size_t distopt_sparseloco_message_bytes(const DistOptim *d);

/* Local-update rules (DiLoCo): on = 1 swaps the synchronized model (identical on every rank) into params, keeping
 * this rank's own parameters aside, when the two differ now; on = 0 swaps them back. Around validation, samples,
 * task scoring and the checkpoint's model file; no step or save may run in between (fatal()). A no-op for the other
 * rules, and when the parameters are the synchronized model (just after a synchronization). Local, no collective. */
void distopt_use_synced(DistOptim *d, int on);
/* The synchronized model (P): params unless a local-update rule's ranks hold their own parameters now. */
const float *distopt_synced(DistOptim *d);
/* Test hook: at every later SCAPE step copies, densely (P floats each, any may be NULL), this rank's corrected
 * momentum c_i, its payload s_i scattered to its coordinates (0 off the mask), and g_hat before clipping
 * (0 off the mask). Costs three extra passes; never set in training. g_hat is refused with ZeRO-1 (only the
 * owners hold b). */
void distopt_debug_capture(DistOptim *d, float *c, float *s, float *ghat);

/* ---- Mask-stability statistics (optimizer engineer) ----
 * Per step and per sparse slice s (dense-only slices are left out: their masks are all ones):
 *   jaccard(A, B) = |A n B| / |A u B| of the masks of consecutive steps (1 when both are empty), and
 *   energy(M, x)  = sum_{j in M} x_j^2 / sum_j x_j^2 over s (1 when x is 0 on s), in double.
 * SCAPE: _m is the first-moment mask M_t vs M_{t-1} with energy of c_i; _g is the hypothetical raw-gradient
 * mask G_t = top-k_s of |g_i| (the density in force at t) vs G_{t-1}, energy of g_i. topk-ef: _g is this rank's
 * selection S_t vs S_{t-1} with energy of acc_i; _m is absent. All on rank 0's vectors, computed by rank 0 only.
 * A Jaccard needs the previous step's mask: NAN when that step was not computed (or was the first). */
typedef struct {
    int step;                 /* the step the values belong to */
    int n;                    /* sparse slices reported */
    const int *slice;         /* (n) their indices in the ParamTable */
    const double *jaccard_m, *energy_m; /* (n) SCAPE only, else NULL */
    const double *jaccard_g, *energy_g; /* (n) */
    /* means weighted by slice numel; NAN where absent */
    double mean_jaccard_m, mean_energy_m, mean_jaccard_g, mean_energy_g;
} DistMaskStats;

/* Turns the statistics on (1) or off (0) for the following steps; set it before the step's backward, and on
 * the step before a logged one too (the Jaccard compares with it). Costs nothing while off; while on, rank 0
 * makes one extra copy of g (SCAPE), one top-k per sparse slice (SCAPE) and one pass over the masks. */
void distopt_mask_stats_enable(DistOptim *d, int on);
/* The statistics of the last completed step, or NULL (off, skipped step, ranks other than 0). */
const DistMaskStats *distopt_mask_stats(const DistOptim *d);
/* Fills st's four means from its per-slice arrays: sum_k numel_k * x_k / sum_k numel_k over the st->n reported
 * slices of tab (st->slice), added in that order; NAN for an absent (NULL) array or when no slice is reported
 * (a NAN value makes its mean NAN). Used by distopt_mask_stats and the device SCAPE update (cuda/dist_scape.cuh),
 * so both report the same means from the same values. */
void distopt_mask_stats_means(DistMaskStats *st, const ParamTable *tab);

#endif

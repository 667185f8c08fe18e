/*
 * scape/dist.h - the data-parallel parameter update the training loop calls, for every optimizer and any number
 * of ranks (1 included): dense AdamW/AdamS with bucketed gradient all-reduce overlapping backward (or ZeRO-1:
 * reduce-scatter, sharded update, all-gather), and SCAPE (SCAPE.md) with its compact payload all-reduce,
 * error feedback and one-step-ahead masks.
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
#include "scape/comm.h"
#include "scape/optim.h"

typedef struct {
    OptimConfig opt;       /* kind (adamw, adams, scape), beta1, beta2, eps, weight_decay */
    float clip;            /* global-norm clip threshold, 0 = off */
    int zero;              /* 1: ZeRO-1 sharding (dense optimizers) */
    float density;         /* SCAPE target density d in (0, 1] */
    float density_start;   /* d_start, default 1 */
    int density_warmup;    /* W steps of geometric warm-up, 0 = none */
    int exclude_norms;     /* 1 (default): norm gains and biases always dense */
} DistConfig;

typedef struct DistOptim DistOptim;

/* Creates the update for this rank; params/grads are the model's flat buffers (tab->total floats).
 * Parameters are broadcast from rank 0 so every rank starts identical. */
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

/* ---- Inspection, for tests and logs (added by the distributed engineer) ---- */

/* SCAPE: payload values K_t of the last completed step (0 for dense optimizers). */
size_t distopt_payload_count(const DistOptim *d);
/* This rank's owned elements [*lo, *hi) in the owner table / ZeRO-1 shard layout of `rank`. */
void distopt_owner_range(const DistOptim *d, int rank, size_t *lo, size_t *hi);
/* Optimizer state views (NULL where the optimizer has none). m: SCAPE and non-ZeRO dense, (P) floats, stored
 * densely (SCAPE's m is zero off the current mask); with ZeRO-1 m and v cover the owned range only.
 * r: SCAPE residual (P). Masks: packed bits (P); `next` is the mask computed at the last step for the next
 * one (waits for its all-gather). */
const float *distopt_moment(const DistOptim *d);
const float *distopt_residual(const DistOptim *d);
const uint8_t *distopt_mask(DistOptim *d, int next);
/* Test hook: at every later SCAPE step copies, densely (P floats each, any may be NULL), this rank's corrected
 * momentum c_i, its payload s_i scattered to its coordinates (0 off the mask), and g_hat before clipping
 * (0 off the mask). Costs three extra passes; never set in training. */
void distopt_debug_capture(DistOptim *d, float *c, float *s, float *ghat);

#endif

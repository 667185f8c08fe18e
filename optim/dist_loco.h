/*
 * optim/dist_loco.h - what the local-update rules (dist_diloco.c, dist_sparseloco.c; issue 45) share, private to
 * their files and dist_loco.c, which implements it (formulas in its header): the common state LocoState, first
 * member of each one's private state (DistOptim's state pointer: loco(d)), the inner step, the synchronized model
 * and the common part of their checkpoint blobs.
 * Not for: any other file; the rest of the host update knows these rules only through their rows (optim/rule.h).
 */
#ifndef OPTIM_DIST_LOCO_H
#define OPTIM_DIST_LOCO_H

#include <stddef.h>
#include <stdint.h>

#include "optim/dist_impl.h"

/* The common state, the first member of each such rule's private state (DistOptim's state). */
typedef struct {
    int h, adams;          /* inner steps per outer step; 1: the inner optimizer is AdamS (no v) */
    float *prev;           /* (P) theta_prev, the synchronized model */
    float *outer;          /* (P) DiLoCo's outer momentum, SparseLoCo's error feedback e_i */
    float *m, *v;          /* (P) the inner moments (v NULL for AdamS) */
    int have_prev;         /* prev holds theta_prev (0 before the first step: params are it) */
    int at_sync;           /* params == prev (no inner step since the last outer step) */
} LocoState;
static inline LocoState *loco(const DistOptim *d) { return (LocoState *)d->state; }
/* The blob's record after its header: at_sync, H, inner AdamS, then the rule's own parameters (w: 5 words). */
typedef struct {
    int32_t at_sync, h, adams;
    union { int32_t i; float f; } w[5];
} LocoRecord;
/* prev, outer, m (and v) of P floats, the outer state zero; at_sync */
void loco_init(DistOptim *d, LocoState *s, int h, const char *inner);
void loco_free(LocoState *s);
/* Step t's inner step (dist_loco.c's header); returns 1 when skipped (dist_end_step done, nothing changed), else 0
 * with the update done and the gradients cleared (the caller then takes its outer step if due, and ends the step:
 * dist_end_step, last_t). */
int loco_inner_step(DistOptim *d, int t, float lr, float *grad_norm);
/* An outer step is due at step t: a multiple of H, or the run's last step. */
int loco_outer_due(const DistOptim *d, int t);
/* The end of an outer step that has written theta into prev: every rank's parameters to it. */
void loco_synchronize(DistOptim *d);
/* rule.h's synced: theta_prev while the parameters differ from it, else NULL */
float *loco_synced(DistOptim *d);
/* The blob: its size; save (rec: the rule's own words; the common ones are filled); the payload a header implies;
 * one blob's record; load (refuses other H / inner rule than this run's, and another world between outer steps;
 * on another world the inner moments, and the outer state unless outer_shared, are the mean over the saved ranks;
 * name: the rule's option prefix for the messages). The rule checks its own record words before loco_load. */
size_t loco_state_bytes(const DistOptim *d);
void loco_save(const DistOptim *d, void *blob, LocoRecord rec);
size_t loco_blob_payload(const BlobHeader *h, int i);
LocoRecord loco_record(const void *blob);
void loco_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, int n_blobs, int outer_shared,
               const char *name);
size_t loco_state_memory(const DistOptim *d);

#endif

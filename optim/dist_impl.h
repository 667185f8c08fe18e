/*
 * optim/dist_impl.h - the inside of optim/dist.h's DistOptim, shared by the files that make up the host update and
 * by nothing else: optim/dist.c (creation, bucket hand-off, the calls through the rule's row, inspection),
 * dist_dense.c (dense all-reduce and ZeRO-1), dist_scape.c (SCAPE), dist_topk_ef.c (top-k EF), dist_powersgd.c
 * (PowerSGD), dist_onebit_adam.c (1-bit Adam), dist_demo.c (DeMo), dist_mask_stats.c
 * (mask stability) and dist_state.c (checkpoint blobs). Each rule file fills one UpdateRule (optim/rule.h), through
 * which dist.c calls it; what the rules share (norm, clip factor, end of step, blob helpers) is declared here.
 * Not for: anything outside those files; users include optim/dist.h.
 */
#ifndef SCAPE_DIST_IMPL_H
#define SCAPE_DIST_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/hash.h"
#include "optim/dist.h"
#include "optim/rule.h"
#include "optim/scape.h"

/* one selected coordinate of topk-ef on the wire: flat index and value, 8 bytes */
typedef struct {
    uint32_t idx;
    float val;
} TopkPair;
_Static_assert(sizeof(TopkPair) == 8, "topk-ef pairs are 8 bytes on the wire");

struct DistOptim {
    const UpdateRule *rule; /* the rule's row (optim/rule.h): every rule-specific call goes through it */
    void *state;            /* the rule's own state, a struct private to its file (rule->free frees it); NULL for
                             * the rules whose state is still the fields below (dense, SCAPE, topk-ef) */
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
    float *stage;          /* (P) packed gradients by bucket; SCAPE: its payload, stage_cap >= K_t values packed by
                            * bucket from pay_off[b] (scape_payload_layout) */
    uint16_t *stage16;     /* SCAPE bf16 payload: the payload as sent, then b, laid out like stage */
    float *qerr;           /* SCAPE bf16 payload: e = fp32 mean - b on this rank's parts, 0 elsewhere, like stage */
    size_t stage_cap, *pay_off;
    float *rs_out;         /* ZeRO: the owned part of each bucket after reduce-scatter */
    size_t *rs_off;        /* ZeRO: offset of bucket b's owned part in rs_out */
    CommHandle *bh;        /* per bucket: its collective */
    int *bstate;           /* per bucket: 0 nothing, 1 c computed (SCAPE), 2 queued */
    int step_begun;
    int grads_clear;       /* the step's update already wrote 0 over every gradient (dist_end_step skips its pass) */
    int synced_in;         /* distopt_use_synced: params hold the synchronized model, the rule's synced buffer this
                            * rank's own parameters */
    /* dense state over [slo, shi): the whole buffer, or the owned shard with ZeRO-1 */
    size_t slo, shi;
    float *m, *v;          /* SCAPE: m compact, see below */
    /* SCAPE */
    float *r;              /* (P) residual */
    uint8_t *mask_cur, *mask_next; /* (P bits) */
    uint8_t *seg;          /* owners' packed segments, concatenated in rank order */
    size_t *seg_bytes, *seg_off;
    /* coded masks (cfg.mask_coding): this rank's code, every rank's code in slots of code_cap bytes, their lengths,
     * and whether the codes were made against a previous mask (mask_cur) */
    uint8_t *code_mine, *code_all;
    size_t code_cap, *code_sizes;
    int code_prev;
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
    size_t *ch_lo, *ch_hi, *ch_q;  /* element range; first compact payload index (per step, scape_payload_layout) */
    int *ch_slice, *ch_bucket;
    double *ch_ss;
    int *ch_bad;
    /* the variants (cfg.variant, issue 31): catchup's age (P bytes: steps each coordinate has been off the mask,
     * saturating at 255; the same on every rank, as the masks are; checkpointed), tensor-nu's per-chunk sums of
     * g_hat^2 and counts over the stayers (M_t and mask_m) and per-slice mean s_T (clip scale included) */
    uint8_t *age;
    double *ch_ss_stay;
    size_t *ch_n_stay;
    float *slice_s2;
    /* SCAPE's first moment, compact (issue 17): m is zero off the mask it was last updated on (SCAPE.md section 3
     * items 3-4), so it holds only its m_n values on mask_m, packed in payload order (chunk by chunk; ch_qm[c] is
     * chunk c's first). The update pass writes m_t into m_new (at the payload's offsets, ch_q); then the two swap
     * and mask_m becomes M_t. have_m = 0: m is zero everywhere (no step yet). */
    float *m_new;
    size_t m_n, m_cap, m_new_cap;
    uint8_t *mask_m;
    int have_m;
    size_t *ch_qm;
    int *slice_ch0;        /* per slice (ParamTable index): its first chunk */
    /* SCAPE with ZeRO-1 (cfg.zero; dist_scape_zero.c): m exists on the owners only, for their slices, compact in
     * chunk order from ch_qm[c] (owned chunks); r holds beta1 m on the mask m is on (the fold); the payload is
     * reduce-scattered to the owners into rs_out (owned chunk c's values from ch_qo[c], bucket b's part from
     * rs_off[b]; rs_k[b * world + r]: rank r's count in bucket b, own_k this rank's total); the owners' updated m
     * and p values on M_t come back through stage, in memory order (chunk c's from ch_qs[c]). With the bf16 payload
     * rs16 and rs_err hold the owned part of b as received and its rounding errors (rs layout), and r's value on
     * mask_m (what the unsharded r holds there: this rank's rounding losses) lives apart in ez, in mask_m's payload
     * order (chunk c's from ch_qe[c]), since r itself holds beta1 m there. */
    size_t *ch_qo, *ch_qs, *rs_k, rs_cap, own_k;
    uint16_t *rs16;
    float *rs_err, *ez;
    size_t ez_cap, *ch_qe;
    double *zred;          /* per-chunk sums of g_hat^2, then the count of ranks with a non-finite c */
    float *r_plain;        /* distopt_residual's unfolded copy (tests) */
    float *m_dense;        /* distopt_moment's dense copy (tests) */
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

/* A slice SCAPE and topk-ef sparsify: all of them, or all but the norm gains and biases (exclude_norms). */
static inline int dist_slice_sparse(const DistOptim *d, const ParamSlice *s) {
    return !(d->cfg.exclude_norms && s->dense_only);
}
/* Slice i (ParamTable index) is in this rank's part of the owner table. */
static inline int dist_is_owned_slice(const DistOptim *d, int i) {
    return i >= d->own.first[d->rank] && i < d->own.first[d->rank + 1];
}

/* ---- dist.c: shared by the rules ---- */
/* off[c]: how many bits of mask lie in the chunks before c (chunk order = payload order: bucket by bucket, slices
 * in memory order); returns the total. SCAPE's payload layout, plain and ZeRO-1. */
size_t dist_chunk_offsets(const DistOptim *d, const uint8_t *mask, size_t *off);
/* The global-norm clip factor: clip / (norm + 1e-6) when clipping is on (clip > 0) and norm exceeds it, else 1. */
static inline float dist_clip_scale(float clip, float norm) {
    return clip > 0 && norm > clip ? clip / (norm + 1e-6f) : 1.0f;
}
/* Sum of squares in double over x[lo, hi) in fixed 64Ki chunks added in order: the same bits for any thread
 * count, so every rank takes the same clip and skip decisions. Within a chunk, 256 lanes: lane l adds the squares
 * ((double)x * (double)x, rounded, then added: no FMA) of the chunk's elements l, l + 256, ... in turn, and the
 * lanes are added by the halving tree lane[l] += lane[l + w], w = 128 .. 1; the GPU's norm kernel
 * (cuda/optimizer.cuh, one block of 256 threads a chunk) adds in exactly this order, so the two agree bit for bit. */
double dist_sumsq(const float *x, size_t lo, size_t hi);
/* The end of every step, taken or skipped: grads zeroed (unless the update did, grads_clear), every bucket back to
 * "nothing done". */
void dist_end_step(DistOptim *d);

/* ---- dist_scape.c: SCAPE.md section 3, what its other files (dist_scape_row.c, dist_scape_zero.c,
 * dist_mask_stats.c, dist_state.c) use ---- */
/* init, bucket hand-off and step: the hooks of SCAPE's row (dist_scape_row.c) */
void scape_init(DistOptim *d, size_t owned_total);
void scape_bucket_ready(DistOptim *d, int b);
int scape_step(DistOptim *d, int t, float lr, float *grad_norm);/* Waits for the all-gather of the mask made at the last step and assembles it into mask_next (no-op if none). */
void scape_collect_next(DistOptim *d);
/* The compact first moment as a dense (P) vector into out (zero off mask_m). */
void scape_m_expand(const DistOptim *d, float *out);
/* The compact first moment in memory order (mask_m's set coordinates ascending) into out (m_n values). */
void scape_m_memory_order(const DistOptim *d, float *out);
/* Sets the compact first moment from a dense m (P) supported on mask (have = 0: none, m zero). */
void scape_m_set_dense(DistOptim *d, const float *m, const uint8_t *mask, int have);

/* ---- dist_scape_zero.c: SCAPE with ZeRO-1, the parts that differ (see its header) ---- */
void scape_zero_init(DistOptim *d);
/* at the end of scape_payload_layout (K: the step's payload count): the owners' reduce-scatter layout (rs_k, rs_off, ch_qo,
 * own_k) and rs_out sized to it */
void scape_zero_layout(DistOptim *d, size_t K);
/* per-chunk sums of g_hat^2 (owned chunks, others 0) and the bad flags all-reduced: ch_ss and *bad as if every rank
 * had computed every chunk */
double scape_zero_reduce_norm(DistOptim *d, int *bad);
/* the update of the owned masked coordinates is done (m_new at ch_qo): all-gather m_t and p on M_t from their owners,
 * write p everywhere and fold beta1 m_t into r on M_t */
void scape_zero_sync(DistOptim *d);
/* m (memory order, mask_m's set coordinates ascending: m_n values over all ranks) gathered from the owners; a
 * collective. Returns the count. */
size_t scape_zero_m_memory_order(const DistOptim *d, float *out);
/* r without the fold (what the unsharded r holds) into out (P) */
void scape_zero_r_unfold(const DistOptim *d, float *out);
/* after a load (r as saved, m dense (P) on mask_m): r = beta1 m on mask_m, what r held there going to ez with the
 * bf16 payload (fp32: added, as it is 0 there) */
void scape_zero_r_fold(DistOptim *d, const float *m);


/* ---- dist_dense.c: bucket b into stage and its collective (the averaging all-reduce, or with ZeRO-1 the
 * reduce-scatter to the owners): the dense rules' hand-off, also 1-bit Adam's during its warm-up ---- */
void dense_queue_bucket(DistOptim *d, int b);
/* SCAPE_CHECK_SYNC's shared state of the rules on e, m, v (topk-ef, powersgd, onebit-adam; dist.c): m and v,
 * continuing h */
uint64_t dist_sync_hash_mv(DistOptim *d, uint64_t h);

/* ---- dist_state.c: what the blobs of the rules share ---- */
/* The header of this rank's blob: optimizer kind, world, rank, ZeRO, last step, mask flags, P and [slo, shi). */
BlobHeader dist_blob_header(const DistOptim *d);
/* e (DistOptim's r), m, v (P each) after the header, and *h = dist_blob_header (the caller adds K and writes it):
 * the start of the topk-ef, PowerSGD and 1-bit Adam blobs; dist_emv_load reads them back (e by
 * dist_load_residual) and clears have_cur. */
void dist_emv_save(const DistOptim *d, void *blob, BlobHeader *h);
void dist_emv_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, int n_blobs);
/* DistOptim's r (P) from the (P) floats after each blob's header: this rank's own when the world is unchanged (or
 * one blob), else the mean over all saved ranks in rank order (SCAPE.md section 8). */
void dist_load_residual(DistOptim *d, const void *const *blobs, int n_blobs, int saved_world);

/* ---- dist_state.c: each rule's checkpoint blob, the hooks of its row (optim/rule.h; layouts in dist_state.c) ---- */
size_t dense_state_bytes(const DistOptim *d);
void dense_save(const DistOptim *d, void *blob);
size_t dense_blob_payload(const BlobHeader *h, int i);
void dense_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs);
size_t scape_state_bytes(const DistOptim *d);
void scape_save(const DistOptim *d, void *blob);
size_t scape_blob_payload(const BlobHeader *h, int i);
void scape_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs);
size_t topk_state_bytes(const DistOptim *d);
void topk_save(const DistOptim *d, void *blob);
size_t topk_blob_payload(const BlobHeader *h, int i);
void topk_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs);

/* ---- dist_loco.c: what the local-update rules (DiLoCo, SparseLoCo; issue 45) share (formulas in its header) ---- */
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
/* The rule option rows of the local-update rules, parsed without the trainer's table (TEMPORARY, issue 45: the
 * shape of the rule option rows; the trainer will take them from the rows). */
typedef struct {
    const char *flag;     /* without the leading "--" */
    int type;             /* common/args.h ArgType */
    const char *def;      /* default as typed */
    double min, max;      /* inclusive range of a number */
    const char *choices;  /* a string's allowed values, '|'-separated, or NULL */
    const char *help;     /* one line */
    size_t offset;        /* of the field in the rule's parameters struct */
} LocoParamRow;
/* A parameters struct of `bytes` from the n rows' defaults, then spec's "flag=value,..." (NULL: none); string fields
 * point into a copy of spec kept in the same allocation (one free). fatal() naming who and the flag on an unknown
 * flag or a bad value. */
void *loco_params_parse(const LocoParamRow *rows, int n, size_t bytes, const char *spec, const char *who);

/* ---- dist_mask_stats.c: DistMaskStats of dist.h, on rank 0 ---- */
/* Fills d->st for step t. gmask/gvec: the raw-gradient mask of this step and the vector its energy is of (SCAPE:
 * G_t and g_i; topk-ef: the selection and acc). mprev: M_{t-1} (SCAPE, NULL if none); c: SCAPE's c_i (M_t's
 * energy), NULL for topk-ef. */
void stats_compute(DistOptim *d, int t, const uint8_t *gmask, const float *gvec, const uint8_t *mprev,
                   const float *c);
/* SCAPE's statistics at step t, before the next mask goes out: G_t = top-k of the copy of g_i made per bucket
 * (st_g), M_t against M_{t-1} (mask_next, when have_prev). */
void stats_scape(DistOptim *d, int t, int have_prev);

#endif

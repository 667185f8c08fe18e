/*
 * optim/dist_scape.h - SCAPE's state, a struct private to SCAPE's files (DistOptim's state pointer: scape(d)), and
 * what those files call in each other: dist_scape.c (the step, SCAPE.md section 3), dist_scape_zero.c (its ZeRO-1
 * parts) and dist_scape_row.c (its row: settings, checkpoint blob, sync hash, inspection).
 * Not for: any other file; the rest of the host update knows SCAPE only through its row (optim/rule.h).
 */
#ifndef OPTIM_DIST_SCAPE_H
#define OPTIM_DIST_SCAPE_H

#include <stddef.h>
#include <stdint.h>

#include "optim/dist_impl.h"

typedef struct {
    float *r;                      /* (P) residual */
    uint8_t *mask_cur, *mask_next; /* (P bits) M_t, M_{t+1} once collected */
    int have_cur, have_next;
    CommHandle next_h;             /* the all-gather of the next mask's segments (0: none in flight) */
    int swapped;                   /* mask_next became mask_cur at this step (undone if the step is skipped) */
    uint8_t *seg;                  /* owners' packed segments, concatenated in rank order */
    size_t *seg_bytes, *seg_off;
    /* coded masks (cfg.mask_coding): this rank's code, every rank's code in slots of code_cap bytes, their lengths,
     * and whether the codes were made against a previous mask (mask_cur) */
    uint8_t *code_mine, *code_all;
    size_t code_cap, *code_sizes;
    int code_prev;
    int corrupt_rank;              /* test drill SCAPE_TEST_CORRUPT_MASK: the rank that damages its code, -1 none */
    uint32_t *topk_tmp;            /* top-k scratch, the largest owned slice */
    /* the payload: DistOptim's stage holds stage_cap >= K_t values packed by bucket from pay_off[b]
     * (scape_payload_layout) */
    size_t stage_cap, *pay_off;
    uint16_t *stage16;             /* bf16 payload: the payload as sent, then b, laid out like stage */
    float *qerr;                   /* bf16 payload: e = fp32 mean - b on this rank's parts, 0 elsewhere, like stage */
    /* the step passes: the slices in payload order cut into chunks of at most SCAPE_CHUNK elements, processed in
     * parallel; per-chunk partial sums are added in chunk order, so results do not depend on thread count */
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
    /* the first moment, compact (issue 17): m is zero off the mask it was last updated on (SCAPE.md section 3 items
     * 3-4), so it holds only its m_n values on mask_m, packed in payload order (chunk by chunk; ch_qm[c] is chunk
     * c's first). The update pass writes m_t into m_new (at the payload's offsets, ch_q); then the two swap and
     * mask_m becomes M_t. have_m = 0: m is zero everywhere (no step yet). */
    float *m, *m_new;
    size_t m_n, m_cap, m_new_cap;
    uint8_t *mask_m;
    int have_m;
    size_t *ch_qm;
    int *slice_ch0;                /* per slice (ParamTable index): its first chunk */
    /* with ZeRO-1 (cfg.zero; dist_scape_zero.c): m exists on the owners only, for their slices, compact in chunk
     * order from ch_qm[c] (owned chunks); r holds beta1 m on the mask m is on (the fold); the payload is
     * reduce-scattered to the owners into rs_out (owned chunk c's values from ch_qo[c], bucket b's part from
     * rs_off[b]; rs_k[b * world + r]: rank r's count in bucket b, own_k this rank's total); the owners' updated m
     * and p values on M_t come back through stage, in memory order (chunk c's from ch_qs[c]). With the bf16 payload
     * rs16 and rs_err hold the owned part of b as received and its rounding errors (rs layout), and r's value on
     * mask_m (what the unsharded r holds there: this rank's rounding losses) lives apart in ez, in mask_m's payload
     * order (chunk c's from ch_qe[c]), since r itself holds beta1 m there. */
    float *rs_out;
    size_t *rs_off;
    size_t *ch_qo, *ch_qs, *rs_k, rs_cap, own_k;
    uint16_t *rs16;
    float *rs_err, *ez;
    size_t ez_cap, *ch_qe;
    double *zred;                  /* per-chunk sums of g_hat^2, then the count of ranks with a non-finite c */
    float *r_plain;                /* distopt_residual's unfolded copy (tests) */
    float *m_dense;                /* distopt_moment's dense copy (tests) */
} ScapeState;
static inline ScapeState *scape(const DistOptim *d) { return (ScapeState *)d->state; }

/* ---- dist_scape.c ---- */
/* init, bucket hand-off, step and free: the hooks of SCAPE's row (dist_scape_row.c); free first waits for the mask
 * all-gather in flight */
void scape_init(DistOptim *d, size_t owned_total);
void scape_bucket_ready(DistOptim *d, int b);
int scape_step(DistOptim *d, int t, float lr, float *grad_norm);
void scape_free(DistOptim *d);
/* Waits for the all-gather of the mask made at the last step and assembles it into mask_next (no-op if none). */
void scape_collect_next(DistOptim *d);
/* The compact first moment as a dense (P) vector into out (zero off mask_m). */
void scape_m_expand(const DistOptim *d, float *out);
/* The compact first moment in memory order (mask_m's set coordinates ascending) into out (m_n values). */
void scape_m_memory_order(const DistOptim *d, float *out);
/* Sets the compact first moment from a dense m (P) supported on mask (have = 0: none, m zero). */
void scape_m_set_dense(DistOptim *d, const float *m, const uint8_t *mask, int have);

/* ---- dist_scape_zero.c: SCAPE with ZeRO-1, the parts that differ (see its header) ---- */
void scape_zero_init(DistOptim *d);
/* at the end of scape_payload_layout (K: the step's payload count): the owners' reduce-scatter layout (rs_k, rs_off,
 * ch_qo, own_k) and rs_out sized to it */
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

#endif

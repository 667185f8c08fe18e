/*
 * optim/dist_scape.c - SCAPE's data-parallel step (SCAPE.md section 3; Zheng, Chen, Xie, Zhang, arXiv 2607.01678)
 * on the host, in the order of that section:
 *   start   at the step's first bucket M_t, all-gathered during this step's backward, becomes the current mask
 *           (scape_collect_next, scape_begin; step 1 without a mask: the bootstrap of section 5 in scape_step)
 *   item 1  c_i = beta1 m_{t-1} + (1 - beta1) g_i + r_i per bucket, written over the gradient (scape_c_bucket)
 *   item 2  the compact payload s_i = c_i[M_t] and its one averaging all-reduce per bucket, fp32 or bf16
 *           (scape_queue_bucket); both run as backward hands over each bucket (scape_bucket_ready)
 *   item 5-6 g_hat = (m_t - beta1 m_{t-1}) / (1 - beta1) on M_t, its norm, the skip and clip decisions
 *           (scape_norm_pass, in scape_step)
 *   item 8  the owners' top-k of |c_i| for M_{t+1} and its asynchronous all-gather (scape_make_mask), started
 *           before the update so that it overlaps it and the next forward/backward; with cfg.mask_coding each
 *           owner's segment travels coded (optim/mask_code.h) against M_t and is decoded on collection
 *   item 3, 4, 7  error feedback r_i = c_i off M_t, m_t = b on M_t, the masked AdamS update and weight decay
 *           alone off the mask (scape_update_pass); cfg.double_residual, for comparison only, reproduces the
 *           authors' newest reducers, which write it twice off the mask (r_i = 2 c_i - r_i,old)
 * Variants (cfg.variant, issue 31; --scape-variant): the same payload, masks and collectives, no state exchanged;
 * faithful (the default) is the algorithm above, bit for bit. In SCAPE.md's terms, with u_j = (m_t / bc1) /
 * (sqrt(nu_j) / sqrt(bc2) + eps) the normalised AdamS step of item 7 and "entering" j in M_t with m_{t-1,j} = 0 off
 * the previous update's mask (mask_m; not at the first update):
 *   catchup         an entering j takes f_j u_j, f_j = min(1 + a_j, A): a_j (uint8, saturating at 255) counts the
 *                   steps j was off the mask, so its residual holds about a_j steps of gradient; a_j <- 0 on M_t,
 *                   a_j + 1 off it, after each update (not on a skipped step). The masks are the same on every
 *                   rank, so is a. Checkpointed (P bytes). A = cfg.variant_cap.
 *   tensor-nu       an entering j takes nu_j = (1 - beta2) s_T instead of (1 - beta2) g_hat_j^2, s_T the mean of
 *                   g_hat^2 (clipped) over the stayers of its tensor (on M_t and on mask_m; b and m_{t-1} are the
 *                   same on every rank, so is s_T), so the step grows with the mass j carries instead of being
 *                   (1 - beta1) / sqrt(1 - beta2) whatever it carries; |u'_j| <= A |u_j|. Faithful where T has no
 *                   stayer. No state.
 *   residual-decay  off M_t, r_i <- c_i - (1 - rho) r_{i,t-1} = rho r_{i,t-1} + beta1 m_{t-1} + (1 - beta1) g_i: the
 *                   carried mass decays by rho a step, so the top-k follows recent mass (rho = 1: faithful). The
 *                   lost mass, (1 - rho) r_{t-1} a step, is what it gives up. No state.
 * The first two attack the entering step's length (docs/reproduction.md 6.3: it is fixed, so error feedback
 * restores the direction of missed updates but not their length); the third the staleness of the top-k's mass.
 * State (ScapeState, optim/dist_scape.h): m compact on the mask it was last updated on (mask_m: about d P values;
 * issue 17), r (P), mask_cur = M_t, mask_next = M_{t+1} once collected, the owners' packed segments (seg), the
 * payload in DistOptim's stage (K_t values, bucket after bucket from pay_off) and with the bf16 payload stage16 and
 * qerr. The passes run over fixed chunks of at most SCAPE_CHUNK elements in parallel, partial sums added in chunk
 * order, so no result depends on the thread count.
 * Not for: top-k, masks and the update formula of one coordinate (scape.c, scape.h), the collectives (comm.c),
 * the checkpoint blob (dist_scape_row.c), mask statistics (dist_mask_stats.c), the rule's row and settings
 * (dist_scape_row.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/util.h"
#include "optim/dist_scape.h"
#include "optim/mask_code.h"

/* SCAPE's state, the chunks of the step passes and the owners' mask segments (one per rank, in rank order). */
void scape_init(DistOptim *d, size_t owned_total) {
    const ParamTable *tab = d->tab;
    ScapeState *S = d->state = xcalloc(1, sizeof(ScapeState), "SCAPE state");
    S->corrupt_rank = distopt_test_corrupt_mask_rank(d->world);
    S->m = NULL; /* compact: grows to the mask's count at the first update (scape_update_pass) */
    S->mask_m = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "SCAPE first-moment mask");
    S->slice_ch0 = xmalloc((size_t)(tab->n ? tab->n : 1) * sizeof(int), "SCAPE chunks");
    S->r = xcalloc(d->P, sizeof(float), "SCAPE residual");
    S->mask_cur = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "SCAPE mask");
    S->mask_next = xcalloc(mask_bytes(d->P) + MASK_PAD, 1, "SCAPE mask");
    /* the payload buffers hold K values, packed bucket after bucket (scape_payload_layout), not P */
    S->stage_cap = 0; /* dist.c left stage NULL */
    S->pay_off = xcalloc((size_t)(d->nb ? d->nb : 1), sizeof(size_t), "SCAPE payload offsets");
    size_t nch = 0;
    for (int i = 0; i < tab->n; i++) nch += (tab->slices[i].numel + SCAPE_CHUNK - 1) / SCAPE_CHUNK;
    S->nch = nch;
    S->ch_lo = xmalloc((nch ? nch : 1) * sizeof(size_t), "SCAPE chunks");
    S->ch_hi = xmalloc((nch ? nch : 1) * sizeof(size_t), "SCAPE chunks");
    S->ch_q = xmalloc((nch ? nch : 1) * sizeof(size_t), "SCAPE chunks");
    S->ch_slice = xmalloc((nch ? nch : 1) * sizeof(int), "SCAPE chunks");
    S->ch_bucket = xmalloc((nch ? nch : 1) * sizeof(int), "SCAPE chunks");
    S->ch_ss = xmalloc((nch ? nch : 1) * sizeof(double), "SCAPE chunks");
    S->ch_bad = xmalloc((nch ? nch : 1) * sizeof(int), "SCAPE chunks");
    S->ch_qm = xcalloc(nch ? nch : 1, sizeof(size_t), "SCAPE chunks");
    size_t c = 0;
    for (int b = 0; b < d->nb; b++)
        for (int k = 0; k < d->bn[b]; k++) {
            const ParamSlice *sl = &tab->slices[d->bslices[b][k]];
            S->slice_ch0[d->bslices[b][k]] = (int)c;
            for (size_t a = sl->offset; a < sl->offset + sl->numel; a += SCAPE_CHUNK, c++) {
                S->ch_lo[c] = a;
                S->ch_hi[c] = a + SCAPE_CHUNK < sl->offset + sl->numel ? a + SCAPE_CHUNK : sl->offset + sl->numel;
                S->ch_slice[c] = d->bslices[b][k];
                S->ch_bucket[c] = b;
            }
        }
    S->seg_bytes = xmalloc((size_t)d->world * sizeof(size_t), "mask segments");
    S->seg_off = xmalloc((size_t)d->world * sizeof(size_t), "mask segments");
    size_t so = 0, maxn = 1;
    for (int r = 0; r < d->world; r++) {
        S->seg_off[r] = so;
        S->seg_bytes[r] = mask_bytes(d->own.hi[r] - d->own.lo[r]);
        so += S->seg_bytes[r];
    }
    S->seg = xcalloc(so + MASK_PAD, 1, "mask segments"); /* the coder reads words: MASK_PAD of slack */
    for (int i = d->own.first[d->rank]; i < d->own.first[d->rank + 1]; i++)
        if (tab->slices[i].numel > maxn) maxn = tab->slices[i].numel;
    S->topk_tmp = xmalloc(maxn * sizeof(uint32_t), "top-k scratch");
    if (d->cfg.mask_coding) {
        size_t most = 0;
        for (int r = 0; r < d->world; r++)
            if (d->own.hi[r] - d->own.lo[r] > most) most = d->own.hi[r] - d->own.lo[r];
        S->code_cap = mask_code_bound(most);
        S->code_mine = xmalloc(S->code_cap, "coded mask");
        S->code_all = xmalloc((size_t)d->world * S->code_cap, "coded masks");
        S->code_sizes = xcalloc((size_t)d->world, sizeof(size_t), "coded mask sizes");
    }
    if (d->cfg.variant == SCAPE_CATCHUP) S->age = xcalloc(d->P ? d->P : 1, 1, "SCAPE catchup age");
    if (d->cfg.variant == SCAPE_TENSOR_NU) {
        S->ch_ss_stay = xcalloc(nch ? nch : 1, sizeof(double), "SCAPE tensor-nu sums");
        S->ch_n_stay = xcalloc(nch ? nch : 1, sizeof(size_t), "SCAPE tensor-nu counts");
        S->slice_s2 = xcalloc((size_t)(tab->n ? tab->n : 1), sizeof(float), "SCAPE tensor-nu scales");
    }
    if (d->cfg.zero) scape_zero_init(d);
}

/* Frees SCAPE's state, once the mask all-gather in flight (if any) has landed. */
void scape_free(DistOptim *d) {
    ScapeState *S = scape(d);
    if (!S) return;
    comm_wait(S->next_h);
    free(S->r); free(S->mask_cur); free(S->mask_next); free(S->seg); free(S->seg_bytes); free(S->seg_off);
    free(S->code_mine); free(S->code_all); free(S->code_sizes); free(S->topk_tmp);
    free(S->pay_off); free(S->stage16); free(S->qerr);
    free(S->ch_lo); free(S->ch_hi); free(S->ch_q); free(S->ch_slice); free(S->ch_bucket); free(S->ch_ss); free(S->ch_bad);
    free(S->age); free(S->ch_ss_stay); free(S->ch_n_stay); free(S->slice_s2);
    free(S->m); free(S->m_new); free(S->mask_m); free(S->ch_qm); free(S->slice_ch0);
    free(S->rs_out); free(S->rs_off); free(S->ch_qo); free(S->ch_qs); free(S->rs_k); free(S->rs16); free(S->rs_err);
    free(S->ez); free(S->ch_qe); free(S->zred);
    free(S->r_plain); free(S->m_dense);
    free(S);
}

/* ---- the step's start: M_t ---- */

/* Waits for the all-gather of the mask computed last step and assembles it into mask_next (coded masks: decoded
 * into the segments first, against the mask_cur they were coded against, and counted; a segment that does not
 * decode stops the run naming its rank). */
void scape_collect_next(DistOptim *d) {
    ScapeState *S = scape(d);
    if (!S->next_h) return;
    comm_wait(S->next_h);
    S->next_h = 0;
    if (d->cfg.mask_coding) {
        uint64_t total = 8ull * (uint64_t)d->world;
        for (int r = 0; r < d->world; r++) {
            size_t n = d->own.hi[r] - d->own.lo[r];
            if (mask_decode(S->code_all + (size_t)r * S->code_cap, S->code_sizes[r], n, S->code_prev ? S->mask_cur : NULL,
                            d->own.lo[r], S->seg + S->seg_off[r]) != 0)
                fatal("mask all-gather: rank %d's coded mask segment (%zu bytes for %zu parameters) does not decode; "
                      "the ranks run different builds, or the message was damaged in transit", r, S->code_sizes[r], n);
            total += S->code_sizes[r];
        }
        comm_stats_add(COMM_ALLGATHER, total, 0.0);
    }
    memset(S->mask_next, 0, mask_bytes(d->P));
    for (int r = 0; r < d->world; r++)
        mask_or_bits(S->mask_next, d->own.lo[r], S->seg + S->seg_off[r], d->own.hi[r] - d->own.lo[r]);
    S->have_next = 1;
}

/* The step's payload layout, once M_t is known and before any bucket is packed: ch_q[c], each chunk's first index
 * into the compact payload, and pay_off[b], each bucket's (its first chunk's; the total for an empty bucket), so
 * the payload buffers (stage, and stage16 and qerr with the bf16 payload) hold K_t values in all. They grow, or
 * shrink by a third or more, to fit: no collective holds them now (the last step waited for all its payloads). */
static void scape_payload_layout(DistOptim *d) {
    ScapeState *S = scape(d);
    size_t K = dist_chunk_offsets(S->ch_lo, S->ch_hi, S->nch, S->mask_cur, S->ch_q), c = 0;
    for (int b = 0; b < d->nb; b++) {
        while (c < S->nch && S->ch_bucket[c] < b) c++;
        S->pay_off[b] = c < S->nch ? S->ch_q[c] : K;
    }
    if (d->cfg.zero) scape_zero_layout(d, K);
    if (d->stage && K <= S->stage_cap && S->stage_cap <= K + K / 2) return;
    size_t n = K ? K : 1;
    d->stage = xrealloc(d->stage, n * sizeof(float), "SCAPE payload");
    if (d->cfg.payload_bf16) {
        S->stage16 = xrealloc(S->stage16, n * sizeof(uint16_t), "SCAPE bf16 payload");
        S->qerr = xrealloc(S->qerr, n * sizeof(float), "SCAPE bf16 rounding errors");
    }
    S->stage_cap = K;
}

/* Start of a SCAPE step at its first bucket: M_t becomes the current mask (SCAPE.md section 3, first line). */
static void scape_begin(DistOptim *d) {
    ScapeState *S = scape(d);
    d->step_begun = 1;
    S->swapped = 0;
    scape_collect_next(d);
    if (S->have_next) {
        uint8_t *t = S->mask_cur;
        S->mask_cur = S->mask_next;
        S->mask_next = t;
        S->have_next = 0;
        S->have_cur = 1;
        S->swapped = 1;
    }
    if (S->have_cur) scape_payload_layout(d);
}

/* ---- item 1: corrected local momentum ---- */

/* Bits [j, j + n) of a mask (n <= 64), and the word with all n bits set. */
static inline uint64_t mask_word(const uint8_t *M, size_t j, size_t n, uint64_t *full) {
    *full = n == 64 ? ~0ull : (1ull << n) - 1;
    return mask_load64(M, j) & *full;
}

/* c = beta1 m + (1 - beta1) g + r over chunk ch (into g), m read from its compact form: the expression of
 * scape_corrected_momentum (scape.c) with m = 0 off mask_m, so every bit is as with a dense m. */
static void scape_c_chunk(DistOptim *d, size_t ch) {
    ScapeState *S = scape(d);
    const float b1 = d->cfg.opt.beta1, omb1 = 1.0f - b1, zero = 0.0f;
    float *g = d->grads;
    const float *r = S->r, *m = S->m;
    size_t lo = S->ch_lo[ch], hi = S->ch_hi[ch];
    if (d->cfg.zero) {
        /* ZeRO-1: r already holds beta1 m_{t-1} on mask_m and m is zero elsewhere (the fold, dist_scape_zero.c):
         * the same sums in another order, then what the unsharded r holds on mask_m (the bf16 payload's rounding
         * losses, ez; else 0: + 0 gives the unsharded expression's +0 for a -0 sum) */
        if (!S->ez || !S->have_m) {
            for (size_t j = lo; j < hi; j++) g[j] = (omb1 * g[j] + r[j]) + zero;
            return;
        }
        const float *e = S->ez;
        size_t q = S->ch_qe[ch];
        for (size_t j = lo; j < hi; j += 64) {
            size_t n = hi - j < 64 ? hi - j : 64;
            uint64_t full, w = mask_word(S->mask_m, j, n, &full);
            for (size_t i = 0; i < n; i++) g[j + i] = (omb1 * g[j + i] + r[j + i]) + ((w >> i) & 1 ? e[q++] : zero);
        }
        return;
    }
    if (!S->have_m) {
        for (size_t j = lo; j < hi; j++) g[j] = b1 * zero + omb1 * g[j] + r[j];
        return;
    }
    size_t q = S->ch_qm[ch];
    for (size_t j = lo; j < hi; j += 64) {
        size_t n = hi - j < 64 ? hi - j : 64;
        uint64_t full, w = mask_word(S->mask_m, j, n, &full);
        if (w == full) {
            for (size_t i = 0; i < n; i++) g[j + i] = b1 * m[q + i] + omb1 * g[j + i] + r[j + i];
            q += n;
        } else {
            for (size_t i = 0; i < n; i++) {
                float mv = (w >> i) & 1 ? m[q++] : zero;
                g[j + i] = b1 * mv + omb1 * g[j + i] + r[j + i];
            }
        }
    }
}

/* c_i over bucket b's slices, over the gradient (rank 0 keeps a copy of g_i first while mask statistics are on). */
static void scape_c_bucket(DistOptim *d, int b) {
    for (int k = 0; k < d->bn[b]; k++) {
        int i = d->bslices[b][k];
        const ParamSlice *s = &d->tab->slices[i];
        if (d->st_on) memcpy(d->st_g + s->offset, d->grads + s->offset, s->numel * sizeof(float));
        size_t c0 = (size_t)scape(d)->slice_ch0[i], c1 = c0 + (s->numel + SCAPE_CHUNK - 1) / SCAPE_CHUNK;
        #pragma omp parallel for schedule(static) if (s->numel >= 65536)
        for (size_t ch = c0; ch < c1; ch++) scape_c_chunk(d, ch);
    }
    d->bstate[b] = 1;
}

/* ---- item 2: the compact payload and its all-reduce ---- */

/* s_i = c_i on M_t, bucket b's slices in memory order, into stage at pay_off[b] (and rounded to bf16 into
 * stage16 with that payload); K_b = bucket_k[b]; then the bucket's averaging all-reduce on the communication
 * thread. */
static void scape_queue_bucket(DistOptim *d, int b) {
    ScapeState *S = scape(d);
    float *out = d->stage + S->pay_off[b];
    size_t K = 0;
    for (int k = 0; k < d->bn[b]; k++) {
        const ParamSlice *s = &d->tab->slices[d->bslices[b][k]];
        K += scape_gather_masked(d->grads, S->mask_cur, s->offset, s->offset + s->numel, out + K);
    }
    d->bucket_k[b] = K;
    uint16_t *out16 = S->stage16 ? S->stage16 + S->pay_off[b] : NULL;
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
                if (!mask_get(S->mask_cur, j)) {
                    d->dbg_s[j] = 0.0f;
                    continue;
                }
                d->dbg_s[j] = out16 ? bf16_to_f32(out16[q]) : out[q];
                q++;
            }
        }
    }
    const size_t *counts = S->rs_k + (size_t)b * (size_t)d->world;
    if (d->cfg.zero && out16) /* ZeRO-1: each owner receives the mean of its slices' values (counts by rank) */
        d->bh[b] = comm_ireduce_scatter_avg_bf16(out16, S->rs16 + S->rs_off[b], S->rs_err + S->rs_off[b], counts);
    else if (d->cfg.zero)
        d->bh[b] = comm_ireduce_scatter_avg_f32(out, S->rs_out + S->rs_off[b], counts);
    else
        d->bh[b] = out16 ? comm_iallreduce_avg_bf16(out16, K, S->qerr + S->pay_off[b]) : comm_iallreduce_avg_f32(out, K);
    d->bstate[b] = 2;
}

/* The bucket hand-off (distopt_bucket_ready): items 1 and 2 for bucket b while backward continues. */
void scape_bucket_ready(DistOptim *d, int b) {
    if (!d->step_begun) scape_begin(d);
    if (!scape(d)->have_cur) return; /* step 1: the mask is made from all gradients in scape_step */
    scape_c_bucket(d, b);
    scape_queue_bucket(d, b);
}

/* ---- items 5-6: g_hat on M_t and its norm ---- */

/* Calls fn for every masked coordinate in payload order (bucket by bucket, slices in memory order, indices
 * ascending) with its compact index q. Written as a macro so the hot loops stay inlined. */
#define FOR_MASKED(d, s, j, q, ...)                                                                          \
    do {                                                                                                      \
        size_t q = 0;                                                                                         \
        for (int b_ = 0; b_ < (d)->nb; b_++) {                                                                \
            q = scape(d)->pay_off[b_];                                                                        \
            for (int k_ = 0; k_ < (d)->bn[b_]; k_++) {                                                        \
                const ParamSlice *s = &(d)->tab->slices[(d)->bslices[b_][k_]];                                \
                for (size_t j = s->offset; j < s->offset + s->numel; j++) {                                   \
                    __VA_ARGS__                                                                               \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
    } while (0)

/* m_{t-1} at bit i of a 64-coordinate word: wm is mask_m's word there, qm the compact index of its first set bit. */
static inline float m_prev_at(const float *m, uint64_t wm, size_t qm, size_t i) {
    return (wm >> i) & 1 ? m[qm + (size_t)__builtin_popcountll(wm & ((1ull << i) - 1))] : 0.0f;
}

/* One pass over every coordinate, word by word over the mask: per chunk, the sum of g_hat^2 on M_t (double) and
 * whether any c (in grads) is not finite. Returns the sum of the chunk sums in chunk order. With ZeRO-1 b and
 * m_{t-1} exist for the owned chunks only: the others' sums are 0 (scape_zero_reduce_norm completes them). */
static double scape_norm_pass(DistOptim *d) {
    ScapeState *S = scape(d);
    const float b1 = d->cfg.opt.beta1, omb1 = 1.0f - b1;
    const int zero = d->cfg.zero;
    const float *c = d->grads, *m = S->m, *bv = zero ? S->rs_out : d->stage;
    const size_t *qb = zero ? S->ch_qo : S->ch_q;
    const uint8_t *M = S->mask_cur, *Mm = S->mask_m;
    const int have_m = S->have_m;
    #pragma omp parallel for schedule(dynamic, 4)
    for (size_t ch = 0; ch < S->nch; ch++) {
        size_t q = qb[ch], qm = S->ch_qm[ch], hi = S->ch_hi[ch];
        double ss = 0;
        int bad = 0;
        if (zero && !dist_is_owned_slice(d, S->ch_slice[ch])) {
            for (size_t j = S->ch_lo[ch]; j < hi; j++) bad |= !isfinite(c[j]);
            S->ch_ss[ch] = 0;
            S->ch_bad[ch] = bad;
            continue;
        }
        for (size_t j = S->ch_lo[ch]; j < hi; j += 64) {
            size_t n = hi - j < 64 ? hi - j : 64;
            uint64_t full, w = mask_word(M, j, n, &full), fm, wm = have_m ? mask_word(Mm, j, n, &fm) : 0;
            for (size_t i = 0; i < n; i++) bad |= !isfinite(c[j + i]);
            if (w == full && wm == full) {
                for (size_t i = 0; i < n; i++) {
                    float gh = (bv[q + i] - b1 * m[qm + i]) / omb1;
                    ss += (double)gh * (double)gh;
                }
                q += n;
            } else {
                for (; w; w &= w - 1) {
                    size_t i = (size_t)__builtin_ctzll(w);
                    float gh = (bv[q++] - b1 * m_prev_at(m, wm, qm, i)) / omb1;
                    ss += (double)gh * (double)gh;
                }
            }
            qm += (size_t)__builtin_popcountll(wm);
        }
        S->ch_ss[ch] = ss;
        S->ch_bad[ch] = bad;
    }
    double ss = 0;
    for (size_t ch = 0; ch < S->nch; ch++) ss += S->ch_ss[ch];
    return ss;
}

/* tensor-nu (issue 31): per slice, s_T = sc^2 mean over the stayers j (on M_t and on mask_m) of g_hat_j^2 (g_hat
 * unclipped, as scape_norm_pass computes it; sc the clip factor, 1 when not clipped), into slice_s2; 0 for a slice
 * with no stayer (its entering coordinates then take the faithful step). A pass of its own, so that the faithful
 * norm pass stays as it is; chunk sums in double, added in chunk order. */
static void scape_stay_pass(DistOptim *d, int clipped, float sc) {
    ScapeState *S = scape(d);
    const float b1 = d->cfg.opt.beta1, omb1 = 1.0f - b1;
    const float *m = S->m, *bv = d->stage;
    const uint8_t *M = S->mask_cur, *Mm = S->mask_m;
    #pragma omp parallel for schedule(dynamic, 4)
    for (size_t ch = 0; ch < S->nch; ch++) {
        size_t q = S->ch_q[ch], qm = S->ch_qm[ch], hi = S->ch_hi[ch], n_st = 0;
        double ss = 0;
        for (size_t j = S->ch_lo[ch]; j < hi; j += 64) {
            size_t n = hi - j < 64 ? hi - j : 64;
            uint64_t full, w = mask_word(M, j, n, &full), fm, wm = S->have_m ? mask_word(Mm, j, n, &fm) : 0;
            for (uint64_t x = w; x; x &= x - 1) {
                size_t i = (size_t)__builtin_ctzll(x);
                if ((wm >> i) & 1) {
                    float gh = (bv[q] - b1 * m_prev_at(m, wm, qm, i)) / omb1;
                    ss += (double)gh * (double)gh;
                    n_st++;
                }
                q++;
            }
            qm += (size_t)__builtin_popcountll(wm);
        }
        S->ch_ss_stay[ch] = ss;
        S->ch_n_stay[ch] = n_st;
    }
    const double sc2 = clipped ? (double)sc * (double)sc : 1.0;
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *sl = &d->tab->slices[i];
        size_t c0 = (size_t)S->slice_ch0[i], c1 = c0 + (sl->numel + SCAPE_CHUNK - 1) / SCAPE_CHUNK, n = 0;
        double ss = 0;
        for (size_t ch = c0; ch < c1; ch++) {
            ss += S->ch_ss_stay[ch];
            n += S->ch_n_stay[ch];
        }
        S->slice_s2[i] = n ? (float)(ss / (double)n * sc2) : 0.0f;
    }
}

/* ---- item 8: the next mask, partitioned by owner ---- */

/* Top-k of |c| (c in grads) over this rank's owned slices with density dens, into its segment of seg, then the
 * all-gather of all segments (asynchronous; waited for by scape_collect_next). */
static CommHandle scape_make_mask(DistOptim *d, double dens) {
    ScapeState *S = scape(d);
    uint8_t *mine = S->seg + S->seg_off[d->rank];
    size_t base = d->own.lo[d->rank];
    memset(mine, 0, S->seg_bytes[d->rank]);
    for (int i = d->own.first[d->rank]; i < d->own.first[d->rank + 1]; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        if (!dist_slice_sparse(d, s)) mask_set_range(mine, s->offset - base, s->numel);
        else scape_topk_mask(d->grads + s->offset, s->numel, scape_k(dens, s->numel), mine, s->offset - base, S->topk_tmp);
    }
    if (d->cfg.mask_coding) { /* coded against M_t where there is one (every rank holds it) */
        S->code_prev = S->have_cur;
        size_t len = mask_encode(mine, d->own.hi[d->rank] - base, S->have_cur ? S->mask_cur : NULL, base, S->code_mine, NULL);
        /* test hook (test/test_scape_gpt2.sh): SCAPE_TEST_CORRUPT_MASK=R makes rank R send its code with one byte too
         * many (one too few when it fills its slot) once it has a current mask; every rank must refuse it naming R */
        if (S->corrupt_rank == d->rank && S->have_cur) {
            if (len < S->code_cap) S->code_mine[len++] = 0;
            else len--;
        }
        return comm_iallgather_bytes(S->code_mine, len, S->code_all, S->code_cap, S->code_sizes);
    }
    return comm_iallgatherv(S->seg, S->seg_bytes, 1);
}

/* ---- items 3, 4, 7: error feedback, new momentum, masked AdamS ---- */

/* The step of an entering coordinate (on M_t, off mask_m: m_{t-1} = 0) under a variant: scape_update_on with its
 * normalised step u (scape_update_u) changed:
 *   tensor-nu (s2 > 0):  u' = (m_t / bc1) / (sqrt((1 - b2) s2) / sqrt_bc2 + eps), |u'| capped at cap |u|
 *   catchup:             u' = f u, f = min(1 + age, cap)   (f = 1, s2 = 0: exactly scape_update_on)
 * then p -= lr (u' + wd p). Compile with -ffp-contract=off, as scape_update_on. */
static inline void scape_update_entering(float *p, float *m, float mt, float sc, int clipped, float b1, float omb1,
                                         float b2, float eps, float bc1, float sqrt_bc2, float lr, float wd, float f,
                                         float s2, float cap) {
    float u = scape_update_u(*m, &mt, sc, clipped, b1, omb1, b2, eps, bc1, sqrt_bc2);
    if (s2 > 0.0f) {
        float uv = (mt / bc1) / (sqrtf((1.0f - b2) * s2) / sqrt_bc2 + eps), lim = cap * fabsf(u);
        u = fabsf(uv) > lim ? copysignf(lim, uv) : uv;
    }
    u = u * f;
    *m = mt;
    *p -= lr * (u + wd * *p);
}

/* Error feedback r <- c (1 - M_t), then the update of every coordinate: AdamS on M_t, decoupled weight decay
 * only (and m = 0) off it. Word by word over the mask, chunks in parallel; every coordinate's arithmetic is
 * independent of the others, so the thread count cannot change a bit. */
static void scape_update_pass(DistOptim *d, int t, float lr, int clipped, float sc) {
    ScapeState *S = scape(d);
    const float b1 = d->cfg.opt.beta1, b2 = d->cfg.opt.beta2, eps = d->cfg.opt.eps, omb1 = 1.0f - b1;
    const float bc1 = (float)(1.0 - pow((double)b1, t));
    const float sqrt_bc2 = (float)sqrt(1.0 - pow((double)b2, t));
    /* m_t goes compact into m_new in payload order: chunk c's values start where its payload does (ch_q) */
    const int zero = d->cfg.zero;
    size_t K = zero ? S->own_k : dist_bucket_k_total(d); /* ZeRO-1: m_t of the owned slices only, at ch_qo */
    if (K > S->m_new_cap || S->m_new_cap > K + K / 2) { /* grow, or shrink by a third or more as the density falls */
        S->m_new = xrealloc(S->m_new, (K ? K : 1) * sizeof(float), "SCAPE first moment");
        S->m_new_cap = K;
    }
    float *p = d->params, *r = S->r, *mn = S->m_new;
    const float *m = S->m;
    const float *c = d->grads, *bv = zero ? S->rs_out : d->stage, *qe = zero ? S->rs_err : S->qerr;
    const size_t *qb = zero ? S->ch_qo : S->ch_q;
    /* ZeRO-1 with the bf16 payload: r's value on M_t goes to ez (payload order), r itself gets beta1 m_t in the sync */
    float *ez = NULL;
    if (zero && S->stage16) {
        size_t Kt = dist_bucket_k_total(d);
        if (Kt > S->ez_cap || S->ez_cap > Kt + Kt / 2) { /* e_{t-1} is spent: c read it before this pass */
            S->ez = xrealloc(S->ez, (Kt ? Kt : 1) * sizeof(float), "SCAPE residual on the mask");
            S->ez_cap = Kt;
        }
        ez = S->ez;
    }
    const float fN = (float)d->world;
    const uint8_t *M = S->mask_cur, *Mm = S->mask_m;
    const int have_m = S->have_m, dbl = d->cfg.double_residual;
    /* the variants (issue 31): entering coordinates' steps (catchup, tensor-nu), the residual's decay */
    const int var = d->cfg.variant, enter = have_m && (var == SCAPE_CATCHUP || var == SCAPE_TENSOR_NU);
    const float cap = d->cfg.variant_cap, omr = 1.0f - d->cfg.residual_decay;
    uint8_t *age = S->age;
    /* the residual on M_t: 0, or with the bf16 payload what rounding lost (distopt_create's comment) */
#define RESIDUAL_ON(j, q) (qe ? (c[j] - bf16_to_f32(bf16_from_f32(c[j]))) + fN * qe[q] : 0.0f)
    /* r on M_t (pq: the coordinate's payload index, counted along) */
#define PUT_R(j, q)                                                                                                   \
    do {                                                                                                              \
        float v_ = RESIDUAL_ON(j, q);                                                                                 \
        if (ez) {                                                                                                     \
            ez[pq] = v_;                                                                                              \
            r[j] = 0.0f;                                                                                              \
        } else {                                                                                                      \
            r[j] = v_;                                                                                                \
        }                                                                                                             \
        pq++;                                                                                                         \
    } while (0)
    #pragma omp parallel for schedule(dynamic, 4)
    for (size_t ch = 0; ch < S->nch; ch++) {
        const ParamSlice *s = &d->tab->slices[S->ch_slice[ch]];
        const float wd = s->decay ? d->cfg.opt.weight_decay : 0.0f;
        size_t q = qb[ch], qm = S->ch_qm[ch], qn = q, hi = S->ch_hi[ch], pq = S->ch_q[ch];
        if (zero && !dist_is_owned_slice(d, S->ch_slice[ch])) {
            /* another rank's slice: error feedback and decay here; its owner's m_t and p on M_t come with the sync,
             * which also folds beta1 m_t into r there (the bf16 payload's error is the owner's: none here) */
            for (size_t j = S->ch_lo[ch]; j < hi; j++) {
                if (mask_get(M, j)) {
                    float v = S->stage16 ? c[j] - bf16_to_f32(bf16_from_f32(c[j])) : 0.0f;
                    if (ez) ez[pq++] = v;
                    r[j] = 0.0f;
                } else {
                    r[j] = c[j];
                    p[j] -= lr * (wd * p[j]);
                }
            }
            continue;
        }
        for (size_t j = S->ch_lo[ch]; j < hi; j += 64) {
            size_t n = hi - j < 64 ? hi - j : 64;
            uint64_t full, w = mask_word(M, j, n, &full), fm, wm = have_m ? mask_word(Mm, j, n, &fm) : 0;
            if (w == full && wm == full) {
                for (size_t i = 0; i < n; i++) {
                    float mv = m[qm + i];
                    PUT_R(j + i, q + i);
                    scape_update_on(&p[j + i], &mv, bv[q + i], sc, clipped, b1, omb1, b2, eps, bc1, sqrt_bc2, lr, wd);
                    mn[qn + i] = mv;
                }
                if (age) memset(age + j, 0, n);
                q += n;
                qn += n;
            } else {
                for (size_t i = 0; i < n; i++) {
                    if ((w >> i) & 1) {
                        float mv = m_prev_at(m, wm, qm, i);
                        PUT_R(j + i, q);
                        if (enter && !((wm >> i) & 1))
                            scape_update_entering(&p[j + i], &mv, bv[q++], sc, clipped, b1, omb1, b2, eps, bc1, sqrt_bc2,
                                                  lr, wd, age ? fminf((float)age[j + i] + 1.0f, cap) : 1.0f,
                                                  age ? 0.0f : S->slice_s2[S->ch_slice[ch]], cap);
                        else
                            scape_update_on(&p[j + i], &mv, bv[q++], sc, clipped, b1, omb1, b2, eps, bc1, sqrt_bc2, lr, wd);
                        mn[qn++] = mv;
                        if (age) age[j + i] = 0;
                    } else {
                        /* error feedback r = c; the authors' defect (cfg.double_residual) adds c - r_old again;
                         * residual-decay keeps rho of r_old: c - (1 - rho) r_old */
                        r[j + i] = dbl ? c[j + i] + (c[j + i] - r[j + i])
                                 : var == SCAPE_RESIDUAL_DECAY ? c[j + i] - omr * r[j + i] : c[j + i];
                        p[j + i] -= lr * (wd * p[j + i]);
                        if (age && age[j + i] < 255) age[j + i]++;
                    }
                }
            }
            qm += (size_t)__builtin_popcountll(wm);
        }
    }
#undef RESIDUAL_ON
#undef PUT_R
    if (ez) memcpy(S->ch_qe, S->ch_q, S->nch * sizeof(size_t));
    /* m_t is now the moment, on M_t */
    float *tm = S->m;
    S->m = S->m_new;
    S->m_new = tm;
    size_t tc = S->m_cap;
    S->m_cap = S->m_new_cap;
    S->m_new_cap = tc;
    memcpy(S->ch_qm, qb, S->nch * sizeof(size_t));
    S->m_n = K;
    memcpy(S->mask_m, S->mask_cur, mask_bytes(d->P));
    S->have_m = 1;
    if (zero) scape_zero_sync(d);
}

/* ---- the compact first moment seen densely (tests, checkpoints) ---- */

/* Calls the body for every coordinate j of chunk ch on mask_m with its compact index q. */
#define FOR_M_CHUNK(d, ch, j, q, ...)                                                                        \
    do {                                                                                                      \
        size_t q = scape(d)->ch_qm[ch];                                                                       \
        for (size_t j = scape(d)->ch_lo[ch]; j < scape(d)->ch_hi[ch]; j++)                                    \
            if (mask_get(scape(d)->mask_m, j)) {                                                              \
                __VA_ARGS__                                                                                   \
                q++;                                                                                          \
            }                                                                                                 \
    } while (0)

void scape_m_expand(const DistOptim *d, float *out) {
    const ScapeState *S = scape(d);
    memset(out, 0, d->P * sizeof(float));
    if (!S->have_m) return;
    if (d->cfg.zero) { /* a collective: the owners' values in memory order, then spread over mask_m */
        size_t n = mask_count(S->mask_m, 0, d->P), q = 0;
        float *v = xmalloc((n ? n : 1) * sizeof(float), "SCAPE first moment");
        scape_zero_m_memory_order(d, v);
        for (size_t j = 0; j < d->P; j++)
            if (mask_get(S->mask_m, j)) out[j] = v[q++];
        free(v);
        return;
    }
    for (size_t ch = 0; ch < S->nch; ch++) FOR_M_CHUNK(d, ch, j, q, { out[j] = S->m[q]; });
}

void scape_m_memory_order(const DistOptim *d, float *out) {
    const ScapeState *S = scape(d);
    if (!S->have_m) return;
    if (d->cfg.zero) {
        scape_zero_m_memory_order(d, out);
        return;
    }
    size_t o = 0; /* slices in memory order; each slice's values are consecutive in m, its chunks too */
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        size_t n = mask_count(S->mask_m, s->offset, s->offset + s->numel);
        if (!n) continue; /* (an empty slice has no chunk) */
        memcpy(out + o, S->m + S->ch_qm[S->slice_ch0[i]], n * sizeof(float));
        o += n;
    }
}

void scape_m_set_dense(DistOptim *d, const float *m, const uint8_t *mask, int have) {
    ScapeState *S = scape(d);
    S->have_m = have;
    S->m_n = 0;
    memset(S->mask_m, 0, mask_bytes(d->P));
    if (!have) return;
    memcpy(S->mask_m, mask, mask_bytes(d->P));
    S->m_n = dist_chunk_offsets(S->ch_lo, S->ch_hi, S->nch, S->mask_m, S->ch_qm);
    if (d->cfg.zero) { /* the owned chunks only, in chunk order */
        size_t q = 0;
        for (size_t ch = 0; ch < S->nch; ch++) {
            size_t n = (ch + 1 < S->nch ? S->ch_qm[ch + 1] : S->m_n) - S->ch_qm[ch];
            if (!dist_is_owned_slice(d, S->ch_slice[ch])) continue;
            S->ch_qm[ch] = q;
            q += n;
        }
        S->m_n = q;
    }
    if (S->m_n > S->m_cap) {
        S->m = xrealloc(S->m, S->m_n * sizeof(float), "SCAPE first moment");
        S->m_cap = S->m_n;
    }
    for (size_t ch = 0; ch < S->nch; ch++)
        if (!d->cfg.zero || dist_is_owned_slice(d, S->ch_slice[ch])) FOR_M_CHUNK(d, ch, j, q, { S->m[q] = m[j]; });
    if (d->cfg.zero) scape_zero_r_fold(d, m);
}
/* ---- the step ---- */

/* Bucket b out at the step: items 1 (if backward did not hand it over) and 2. */
static void scape_send_bucket(DistOptim *d, int b) {
    if (d->bstate[b] == 0) scape_c_bucket(d, b);
    scape_queue_bucket(d, b);
}

/* Bucket b's reduced payload, once landed, where the passes read it: with the bf16 payload b in fp32 (the owned
 * part with ZeRO-1, in rs_out; else in stage); the fp32 payload is there already. */
static void scape_unpack_bucket(DistOptim *d, int b) {
    ScapeState *S = scape(d);
    if (S->stage16 && d->cfg.zero) { /* the owned part of b in bf16 -> fp32 */
        float *bv = S->rs_out + S->rs_off[b];
        const uint16_t *b16 = S->rs16 + S->rs_off[b];
        size_t Kb = S->rs_k[(size_t)b * (size_t)d->world + (size_t)d->rank];
        #pragma omp parallel for schedule(static) if (Kb > 65536)
        for (size_t q = 0; q < Kb; q++) bv[q] = bf16_to_f32(b16[q]);
    } else if (S->stage16) {
        /* b in bf16 -> the fp32 payload buffer the passes below read */
        float *bv = d->stage + S->pay_off[b];
        const uint16_t *b16 = S->stage16 + S->pay_off[b];
        size_t Kb = d->bucket_k[b];
        #pragma omp parallel for schedule(static) if (Kb > 65536)
        for (size_t q = 0; q < Kb; q++) bv[q] = bf16_to_f32(b16[q]);
    }
}

/* Step t: bootstrap the first mask if there is none, send the buckets backward did not, wait for the payloads,
 * g_hat's norm and the skip decision (any rank's non-finite c), the clip factor, statistics, the next mask's
 * top-k and all-gather, then the update. */
int scape_step(DistOptim *d, int t, float lr, float *grad_norm) {
    ScapeState *S = scape(d);
    const float b1 = d->cfg.opt.beta1, omb1 = 1.0f - b1;
    if (!d->step_begun) scape_begin(d);
    int bootstrapped = 0;
    if (!S->have_cur) {
        /* first step: c for everything, then M_1 = all ones (d(1) = 1) or the owners' top-k, gathered now */
        for (int b = 0; b < d->nb; b++) scape_c_bucket(d, b);
        double d1 = scape_density(d->cfg.density, d->cfg.density_start, d->cfg.density_warmup, t);
        if (d1 >= 1.0) {
            mask_set_range(S->mask_cur, 0, d->P);
        } else {
            S->next_h = scape_make_mask(d, d1);
            scape_collect_next(d);
            uint8_t *tmp = S->mask_cur;
            S->mask_cur = S->mask_next;
            S->mask_next = tmp;
            S->have_next = 0;
        }
        S->have_cur = 1;
        bootstrapped = 1;
        scape_payload_layout(d);
    }
    dist_gather_buckets(d, scape_send_bucket, scape_unpack_bucket);
    size_t K = dist_bucket_k_total(d);
    if (d->dbg_c) memcpy(d->dbg_c, d->grads, d->P * sizeof(float));

    /* g_hat = (m_t - beta1 m_{t-1}) / (1 - beta1) on M_t (SCAPE.md section 3 item 5); its norm for clipping */
    double ss = scape_norm_pass(d);
    if (d->dbg_ghat) {
        float *mprev = xmalloc(d->P * sizeof(float), "debug m");
        scape_m_expand(d, mprev);
        memset(d->dbg_ghat, 0, d->P * sizeof(float));
        FOR_MASKED(d, s, j, q, {
            if (mask_get(S->mask_cur, j)) {
                d->dbg_ghat[j] = (d->stage[q] - b1 * mprev[j]) / omb1;
                q++;
            }
        });
        free(mprev);
    }
    /* A non-finite c off the mask would never reach g_hat but would poison r forever: skip on it too (the norm
     * pass flagged it per chunk). Any rank may hold one, so the decision takes one tiny control all-reduce; with
     * ZeRO-1 the same all-reduce brings the owners' per-chunk norm sums. */
    int64_t bad = 0;
    if (d->cfg.zero) {
        int zbad = 0;
        ss = scape_zero_reduce_norm(d, &zbad);
        bad = zbad;
    } else {
        for (size_t c = 0; c < S->nch; c++) bad |= S->ch_bad[c];
        comm_allreduce_max_i64(&bad, 1);
    }
    float norm = (float)sqrt(ss);
    if (bad) norm = NAN;
    *grad_norm = norm;
    if (!isfinite(norm)) {
        /* skipped: put the masks back as they were before the step, so m stays supported on mask_cur */
        if (bootstrapped) S->have_cur = 0;
        else if (S->swapped) {
            uint8_t *tmp = S->mask_cur;
            S->mask_cur = S->mask_next;
            S->mask_next = tmp;
            S->have_next = 1;
        }
        return dist_end_step(d, t, 1);
    }
    int clipped = d->cfg.clip > 0 && norm > d->cfg.clip;
    float sc = dist_clip_scale(d->cfg.clip, norm);

    if (d->st_on) stats_scape(d, t, S->mask_cur, S->swapped && !bootstrapped ? S->mask_next : NULL);
    /* next mask from |c| (c still in grads), gathered while the update and the next forward/backward run */
    S->next_h = scape_make_mask(d, scape_density(d->cfg.density, d->cfg.density_start, d->cfg.density_warmup, t + 1));

    /* error feedback, then AdamS on M_t and decay only elsewhere (SCAPE.md section 3 items 3-7) */
    if (d->cfg.variant == SCAPE_TENSOR_NU && S->have_m) scape_stay_pass(d, clipped, sc);
    scape_update_pass(d, t, lr, clipped, sc);
    d->last_k = K;
    return dist_end_step(d, t, 0);
}

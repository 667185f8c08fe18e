/*
 * optim/dist_scape_zero.c - SCAPE with ZeRO-1 (--zero 1; issue 17): the parts of the step that differ from
 * dist_scape.c, which calls them. The arithmetic is the unsharded step's (SCAPE.md section 3), so the results are
 * bit-identical wherever the payload's sums are added in the same order (always on 1 and 2 ranks; on more ranks the
 * MPI library's reduce-scatter may add the N values of a coordinate in another order than its all-reduce does).
 *
 * What each rank holds (the owner table of SCAPE.md section 4 is the shard layout):
 *   r_i      (P)     its residual, with beta1 m_{t-1} folded in on the mask m is on (below)
 *   m        owned   the first moment of its own slices only, compact on mask_m (about d P / N values)
 *   masks    P bits  M_t, M_{t+1} and mask_m, as unsharded
 * Why the fold: item 1's c_i = beta1 m_{t-1} + (1 - beta1) g_i + r_i needs m_{t-1} on every rank, on every
 * coordinate of M_{t-1}. Unsharded, r_i is exactly 0 there (item 3 resets it on the mask; fp32 payload), so a rank
 * can keep fl(beta1 m_{t-1}) in r_i instead and compute c_i = ((1 - beta1) g_i + r_i) + 0: the same two terms added
 * once (addition commutes; the + 0 turns a -0 into the +0 the unsharded sum gives). So non-owners hold no m at all.
 *
 * The step's collectives, per rank (ring model of comm.h; K = K_t, the mask's count):
 *   per bucket  reduce-scatter of the payload s_i = c_i[M_t] to the owners         4 K (N-1)/N
 *   once        all-reduce of the per-chunk sums of g_hat^2 and the bad-c count    8 (chunks + 1), control
 *   once        the mask all-gather of item 8, as unsharded                        P/8 (N-1)/N
 *   twice       all-gathers of the owners' m_t, then p, on M_t, through the payload  2 x 4 K (N-1)/N
 *               buffer (no memory beyond the unsharded step's)
 * against the unsharded 8 K (N-1)/N payload all-reduce: K values more, and no dense parameter all-gather.
 * The owners alone compute g_hat, the clip norm's terms and the masked AdamS update; everyone applies weight decay
 * off the mask and error feedback to its own r_i. Checkpoints keep the unsharded layout (dist_state.c): m is
 * gathered at the save and r is saved without the fold, so either layout resumes from the other, on any world.
 * The bf16 payload: the owners reduce in bf16 exactly as comm_iallreduce_avg_bf16 does (comm_ireduce_scatter_avg_bf16),
 * so b has the unsharded bits; the mean's rounding error goes to the owner's residual instead of the all-reduce
 * part's owner (the mean residual, all the algorithm sees, is the same), so runs match the unsharded one only on
 * one rank. What the unsharded r holds on the mask (this rank's rounding losses) is kept apart in ez, so that the
 * fold stays exact; that costs 4 K bytes per rank.
 * The device counterpart, with the same arithmetic: cuda/dist_scape_zero.cuh.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_scape.h"

void scape_zero_init(DistOptim *d) {
    ScapeState *S = scape(d);
    size_t nch = S->nch ? S->nch : 1;
    S->ch_qo = xcalloc(nch, sizeof(size_t), "SCAPE owned payload offsets");
    S->ch_qs = xcalloc(nch, sizeof(size_t), "SCAPE sync offsets");
    S->rs_off = xcalloc((size_t)(d->nb ? d->nb : 1), sizeof(size_t), "SCAPE reduce-scatter offsets");
    S->rs_k = xcalloc((size_t)(d->nb ? d->nb : 1) * (size_t)d->world, sizeof(size_t), "SCAPE reduce-scatter counts");
    S->zred = xmalloc((S->nch + 1) * sizeof(double), "SCAPE norm partials");
    if (d->cfg.payload_bf16) S->ch_qe = xcalloc(nch, sizeof(size_t), "SCAPE residual offsets");
}

void scape_zero_layout(DistOptim *d, size_t K) {
    ScapeState *S = scape(d);
    const size_t W = (size_t)d->world;
    memset(S->rs_k, 0, (size_t)d->nb * W * sizeof(size_t));
    size_t q = 0;
    for (int b = 0; b < d->nb; b++) {
        S->rs_off[b] = q;
        /* the bucket's slices are in memory order, so each owner's are consecutive in its payload, in rank order */
        for (int k = 0; k < d->bn[b]; k++) {
            int i = d->bslices[b][k];
            const ParamSlice *s = &d->tab->slices[i];
            size_t c0 = (size_t)S->slice_ch0[i], c1 = c0 + (s->numel + SCAPE_CHUNK - 1) / SCAPE_CHUNK;
            size_t n = c1 == c0 ? 0 : (c1 < S->nch ? S->ch_q[c1] : K) - S->ch_q[c0];
            int r = owner_table_owner(&d->own, i);
            S->rs_k[(size_t)b * W + (size_t)r] += n;
            if (r != d->rank) continue;
            for (size_t c = c0; c < c1; c++) S->ch_qo[c] = q + (S->ch_q[c] - S->ch_q[c0]);
            q += n;
        }
    }
    S->own_k = q;
    /* ch_qs: where chunk c's masked values sit among all masked coordinates in memory order (the sync's layout:
     * the owners' parts in rank order, each in memory order) */
    size_t qs = 0;
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        size_t c0 = (size_t)S->slice_ch0[i], c1 = c0 + (s->numel + SCAPE_CHUNK - 1) / SCAPE_CHUNK;
        if (c1 == c0) continue; /* an empty slice */
        for (size_t c = c0; c < c1; c++) S->ch_qs[c] = qs + (S->ch_q[c] - S->ch_q[c0]);
        qs += (c1 < S->nch ? S->ch_q[c1] : K) - S->ch_q[c0];
    }
    if (S->rs_out && q <= S->rs_cap && S->rs_cap <= q + q / 2) return;
    S->rs_out = xrealloc(S->rs_out, (q ? q : 1) * sizeof(float), "SCAPE owned payload");
    if (d->cfg.payload_bf16) {
        S->rs16 = xrealloc(S->rs16, (q ? q : 1) * sizeof(uint16_t), "SCAPE owned bf16 payload");
        S->rs_err = xrealloc(S->rs_err, (q ? q : 1) * sizeof(float), "SCAPE owned rounding errors");
    }
    S->rs_cap = q;
}

double scape_zero_reduce_norm(DistOptim *d, int *bad) {
    ScapeState *S = scape(d);
    int b = 0;
    for (size_t c = 0; c < S->nch; c++) {
        S->zred[c] = S->ch_ss[c];
        b |= S->ch_bad[c];
    }
    S->zred[S->nch] = b ? 1.0 : 0.0;
    /* one rank contributes each chunk's sum, the others +0: exact, in any order of addition */
    comm_allreduce_sum_f64(S->zred, S->nch + 1);
    double ss = 0;
    for (size_t c = 0; c < S->nch; c++) {
        S->ch_ss[c] = S->zred[c];
        ss += S->zred[c];
    }
    *bad = S->zred[S->nch] > 0;
    return ss;
}

/* K_r of each rank (the step's payload counts by owner) into kr (world entries); returns the total. */
static size_t owner_counts(const DistOptim *d, size_t *kr) {
    const size_t W = (size_t)d->world;
    size_t total = 0;
    for (size_t r = 0; r < W; r++) {
        kr[r] = 0;
        for (int b = 0; b < d->nb; b++) kr[r] += scape(d)->rs_k[(size_t)b * W + r];
        total += kr[r];
    }
    return total;
}

/* One all-gather of the owners' values on M_t into stage (its K_t floats, free once the reduce-scatters are
 * waited for): all masked coordinates in memory order, so rank r's K_r values follow the earlier ranks' (chunk c's
 * from ch_qs[c]); then every rank writes them over M_t: into p (what = 'p'), or beta1 times them into r (what = 'm',
 * the fold). Chunks in parallel, word by word over the mask. */
static void sync_values(DistOptim *d, const size_t *kr, char what) {
    ScapeState *S = scape(d);
    const float b1 = d->cfg.opt.beta1;
    const uint8_t *M = S->mask_cur;
    float *v = d->stage;
    #pragma omp parallel for schedule(dynamic, 4)
    for (size_t c = 0; c < S->nch; c++) {
        if (!dist_is_owned_slice(d, S->ch_slice[c])) continue;
        if (what == 'p') scape_gather_masked(d->params, M, S->ch_lo[c], S->ch_hi[c], v + S->ch_qs[c]);
        else memcpy(v + S->ch_qs[c], S->m + S->ch_qm[c], mask_count(M, S->ch_lo[c], S->ch_hi[c]) * sizeof(float));
    }
    comm_wait(comm_iallgatherv(v, kr, sizeof(float)));
    float *dst = what == 'p' ? d->params : S->r;
    const float sc = what == 'p' ? 1.0f : b1;
    #pragma omp parallel for schedule(dynamic, 4)
    for (size_t c = 0; c < S->nch; c++) {
        size_t q = S->ch_qs[c], hi = S->ch_hi[c];
        for (size_t j = S->ch_lo[c]; j < hi; j += 64) {
            size_t n = hi - j < 64 ? hi - j : 64;
            uint64_t w = mask_load64(M, j) & (n == 64 ? ~0ull : (1ull << n) - 1);
            for (; w; w &= w - 1) {
                size_t i = (size_t)__builtin_ctzll(w);
                dst[j + i] = what == 'p' ? v[q] : sc * v[q];
                q++;
            }
        }
    }
}

void scape_zero_sync(DistOptim *d) {
    size_t *kr = xmalloc((size_t)d->world * sizeof(size_t), "SCAPE sync counts");
    owner_counts(d, kr);
    sync_values(d, kr, 'm'); /* r = beta1 m_t on M_t (the update pass left 0 there) */
    sync_values(d, kr, 'p');
    free(kr);
}

size_t scape_zero_m_memory_order(const DistOptim *d, float *out) {
    const ScapeState *S = scape(d);
    const size_t W = (size_t)d->world;
    size_t *cnt = xmalloc(W * sizeof(size_t), "SCAPE gather counts"), total = 0, mine = 0;
    for (size_t r = 0; r < W; r++) {
        cnt[r] = S->have_m ? mask_count(S->mask_m, d->own.lo[r], d->own.hi[r]) : 0;
        if ((int)r == d->rank) mine = total;
        total += cnt[r];
    }
    size_t o = 0;
    if (S->have_m)
        for (int i = d->own.first[d->rank]; i < d->own.first[d->rank + 1]; i++) {
            const ParamSlice *s = &d->tab->slices[i];
            size_t n = mask_count(S->mask_m, s->offset, s->offset + s->numel);
            if (!n) continue; /* (an empty slice has no chunk) */
            memcpy(out + mine + o, S->m + S->ch_qm[S->slice_ch0[i]], n * sizeof(float));
            o += n;
        }
    comm_wait(comm_iallgatherv(out, cnt, sizeof(float)));
    free(cnt);
    return total;
}

void scape_zero_r_unfold(const DistOptim *d, float *out) {
    const ScapeState *S = scape(d);
    memcpy(out, S->r, d->P * sizeof(float));
    if (!S->have_m) return;
    #pragma omp parallel for schedule(dynamic, 4)
    for (size_t c = 0; c < S->nch; c++) {
        size_t q = S->ez ? S->ch_qe[c] : 0;
        for (size_t j = S->ch_lo[c]; j < S->ch_hi[c]; j++)
            if (mask_get(S->mask_m, j)) out[j] = S->ez ? S->ez[q++] : 0.0f;
    }
}

void scape_zero_r_fold(DistOptim *d, const float *m) {
    ScapeState *S = scape(d);
    if (!S->have_m) return;
    const float b1 = d->cfg.opt.beta1;
    if (d->cfg.payload_bf16) { /* r on mask_m (the rounding losses) -> ez, in mask_m's payload order */
        size_t n = dist_chunk_offsets(S->ch_lo, S->ch_hi, S->nch, S->mask_m, S->ch_qe);
        if (n > S->ez_cap || !S->ez) {
            S->ez = xrealloc(S->ez, (n ? n : 1) * sizeof(float), "SCAPE residual on the mask");
            S->ez_cap = n;
        }
        for (size_t c = 0; c < S->nch; c++) {
            size_t q = S->ch_qe[c];
            for (size_t j = S->ch_lo[c]; j < S->ch_hi[c]; j++)
                if (mask_get(S->mask_m, j)) {
                    S->ez[q++] = S->r[j];
                    S->r[j] = b1 * m[j];
                }
        }
        return;
    }
    for (size_t j = 0; j < d->P; j++)
        if (mask_get(S->mask_m, j)) S->r[j] += b1 * m[j];
}

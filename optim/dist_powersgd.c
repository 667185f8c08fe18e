/*
 * optim/dist_powersgd.c - PowerSGD (--optimizer powersgd; Vogels, Karimireddy, Jaggi, "PowerSGD: Practical Low-Rank
 * Gradient Compression for Distributed Optimization", NeurIPS 2019, Algorithm 1 with error feedback and warm
 * start), its result fed into dense AdamW as the gradient, as PyTorch's PowerSGD communication hook is used with
 * Adam. Per rank i at step t > S (--powersgd-start; steps 1..S all-reduce the gradient whole, as the hook's
 * start_powerSGD_iter), for each compressed matrix slice s viewed as n x m (n = shape[0], m = numel / n), rank
 * r_s = min(R, n, m):
 *   M_i = g_i[s] + e_i[s]                     (error feedback)
 *   P = mean_i M_i Q_s                        (n x r_s; one averaging all-reduce per bucket, with the bucket's
 *                                              uncompressed slices' gradients)
 *   P <- orthogonalize(P)                     (Gram-Schmidt over the columns, in column order:
 *                                              p_k /= ||p_k|| + eps, then p_j -= <p_k, p_j> p_k for j > k; a zero
 *                                              column stays zero)
 *   Q_s = mean_i M_i^T P                      (m x r_s; one all-reduce of every slice's Q after the P's)
 *   g[s] = P Q_s^T;  e_i[s] = M_i - P Q_s^T   (Q_s is kept: the next step's warm start)
 * Uncompressed slices (vectors, and matrices with n m < --powersgd-min-compression r_s (n + m), the hook's
 * min_compression_rate) are averaged whole. Then the global-norm clip of g and AdamW (optim.h). Q_s starts as
 * i.i.d. N(0, 1) from a fixed seed, the same on every rank, so P, Q and g are too; e_i is each rank's own.
 * Ours, not the paper's: the products in a fixed order with double accumulators (no BLAS: the same bits for any
 * thread count; r_s is 1-4 here, so they are matrix-vector sized), the slice's own rows/columns as the hook's
 * view, and a zero column left zero where the hook (epsilon 0) would divide by zero.
 * Bytes per rank and step: 2 * 4 (K_P + K_Q) (N - 1) / N (two ring all-reduces), K_P = sum over slices of n r_s
 * (compressed) or numel (uncompressed), K_Q = sum of m r_s.
 * State (PsgdState below): e_i, m, v (AdamW's, P each), Q (K_Q, shared), qbuf = the Q payload; DistOptim's stage
 * holds the P payloads by bucket.
 * Not for: AdamW itself (optim.c).
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/util.h"
#include "optim/dist_impl.h"

/* PowerSGD's options (its rows below): the approximation's rank R, the dense steps S, the least compression rate
 * of a compressed matrix and the orthogonalization's epsilon. */
typedef struct {
    int rank, start;
    double min_compression;
    float eps;
} PsgdParams;
RULE_PARAMS_FIT(PsgdParams);
static inline const PsgdParams *psgd_params(const RuleParams *b) { return (const PsgdParams *)(const void *)b->bytes; }
static inline const PsgdParams *psgd_par(const DistOptim *d) { return psgd_params(&d->cfg.rule_params); }

/* PowerSGD's own state (DistOptim's state): e_i, m, v (EmvState, first); per slice its rank r_s (slice_rank; 0: not
 * compressed), Q offset and payload offset; per bucket its payload's offset in stage (pay_off); the warm-started Q
 * (shared, kq values) and the Q payload (kq values); the step whose buckets are on the wire (cur_t, -1 none) and
 * whether it compresses. */
typedef struct {
    EmvState emv;
    size_t *slice_rank, *qoff, *poff, *pay_off, kq;
    float *q, *qbuf;
    int cur_t, compress;
} PsgdState;
static inline PsgdState *psgd(const DistOptim *d) { return (PsgdState *)d->state; }


/* rank r_s of slice i if it is compressed, else 0 */
static size_t psgd_rank_of(const DistOptim *d, const ParamSlice *s) {
    if (s->ndim < 2 || s->numel == 0) return 0;
    size_t n = s->shape[0], m = s->numel / n, r = (size_t)psgd_par(d)->rank;
    if (r > n) r = n;
    if (r > m) r = m;
    if ((double)n * (double)m < psgd_par(d)->min_compression * (double)r * (double)(n + m)) return 0;
    return r;
}

static void psgd_init(DistOptim *d, size_t owned_total) {
    d->state = xcalloc(1, sizeof(PsgdState), "PowerSGD state");
    const ParamTable *tab = d->tab;
    dist_emv_init(d);
    psgd(d)->slice_rank = xcalloc((size_t)(tab->n ? tab->n : 1), sizeof(size_t), "PowerSGD ranks");
    psgd(d)->qoff = xcalloc((size_t)(tab->n ? tab->n : 1), sizeof(size_t), "PowerSGD Q offsets");
    psgd(d)->poff = xcalloc((size_t)(tab->n ? tab->n : 1), sizeof(size_t), "PowerSGD P offsets");
    psgd(d)->pay_off = xcalloc((size_t)(d->nb ? d->nb : 1), sizeof(size_t), "PowerSGD payload offsets");
    size_t kq = 0;
    for (int i = 0; i < tab->n; i++) {
        const ParamSlice *s = &tab->slices[i];
        psgd(d)->slice_rank[i] = psgd_rank_of(d, s);
        psgd(d)->qoff[i] = kq;
        if (psgd(d)->slice_rank[i]) kq += s->numel / s->shape[0] * psgd(d)->slice_rank[i];
    }
    psgd(d)->kq = kq;
    if (kq == 0 && d->rank == 0 && tab->n > 0) { /* the plain dense rule for the whole run: say so, as for --warmup */
        printf("note: --optimizer powersgd compresses no matrix at --powersgd-rank %d and --powersgd-min-compression %g "
               "(each has n m < min x rank x (n + m)), so the whole run is AdamW bit for bit; lower either\n",
               psgd_par(d)->rank, psgd_par(d)->min_compression);
        fflush(stdout);
    }
    psgd(d)->q = xmalloc((kq ? kq : 1) * sizeof(float), "PowerSGD Q");
    psgd(d)->qbuf = xmalloc((kq ? kq : 1) * sizeof(float), "PowerSGD Q payload");
    Rng g;
    rng_seed(&g, 0x9e3779b97f4a7c15ull); /* fixed: every rank draws the same Q */
    if (kq) rng_normal(&g, psgd(d)->q, kq, 0.0f, 1.0f);
    d->stage = xmalloc((d->P ? d->P : 1) * sizeof(float), "PowerSGD payload"); /* K_P <= P */
    psgd(d)->cur_t = -1;
}

/* Start of step t's communication: whether it compresses (t > S), and each bucket's payload layout. */
static void psgd_begin(DistOptim *d, int t) {
    psgd(d)->cur_t = t;
    psgd(d)->compress = t > psgd_par(d)->start;
    size_t off = 0;
    for (int b = 0; b < d->nb; b++) {
        psgd(d)->pay_off[b] = off;
        for (int k = 0; k < d->bn[b]; k++) {
            int i = d->bslices[b][k];
            const ParamSlice *s = &d->tab->slices[i];
            psgd(d)->poff[i] = off;
            off += psgd(d)->compress && psgd(d)->slice_rank[i] ? s->shape[0] * psgd(d)->slice_rank[i] : s->numel;
        }
        d->bucket_k[b] = off - psgd(d)->pay_off[b];
    }
    d->step_begun = 1;
}

/* Bucket b: M = g + e over its compressed slices (into grads), P_i = M Q into the payload, the others' gradients
 * copied; then the bucket's averaging all-reduce. */
static void psgd_queue_bucket(DistOptim *d, int b) {
    float *g = d->grads, *out = d->stage;
    for (int k = 0; k < d->bn[b]; k++) {
        int i = d->bslices[b][k];
        const ParamSlice *s = &d->tab->slices[i];
        size_t r = psgd(d)->slice_rank[i], o = psgd(d)->poff[i];
        if (!psgd(d)->compress || !r) {
            memcpy(out + o, g + s->offset, s->numel * sizeof(float));
            continue;
        }
        size_t n = s->shape[0], m = s->numel / n;
        float *M = g + s->offset;
        const float *Q = psgd(d)->q + psgd(d)->qoff[i], *e = psgd(d)->emv.e + s->offset;
        for (size_t j = 0; j < s->numel; j++) M[j] = M[j] + e[j];
        float *P = out + o;
        #pragma omp parallel for schedule(static) if (n * m >= 65536)
        for (size_t a = 0; a < n; a++)
            for (size_t c = 0; c < r; c++) {
                double acc = 0;
                for (size_t j = 0; j < m; j++) acc += (double)M[a * m + j] * (double)Q[j * r + c];
                P[a * r + c] = (float)acc;
            }
    }
    d->bh[b] = comm_iallreduce_avg_f32(out + psgd(d)->pay_off[b], d->bucket_k[b]);
    d->bstate[b] = 2;
}

static void psgd_bucket_ready(DistOptim *d, int b) {
    if (!d->step_begun) psgd_begin(d, d->last_t + 1);
    psgd_queue_bucket(d, b);
}

/* Gram-Schmidt over the r columns of the n x r row-major P, in place, in column order (see the header). */
static void psgd_orthogonalize(float *P, size_t n, size_t r, float eps) {
    for (size_t k = 0; k < r; k++) {
        double ss = 0;
        for (size_t a = 0; a < n; a++) ss += (double)P[a * r + k] * (double)P[a * r + k];
        float norm = (float)sqrt(ss);
        if (norm > 0)
            for (size_t a = 0; a < n; a++) P[a * r + k] = P[a * r + k] / (norm + eps);
        for (size_t j = k + 1; j < r; j++) {
            double dot = 0;
            for (size_t a = 0; a < n; a++) dot += (double)P[a * r + k] * (double)P[a * r + j];
            for (size_t a = 0; a < n; a++) P[a * r + j] = P[a * r + j] - (float)dot * P[a * r + k];
        }
    }
}

/* Bucket b went out for another step, in the other phase: M = g + e undone on its compressed slices, so the retry
 * starts from the gradient. */
static void psgd_unqueue_bucket(DistOptim *d, int b) {
    for (int k = 0; k < d->bn[b]; k++) {
        int i = d->bslices[b][k];
        const ParamSlice *s = &d->tab->slices[i];
        if (psgd(d)->compress && psgd(d)->slice_rank[i])
            for (size_t j = s->offset; j < s->offset + s->numel; j++) d->grads[j] = d->grads[j] - psgd(d)->emv.e[j];
    }
}

/* Step t: the buckets backward did not send, the P all-reduces, the skip decision (any rank's non-finite M or
 * gradient), P orthogonalized, Q_i = M^T P and its all-reduce, g = P Q^T and e = M - P Q^T, the clip and AdamW. */
static int psgd_step(DistOptim *d, int t, float lr, float *grad_norm) {
    if (d->step_begun && psgd(d)->cur_t != t && psgd(d)->compress == (t > psgd_par(d)->start))
        psgd(d)->cur_t = t; /* buckets went out for another step number (after a skipped step) in the same phase: the
                       * payload does not depend on t */
    /* ... in the other phase (a skip at the boundary): redo them for t, M - e giving g back up to rounding */
    if (d->step_begun && psgd(d)->cur_t != t) dist_drop_buckets(d, psgd_unqueue_bucket);
    if (!d->step_begun) psgd_begin(d, t);
    dist_gather_buckets(d, psgd_queue_bucket, NULL);
    float *g = d->grads;
    const float *avg = d->stage;
    /* a non-finite M or gradient on any rank would reach e or the update: every rank must agree to skip */
    int64_t bad = 0;
    for (size_t j = 0; j < d->P; j++) bad |= !isfinite(g[j]);
    for (int b = 0; b < d->nb; b++)
        for (size_t q = psgd(d)->pay_off[b]; q < psgd(d)->pay_off[b] + d->bucket_k[b]; q++) bad |= !isfinite(avg[q]);
    comm_allreduce_max_i64(&bad, 1);
    if (bad) {
        *grad_norm = NAN;
        psgd(d)->cur_t = -1;
        return dist_end_step(d, t, 1);
    }
    const int comp = psgd(d)->compress;
    if (comp && psgd(d)->kq) {
        /* P orthogonalized in the payload, then Q_i = M^T P for every compressed slice, all-reduced at once */
        for (int i = 0; i < d->tab->n; i++) {
            const ParamSlice *s = &d->tab->slices[i];
            size_t r = psgd(d)->slice_rank[i];
            if (!r) continue;
            size_t n = s->shape[0], m = s->numel / n;
            float *P = d->stage + psgd(d)->poff[i];
            psgd_orthogonalize(P, n, r, psgd_par(d)->eps);
            const float *M = g + s->offset;
            float *Qi = psgd(d)->qbuf + psgd(d)->qoff[i];
            #pragma omp parallel for schedule(static) if (n * m >= 65536)
            for (size_t j = 0; j < m; j++)
                for (size_t c = 0; c < r; c++) {
                    double acc = 0;
                    for (size_t a = 0; a < n; a++) acc += (double)M[a * m + j] * (double)P[a * r + c];
                    Qi[j * r + c] = (float)acc;
                }
        }
        comm_wait(comm_iallreduce_avg_f32(psgd(d)->qbuf, psgd(d)->kq));
        memcpy(psgd(d)->q, psgd(d)->qbuf, psgd(d)->kq * sizeof(float)); /* the warm start of the next step */
    }
    /* g: the averaged uncompressed gradients, and P Q^T with e = M - P Q^T on the compressed slices */
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        size_t r = psgd(d)->slice_rank[i];
        if (!comp || !r) {
            memcpy(g + s->offset, avg + psgd(d)->poff[i], s->numel * sizeof(float));
            continue;
        }
        size_t n = s->shape[0], m = s->numel / n;
        const float *P = avg + psgd(d)->poff[i], *Q = psgd(d)->q + psgd(d)->qoff[i];
        float *M = g + s->offset, *e = psgd(d)->emv.e + s->offset;
        #pragma omp parallel for schedule(static) if (n * m >= 65536)
        for (size_t a = 0; a < n; a++)
            for (size_t j = 0; j < m; j++) {
                double acc = 0;
                for (size_t c = 0; c < r; c++) acc += (double)P[a * r + c] * (double)Q[j * r + c];
                float approx = (float)acc;
                e[a * m + j] = M[a * m + j] - approx;
                M[a * m + j] = approx;
            }
    }
    if (d->dbg_ghat) memcpy(d->dbg_ghat, g, d->P * sizeof(float));
    double ss = dist_sumsq(g, 0, d->P);
    float norm = (float)sqrt(ss);
    *grad_norm = norm;
    float sc = dist_clip_scale(d->cfg.clip, norm);
    if (sc != 1.0f)
        for (size_t j = 0; j < d->P; j++) g[j] *= sc;
    adamw_update(d->tab, d->params, g, psgd(d)->emv.m, psgd(d)->emv.v, 0, d->P, t, lr, &d->cfg.opt);
    d->last_k = dist_bucket_k_total(d) + (comp ? psgd(d)->kq : 0);
    psgd(d)->cur_t = -1;
    return dist_end_step(d, t, 0);
}

extern const UpdateRule rule_powersgd;

/* the approximation's rank and epsilon, when PowerSGD is the chosen rule */
static void psgd_check(const DistConfig *cfg, const UpdateRule *chosen) {
    if (chosen != &rule_powersgd) return;
    const PsgdParams *p = psgd_params(&cfg->rule_params);
    if (p->rank < 1)
        fatal("--powersgd-rank %d: the approximation's rank must be >= 1 (1 is the PyTorch hook's default)", p->rank);
    if (!(p->eps >= 0)) fatal("--powersgd-eps %g must be >= 0", p->eps);
}

/* the dense phase covering the whole run */
static void psgd_notes(const RuleParams *b, int steps) {
    if (psgd_params(b)->start >= steps)
        printf("note: --powersgd-start %d >= --steps %d, so PowerSGD never compresses: the whole run is AdamW bit "
               "for bit; lower --powersgd-start\n", psgd_params(b)->start, steps);
}

/* the memory check's bytes per parameter: e, m, v (Q is small) */
static double psgd_bytes_per_param(const DistConfig *cfg) { return 12; }

/* e, m, v and the warm-started Q */
static size_t psgd_state_memory(const DistOptim *d) { return 3 * d->P * sizeof(float) + psgd(d)->kq * sizeof(float); }

const float *distopt_powersgd_q(const DistOptim *d, size_t *n) {
    *n = d->rule == &rule_powersgd ? psgd(d)->kq : 0;
    return d->rule == &rule_powersgd ? psgd(d)->q : NULL;
}

static const RuleOption psgd_options[] = {
    {.spec = {"powersgd-rank", ARG_INT, NULL, "1", 1, 1024, NULL,
              "--optimizer powersgd: rank of each matrix's approximation (1: the PyTorch hook's default)", 0},
     .offset = offsetof(PsgdParams, rank), .defining = 1},
    {.spec = {"powersgd-start", ARG_INT, NULL, "1000", 0, INT_MAX, NULL,
              "--optimizer powersgd: steps 1..N all-reduce the whole gradient before compression starts (the PyTorch "
              "hook's start_powerSGD_iter)", 0},
     .offset = offsetof(PsgdParams, start)},
    {.spec = {"powersgd-min-compression", ARG_DOUBLE, NULL, "2", 0, 1e9, NULL,
              "--optimizer powersgd: compress a matrix only if n m >= this x rank (n + m) (the hook's "
              "min_compression_rate); others are all-reduced whole", 0},
     .offset = offsetof(PsgdParams, min_compression), .defining = 1},
    {.spec = {"powersgd-eps", ARG_FLOAT, NULL, "0", 0, 1, NULL,
              "--optimizer powersgd: epsilon of the Gram-Schmidt orthogonalization (p / (|p| + eps))", 0},
     .offset = offsetof(PsgdParams, eps)},
};

static size_t psgd_state_bytes(const DistOptim *d) { return sizeof(BlobHeader) + (3 * d->P + psgd(d)->kq) * sizeof(float); }
static void psgd_save(const DistOptim *d, void *blob) {
    BlobHeader h;
    dist_emv_save(d, blob, &h);
    memcpy((char *)blob + sizeof h + 3 * d->P * sizeof(float), psgd(d)->q, psgd(d)->kq * sizeof(float));
    h.K = psgd(d)->kq;
    memcpy(blob, &h, sizeof h);
}
static size_t psgd_blob_payload(const BlobHeader *h, int i) { return (3 * h->P + h->K) * sizeof(float); }
static void psgd_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs) {
    dist_emv_load(d, h0, blobs, n_blobs);
    if (h0->K != psgd(d)->kq)
        fatal("optimizer state holds %llu PowerSGD Q values, this run needs %zu; resume with the --powersgd-rank "
              "and --powersgd-min-compression of the checkpoint", (unsigned long long)h0->K, psgd(d)->kq);
    memcpy(psgd(d)->q, (const float *)((const char *)blobs[0] + sizeof(BlobHeader)) + 3 * d->P, psgd(d)->kq * sizeof(float));
}

static void psgd_free(DistOptim *d) {
    PsgdState *s = psgd(d);
    if (!s) return;
    dist_emv_free(&s->emv);
    free(s->slice_rank); free(s->qoff); free(s->poff); free(s->pay_off); free(s->q); free(s->qbuf);
    free(s);
}

/* m, v and the warm-started Q, which every rank shares */
static uint64_t psgd_sync_hash(DistOptim *d, uint64_t h) {
    h = dist_sync_hash_mv(d, h);
    return hash_fnv1a64(h, psgd(d)->q, psgd(d)->kq * sizeof(float));
}

const UpdateRule rule_powersgd = {
    .name = "powersgd", RULE_OPTIONS(psgd_options), .kind = OPT_POWERSGD,
    .notes = psgd_notes, .bytes_per_param = psgd_bytes_per_param, .check = psgd_check, .init = psgd_init, .bucket_ready = psgd_bucket_ready, .step = psgd_step,
    .state_bytes = psgd_state_bytes, .save = psgd_save, .blob_payload = psgd_blob_payload, .load = psgd_load,
    .state_memory = psgd_state_memory, .sync_hash = psgd_sync_hash,
    .free = psgd_free,
    .moment = dist_emv_moment, .residual = dist_emv_residual,
};


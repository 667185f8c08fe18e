/*
 * optim/dist_sparseloco.c - SparseLoCo (--optimizer sparseloco; Sarfi, Therien, Lidin, Belilovsky, "Communication
 * Efficient LLM Pre-training with SparseLoCo", arXiv 2508.15706): DiLoCo (optim/dist_diloco.c) whose outer momentum is
 * replaced by each rank's own error feedback, of which only the top-k of each chunk goes out, in a few bits. Inner
 * steps as DiLoCo's (dist_loco.c: H steps of AdamW or AdamS on the rank's own gradient). At an outer step (t a
 * multiple of H, and the run's last step), rank i with beta = sparseloco-beta, C = sparseloco-chunk, k =
 * sparseloco-topk, b = sparseloco-bits, alpha = sparseloco-alpha:
 *   Delta_i = theta_prev - theta_i;  e_i <- beta e_i + Delta_i
 *   every tensor (ParamTable slice) cut into chunks of C consecutive elements (its last one shorter), and per chunk c:
 *     S = the k_c = min(k, |c|) largest |e_i| of c (ties to the lower index);  s = max_{j in S} |e_i[j]|
 *     each j in S quantized to b bits: a sign and a level l in 0 .. 2^(b-1) - 1 of the symmetric uniform grid
 *       q_j = sign(e_i[j]) s (2l + 1) / (2^b - 1),  y = |e_i[j]| / s (2^b - 1),
 *       l = min(2^(b-1) - 1, max(0, floor((y - 1) / 2 + 1/2))): the nearest level, ties to the larger (b = 2:
 *       levels s/3 and s, s when |e| >= 2s/3; b = 1: sign times s); sign(0) = +; all 0 when s = 0
 *     e_i[j] <- e_i[j] - q_j                                (what was sent leaves the error feedback)
 *   the (index, value) pairs of every rank go out on one all-gather, then on every rank
 *     theta <- theta_prev - alpha (1/N) sum_i scatter(q_i)   (summed in rank order);  theta_prev, theta_i <- theta
 * What the paper's code does for the 2-bit values could not be checked here: the quantizer above (sign, one
 * magnitude bit, one fp32 scale per chunk: the max of the chunk's selected values) is ours, written from the paper's
 * "2-bit quantization" of the top-k values; with error feedback its rounding is carried to the next round.
 * Wire format, per rank and chunk: the scale (fp32), k_c uint16 offsets in the chunk (C <= 65536), k_c b-bit codes
 * (bit 0 the sign, the level above it) packed into ceil(k_c b / 8) bytes; every rank sends the same count.
 * Bytes per rank (comm.h's ring model): inner steps 0 in every payload kind (the inner step's control all-reduce as
 * DiLoCo's); an outer step one all-gather, (N - 1) sum_c (4 + 2 k_c + ceil(k_c b / 8)): with the defaults (C 4096,
 * k 64, b 2) 148 bytes a chunk, against 2 x 16384 (N-1)/N for DiLoCo's dense all-reduce of the chunk.
 * --sparseloco-mask shared (ours, not the paper's: SCAPE's shared mask, SCAPE.md sections 3-4, on SparseLoCo's outer
 * step): one mask M for every rank, so the values go by an all-reduce and no index travels. M of an outer step is
 * chosen at the one before, after its e_i <- e_i - q_i, by each tensor's owner (optim/scape.h's owner table) as the
 * top-k_c of each chunk of its own e_i; the owners' packed segments are all-gathered (P bits in all). At the first
 * outer step (no mask yet) it is chosen there, from e_i after the decay-and-add, the same way. At an outer step each
 * rank quantizes its e_i on M with its own per-chunk scale s_i (its largest |e_i| on M in the chunk; the quantizer
 * above), takes that out of e_i, and the K = sum_c k_c dequantized values are averaged by one all-reduce (fp32, in
 * memory order); theta <- theta_prev - alpha mean on M. Bytes per rank and outer step: 2 * 4K (N-1)/N for the
 * payload and (N-1)/N sum_r mask_bytes(hi_r - lo_r) for the mask (twice at the first outer step), against the own
 * masks' (N-1) sum_c (4 + 2 k_c + ceil(k_c b / 8)), which grows with N. The mask is in the blob (shared: rank 0's on
 * another world) and hashed by SCAPE_CHECK_SYNC. Not done: coding the mask segments (SCAPE's optim/mask_code.h), the
 * payload in b bits.
 * Defaults: beta 0.95, C 4096, k 64, b 2, alpha 1 (the paper's), H 30 (the paper's 72B run; it reports H 15-250),
 * mask own.
 * State: dist_loco.c's LocoState with e_i as its outer state (per rank: no sync hash); the wire buffer, the chunk
 * table. Resume: as DiLoCo's, e_i per rank (the mean over the saved ranks on another world, at an outer step).
 * Not for: the inner step and the blob's common part (dist_loco.c), the collectives (comm/comm.c).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_loco.h"

/* SparseLoCo's options (its rows below). */
typedef struct {
    int h;
    const char *inner;
    float beta;  /* the error feedback's decay */
    int chunk;   /* C */
    int topk;    /* k per chunk */
    int bits;    /* b per value */
    float alpha; /* the outer learning rate */
    const char *mask; /* "own" (each rank's top-k, the paper's) or "shared" (the owners', one outer step ahead) */
} SparselocoParams;
RULE_PARAMS_FIT(SparselocoParams);
static inline const SparselocoParams *sparseloco_params(const RuleParams *b) {
    return (const SparselocoParams *)(const void *)b->bytes;
}

/* SparseLoCo's state: the shared local-update state (its outer state e_i), the parameters, the chunks (first element,
 * length, byte offset of its part in a rank's message), a rank's message bytes, the all-gather buffer, scratch. */
typedef struct {
    LocoState loco;
    float beta, alpha;
    int chunk, topk, bits;
    size_t nch, *ch_lo, *ch_n, *ch_off, msg;
    uint8_t *wire;
    uint32_t *tmp;
    uint8_t *sel;
    /* --sparseloco-mask shared: per chunk its tensor's owner; the mask of the next outer step (P bits) and whether
     * there is one; the owners' packed segments (rank r's mask_bytes(hi_r - lo_r) bytes at seg_off[r]); the payload
     * (K = sum_c k_c values) */
    int shared;
    int *ch_owner;
    uint8_t *mask_next;
    int have_next;
    uint8_t *seg;
    size_t *seg_off, *seg_n, K;
    float *pay;
} SparselocoState;
static inline SparselocoState *sl(const DistOptim *d) { return (SparselocoState *)d->state; }

extern const UpdateRule rule_sparseloco;

static size_t chunk_k(const SparselocoState *s, size_t n) { return (size_t)s->topk < n ? (size_t)s->topk : n; }
static size_t chunk_bytes(const SparselocoState *s, size_t n) {
    size_t k = chunk_k(s, n);
    return sizeof(float) + 2 * k + (k * (size_t)s->bits + 7) / 8;
}

static void sparseloco_init(DistOptim *d, size_t owned_total) {
    (void)owned_total;
    const SparselocoParams *q = sparseloco_params(&d->cfg.rule_params);
    SparselocoState *s = xcalloc(1, sizeof *s, "SparseLoCo state");
    d->state = s;
    loco_init(d, &s->loco, q->h, q->inner);
    s->beta = q->beta;
    s->alpha = q->alpha;
    s->chunk = q->chunk;
    s->topk = q->topk;
    s->bits = q->bits;
    s->shared = strcmp(q->mask, "shared") == 0;
    for (int i = 0; i < d->tab->n; i++) s->nch += (d->tab->slices[i].numel + (size_t)s->chunk - 1) / (size_t)s->chunk;
    s->ch_lo = xmalloc((s->nch + 1) * sizeof(size_t), "SparseLoCo chunks");
    s->ch_n = xmalloc((s->nch + 1) * sizeof(size_t), "SparseLoCo chunks");
    s->ch_off = xmalloc((s->nch + 1) * sizeof(size_t), "SparseLoCo chunks");
    s->ch_owner = xmalloc((s->nch + 1) * sizeof(int), "SparseLoCo chunk owners");
    size_t c = 0, maxn = 1;
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *sc = &d->tab->slices[i];
        int owner = 0;
        while (owner + 1 < d->world && i >= d->own.first[owner + 1]) owner++;
        for (size_t a = 0; a < sc->numel; a += (size_t)s->chunk, c++) {
            s->ch_owner[c] = owner;
            s->ch_lo[c] = sc->offset + a;
            s->ch_n[c] = sc->numel - a < (size_t)s->chunk ? sc->numel - a : (size_t)s->chunk;
            s->ch_off[c] = s->msg;
            s->msg += chunk_bytes(s, s->ch_n[c]);
            if (s->ch_n[c] > maxn) maxn = s->ch_n[c];
            s->K += chunk_k(s, s->ch_n[c]);
        }
    }
    if (s->shared) {
        s->mask_next = xcalloc(mask_bytes(d->P) + 1, 1, "SparseLoCo next mask");
        s->seg_off = xmalloc((size_t)d->world * sizeof(size_t), "SparseLoCo mask segments");
        s->seg_n = xmalloc((size_t)d->world * sizeof(size_t), "SparseLoCo mask segments");
        size_t o = 0;
        for (int r = 0; r < d->world; r++) {
            s->seg_off[r] = o;
            s->seg_n[r] = mask_bytes(d->own.hi[r] - d->own.lo[r]);
            o += s->seg_n[r];
        }
        s->seg = xcalloc(o + 1, 1, "SparseLoCo mask segments");
        s->pay = xmalloc((s->K + 1) * sizeof(float), "SparseLoCo payload");
    }
    s->wire = xmalloc((size_t)d->world * s->msg + 1, "SparseLoCo all-gather buffer");
    s->tmp = xmalloc(maxn * sizeof(uint32_t), "SparseLoCo top-k scratch");
    s->sel = xmalloc(mask_bytes(maxn) + 8, "SparseLoCo chunk selection");
}

static void sparseloco_bucket_ready(DistOptim *d, int b) { (void)d; (void)b; /* inner steps communicate nothing */ }

/* the b-bit code of x (scale s > 0): bit 0 the sign, above it the level of the header's grid */
static unsigned quantize(float x, float s, int b) {
    const int L = 1 << (b - 1);
    float y = fabsf(x) / s * (float)((1 << b) - 1);
    int l = (int)floorf((y - 1.0f) * 0.5f + 0.5f);
    l = l < 0 ? 0 : l > L - 1 ? L - 1 : l;
    return (unsigned)(l << 1) | (x < 0.0f);
}
/* the value a code stands for (on the sender and on every receiver alike) */
static float dequantize(unsigned code, float s, int b) {
    float v = s * (float)(2 * (int)(code >> 1) + 1) / (float)((1 << b) - 1);
    return code & 1 ? -v : v;
}
static void put_code(uint8_t *codes, size_t i, int b, unsigned code) {
    for (int q = 0; q < b; q++) {
        size_t bit = i * (size_t)b + (size_t)q;
        if (code >> q & 1) codes[bit >> 3] |= (uint8_t)(1u << (bit & 7));
    }
}
static unsigned get_code(const uint8_t *codes, size_t i, int b) {
    unsigned code = 0;
    for (int q = 0; q < b; q++) {
        size_t bit = i * (size_t)b + (size_t)q;
        code |= (unsigned)(codes[bit >> 3] >> (bit & 7) & 1) << q;
    }
    return code;
}

/* Chunk c of this rank's e into its message part out (the header's wire format), what was sent taken out of e. */
static void encode_chunk(SparselocoState *s, float *e, size_t c, uint8_t *out) {
    const size_t lo = s->ch_lo[c], n = s->ch_n[c], k = chunk_k(s, n);
    memset(s->sel, 0, mask_bytes(n));
    scape_topk_mask(e + lo, n, k, s->sel, 0, s->tmp);
    float sc = 0.0f;
    for (size_t j = 0; j < n; j++)
        if (mask_get(s->sel, j) && fabsf(e[lo + j]) > sc) sc = fabsf(e[lo + j]);
    memcpy(out, &sc, sizeof sc);
    uint8_t *idx = out + sizeof sc, *codes = idx + 2 * k;
    memset(codes, 0, (k * (size_t)s->bits + 7) / 8);
    size_t q = 0;
    for (size_t j = 0; j < n; j++) {
        if (!mask_get(s->sel, j)) continue;
        unsigned code = sc > 0.0f ? quantize(e[lo + j], sc, s->bits) : 0u;
        uint16_t o = (uint16_t)j;
        memcpy(idx + 2 * q, &o, 2);
        put_code(codes, q, s->bits, code);
        e[lo + j] -= sc > 0.0f ? dequantize(code, sc, s->bits) : 0.0f;
        q++;
    }
}

/* The outer step (the header's formulas). */
static void sparseloco_outer(DistOptim *d) {
    SparselocoState *s = sl(d);
    float *e = s->loco.outer, *prev = s->loco.prev, *p = d->params, *acc = d->stage;
    const size_t P = d->P;
    const float beta = s->beta;
    #pragma omp parallel for schedule(static)
    for (size_t j = 0; j < P; j++) e[j] = beta * e[j] + (prev[j] - p[j]);
    uint8_t *mine = s->wire + (size_t)d->rank * s->msg;
    for (size_t c = 0; c < s->nch; c++) encode_chunk(s, e, c, mine + s->ch_off[c]);
    comm_wait(comm_iallgather(s->wire, s->msg, 1));
    memset(acc, 0, P * sizeof(float));
    for (int r = 0; r < d->world; r++) { /* in rank order: the same sums on every rank */
        const uint8_t *m = s->wire + (size_t)r * s->msg;
        for (size_t c = 0; c < s->nch; c++) {
            const uint8_t *part = m + s->ch_off[c], *idx = part + sizeof(float);
            const size_t k = chunk_k(s, s->ch_n[c]);
            const uint8_t *codes = idx + 2 * k;
            float sc;
            memcpy(&sc, part, sizeof sc);
            for (size_t q = 0; q < k; q++) {
                uint16_t o;
                memcpy(&o, idx + 2 * q, 2);
                if (o >= s->ch_n[c]) fatal("SparseLoCo: rank %d sent offset %u in a chunk of %zu (corrupt message)", r,
                                           (unsigned)o, s->ch_n[c]);
                acc[s->ch_lo[c] + o] += sc > 0.0f ? dequantize(get_code(codes, q, s->bits), sc, s->bits) : 0.0f;
            }
        }
    }
    const float a = s->alpha, inv = (float)d->world;
    #pragma omp parallel for schedule(static)
    for (size_t j = 0; j < P; j++) prev[j] = prev[j] - a * (acc[j] / inv);
    loco_synchronize(d);
}

/* --sparseloco-mask shared: the owners' top-k of their chunks of e into mask_next, their segments all-gathered and
 * assembled on every rank (the mask the next outer step uses). */
static void choose_shared_mask(DistOptim *d, const float *e) {
    SparselocoState *s = sl(d);
    const size_t P = d->P, lo = d->own.lo[d->rank], hi = d->own.hi[d->rank];
    memset(s->mask_next, 0, mask_bytes(P));
    for (size_t c = 0; c < s->nch; c++)
        if (s->ch_owner[c] == d->rank)
            scape_topk_mask(e + s->ch_lo[c], s->ch_n[c], chunk_k(s, s->ch_n[c]), s->mask_next, s->ch_lo[c], s->tmp);
    uint8_t *mine = s->seg + s->seg_off[d->rank];
    memset(mine, 0, s->seg_n[d->rank]);
    for (size_t j = lo; j < hi; j++)
        if (mask_get(s->mask_next, j)) mask_set(mine, j - lo);
    comm_wait(comm_iallgatherv(s->seg, s->seg_n, 1));
    for (int r = 0; r < d->world; r++)
        if (r != d->rank) mask_or_bits(s->mask_next, d->own.lo[r], s->seg + s->seg_off[r], d->own.hi[r] - d->own.lo[r]);
    s->have_next = 1;
}

/* The outer step with the shared mask M (chosen at the last outer step; at the first, now): per chunk the rank's own
 * scale s_i (its largest |e_i| on M), its values quantized as with its own mask and taken out of e_i, the dequantized
 * values (K, memory order) averaged by one all-reduce, theta <- theta_prev - alpha mean on M; then the next mask. */
static void sparseloco_outer_shared(DistOptim *d) {
    SparselocoState *s = sl(d);
    float *e = s->loco.outer, *prev = s->loco.prev, *p = d->params;
    const size_t P = d->P;
    const float beta = s->beta;
    #pragma omp parallel for schedule(static)
    for (size_t j = 0; j < P; j++) e[j] = beta * e[j] + (prev[j] - p[j]);
    if (!s->have_next) choose_shared_mask(d, e);
    const uint8_t *M = s->mask_next;
    size_t q = 0;
    for (size_t c = 0; c < s->nch; c++) {
        const size_t lo = s->ch_lo[c], hi = lo + s->ch_n[c];
        float sc = 0.0f;
        for (size_t j = lo; j < hi; j++)
            if (mask_get(M, j) && fabsf(e[j]) > sc) sc = fabsf(e[j]);
        for (size_t j = lo; j < hi; j++) {
            if (!mask_get(M, j)) continue;
            float v = sc > 0.0f ? dequantize(quantize(e[j], sc, s->bits), sc, s->bits) : 0.0f;
            e[j] -= v;
            s->pay[q++] = v;
        }
    }
    if (q != s->K) fatal("SparseLoCo: the shared mask holds %zu coordinates, expected %zu (internal error)", q, s->K);
    comm_wait(comm_iallreduce_avg_f32(s->pay, s->K));
    const float a = s->alpha;
    q = 0;
    for (size_t j = 0; j < P; j++)
        if (mask_get(M, j)) prev[j] = prev[j] - a * s->pay[q++];
    choose_shared_mask(d, e);
    loco_synchronize(d);
}

static int sparseloco_step(DistOptim *d, int t, float lr, float *grad_norm) {
    if (loco_inner_step(d, t, lr, grad_norm)) return 1;
    if (loco_outer_due(d, t)) {
        if (sl(d)->shared) sparseloco_outer_shared(d);
        else sparseloco_outer(d);
    }
    return dist_end_step(d, t, 0);
}

size_t distopt_sparseloco_message_bytes(const DistOptim *d) { return d->rule == &rule_sparseloco ? sl(d)->msg : 0; }

/* the blob: dist_loco.c's, its record words beta, C, k, b (with the shared mask's flag as bit 8), alpha (beta and
 * alpha a record only: a resume takes this run's); with the shared mask the next one (P bits, padded to 8 bytes;
 * the header's have_next) after it */
static size_t blob_mask(size_t P) { return (mask_bytes(P) + 7) / 8 * 8; }
static size_t sparseloco_state_bytes(const DistOptim *d) {
    return loco_state_bytes(d) + (sl(d)->have_next ? blob_mask(d->P) : 0);
}
static void sparseloco_save(const DistOptim *d, void *blob) {
    const SparselocoState *s = sl(d);
    LocoRecord rec = {0};
    rec.w[0].f = s->beta;
    rec.w[1].i = s->chunk;
    rec.w[2].i = s->topk;
    rec.w[3].i = s->bits | s->shared << 8;
    rec.w[4].f = s->alpha;
    loco_save(d, blob, rec);
    if (!s->have_next) return;
    char *at = (char *)blob + loco_state_bytes(d);
    memset(at, 0, blob_mask(d->P));
    memcpy(at, s->mask_next, mask_bytes(d->P));
    BlobHeader h;
    memcpy(&h, blob, sizeof h);
    h.have_next = 1;
    memcpy(blob, &h, sizeof h);
}
static size_t sparseloco_blob_payload(const BlobHeader *h, int i) {
    return loco_blob_payload(h, i) + (h->have_next ? blob_mask(h->P) : 0);
}
static void sparseloco_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes,
                            int n_blobs) {
    const SparselocoState *s = sl(d);
    for (int i = 0; i < n_blobs; i++) { /* the defining ones (beta and alpha may change on resume: this run's) */
        LocoRecord r = loco_record(blobs[i]);
        if (r.w[1].i != s->chunk || r.w[2].i != s->topk || r.w[3].i != (s->bits | s->shared << 8))
            fatal("optimizer state of rank %d was written with sparseloco-chunk %d, -topk %d, -bits %d, -mask %s; this "
                  "run has %d, %d, %d, %s: resume with the checkpoint's settings", i, r.w[1].i, r.w[2].i,
                  r.w[3].i & 255, r.w[3].i >> 8 ? "shared" : "own", s->chunk, s->topk, s->bits,
                  s->shared ? "shared" : "own");
    }
    loco_load(d, h0, blobs, n_blobs, 0, "sparseloco"); /* e_i per rank: the mean on another world */
    SparselocoState *w = sl(d);
    w->have_next = h0->have_next;
    if (w->have_next) /* the same on every rank: blob 0's */
        memcpy(w->mask_next, (const char *)blobs[0] + sizes[0] - blob_mask(d->P), mask_bytes(d->P));
}

static void sparseloco_free(DistOptim *d) {
    SparselocoState *s = sl(d);
    if (!s) return;
    loco_free(&s->loco);
    free(s->ch_lo); free(s->ch_n); free(s->ch_off); free(s->wire); free(s->tmp); free(s->sel);
    free(s->ch_owner); free(s->mask_next); free(s->seg); free(s->seg_off); free(s->seg_n); free(s->pay);
    free(s);
}

static const float *sparseloco_moment(const DistOptim *d) { return sl(d)->loco.m; }
static const float *sparseloco_residual(const DistOptim *d) { return sl(d)->loco.outer; }
/* the shared mask of the next outer step (NULL: none yet, or each rank's own masks) */
static const uint8_t *sparseloco_mask(DistOptim *d, int next) {
    (void)next;
    return sl(d)->have_next ? sl(d)->mask_next : NULL;
}
/* SCAPE_CHECK_SYNC: the shared mask, when there is one */
static uint64_t sparseloco_sync_hash(DistOptim *d, uint64_t h) {
    return sl(d)->have_next ? hash_fnv1a64(h, sl(d)->mask_next, mask_bytes(d->P)) : h;
}

/* H, the inner rule and the mask mode, when SparseLoCo is the chosen rule (the option rows check ranges; a DistConfig
 * filled by hand must start from distopt_default_options) */
static void sparseloco_check(const DistConfig *cfg, const UpdateRule *chosen) {
    const SparselocoParams *p = sparseloco_params(&cfg->rule_params);
    if (chosen == &rule_sparseloco &&
        (p->h < 1 || !p->inner || !p->mask || p->chunk < 1 || p->chunk > 65536 || p->topk < 1 || p->bits < 1 ||
         p->bits > 8))
        fatal("SparseLoCo: --sparseloco-h %d must be >= 1, --sparseloco-chunk %d in 1..65536, --sparseloco-topk %d "
              ">= 1, --sparseloco-bits %d in 1..8, --sparseloco-inner and --sparseloco-mask set; a DistConfig made by "
              "hand takes the defaults from distopt_default_options", p->h, p->chunk, p->topk, p->bits);
}

/* The memory check's bytes per parameter, a lower bound (without the staging buffer, which holds the sum of what the
 * ranks sent), as sparseloco_init allocates: theta_prev 4, e_i 4, the inner m 4 and, with the inner AdamW, v 4
 * (16; 12 with AdamS), plus one rank's message, (4 + 2 k + ceil(k b / 8)) / C per parameter (the all-gather buffer
 * holds one per rank: N of them), and with the shared mask the next mask and the owners' segments (1/8 each) and the
 * payload (4 k / C). The defaults: 16 + 148/4096 = 16.04 (own), + 0.31 (shared). */
static double sparseloco_bytes_per_param(const DistConfig *cfg) {
    const SparselocoParams *p = sparseloco_params(&cfg->rule_params);
    double k = p->topk < p->chunk ? p->topk : p->chunk, C = p->chunk;
    double b = strcmp(p->inner, "adams") == 0 ? 12 : 16;
    b += (4 + 2 * k + ceil(k * p->bits / 8)) / C;
    if (strcmp(p->mask, "shared") == 0) b += 2.0 / 8 + 4 * k / C;
    return b;
}

/* H covering the whole run (one outer step, at the last step), and a top-k that takes every value of a chunk */
static void sparseloco_notes(const RuleParams *b, int steps) {
    const SparselocoParams *p = sparseloco_params(b);
    if (p->h >= steps)
        printf("note: --sparseloco-h %d >= --steps %d, so the ranks synchronize once, at the last step: each trains "
               "alone until then; lower --sparseloco-h\n", p->h, steps);
    if (p->topk >= p->chunk)
        printf("note: --sparseloco-topk %d >= --sparseloco-chunk %d, so every value of every chunk is sent (in %d "
               "bits): nothing is sparse; lower --sparseloco-topk\n", p->topk, p->chunk, p->bits);
}

static const RuleOption sparseloco_options[] = {
    {.spec = {"sparseloco-h", ARG_INT, NULL, "30", 1, 1e9, NULL,
              "--optimizer sparseloco: inner steps per outer step, H (the paper's 72B run's 30)", 0},
     .offset = offsetof(SparselocoParams, h), .defining = 1},
    {.spec = {"sparseloco-inner", ARG_STRING, NULL, "adamw", 0, 0, "adamw|adams",
              "--optimizer sparseloco: each rank's inner optimizer (the paper's AdamW)", 0},
     .offset = offsetof(SparselocoParams, inner), .defining = 1},
    {.spec = {"sparseloco-beta", ARG_FLOAT, NULL, "0.95", 0, 1, NULL,
              "--optimizer sparseloco: decay of each rank's error feedback (the paper's 0.95)", 0},
     .offset = offsetof(SparselocoParams, beta)},
    {.spec = {"sparseloco-chunk", ARG_INT, NULL, "4096", 1, 65536, NULL,
              "--optimizer sparseloco: elements per chunk of a tensor, each with its own top-k (the paper's 4096)", 0},
     .offset = offsetof(SparselocoParams, chunk), .defining = 1},
    {.spec = {"sparseloco-topk", ARG_INT, NULL, "64", 1, 65536, NULL,
              "--optimizer sparseloco: values each rank sends per chunk (the paper's 64: 1.56%)", 0},
     .offset = offsetof(SparselocoParams, topk), .defining = 1},
    {.spec = {"sparseloco-bits", ARG_INT, NULL, "2", 1, 8, NULL,
              "--optimizer sparseloco: bits per value sent: a sign and a level of a per-chunk scale (the paper's 2)",
              0},
     .offset = offsetof(SparselocoParams, bits), .defining = 1},
    {.spec = {"sparseloco-alpha", ARG_FLOAT, NULL, "1", 0, 10, NULL,
              "--optimizer sparseloco: outer learning rate on the mean of what the ranks sent (the paper's 1)", 0},
     .offset = offsetof(SparselocoParams, alpha)},
    {.spec = {"sparseloco-mask", ARG_STRING, NULL, "own", 0, 0, "own|shared",
              "--optimizer sparseloco: own: each rank sends its own top-k with their offsets (the paper's); shared: "
              "one mask for every rank, chosen by the tensors' owners one outer step ahead, the values averaged by an "
              "all-reduce", 0},
     .offset = offsetof(SparselocoParams, mask), .defining = 1},
};

const UpdateRule rule_sparseloco = {
    .name = "sparseloco", RULE_OPTIONS(sparseloco_options), .kind = OPT_SPARSELOCO, .stage = 1, .local_params = 1,
    .notes = sparseloco_notes, .bytes_per_param = sparseloco_bytes_per_param, .check = sparseloco_check,
    .init = sparseloco_init, .bucket_ready = sparseloco_bucket_ready, .step = sparseloco_step,
    .state_bytes = sparseloco_state_bytes, .save = sparseloco_save, .blob_payload = sparseloco_blob_payload,
    .load = sparseloco_load, .free = sparseloco_free, .state_memory = loco_state_memory,
    .sync_hash = sparseloco_sync_hash, .moment = sparseloco_moment, .residual = sparseloco_residual,
    .mask = sparseloco_mask, .synced = loco_synced,
};

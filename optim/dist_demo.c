/*
 * optim/dist_demo.c - DeMo, decoupled momentum optimization (--optimizer demo; Peng, Quesnelle, Kingma, "DeMo:
 * Decoupled Momentum Optimization", arXiv 2411.19870, Algorithm 1): each rank keeps its own momentum, sends only
 * its fastest-moving components, taken as the largest DCT coefficients of chunks of each tensor, removes what it sent
 * from its momentum, and steps on the sign of the ranks' combined components. Per rank i at step t, with
 * beta = --demo-decay, s = --demo-chunk, k = --demo-topk:
 *   g_i clipped by clip / (n + 1e-6) when n > clip, n = sqrt(mean_i |g_i|^2) (one control all-reduce of two doubles,
 *     which also carries the skip decision)
 *   p <- p (1 - lr wd)                                  (decoupled weight decay, decay slices)
 *   delta_i <- beta delta_i + lr g_i                    (the local momentum, lr folded in as the reference does)
 *   per tensor, cut into blocks: a matrix n x m into blocks b_r x b_c, a vector n into blocks b_r, where b_r is the
 *   largest divisor of n not above s (b_c likewise of m), and per block B:
 *     C = D_r delta_i[B] D_c^T                          (orthonormal 2-D DCT-II; D_x the b_x x b_x DCT-II matrix,
 *                                                        D[u][j] = sqrt(2/b) c_u cos(pi (2j + 1) u / 2b), c_0 =
 *                                                        1/sqrt 2, c_u = 1; a vector's blocks: C = D_r delta[B])
 *     S_i = the min(k, |B|) largest |C| (ties to the lower index): the (index, value) pairs rank i sends
 *     delta_i[B] <- delta_i[B] - D_r^T C|S_i D_c      (what was sent leaves the momentum)
 *   every rank's pairs go out on one all-gather; per coefficient, Q = the mean of the values of the ranks that sent
 *   it (0 if none), and
 *     p[B] <- p[B] - lr sign(D_r^T Q D_c)              (sign(0) = 0)
 * Ours, not the paper's: the clip (the reference has none; the rest of this runtime clips), the pairs as a uint32
 * flat index and an fp32 value (8 bytes, as topk-ef's; the reference sends int64 indices), ties broken toward the
 * lower index, and the transforms as fixed-order float loops (no BLAS: the same bits for any thread count and CPU).
 * Defaults: s 64, k 32, beta 0.999 (the reference implementation's defaults).
 * Bytes per rank and step: 8 K (N-1), K = sum over blocks of min(k, |B|) (an all-gather of N K pairs, comm.h's ring
 * model), identical on every rank.
 * State (DemoState below): delta_i (P), the pairs (N K), the DCT matrices; DistOptim's stage holds the coefficients
 * (P, scratch).
 * Not for: the collectives (comm/comm.c).
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_impl.h"

/* DeMo's options (its rows below): the DCT's target block side s, the coefficients k each rank sends per block, the
 * momentum's decay beta. */
typedef struct {
    int chunk, topk;
    float decay;
} DemoParams;
RULE_PARAMS_FIT(DemoParams);
static inline const DemoParams *demo_params(const RuleParams *b) { return (const DemoParams *)(const void *)b->bytes; }
static inline const DemoParams *demo_par(const DistOptim *d) { return demo_params(&d->cfg.rule_params); }

/* DeMo's own state (DistOptim's state): the local momentum delta_i (P); the DCT-II matrices by size (NULL until used;
 * dct_n + 1 of them), per block its first pair in a rank's part, the pairs per rank K, the all-gather's pairs (N K),
 * the largest block, per coefficient how many ranks sent it, block scratch (3 blocks), the block's selection bits
 * and the top-k scratch (the largest block). DistOptim's stage holds the coefficients. */
typedef struct {
    float *delta;
    TopkPair *pairs;
    uint32_t *topk_tmp;
    float **dct;
    size_t dct_n;
    size_t *koff, k, maxblk;
    uint16_t *cnt;
    float *tmp;
    uint8_t *bits;
} DemoState;
static inline DemoState *demo(const DistOptim *d) { return (DemoState *)d->state; }


/* the largest divisor of n not above s (n itself if n <= s) */
static size_t demo_split(size_t n, size_t s) {
    if (n <= s) return n;
    for (size_t b = s; b > 1; b--)
        if (n % b == 0) return b;
    return 1;
}

/* block sizes of slice s: rows b_r, columns b_c (1 for a vector) */
static void demo_blocks(const DistOptim *d, const ParamSlice *s, size_t *br, size_t *bc) {
    size_t S = (size_t)demo_par(d)->chunk;
    if (s->ndim >= 2) {
        *br = demo_split(s->shape[0], S);
        *bc = demo_split(s->numel / s->shape[0], S);
    } else {
        *br = demo_split(s->numel, S);
        *bc = 1;
    }
}

/* the orthonormal DCT-II matrix of size b (row u: frequency u), cached by size */
static const float *demo_dct(DistOptim *d, size_t b) {
    if (!demo(d)->dct[b]) {
        float *D = xmalloc(b * b * sizeof(float), "DCT matrix");
        for (size_t u = 0; u < b; u++)
            for (size_t j = 0; j < b; j++) {
                double c = u == 0 ? sqrt(1.0 / (double)b) : sqrt(2.0 / (double)b);
                D[u * b + j] = (float)(c * cos(3.14159265358979323846 * (2.0 * (double)j + 1.0) * (double)u / (2.0 * (double)b)));
            }
        demo(d)->dct[b] = D;
    }
    return demo(d)->dct[b];
}

/* out = D_r in D_c^T (forward) or D_r^T in D_c (inverse), in and out dense r x c row-major (distinct); for a vector
 * (c = 1, Dc NULL) only the D_r side. tmp: r c floats of scratch. Fixed-order float sums: each output element's
 * terms are added in index order, so the bits do not depend on the CPU or the thread count. */
static void demo_transform(const float *Dr, const float *Dc, const float *in, float *out, size_t r, size_t c,
                           int inverse, float *tmp) {
    float *mid = c > 1 ? tmp : out;
    for (size_t i = 0; i < r; i++) { /* mid = (D_r or D_r^T) in, row by row */
        float *mi = mid + i * c;
        for (size_t j = 0; j < c; j++) mi[j] = 0.0f;
        for (size_t t = 0; t < r; t++) {
            float w = inverse ? Dr[t * r + i] : Dr[i * r + t];
            const float *row = in + t * c;
            for (size_t j = 0; j < c; j++) mi[j] += w * row[j];
        }
    }
    if (c == 1) return;
    for (size_t i = 0; i < r; i++) { /* out = mid (D_c^T or D_c): out[i][j] = sum_t mid[i][t] w(j, t) */
        float *oi = out + i * c;
        const float *mi = mid + i * c;
        for (size_t j = 0; j < c; j++) oi[j] = 0.0f;
        for (size_t t = 0; t < c; t++) {
            float a = mi[t];
            if (inverse) {
                const float *row = Dc + t * c; /* w(j, t) = D_c[t][j] */
                for (size_t j = 0; j < c; j++) oi[j] += a * row[j];
            } else {
                for (size_t j = 0; j < c; j++) oi[j] += a * Dc[j * c + t];
            }
        }
    }
}

/* Calls fn(d, slice, block origin (first element), b_r, b_c, row stride, block index) for every block of every
 * slice; blocks numbered consecutively over the slices, in memory order. */
typedef void (*demo_block_fn)(DistOptim *d, const ParamSlice *s, size_t origin, size_t br, size_t bc, size_t ld,
                              size_t blk, void *arg);
static void demo_for_blocks(DistOptim *d, demo_block_fn fn, void *arg) {
    size_t blk = 0;
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        size_t br, bc;
        demo_blocks(d, s, &br, &bc);
        size_t rows = s->ndim >= 2 ? s->shape[0] : s->numel, cols = s->ndim >= 2 ? s->numel / s->shape[0] : 1;
        for (size_t a = 0; a < rows; a += br)
            for (size_t b = 0; b < cols; b += bc, blk++) fn(d, s, s->offset + a * cols + b, br, bc, cols, blk, arg);
    }
}

static void count_block(DistOptim *d, const ParamSlice *s, size_t origin, size_t br, size_t bc, size_t ld, size_t blk,
                        void *arg) {
    (void)s; (void)origin; (void)ld;
    size_t n = br * bc, k = (size_t)demo_par(d)->topk < n ? (size_t)demo_par(d)->topk : n;
    demo(d)->koff[blk] = *(size_t *)arg;
    *(size_t *)arg += k;
    if (n > demo(d)->maxblk) demo(d)->maxblk = n;
}

extern const UpdateRule rule_demo;

static void demo_init(DistOptim *d, size_t owned_total) {
    d->state = xcalloc(1, sizeof(DemoState), "DeMo state");
    demo(d)->delta = xcalloc(d->P ? d->P : 1, sizeof(float), "DeMo momentum");
    demo(d)->dct = xcalloc((size_t)demo_par(d)->chunk + 1, sizeof(float *), "DCT matrices");
    demo(d)->dct_n = (size_t)demo_par(d)->chunk;
    size_t nblk = 0;
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        size_t br, bc;
        demo_blocks(d, s, &br, &bc);
        nblk += s->numel / (br * bc);
    }
    demo(d)->koff = xcalloc(nblk + 1, sizeof(size_t), "DeMo block offsets");
    size_t K = 0;
    demo_for_blocks(d, count_block, &K);
    demo(d)->k = K;
    demo(d)->pairs = xmalloc(((size_t)d->world * K + 1) * sizeof(TopkPair), "DeMo all-gather buffer");
    if (!d->stage) d->stage = xmalloc((d->P ? d->P : 1) * sizeof(float), "DeMo coefficients");
    demo(d)->cnt = xmalloc((d->P ? d->P : 1) * sizeof(uint16_t), "DeMo coefficient counts");
    demo(d)->tmp = xmalloc((3 * demo(d)->maxblk + 1) * sizeof(float), "DeMo block scratch");
    demo(d)->topk_tmp = xmalloc((demo(d)->maxblk + 1) * sizeof(uint32_t), "DeMo top-k scratch");
    demo(d)->bits = xmalloc(mask_bytes(demo(d)->maxblk) + 8, "DeMo block selection");
}

size_t distopt_demo_count(const DistOptim *d) { return d->rule == &rule_demo ? demo(d)->k : 0; }

static void demo_bucket_ready(DistOptim *d, int b) { (void)d; (void)b; /* everything happens at the step */ }

/* block b_r x b_c at origin (row stride ld) of x to a dense array, and back */
static void block_get(const float *x, size_t origin, size_t br, size_t bc, size_t ld, float *out) {
    for (size_t i = 0; i < br; i++) memcpy(out + i * bc, x + origin + i * ld, bc * sizeof(float));
}

/* One block's encode: C = DCT(delta_i[B]); this rank's top-k pairs into its part of pairs, each coefficient (i, j) of
 * the block named by the parameter index origin + i ld + j (a one-to-one map of the tensor's coefficients onto its
 * elements); delta_i[B] minus the inverse transform of what was sent. */
static void encode_block(DistOptim *d, const ParamSlice *s, size_t origin, size_t br, size_t bc, size_t ld, size_t blk,
                         void *arg) {
    (void)s;
    TopkPair *out = (TopkPair *)arg + demo(d)->koff[blk];
    const size_t n = br * bc, k = (size_t)demo_par(d)->topk < n ? (size_t)demo_par(d)->topk : n;
    const float *Dr = demo_dct(d, br), *Dc = bc > 1 ? demo_dct(d, bc) : NULL;
    float *x = demo(d)->tmp, *C = x + demo(d)->maxblk, *tmp = C + demo(d)->maxblk;
    block_get(demo(d)->delta, origin, br, bc, ld, x);
    demo_transform(Dr, Dc, x, C, br, bc, 0, tmp);
    memset(demo(d)->bits, 0, mask_bytes(n));
    scape_topk_mask(C, n, k, demo(d)->bits, 0, demo(d)->topk_tmp);
    size_t q = 0;
    for (size_t j = 0; j < n; j++) {
        if (mask_get(demo(d)->bits, j)) {
            out[q].idx = (uint32_t)(origin + j / bc * ld + j % bc);
            out[q].val = C[j];
            q++;
        } else {
            C[j] = 0.0f;
        }
    }
    demo_transform(Dr, Dc, C, x, br, bc, 1, tmp); /* the sent part, back in the parameter domain */
    for (size_t i = 0; i < br; i++)
        for (size_t j = 0; j < bc; j++) demo(d)->delta[origin + i * ld + j] -= x[i * bc + j];
}

/* One block's decode: the combined coefficients Q (in stage, at the indices of encode_block) to the step
 * p[B] -= lr sign(IDCT(Q)). */
static void decode_block(DistOptim *d, const ParamSlice *s, size_t origin, size_t br, size_t bc, size_t ld, size_t blk,
                         void *arg) {
    (void)s; (void)blk;
    const float lr = *(const float *)arg;
    const float *Dr = demo_dct(d, br), *Dc = bc > 1 ? demo_dct(d, bc) : NULL;
    float *x = demo(d)->tmp, *y = x + demo(d)->maxblk, *tmp = y + demo(d)->maxblk;
    block_get(d->stage, origin, br, bc, ld, x);
    demo_transform(Dr, Dc, x, y, br, bc, 1, tmp);
    for (size_t i = 0; i < br; i++)
        for (size_t j = 0; j < bc; j++) {
            float v = y[i * bc + j];
            d->params[origin + i * ld + j] -= lr * (float)((v > 0.0f) - (v < 0.0f));
        }
}

static int demo_step(DistOptim *d, int t, float lr, float *grad_norm) {
    dist_gather_buckets(d, NULL, NULL); /* none went out: everything happens here */
    float *g = d->grads;
    double ctl[2] = {dist_sumsq(g, 0, d->P), 0};
    ctl[1] = !isfinite(ctl[0]);
    comm_allreduce_sum_f64(ctl, 2);
    if (ctl[1] != 0) {
        *grad_norm = NAN;
        return dist_end_step(d, t, 1);
    }
    float norm = (float)sqrt(ctl[0] / d->world);
    *grad_norm = norm;
    float sc = dist_clip_scale(d->cfg.clip, norm);
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        if (!s->decay || d->cfg.opt.weight_decay == 0.0f) continue;
        float f = 1.0f - lr * d->cfg.opt.weight_decay;
        for (size_t j = s->offset; j < s->offset + s->numel; j++) d->params[j] *= f;
    }
    const float beta = demo_par(d)->decay;
    for (size_t j = 0; j < d->P; j++) demo(d)->delta[j] = beta * demo(d)->delta[j] + lr * (g[j] * sc);
    TopkPair *mine = demo(d)->pairs + (size_t)d->rank * demo(d)->k;
    demo_for_blocks(d, encode_block, mine);
    comm_wait(comm_iallgather(demo(d)->pairs, demo(d)->k, sizeof(TopkPair)));
    /* Q: the mean over the ranks that sent each coefficient, summed in rank order */
    memset(d->stage, 0, d->P * sizeof(float));
    memset(demo(d)->cnt, 0, d->P * sizeof(uint16_t));
    for (size_t q = 0; q < (size_t)d->world * demo(d)->k; q++) {
        uint32_t j = demo(d)->pairs[q].idx;
        d->stage[j] += demo(d)->pairs[q].val;
        demo(d)->cnt[j]++;
    }
    for (size_t j = 0; j < d->P; j++)
        if (demo(d)->cnt[j] > 1) d->stage[j] /= (float)demo(d)->cnt[j];
    demo_for_blocks(d, decode_block, &lr);
    if (d->dbg_ghat) memcpy(d->dbg_ghat, g, d->P * sizeof(float));
    d->last_k = demo(d)->k;
    return dist_end_step(d, t, 0);
}

/* the block side, coefficients per block and decay, when DeMo is the chosen rule */
static void demo_check(const DistConfig *cfg, const UpdateRule *chosen) {
    const DemoParams *p = demo_params(&cfg->rule_params);
    if (chosen == &rule_demo && !(p->chunk >= 1 && p->chunk <= 256 && p->topk >= 1 && p->decay >= 0 && p->decay <= 1))
        fatal("DeMo: --demo-chunk %d must be in 1..256, --demo-topk %d >= 1, --demo-decay %g in [0, 1]", p->chunk,
              p->topk, p->decay);
}

/* the memory check's bytes per parameter: the momentum (4) and the per-coefficient sender counts (2) */
static double demo_bytes_per_param(const DistConfig *cfg) { return 6; }

/* the local momentum delta */
static size_t demo_state_memory(const DistOptim *d) { return d->P * sizeof(float); }

static const RuleOption demo_options[] = {
    {.spec = {"demo-chunk", ARG_INT, NULL, "64", 1, 256, NULL,
              "--optimizer demo: target block side of the DCT (a dimension is cut into blocks of its largest divisor "
              "not above this; the reference implementation's 64)", 0},
     .offset = offsetof(DemoParams, chunk), .defining = 1},
    {.spec = {"demo-topk", ARG_INT, NULL, "32", 1, 65536, NULL,
              "--optimizer demo: DCT coefficients each rank sends per block (the reference implementation's 32)", 0},
     .offset = offsetof(DemoParams, topk), .defining = 1},
    {.spec = {"demo-decay", ARG_FLOAT, NULL, "0.999", 0, 1, NULL,
              "--optimizer demo: decay of each rank's momentum (the reference implementation's 0.999)", 0},
     .offset = offsetof(DemoParams, decay)},
};

/* demo: delta (P), this rank's own or the mean over the saved ranks (as topk-ef's e) */
static size_t demo_state_bytes(const DistOptim *d) { return sizeof(BlobHeader) + d->P * sizeof(float); }
static void demo_save(const DistOptim *d, void *blob) {
    BlobHeader h = dist_blob_header(d);
    memcpy((char *)blob + sizeof h, demo(d)->delta, d->P * sizeof(float));
    memcpy(blob, &h, sizeof h);
}
static size_t demo_blob_payload(const BlobHeader *h, int i) { return h->P * sizeof(float); }
static void demo_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs) {
    dist_load_residual(d, demo(d)->delta, blobs, n_blobs, h0->world);
}

/* distopt_residual: the local momentum (DeMo has no shared moment) */
static const float *demo_residual(const DistOptim *d) { return demo(d)->delta; }

static void demo_free(DistOptim *d) {
    DemoState *s = demo(d);
    if (!s) return;
    if (s->dct)
        for (size_t b = 0; b <= s->dct_n; b++) free(s->dct[b]);
    free(s->dct); free(s->koff); free(s->cnt); free(s->tmp); free(s->bits);
    free(s->delta); free(s->pairs); free(s->topk_tmp);
    free(s);
}

const UpdateRule rule_demo = {
    .name = "demo", RULE_OPTIONS(demo_options), .kind = OPT_DEMO, .index32 = 1, .stage = 1,
    .bytes_per_param = demo_bytes_per_param,
    .check = demo_check, .init = demo_init, .bucket_ready = demo_bucket_ready, .step = demo_step,
    .state_bytes = demo_state_bytes, .save = demo_save, .blob_payload = demo_blob_payload, .load = demo_load,
    .state_memory = demo_state_memory,
    .free = demo_free, .residual = demo_residual,
};


/*
 * optim/dist_onebit_adam.c - 1-bit Adam (--optimizer onebit-adam; Tang, Gan, Awan, Rajbhandari, Li, Lian, Liu,
 * Zhang, He, "1-bit Adam: Communication Efficient Large-Scale Training with Adam's Convergence Speed", ICML 2021,
 * Algorithm 1, with the compressed all-reduce of its section 4 / DeepSpeed's implementation: error compensation on
 * the worker side and on the server side of the reduction, one scale per tensor).
 *   Warm-up, steps t <= F (--onebit-freeze): AdamW on the mean gradient (optim.h's adamw_update, bias-corrected;
 *     one averaging all-reduce per bucket, the global-norm clip), so it is AdamW bit for bit.
 *   Compression, t > F: v is frozen at v_F; the mean gradient is never formed. Per rank i:
 *     g_i clipped by clip / (n + 1e-6) when n > clip, n = sqrt(mean_i |g_i|^2) (one control all-reduce of two
 *       doubles, which also carries the skip decision: every rank scales alike)
 *     m_i = beta1 m + (1 - beta1) g_i                      (m: the previous step's shared momentum)
 *     per tensor s (n_s elements), the worker side:
 *       x = m_i[s] + e_i[s];  a_i = |x|_2 / sqrt(n_s);  c_i = a_i sign(x);  e_i[s] = x - c_i
 *     the tensor is cut into N chunks of L_s = 8 ceil(n_s / 8N) elements (the last ones short or empty); the owner
 *     j of chunk j receives every rank's signs of it and scales (one all-to-all), and on its real elements
 *       y = (1/N) sum_i c_i + es_j;  b_j = |y|_2 / sqrt(len);  es_j = y - b_j sign(y)
 *     and every rank receives every owner's signs and b_j (one all-gather): m[s] = b_j sign(y) on chunk j
 *     p -= lr ( (m / bc1_t) / (sqrt(v_F / bc2_F) + eps) + wd p )   (wd on decay slices)
 *   sign(x) = +1 for x >= 0 (DeepSpeed's: 1 bit cannot say 0), sums of squares in double in element order.
 * Ours, not the paper's: Adam's bias correction (DeepSpeed's OnebitAdam has none; at the paper's thousands of
 * warm-up steps the factor is 1, at a few hundred and beta2 0.999 v_F alone would be 7x small), the clip of the
 * compressed stage (the paper has none; the rest of this runtime clips), and compression on one rank too (DeepSpeed
 * skips it: here one rank computes what N ranks would, like SCAPE and topk-ef).
 * Bytes per rank and step: warm-up 2 * 4P (N-1)/N; compression 2 Bk (N-1), Bk = 4 S + sum_s L_s / 8 (an
 * all-to-all and an all-gather of N blocks of Bk bytes: S worker or server scales, then the sign bits of the chunks),
 * i.e. about P/4 (N-1)/N, 1/32 of the dense all-reduce; the control all-reduce (16 bytes) is counted as control.
 * State (OnebitState below): e_i, m, v (P each, m shared), es (P, nonzero on this rank's chunks only), the send and
 * receive blocks (N Bk bytes each); DistOptim's stage holds the warm-up's buckets.
 * Not for: AdamW itself (optim.c).
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_impl.h"

/* 1-bit Adam's option (its row below): the freeze step F, 0 until configure resolves it. */
typedef struct {
    int freeze;
} OnebitParams;
RULE_PARAMS_FIT(OnebitParams);
static inline const OnebitParams *onebit_params(const RuleParams *b) { return (const OnebitParams *)(const void *)b->bytes; }

/* 1-bit Adam's own state (DistOptim's state): the worker error e_i, m and v (EmvState, first); the server error es
 * (P, nonzero on this rank's chunks), per slice the offset of its chunk's sign bytes within a block, the block size
 * Bk, the all-to-all's send (also the all-gather's buffer) and receive blocks (world * Bk bytes each). */
typedef struct {
    EmvState emv;
    float *es;
    size_t *boff, block;
    uint8_t *send, *recv;
} OnebitState;
static inline OnebitState *onebit(const DistOptim *d) { return (OnebitState *)d->state; }


/* chunk length L_s of slice s: a multiple of 8, N L_s >= n_s */
static size_t ob_chunk(size_t n, int world) {
    size_t w8 = 8 * (size_t)world;
    return (n + w8 - 1) / w8 * 8;
}

extern const UpdateRule rule_onebit_adam;

static void onebit_init(DistOptim *d, size_t owned_total) {
    d->state = xcalloc(1, sizeof(OnebitState), "1-bit Adam state");
    const ParamTable *tab = d->tab;
    dist_emv_init(d);
    onebit(d)->es = xcalloc(d->P ? d->P : 1, sizeof(float), "1-bit Adam server error");
    onebit(d)->boff = xcalloc((size_t)(tab->n ? tab->n : 1), sizeof(size_t), "1-bit Adam chunk offsets");
    size_t sb = 0;
    for (int i = 0; i < tab->n; i++) {
        onebit(d)->boff[i] = sb;
        sb += ob_chunk(tab->slices[i].numel, d->world) / 8;
    }
    onebit(d)->block = 4 * (size_t)tab->n + sb;
    onebit(d)->send = xcalloc((size_t)d->world * onebit(d)->block + 1, 1, "1-bit Adam send blocks");
    onebit(d)->recv = xcalloc((size_t)d->world * onebit(d)->block + 1, 1, "1-bit Adam receive blocks");
    if (!d->stage) d->stage = xmalloc((d->P ? d->P : 1) * sizeof(float), "gradient staging buffer");
}

size_t distopt_onebit_block_bytes(const DistOptim *d) { return d->rule == &rule_onebit_adam ? onebit(d)->block : 0; }

static void onebit_bucket_ready(DistOptim *d, int b) {
    int t = d->last_t + 1;
    if (t > onebit_params(&d->cfg.rule_params)->freeze) return; /* compression: everything happens at the step */
    dense_queue_bucket(d, b);
}

/* scale |x|_2 / sqrt(n) of x[0..n) (0 for n = 0) */
static float ob_scale(const float *x, size_t n) {
    if (n == 0) return 0.0f;
    double ss = 0;
    for (size_t j = 0; j < n; j++) ss += (double)x[j] * (double)x[j];
    return (float)(sqrt(ss) / sqrt((double)n));
}

/* The compressed average of the m_i in m (P, this rank's m_i in, the shared result out), with the worker error in
 * r and the server error in ob_es (the header's formulas). */
static void ob_compressed_allreduce(DistOptim *d) {
    const ParamTable *tab = d->tab;
    const int N = d->world, me = d->rank, S = tab->n;
    const size_t Bk = onebit(d)->block;
    uint8_t *send = onebit(d)->send, *recv = onebit(d)->recv;
    memset(send, 0, (size_t)N * Bk);
    /* the worker side: x = m_i + e_i, its scale into every block, its signs into the block of each chunk's owner */
    for (int i = 0; i < S; i++) {
        const ParamSlice *s = &tab->slices[i];
        size_t n = s->numel, L = ob_chunk(n, N);
        float *x = onebit(d)->emv.m + s->offset, *e = onebit(d)->emv.e + s->offset;
        for (size_t j = 0; j < n; j++) x[j] = x[j] + e[j];
        float a = ob_scale(x, n);
        for (size_t j = 0; j < n; j++) {
            int pos = x[j] >= 0.0f;
            float c = pos ? a : -a;
            e[j] = x[j] - c;
            size_t r = j / L, k = j % L;
            if (pos) send[r * Bk + 4 * (size_t)S + onebit(d)->boff[i] + k / 8] |= (uint8_t)(1u << (k % 8));
        }
        for (int r = 0; r < N; r++) memcpy(send + (size_t)r * Bk + 4 * (size_t)i, &a, 4);
    }
    comm_wait(comm_ialltoall_bytes(send, recv, Bk));
    /* the server side, on this rank's chunks: y = mean of the workers' c + es, compressed again into send's block
     * me (the all-gather's buffer), es keeping what that loses */
    uint8_t *mine = send + (size_t)me * Bk;
    memset(mine, 0, Bk);
    float *sc = xmalloc((size_t)N * sizeof(float), "1-bit Adam worker scales");
    for (int i = 0; i < S; i++) {
        const ParamSlice *s = &tab->slices[i];
        size_t n = s->numel, L = ob_chunk(n, N), lo = (size_t)me * L, hi = lo + L < n ? lo + L : n;
        size_t len = hi > lo ? hi - lo : 0;
        float *es = onebit(d)->es + s->offset + lo;
        float *y = onebit(d)->emv.m + s->offset + lo; /* y: m's elements there, as scratch */
        for (int w = 0; w < N; w++) memcpy(&sc[w], recv + (size_t)w * Bk + 4 * (size_t)i, 4);
        for (size_t k = 0; k < len; k++) {
            size_t byte = 4 * (size_t)S + onebit(d)->boff[i] + k / 8;
            uint8_t bit = (uint8_t)(1u << (k % 8));
            float acc = 0.0f;
            for (int w = 0; w < N; w++) acc += recv[(size_t)w * Bk + byte] & bit ? sc[w] : -sc[w];
            y[k] = acc / (float)N + es[k];
        }
        float b = ob_scale(y, len);
        for (size_t k = 0; k < len; k++) {
            int pos = y[k] >= 0.0f;
            es[k] = y[k] - (pos ? b : -b);
            if (pos) mine[4 * (size_t)S + onebit(d)->boff[i] + k / 8] |= (uint8_t)(1u << (k % 8));
        }
        memcpy(mine + 4 * (size_t)i, &b, 4);
    }
    free(sc);
    comm_wait(comm_iallgather(send, Bk, 1));
    /* m = b_j sign on chunk j, from the gathered blocks */
    for (int i = 0; i < S; i++) {
        const ParamSlice *s = &tab->slices[i];
        size_t n = s->numel, L = ob_chunk(n, N);
        float *m = onebit(d)->emv.m + s->offset;
        for (size_t j = 0; j < n; j++) {
            size_t r = j / L, k = j % L;
            const uint8_t *blk = send + r * Bk;
            float b;
            memcpy(&b, blk + 4 * (size_t)i, 4);
            m[j] = blk[4 * (size_t)S + onebit(d)->boff[i] + k / 8] & (1u << (k % 8)) ? b : -b;
        }
    }
}

static int onebit_step(DistOptim *d, int t, float lr, float *grad_norm) {
    const float clip = d->cfg.clip;
    const int F = onebit_params(&d->cfg.rule_params)->freeze;
    if (t <= F) {
        /* the warm-up: AdamW on the mean gradient (buckets not yet sent go now; after a skipped step the buckets
         * of a compression step cannot have been sent, so the phase of t decides) */
        dist_gather_buckets(d, dense_queue_bucket, dense_unpack_bucket);
    } else {
        dist_gather_buckets(d, NULL, NULL); /* buckets of a skipped warm-up step, if any */
    }
    float *g = d->grads;
    double ss = dist_sumsq(g, 0, d->P);
    int bad = !isfinite(ss);
    if (t > F) {
        double ctl[2] = {ss, (double)bad};
        comm_allreduce_sum_f64(ctl, 2);
        ss = ctl[0] / d->world;
        bad = ctl[1] != 0;
    }
    if (bad) {
        *grad_norm = NAN;
        return dist_end_step(d, t, 1);
    }
    float norm = (float)sqrt(ss);
    *grad_norm = norm;
    float sc = dist_clip_scale(clip, norm);
    if (t <= F) {
        if (sc != 1.0f)
            for (size_t j = 0; j < d->P; j++) g[j] *= sc;
        adamw_update(d->tab, d->params, g, onebit(d)->emv.m, onebit(d)->emv.v, 0, d->P, t, lr, &d->cfg.opt);
    } else {
        const float b1 = d->cfg.opt.beta1, eps = d->cfg.opt.eps;
        for (size_t j = 0; j < d->P; j++) onebit(d)->emv.m[j] = b1 * onebit(d)->emv.m[j] + (1.0f - b1) * (g[j] * sc);
        ob_compressed_allreduce(d);
        float bc1 = (float)(1.0 - pow((double)b1, t));
        float bc2 = (float)(1.0 - pow((double)d->cfg.opt.beta2, F > 0 ? F : 1));
        for (int i = 0; i < d->tab->n; i++) {
            const ParamSlice *s = &d->tab->slices[i];
            float wd = s->decay ? d->cfg.opt.weight_decay : 0.0f;
            float *p = d->params + s->offset;
            const float *m = onebit(d)->emv.m + s->offset, *v = onebit(d)->emv.v + s->offset;
            for (size_t j = 0; j < s->numel; j++) p[j] -= lr * ((m[j] / bc1) / (sqrtf(v[j] / bc2) + eps) + wd * p[j]);
        }
    }
    d->last_k = 0;
    if (d->dbg_ghat) memcpy(d->dbg_ghat, g, d->P * sizeof(float));
    return dist_end_step(d, t, 0);
}

/* Zeroes the server error off the chunks this rank reduces (after a load that summed every saved rank's). */
static void onebit_keep_own_chunks(DistOptim *d) {
    for (int i = 0; i < d->tab->n; i++) {
        const ParamSlice *s = &d->tab->slices[i];
        size_t n = s->numel, L = ob_chunk(n, d->world), lo = (size_t)d->rank * L, hi = lo + L < n ? lo + L : n;
        for (size_t j = 0; j < n; j++)
            if (j < lo || j >= hi) onebit(d)->es[s->offset + j] = 0.0f;
    }
}

/* the freeze step, when 1-bit Adam is the chosen rule */
static void onebit_check(const DistConfig *cfg, const UpdateRule *chosen) {
    if (chosen != &rule_onebit_adam) return;
    int F = onebit_params(&cfg->rule_params)->freeze;
    if (F < 1)
        fatal("--onebit-freeze %d: 1-bit Adam needs at least 1 step of Adam before its variance freezes", F);
}

/* The freeze step is fixed at the run's start: 0 becomes 15% of that run's --steps here, and the checkpoints record
 * the resolved step, so a resume with another --steps keeps it. */
static void onebit_configure(RuleParams *b, int steps) {
    OnebitParams *p = (OnebitParams *)(void *)b->bytes;
    if (p->freeze == 0) p->freeze = (int)fmax(1.0, floor(0.15 * steps + 0.5));
}

/* a warm-up covering the whole run */
static void onebit_notes(const RuleParams *b, int steps) {
    int F = onebit_params(b)->freeze;
    if (F >= steps)
        printf("note: --onebit-freeze %d >= --steps %d, so 1-bit Adam never freezes its variance nor compresses: "
               "the whole run is AdamW bit for bit; lower --onebit-freeze\n", F, steps);
}

/* the memory check's bytes per parameter: e, m, v and the server error */
static double onebit_bytes_per_param(const DistConfig *cfg) { return 16; }

/* e, m, v and the server error */
static size_t onebit_state_memory(const DistOptim *d) { return 4 * d->P * sizeof(float); }

const float *distopt_onebit_server_error(const DistOptim *d) { return d->rule == &rule_onebit_adam ? onebit(d)->es : NULL; }

static const RuleOption onebit_options[] = {
    {.spec = {"onebit-freeze", ARG_INT, NULL, "0", 0, INT_MAX, NULL,
              "--optimizer onebit-adam: steps of AdamW before the variance freezes and compression starts (the "
              "paper's warm-up, chosen per task there); 0: 15% of --steps", 0},
     .offset = offsetof(OnebitParams, freeze)},
};

static size_t onebit_state_bytes(const DistOptim *d) { return sizeof(BlobHeader) + 4 * d->P * sizeof(float); }
static void onebit_save(const DistOptim *d, void *blob) {
    BlobHeader h;
    dist_emv_save(d, blob, &h);
    memcpy((char *)blob + sizeof h + 3 * d->P * sizeof(float), onebit(d)->es, d->P * sizeof(float));
    memcpy(blob, &h, sizeof h);
}
static size_t onebit_blob_payload(const BlobHeader *h, int i) { return 4 * h->P * sizeof(float); }
static void onebit_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs) {
    dist_emv_load(d, h0, blobs, n_blobs);
    /* es: after e, m, v */
    if (h0->world == d->world) { /* this rank's own (a same-world resume passes just its own blob) */
        memcpy(onebit(d)->es, (const float *)((const char *)blobs[n_blobs == 1 ? 0 : d->rank] + sizeof(BlobHeader)) + 3 * d->P,
               d->P * sizeof(float));
    } else { /* each saved rank's is zero off its chunks: their sum holds every coordinate's once */
        memset(onebit(d)->es, 0, d->P * sizeof(float));
        for (int i = 0; i < n_blobs; i++) {
            const float *es = (const float *)((const char *)blobs[i] + sizeof(BlobHeader)) + 3 * d->P;
            for (size_t j = 0; j < d->P; j++) onebit(d)->es[j] += es[j];
        }
        onebit_keep_own_chunks(d);
    }
}

static void onebit_free(DistOptim *d) {
    OnebitState *s = onebit(d);
    if (!s) return;
    dist_emv_free(&s->emv);
    free(s->es); free(s->boff); free(s->send); free(s->recv);
    free(s);
}

const UpdateRule rule_onebit_adam = {
    .name = "onebit-adam", RULE_OPTIONS(onebit_options), .kind = OPT_ONEBIT_ADAM, .stage = 1,
    .configure = onebit_configure, .notes = onebit_notes, .bytes_per_param = onebit_bytes_per_param,
    .check = onebit_check, .init = onebit_init, .bucket_ready = onebit_bucket_ready, .step = onebit_step,
    .state_bytes = onebit_state_bytes, .save = onebit_save, .blob_payload = onebit_blob_payload, .load = onebit_load,
    .state_memory = onebit_state_memory, .sync_hash = dist_sync_hash_mv,
    .free = onebit_free,
    .moment = dist_emv_moment, .residual = dist_emv_residual,
};


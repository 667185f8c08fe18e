/*
 * optim/dist_state.c - the checkpoint blobs (distopt_state_bytes / save / load of optim/dist.h, through each rule's
 * row; the code of every blob but SCAPE's is in its rule's file, on the helpers here) and the
 * same layouts from explicit views for the CUDA trainers' device update (distopt_dense_blob_*, distopt_scape_blob_*),
 * so that host and device write and read each other's checkpoints. A blob is one rank's file of a checkpoint:
 * header, then
 *   adamw/adams: m (and v) over [lo, hi) (the owned shard with ZeRO-1, else everything)
 *   scape:       r (P), mask_cur (P bits, if have_cur), mask_next (P bits, if have_next), m on mask_cur (K),
 *                and with --scape-variant catchup its age (P bytes; header ext bit 0)
 *   topk-ef:     e (P), m (P), v (P)
 *   powersgd:    e (P), m (P), v (P), Q (K: every compressed slice's warm start, shared)
 *   onebit-adam: e (P), m (P), v (P), es (P: the server error, nonzero on this rank's chunks only)
 *   demo:        delta (P: this rank's momentum)
 * Every rank's blob holds the shared SCAPE state (masks, m) too, so a rank can resume from its own file alone.
 * Loading onto another world size: dense state is assembled from whichever saved shards cover this rank's range;
 * SCAPE's r and topk-ef's e become the mean over the saved ranks (SCAPE.md section 8); 1-bit Adam's worker error
 * too, and its server error, a function of the coordinate whoever reduces it, is summed over the saved ranks (each
 * holds its own chunks) and each new rank keeps its own chunks of it: the mean worker error plus the server error,
 * what the compressed momentum still owes, is unchanged.
 * Not for: the checkpoint directory, manifest and files (trainer/ckpt.c), which store these blobs as they are.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_impl.h"

#define DIST_MAGIC 0x45504353u /* "SCPE" */
#define DIST_VERSION 1

_Static_assert(sizeof(BlobHeader) == 72, "the blob header layout is part of the checkpoint format");

/* masks are padded to 8 bytes in the blob so the floats after them stay aligned (dist_impl.h) */
size_t dist_blob_mask_bytes(size_t P) { return (mask_bytes(P) + 7) / 8 * 8; }


static BlobHeader check_blob_kind(OptimizerKind kind, size_t P, const void *blob, size_t size, int i) {
    BlobHeader h;
    if (size < sizeof h) fatal("optimizer state of rank %d is %zu bytes, shorter than its header; the checkpoint is truncated", i, size);
    memcpy(&h, blob, sizeof h);
    if (h.magic != DIST_MAGIC || h.version != DIST_VERSION)
        fatal("optimizer state of rank %d: bad magic/version (%08x v%u); not a checkpoint of this runtime", i, h.magic, h.version);
    if (h.kind != (int32_t)kind)
        fatal("optimizer state of rank %d was written by optimizer kind %d, this run uses %d; resume with the same --optimizer", i, h.kind, (int)kind);
    if (h.P != P)
        fatal("optimizer state of rank %d covers %llu parameters, the model has %zu; resume with the same --model", i, (unsigned long long)h.P, P);
    size_t want = sizeof h + update_rule(kind)->blob_payload(&h, i);
    if (want != size) fatal("optimizer state of rank %d is %zu bytes, expected %zu from its header; the checkpoint is corrupt", i, size, want);
    return h;
}

static BlobHeader check_blob(const DistOptim *d, const void *blob, size_t size, int i) {
    return check_blob_kind(d->cfg.opt.kind, d->P, blob, size, i);
}

/* ---- the dense blob from explicit views (shared with the device updater, cuda/dist_dense.cuh) ---- */

size_t distopt_dense_blob_bytes(OptimizerKind kind, size_t lo, size_t hi) {
    return sizeof(BlobHeader) + (hi - lo) * sizeof(float) * (kind == OPT_ADAMW ? 2 : 1);
}

void distopt_dense_blob_save(void *blob, OptimizerKind kind, int world, int rank, int zero, int last_t, size_t P,
                             size_t lo, size_t hi, const float *m, const float *v) {
    if (kind != OPT_ADAMW && kind != OPT_ADAMS) fatal("distopt_dense_blob_save: optimizer kind %d is not dense", (int)kind);
    BlobHeader h = {.magic = DIST_MAGIC, .version = DIST_VERSION, .kind = (int32_t)kind, .world = world,
                    .rank = rank, .zero = zero, .last_t = last_t, .have_cur = 0, .have_next = 0, .P = P, .lo = lo,
                    .hi = hi};
    char *p = (char *)blob + sizeof h;
    size_t n = hi - lo;
    memcpy(p, m, n * sizeof(float));
    if (kind == OPT_ADAMW) memcpy(p + n * sizeof(float), v, n * sizeof(float));
    memcpy(blob, &h, sizeof h);
}

/* Assembles [lo, hi) of m (and v) from whichever blobs cover it; fatal() if they do not (dist_impl.h). */
void dist_dense_assemble(OptimizerKind kind, size_t lo, size_t hi, float *m, float *v, const void *const *blobs,
                           int n_blobs) {
    size_t n = hi - lo;
    size_t covered = 0;
    for (int i = 0; i < n_blobs; i++) {
        BlobHeader h;
        memcpy(&h, blobs[i], sizeof h);
        size_t a = h.lo > lo ? h.lo : lo, e = h.hi < hi ? h.hi : hi;
        if (a >= e) continue;
        const float *bm = (const float *)((const char *)blobs[i] + sizeof h);
        const float *bv = bm + (h.hi - h.lo);
        memcpy(m + (a - lo), bm + (a - h.lo), (e - a) * sizeof(float));
        if (kind == OPT_ADAMW) memcpy(v + (a - lo), bv + (a - h.lo), (e - a) * sizeof(float));
        covered += e - a;
        if (h.lo <= lo && h.hi >= hi) break; /* one blob covers everything (non-ZeRO runs) */
    }
    if (covered < n) fatal("optimizer state does not cover this rank's parameters [%zu, %zu); pass the state of all saved ranks", lo, hi);
}

int distopt_dense_blob_load(OptimizerKind kind, size_t P, int world, size_t lo, size_t hi, float *m, float *v,
                            const void *const *blobs, const size_t *sizes, int n_blobs) {
    if (kind != OPT_ADAMW && kind != OPT_ADAMS) fatal("distopt_dense_blob_load: optimizer kind %d is not dense", (int)kind);
    if (n_blobs < 1) fatal("distopt_load: no optimizer state given");
    BlobHeader h0 = check_blob_kind(kind, P, blobs[0], sizes[0], 0);
    for (int i = 1; i < n_blobs; i++) check_blob_kind(kind, P, blobs[i], sizes[i], i);
    if (n_blobs < h0.world && h0.world != world && (h0.lo > lo || h0.hi < hi))
        fatal("optimizer state was saved by %d ranks, this run has %d; pass the state of all %d saved ranks", h0.world, world, h0.world);
    dist_dense_assemble(kind, lo, hi, m, v, blobs, n_blobs);
    return h0.last_t;
}

/* The per-rank residual (SCAPE's r, topk-ef's e) that every state blob starts with: this rank's own when the world
 * is unchanged, else the mean over all saved ranks, summed in rank order (SCAPE.md section 8: the mean residual is
 * what the algorithm sees). r: (P). */
static void load_residual_into(float *r, size_t P, int world, int rank, const void *const *blobs, int n_blobs,
                               int saved_world) {
    if (n_blobs == 1 || saved_world == world) {
        int src = n_blobs == 1 ? 0 : rank;
        memcpy(r, (const char *)blobs[src] + sizeof(BlobHeader), P * sizeof(float));
        return;
    }
    memset(r, 0, P * sizeof(float));
    for (int i = 0; i < n_blobs; i++) {
        const float *ri = (const float *)((const char *)blobs[i] + sizeof(BlobHeader));
        for (size_t j = 0; j < P; j++) r[j] += ri[j];
    }
    for (size_t j = 0; j < P; j++) r[j] /= (float)n_blobs;
}
void dist_load_residual(const DistOptim *d, float *r, const void *const *blobs, int n_blobs, int saved_world) {
    load_residual_into(r, d->P, d->world, d->rank, blobs, n_blobs, saved_world);
}

/* ---- the SCAPE blob from explicit views (shared with the device updater, cuda/dist_scape.cuh) ---- */

size_t distopt_scape_blob_bytes(size_t P, int have_cur, int have_next, size_t K) {
    return sizeof(BlobHeader) + P * sizeof(float) + (have_cur ? dist_blob_mask_bytes(P) : 0) +
           (have_next ? dist_blob_mask_bytes(P) : 0) + (have_cur ? K : 0) * sizeof(float);
}

void distopt_scape_blob_save(void *blob, int world, int rank, int last_t, size_t P, const float *r,
                             const uint8_t *mask_cur, const uint8_t *mask_next, const float *m) {
    BlobHeader h = {.magic = DIST_MAGIC, .version = DIST_VERSION, .kind = (int32_t)OPT_SCAPE, .world = world,
                    .rank = rank, .zero = 0, .last_t = last_t, .have_cur = mask_cur != NULL,
                    .have_next = mask_next != NULL, .P = P, .lo = 0, .hi = P};
    char *p = (char *)blob + sizeof h;
    h.K = mask_cur ? mask_count(mask_cur, 0, P) : 0;
    memcpy(p, r, P * sizeof(float));
    p += P * sizeof(float);
    if (mask_cur) {
        memset(p, 0, dist_blob_mask_bytes(P));
        memcpy(p, mask_cur, mask_bytes(P));
        p += dist_blob_mask_bytes(P);
    }
    if (mask_next) {
        memset(p, 0, dist_blob_mask_bytes(P));
        memcpy(p, mask_next, mask_bytes(P));
        p += dist_blob_mask_bytes(P);
    }
    if (mask_cur && m) scape_gather_masked(m, mask_cur, 0, P, (float *)p);
    memcpy(blob, &h, sizeof h);
}

int distopt_scape_blob_load(size_t P, int world, int rank, float *r, uint8_t *mask_cur, uint8_t *mask_next,
                            int *have_cur, int *have_next, float *m, const void *const *blobs, const size_t *sizes,
                            int n_blobs) {
    if (n_blobs < 1) fatal("distopt_load: no optimizer state given");
    BlobHeader h0 = check_blob_kind(OPT_SCAPE, P, blobs[0], sizes[0], 0);
    for (int i = 1; i < n_blobs; i++) check_blob_kind(OPT_SCAPE, P, blobs[i], sizes[i], i);
    if (n_blobs < h0.world && h0.world != world) /* a 1-rank checkpoint's one blob is all of them */
        fatal("optimizer state was saved by %d ranks, this run has %d; pass the state of all %d saved ranks", h0.world, world, h0.world);
    const size_t PB = mask_bytes(P);
    load_residual_into(r, P, world, rank, blobs, n_blobs, h0.world);
    const char *p = (const char *)blobs[0] + sizeof(BlobHeader) + P * sizeof(float);
    *have_cur = h0.have_cur;
    *have_next = h0.have_next;
    memset(mask_cur, 0, PB);
    memset(mask_next, 0, PB);
    if (h0.have_cur) {
        memcpy(mask_cur, p, PB);
        p += dist_blob_mask_bytes(P);
    }
    if (h0.have_next) {
        memcpy(mask_next, p, PB);
        p += dist_blob_mask_bytes(P);
    }
    memset(m, 0, P * sizeof(float));
    if (h0.have_cur) {
        if (mask_count(mask_cur, 0, P) != h0.K) fatal("optimizer state of rank 0: mask and moment sizes disagree; the checkpoint is corrupt");
        const float *mv = (const float *)p;
        size_t q = 0;
        for (size_t j = 0; j < P; j++)
            if (mask_get(mask_cur, j)) m[j] = mv[q++];
    }
    return h0.last_t;
}


/* ---- the blob of each rule (optim/rule.h's state_bytes, save, blob_payload and load) ---- */

BlobHeader dist_blob_header(const DistOptim *d) {
    BlobHeader h = {.magic = DIST_MAGIC, .version = DIST_VERSION, .kind = (int32_t)d->cfg.opt.kind,
                    .world = d->world, .rank = d->rank, .zero = d->cfg.zero, .last_t = d->last_t,
                    .have_cur = 0, .have_next = 0, .P = d->P, .lo = d->slo, .hi = d->shi};
    return h;
}

/* topk-ef, powersgd, onebit-adam: e (P), m (P), v (P), then powersgd's Q (K) or onebit-adam's server error (P) */
void dist_emv_save(const DistOptim *d, void *blob, BlobHeader *h) {
    const EmvState *s = dist_emv(d);
    *h = dist_blob_header(d);
    char *p = (char *)blob + sizeof *h;
    memcpy(p, s->e, d->P * sizeof(float));
    memcpy(p + d->P * sizeof(float), s->m, d->P * sizeof(float));
    memcpy(p + 2 * d->P * sizeof(float), s->v, d->P * sizeof(float));
}
/* e_i: this rank's own when the world is unchanged, else the mean over the saved ranks (as SCAPE's r); m, v */
void dist_emv_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, int n_blobs) {
    EmvState *s = dist_emv(d);
    dist_load_residual(d, s->e, blobs, n_blobs, h0->world);
    const float *mv = (const float *)((const char *)blobs[0] + sizeof(BlobHeader)) + d->P;
    memcpy(s->m, mv, d->P * sizeof(float));
    memcpy(s->v, mv + d->P, d->P * sizeof(float));
}

/* ---- through the rule's row ---- */

size_t distopt_state_bytes(const DistOptim *d) { return d->rule->state_bytes(d); }

void distopt_save(const DistOptim *d, void *blob) { d->rule->save(d, blob); }

void distopt_load(DistOptim *d, const void *const *blobs, const size_t *sizes, int n_blobs) {
    if (n_blobs < 1) fatal("distopt_load: no optimizer state given");
    BlobHeader h0 = check_blob(d, blobs[0], sizes[0], 0);
    for (int i = 1; i < n_blobs; i++) check_blob(d, blobs[i], sizes[i], i);
    if (n_blobs < h0.world && h0.world != d->world && (!d->rule->any_shard || h0.lo > d->slo || h0.hi < d->shi))
        fatal("optimizer state was saved by %d ranks, this run has %d; pass the state of all %d saved ranks", h0.world, d->world, h0.world);
    d->last_t = h0.last_t;
    for (int b = 0; b < d->nb; b++) d->bstate[b] = 0;
    d->step_begun = 0;
    d->st_gprev_t = -1; /* the Jaccard of the first step after a resume has no previous mask */
    d->rule->load(d, &h0, blobs, sizes, n_blobs);
}

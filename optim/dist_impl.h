/*
 * optim/dist_impl.h - the inside of optim/dist.h's DistOptim, shared by the files that make up the host update and
 * by nothing else: optim/dist.c (creation, bucket hand-off, the calls through the rule's row, inspection),
 * dist_dense.c (dense all-reduce and ZeRO-1), dist_scape*.c (SCAPE), dist_topk_ef.c (top-k EF), dist_powersgd.c
 * (PowerSGD), dist_onebit_adam.c (1-bit Adam), dist_demo.c (DeMo), dist_loco.c, dist_diloco.c and
 * dist_sparseloco.c (the local-update rules, their shared part in optim/dist_loco.h), dist_mask_stats.c (mask
 * stability) and dist_state.c (checkpoint blobs). Each rule file fills one UpdateRule (optim/rule.h), through
 * which dist.c calls it, and keeps its state in a struct of its own behind DistOptim's state pointer (SCAPE's, shared
 * by its files, in optim/dist_scape.h); what the rules share (the step's opening and end, norm, clip factor, blob
 * helpers) is declared here.
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
    void *state;            /* the rule's own state, a struct private to its file(s) (rule->init makes it, rule->free
                             * frees it) */
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
    float *stage;          /* (P) packed gradients by bucket (dist.c allocates it where the row sets stage, else the
                            * rule's init may); SCAPE: its payload of K_t values, packed by bucket */
    CommHandle *bh;        /* per bucket: its collective */
    int *bstate;           /* per bucket: 0 nothing, 1 c computed (SCAPE), 2 queued */
    size_t *bucket_k;      /* per bucket: the values it sends at the step in progress (the sparse rules, PowerSGD) */
    int step_begun;
    int grads_clear;       /* the step's update already wrote 0 over every gradient (dist_end_step skips its pass) */
    int synced_in;         /* distopt_use_synced: params hold the synchronized model, the rule's synced buffer this
                            * rank's own parameters */
    /* the parameters whose state this rank holds, [slo, shi) (the blob header's lo, hi): all of them, or the dense
     * rules' ZeRO-1 shard (their init sets it) */
    size_t slo, shi;
    size_t last_k;         /* distopt_payload_count: the payload values of the last completed step */
    int last_t;            /* the last completed step */
    float *dbg_c, *dbg_s, *dbg_ghat; /* distopt_debug_capture's buffers (NULL: none) */
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
/* off[c]: how many bits of mask lie in the chunks before c, chunk c' being the bits [lo[c'], hi[c']) (nch chunks);
 * returns the total. SCAPE's payload layout, plain and ZeRO-1 (chunk order = payload order). */
size_t dist_chunk_offsets(const size_t *lo, const size_t *hi, size_t nch, const uint8_t *mask, size_t *off);
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
/* The opening of every rule's step, after the rule's own start of it: each bucket backward did not hand over (bstate
 * below 2) goes out through queue(d, b) (NULL: the rule sends nothing per bucket), in bucket order; then every
 * bucket's collective is waited for in bucket order, and unpack(d, b) (NULL: none) takes bucket b's result out of
 * the rule's buffers once it has landed. */
void dist_gather_buckets(DistOptim *d, void (*queue)(DistOptim *d, int b), void (*unpack)(DistOptim *d, int b));
/* The buckets on the wire went out for another step number than the loop's (after a skipped step): waits for each,
 * undo(d, b) for each that went out (NULL: nothing to undo), and leaves the step unbegun, to be begun again. */
void dist_drop_buckets(DistOptim *d, void (*undo)(DistOptim *d, int b));
/* K_t: the sum of bucket_k, the values the step's buckets send. */
size_t dist_bucket_k_total(const DistOptim *d);
/* The end of step t, taken or skipped: grads zeroed (unless the update did, grads_clear), every bucket back to
 * "nothing done", and for a taken step (skipped 0) t becomes the last completed step (last_t). Returns skipped, the
 * step hook's result. */
int dist_end_step(DistOptim *d, int t, int skipped);

/* ---- dist_dense.c: bucket b into stage and its collective (the averaging all-reduce, or with ZeRO-1 the
 * reduce-scatter to the owners): the dense rules' hand-off, also 1-bit Adam's during its warm-up ---- */
void dense_queue_bucket(DistOptim *d, int b);
/* The reduced bucket b back into grads from stage: all of it, or with ZeRO-1 the owned slices (nothing for the dense
 * rules' in-place update on one rank). */
void dense_unpack_bucket(DistOptim *d, int b);

/* ---- dist.c, dist_state.c: the rules that feed AdamW a compressed gradient (topk-ef, PowerSGD, 1-bit Adam) ---- */
/* Their error feedback e and AdamW's moments m, v (P floats each, e this rank's own, m and v the same on every rank):
 * the first member of each one's private state, so that the helpers below reach it through DistOptim's state. */
typedef struct {
    float *e, *m, *v;
} EmvState;
static inline EmvState *dist_emv(const DistOptim *d) { return (EmvState *)d->state; }
/* e, m, v allocated, zero (the rule's state allocated first); dist_emv_free frees them, not the struct. */
void dist_emv_init(DistOptim *d);
void dist_emv_free(EmvState *s);
/* SCAPE_CHECK_SYNC's shared state (the sync_hash hook): m and v, continuing h */
uint64_t dist_sync_hash_mv(DistOptim *d, uint64_t h);
/* distopt_moment and distopt_residual (the moment and residual hooks): m and e */
const float *dist_emv_moment(const DistOptim *d);
const float *dist_emv_residual(const DistOptim *d);
/* e, m, v (P each) after the header, and *h = dist_blob_header (the caller completes it and writes it): the start
 * of their blobs; dist_emv_load reads them back (e by dist_load_residual). */
void dist_emv_save(const DistOptim *d, void *blob, BlobHeader *h);
void dist_emv_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, int n_blobs);

/* ---- dist_state.c: what the blobs of the rules share ---- */
/* The header of this rank's blob: optimizer kind, world, rank, ZeRO, last step, P and [slo, shi); no masks
 * (have_cur, have_next 0: a rule with one sets them). */
BlobHeader dist_blob_header(const DistOptim *d);
/* A mask of P bits as a blob holds it: padded to 8 bytes, so the floats after it stay aligned. */
size_t dist_blob_mask_bytes(size_t P);
/* r (P) from the (P) floats after each blob's header: this rank's own when the world is unchanged (or one blob),
 * else the mean over all saved ranks in rank order (SCAPE.md section 8). */
void dist_load_residual(const DistOptim *d, float *r, const void *const *blobs, int n_blobs, int saved_world);
/* [lo, hi) of the dense rules' m (and v for AdamW: kind) from whichever of the blobs cover it; fatal() if they do
 * not. */
void dist_dense_assemble(OptimizerKind kind, size_t lo, size_t hi, float *m, float *v, const void *const *blobs,
                         int n_blobs);

/* ---- dist_mask_stats.c: DistMaskStats of dist.h, on rank 0 ---- */
/* Fills d->st for step t. gmask/gvec: the raw-gradient mask of this step and the vector its energy is of (SCAPE:
 * G_t and g_i; topk-ef: the selection and acc). mcur: SCAPE's M_t, NULL for topk-ef (no _m values); mprev: M_{t-1}
 * (SCAPE, NULL if none); c: SCAPE's c_i (M_t's energy), NULL for topk-ef. */
void stats_compute(DistOptim *d, int t, const uint8_t *gmask, const float *gvec, const uint8_t *mcur,
                   const uint8_t *mprev, const float *c);
/* SCAPE's statistics at step t, before the next mask goes out: G_t = top-k of the copy of g_i made per bucket
 * (st_g), M_t (mcur) against M_{t-1} (mprev, NULL if none), the energy of c_i (in grads). */
void stats_scape(DistOptim *d, int t, const uint8_t *mcur, const uint8_t *mprev);

#endif

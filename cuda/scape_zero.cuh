/*
 * cuda/scape_zero.cuh - SCAPE's kernels for ZeRO-1 (--zero 1; optim/dist_scape_zero.c on the host): the owners' norm
 * and update with the first moment kept compact in memory order (ScapeCompactM), the others' off-mask update, and
 * the sparse synchronisation's fold and scatter of the gathered values. Same formulas and order as the unsharded
 * kernels of cuda/scape.cuh, so bit for bit the host's. Part of cuda/scape.cuh, which includes it at its end (its
 * helpers, plans, update arguments and constants are defined there); include that.
 * Not for: the step's control flow and its collectives (cuda/dist_scape_zero.cuh).
 */
#ifndef CUDA_SCAPE_ZERO_CUH
#define CUDA_SCAPE_ZERO_CUH

/* ---- SCAPE with ZeRO-1: the sparse synchronisation (optim/dist_scape_zero.c's sync_values) ----
 * The owners' values on M_t travel in memory order (all masked coordinates, ascending: a plan over every slice in
 * memory order, whose payload offsets q number them); after the all-gather every rank writes them back. */

/* The owner's first moment, compact (SCAPE with ZeRO-1, like the host's): m_{t-1} of this rank's coordinates on
 * its mask Mm, in memory order, element j's at mc[mq[tile_mo] - Qm + its rank among Mm's bits in its tile]; mq is
 * the memory-order plan's (mo) payload offsets for Mm, tile_mo maps the launched bucket tiles to mo's, Qm is where
 * this rank's values start in that order. The update writes m_t the same way for M_t into mc_new (mq_new, Qn). */
typedef struct {
    const float *mc;          /* m_{t-1}, NULL: none yet (m = 0) */
    const uint32_t *mmask;    /* Mm */
    const long long *mq;      /* (mo tiles + 1) */
    long long Qm;
    float *mc_new;            /* m_t (update only) */
    const long long *mq_new;  /* mo's offsets for M_t */
    long long Qn;
    const int *tile_mo;       /* per launched tile: its index in mo */
} ScapeCompactM;

/* m_{t-1} at element j of the round: old = j on Mm, pos_old its rank among the round's Mm bits; mb the tile's
 * running index (advanced by the caller) */
static __device__ inline float scape_compact_m_at(const ScapeCompactM &cm, int old, long long mb, int pos_old) {
    return old ? cm.mc[mb + pos_old] : 0.0f;
}

__global__ static void scape_zero_norm_kernel(double *partial, const ScapeTile *tiles, const long long *q,
                                              const float *payload, const uint32_t *mask, ScapeCompactM cm, float b1,
                                              float omb1) {
    __shared__ int sh[32];
    const ScapeTile t = tiles[blockIdx.x];
    long long base = q[blockIdx.x];
    long long mb = cm.mc ? cm.mq[cm.tile_mo[blockIdx.x]] - cm.Qm : 0;
    double ss = 0.0;
    for (int e0 = 0; e0 < t.len; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        const long long j = t.start + e;
        const int on = e < t.len ? (int)scape_mask_bit(mask, j) : 0;
        const int old = cm.mc && e < t.len ? (int)scape_mask_bit(cm.mmask, j) : 0;
        int tot, tot_old;
        const int pos = scape_block_exclusive_count(on, &tot, sh);
        const int pos_old = scape_block_exclusive_count(old, &tot_old, sh);
        if (on) {
            const double gh = (double)scape_ghat(payload[base + pos], scape_compact_m_at(cm, old, mb, pos_old), b1, omb1);
            ss = __dadd_rn(ss, __dmul_rn(gh, gh));
        }
        base += tot;
        mb += tot_old;
    }
    ss = scape_block_sum(ss);
    if (threadIdx.x == 0) partial[blockIdx.x] = ss;
}
/* One sum of g_hat^2 per tile of the plan's tiles [t0, t1) (an owner's) into partial[0 .. t1 - t0), m_{t-1} compact
 * (cm.tile_mo for those tiles): the terms and order of scape_norm_partial's one-tile blocks. The host adds them per
 * 16384-element chunk of optim/dist_scape.c (a chunk is whole tiles). */
static void scape_zero_norm(double *partial, const ScapeBucketPlan *pl, int t0, int t1, const float *payload,
                            const uint32_t *mask, const ScapeCompactM *cm, float b1, cudaStream_t s) {
    if (t1 <= t0) return;
    scape_zero_norm_kernel<<<t1 - t0, SCAPE_THREADS, 0, s>>>(partial, pl->tiles + t0, pl->q + t0, payload, mask, *cm, b1,
                                                             1.0f - b1);
    cudaCheckLaunch();
}

__global__ static void scape_zero_update_owned_kernel(float *params, floatX *copy, float *r, const float *c,
                                                      const ScapeTile *tiles, const long long *q, const float *payload,
                                                      const uint32_t *mask, ScapeUpdateArgs a, ScapeCompactM cm) {
    __shared__ int sh[32];
    const ScapeTile t = tiles[blockIdx.x];
    const float wd = t.decay ? a.wd : 0.0f;
    const uint32_t seed = hash_u32((uint32_t)t.slice * 0x27D4EB2Fu + (uint32_t)a.step, a.seed_mix);
    long long base = q[blockIdx.x];
    long long mb = cm.mc ? cm.mq[cm.tile_mo[blockIdx.x]] - cm.Qm : 0;
    long long nb = cm.mq_new[cm.tile_mo[blockIdx.x]] - cm.Qn;
    for (int e0 = 0; e0 < t.len; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        const long long j = t.start + e;
        const int on = e < t.len ? (int)scape_mask_bit(mask, j) : 0;
        const int old = cm.mc && e < t.len ? (int)scape_mask_bit(cm.mmask, j) : 0;
        int tot, tot_old;
        const int pos = scape_block_exclusive_count(on, &tot, sh);
        const int pos_old = scape_block_exclusive_count(old, &tot_old, sh);
        if (e < t.len) {
            float pj = params[j];
            if (on) {
                float mj = scape_compact_m_at(cm, old, mb, pos_old);
                const float ron = a.payload_bf16 ? scape_bf16_residual(c[j], a.qerr ? a.qerr[base + pos] : 0.0f, a.fN)
                                                 : 0.0f;
                scape_update_on_dev(&pj, &mj, payload[base + pos], a, wd);
                cm.mc_new[nb + pos] = mj;
                r[j] = __fmul_rn(a.b1, mj); /* the fold; what the unsharded r holds here goes to ez (fp32 payload: 0) */
                if (a.ez) a.ez[j] = ron;
            } else {
                r[j] = c[j];
                if (a.ez) a.ez[j] = 0.0f;
                pj = __fsub_rn(pj, __fmul_rn(a.lr, __fmul_rn(wd, pj)));
            }
            params[j] = pj;
            if (copy) store_rounded(copy + j, pj, hash_u32((uint32_t)(j - t.slice_off), seed));
        }
        base += tot;
        mb += tot_old;
        nb += tot;
    }
}
/* scape_update over an owner's tiles [t0, t1) of the plan with m compact (cm): on M_t AdamS from m_{t-1}, m_t into
 * cm.mc_new, r = fl(b1 m_t) (the fold; with a->ez the unsharded r's value there into ez); off M_t r = c and the
 * decay. r, c: (P) buffers. */
static void scape_zero_update_owned(float *params, floatX *copy, float *r, const float *c, const ScapeBucketPlan *pl,
                                    int t0, int t1, const float *payload, const uint32_t *mask, const ScapeUpdateArgs *a,
                                    const ScapeCompactM *cm, cudaStream_t s) {
    if (t1 <= t0) return;
    scape_zero_update_owned_kernel<<<t1 - t0, SCAPE_THREADS, 0, s>>>(params, copy, r, c, pl->tiles + t0, pl->q + t0,
                                                                     payload, mask, *a, *cm);
    cudaCheckLaunch();
}

/* One block per tile; mode 'm': r[j] = b1 * v[q] (the fold of the owners' m_t); mode 'p': params[j] = v[q] and the
 * floatX copy rounded as scape_update_kernel rounds it (seed: sr_seed(seed, step, slice) from a). */
__global__ static void scape_zero_scatter_kernel(float *dst, floatX *copy, const ScapeTile *tiles, const long long *q,
                                                 const float *v, const uint32_t *mask, int mode_p, ScapeUpdateArgs a) {
    __shared__ int sh[32];
    const ScapeTile t = tiles[blockIdx.x];
    const uint32_t seed = hash_u32((uint32_t)t.slice * 0x27D4EB2Fu + (uint32_t)a.step, a.seed_mix);
    long long base = q[blockIdx.x];
    for (int e0 = 0; e0 < t.len; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        const long long j = t.start + e;
        const int on = e < t.len ? (int)scape_mask_bit(mask, j) : 0;
        int tot;
        const int pos = scape_block_exclusive_count(on, &tot, sh);
        if (on) {
            const float x = v[base + pos];
            if (!mode_p) {
                dst[j] = __fmul_rn(a.b1, x);
            } else {
                dst[j] = x;
                if (copy) store_rounded(copy + j, x, hash_u32((uint32_t)(j - t.slice_off), seed));
            }
        }
        base += tot;
    }
}
/* Over the plan's tiles [t0, t1) (another rank's), v the gathered values by the plan's payload index:
 *   scape_zero_fold:    r[j] = b1 * v[q] on M_t (r then holds fl(b1 m_t), the fold)
 *   scape_zero_scatter: params[j] = v[q] on M_t, and the floatX copy (may be NULL) rounded from it */
static void scape_zero_fold(float *r, const ScapeBucketPlan *pl, int t0, int t1, const float *v, const uint32_t *mask,
                            const ScapeUpdateArgs *a, cudaStream_t s) {
    if (t1 <= t0) return;
    scape_zero_scatter_kernel<<<t1 - t0, SCAPE_THREADS, 0, s>>>(r, NULL, pl->tiles + t0, pl->q + t0, v, mask, 0, *a);
    cudaCheckLaunch();
}
static void scape_zero_scatter(float *params, floatX *copy, const ScapeBucketPlan *pl, int t0, int t1, const float *v,
                               const uint32_t *mask, const ScapeUpdateArgs *a, cudaStream_t s) {
    if (t1 <= t0) return;
    scape_zero_scatter_kernel<<<t1 - t0, SCAPE_THREADS, 0, s>>>(params, copy, pl->tiles + t0, pl->q + t0, v, mask, 1, *a);
    cudaCheckLaunch();
}

#endif

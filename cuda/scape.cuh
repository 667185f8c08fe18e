/*
 * cuda/scape.cuh - SCAPE's device kernels (../shared/SCAPE.md section 3), each the counterpart of a CPU function
 * in optim/scape.c or optim/dist.c with the same formulas in the same order: the arithmetic uses __fmul_rn /
 * __fadd_rn / ... intrinsics so nvcc cannot contract it into FMAs (the CPU build uses -ffp-contract=off), hence
 * every fp32 result equals the CPU's bit for bit. What is here:
 *   bucket plan       a gradient bucket (its slices in memory order) cut into tiles of SCAPE_TILE elements
 *   payload offsets   per-tile counts of the mask bits and their exclusive scan (CUB): where each tile's masked
 *                     values go in the bucket's payload, and K_b
 *   momentum_compact  c = b1 m + (1-b1) g + r on every coordinate, the masked c compacted into the payload
 *                     (scape_corrected_momentum + scape_gather_masked); per bucket, or per slice with r and c
 *                     in a staging buffer of the slice (residual offload)
 *   norm              sum of g_hat^2 over the mask, deterministic (optim/dist_scape.c's scape_norm_pass)
 *   update            scatter of the averaged payload, g_hat, optional clip, AdamS on the mask, weight decay off
 *                     it, r = c off the mask and 0 on it (optim/dist_scape.c's scape_update_pass / scape_update_on); per
 *                     bucket or per slice, like momentum_compact
 *   ZeRO-1            the owners' norm and update with m compact in memory order (ScapeCompactM), the others'
 *                     off-mask update, and the sparse sync's fold and scatter (optim/dist_scape_zero.c; in
 *                     cuda/scape_zero.cuh, included at the end)
 *   top-k             exact per-slice top-k of |c| by radix select, many blocks per slice (scape_topk_mask;
 *                     in cuda/scape_mask.cuh, included at the end, with the segment OR and the statistics)
 *   masks             pack from bytes, unpack, set a range, count a range (mask_or_bits, mask_set_range,
 *                     mask_count)
 *   mask statistics   per slice AND / OR popcounts of two masks and the energy of a vector on a mask, for
 *                     DistMaskStats (optim/dist_mask_stats.c's mask_jaccard, mask_energy); deterministic double sums
 * Masks on the device are arrays of uint32 words, element j = bit (j & 31) of word j >> 5; on a little-endian
 * host (x86-64, AArch64) that is byte for byte scape.h's LSB-first layout, so a host mask is copied as bytes. A
 * mask of n elements needs scape_mask_words(n) words, 4-byte aligned (every cudaMalloc is).
 * Every kernel runs on the caller's stream and nothing synchronises the host, except the set-up functions
 * (scape_plan_build, scape_topk_work_create: allocations and copies). Determinism: integer counts (histograms,
 * popcounts, scans) are exact whatever the order; the float reductions (the norm, the statistics' energies) use a
 * grid fixed by the plan's shape and sum in a fixed order. Checked against the CPU code by dev/cuda/scape.cu, on a GPU or on the
 * CPU emulation of dev/cuda/emu (`make test-emu`).
 * Not for: streams and events, communication, the residual offload's copies (the kernels only take a one-slice
 * staging buffer), the step's control flow (the device updater).
 * Shapes: P parameters in the flat buffers (params, m, r, c: fp32; grad: floatX or fp32), a slice = one tensor.
 */
#ifndef CUDA_SCAPE_CUH
#define CUDA_SCAPE_CUH

#include <limits.h>
#include <math.h>
#include <cub/device/device_scan.cuh>
#include "cuda/common.cuh"
extern "C" {
#include "common/params.h"
#include "common/bf16.h"
#include "optim/scape.h"
}

#define SCAPE_THREADS 256                          /* block size of every kernel here (a multiple of 32) */
#define SCAPE_TILE (SCAPE_THREADS * 16)            /* elements per tile of the bucket kernels */
#define SCAPE_NORM_BLOCKS 256                      /* most partial sums one bucket's norm pass writes */
#define TOPK_BINS SCAPE_TOPK_BINS                  /* histogram bins of the widest radix digit (11 bits) */
#define TOPK_UNROLL 4                              /* loads in flight per thread in the histogram passes */
#define TOPK_CHUNK SCAPE_TOPK_CHUNK                /* elements per block of the tie-count and marking passes */
static_assert(SCAPE_TOPK_GROUPS == SCAPE_THREADS, "the top-k select step has one group of bins per thread");
static_assert(TOPK_CHUNK % SCAPE_THREADS == 0, "a top-k chunk is whole rounds of the block");

/* One line and exit(1), like fatal() (common/util.h) and cudaCheck. */
static void scape_cuda_fail(const char *what) {
    fprintf(stderr, "error: %s\n", what);
    exit(1);
}

static inline long long scape_mask_words(long long n) { return (n + 31) / 32; }

/* ---- small device helpers ---- */

static __device__ inline uint32_t scape_mask_bit(const uint32_t *mask, long long j) {
    return (mask[j >> 5] >> (j & 31)) & 1u;
}
/* The bits of word w that lie in the bit range [lo, hi), for lo >> 5 <= w <= (hi - 1) >> 5. */
static __device__ inline uint32_t scape_range_bits(long long w, long long lo, long long hi) {
    long long b0 = w << 5;
    uint32_t m = 0xFFFFFFFFu;
    if (lo > b0) m &= 0xFFFFFFFFu << (int)(lo - b0);
    if (hi < b0 + 32) m &= 0xFFFFFFFFu >> (int)(b0 + 32 - hi);
    return m;
}
/* Sum over the block in a fixed order (butterfly in each warp, then the warps in order); the result is valid in
 * thread 0. Every thread of the block must call it (it synchronises). */
template <typename T> static __device__ inline T scape_block_sum(T v) {
    __shared__ T sh[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    T s = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < nw; w++) s += sh[w];
    return s;
}
/* Stream compaction within one round of the block (element e0 + threadIdx.x): the number of threads below this
 * one with flag set, and the block's total in *total. sh: 32 ints of shared memory. Every thread must call it. */
static __device__ inline int scape_block_exclusive_count(int flag, int *total, int *sh) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned bal = __ballot_sync(0xFFFFFFFFu, flag);
    const int pre = __popc(bal & ((1u << lane) - 1u));
    if (lane == 0) sh[warp] = __popc(bal);
    __syncthreads();
    int base = 0, tot = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) {
        int v = sh[w];
        if (w < (int)warp) base += v;
        tot += v;
    }
    __syncthreads(); /* sh is rewritten by the next round */
    *total = tot;
    return base + pre;
}

/* ---- masks (optim/scape.h's mask_* on the device) ---- */

__global__ static void scape_mask_set_range_kernel(uint32_t *bits, long long lo, long long hi) {
    long long w = (lo >> 5) + (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (w > (hi - 1) >> 5) return;
    uint32_t m = scape_range_bits(w, lo, hi);
    if (m == 0xFFFFFFFFu) bits[w] = m;
    else atomicOr(&bits[w], m); /* the word's other bits may belong to a neighbour, even in another kernel */
}
/* Sets bits [off, off + n) (mask_set_range). */
static void scape_mask_set_range(uint32_t *bits, long long off, long long n, cudaStream_t s) {
    if (n <= 0) return;
    long long nw = ((off + n - 1) >> 5) - (off >> 5) + 1;
    scape_mask_set_range_kernel<<<ceil_div(nw, SCAPE_THREADS), SCAPE_THREADS, 0, s>>>(bits, off, off + n);
    cudaCheckLaunch();
}

__global__ static void scape_mask_pack_kernel(uint32_t *bits, long long bit_off, const uint8_t *src, long long n) {
    long long w = (bit_off >> 5) + (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (w > (bit_off + n - 1) >> 5) return;
    const uint32_t range = scape_range_bits(w, bit_off, bit_off + n);
    const long long e0 = (w << 5) - bit_off; /* element at bit 0 of word w (negative in a partial first word) */
    uint32_t v = 0;
    for (int i = 0; i < 32; i++)
        if ((range >> i) & 1u) v |= (uint32_t)(src[e0 + i] != 0) << i;
    if (range == 0xFFFFFFFFu) bits[w] |= v; /* a whole word inside the range: only this thread writes it */
    else if (v) atomicOr(&bits[w], v);
}
/* ORs the n flags of src (one byte per element, nonzero = 1) into bits [bit_off, bit_off + n) (mask_or_bits from
 * a byte array). Bits outside the range are kept; the target bits should be 0 on entry, as mask_or_bits asks. */
static void scape_mask_pack(uint32_t *bits, long long bit_off, const uint8_t *src, long long n, cudaStream_t s) {
    if (n <= 0) return;
    long long nw = ((bit_off + n - 1) >> 5) - (bit_off >> 5) + 1;
    scape_mask_pack_kernel<<<ceil_div(nw, SCAPE_THREADS), SCAPE_THREADS, 0, s>>>(bits, bit_off, src, n);
    cudaCheckLaunch();
}

template <typename T> __global__ static void scape_mask_unpack_kernel(T *out, const uint32_t *bits, long long bit_off, long long n) {
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) out[e] = scape_mask_bit(bits, bit_off + e) ? (T)1 : (T)0;
}
/* out[e] = bit (bit_off + e) of bits, e < n, as 0/1 (T = float or uint8_t). */
template <typename T> static void scape_mask_unpack(T *out, const uint32_t *bits, long long bit_off, long long n, cudaStream_t s) {
    if (n <= 0) return;
    scape_mask_unpack_kernel<T><<<ceil_div(n, SCAPE_THREADS), SCAPE_THREADS, 0, s>>>(out, bits, bit_off, n);
    cudaCheckLaunch();
}

__global__ static void scape_mask_count_kernel(unsigned long long *out, const uint32_t *bits, long long lo, long long hi) {
    unsigned long long c = 0;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long w = (lo >> 5) + (long long)blockIdx.x * blockDim.x + threadIdx.x; w <= (hi - 1) >> 5; w += stride)
        c += (unsigned long long)__popc(bits[w] & scape_range_bits(w, lo, hi));
    c = scape_block_sum(c);
    if (threadIdx.x == 0 && c) atomicAdd(out, c); /* integer: exact in any order */
}
/* *out (device) = number of set bits among [lo, hi) (mask_count). */
static void scape_mask_count(unsigned long long *out, const uint32_t *bits, long long lo, long long hi, cudaStream_t s) {
    cudaCheck(cudaMemsetAsync(out, 0, sizeof *out, s));
    if (hi <= lo) return;
    long long nw = ((hi - 1) >> 5) - (lo >> 5) + 1;
    int grid = ceil_div(nw, SCAPE_THREADS);
    if (grid > 1024) grid = 1024;
    scape_mask_count_kernel<<<grid, SCAPE_THREADS, 0, s>>>(out, bits, lo, hi);
    cudaCheckLaunch();
}

/* ---- bucket plan: the tiles of one gradient bucket ---- */

/* One tile: up to SCAPE_TILE consecutive elements of one slice. */
typedef struct {
    long long start;     /* first element, flat index into the (P) buffers */
    long long slice_off; /* the slice's offset (element j has index j - slice_off in its tensor) */
    int len;             /* elements, 1..SCAPE_TILE */
    int slice;           /* index of the slice in the ParamTable */
    int decay;           /* 1: weight decay applies (ParamSlice.decay) */
    int pad;
} ScapeTile;

/* A bucket's slices, in the order their masked values follow each other in the payload (scape_queue_bucket:
 * the bucket's slices in memory order), cut into tiles. Built once; per step scape_payload_offsets fills q. */
typedef struct {
    int ntiles;
    long long numel;     /* elements of the bucket */
    ScapeTile *tiles;    /* (ntiles) device */
    long long *count;    /* (ntiles + 1) device: masked elements per tile; count[ntiles] stays 0 */
    long long *q;        /* (ntiles + 1) device: tile i's first index in the bucket's payload; q[ntiles] = K_b */
    void *scan_tmp;      /* CUB scratch */
    size_t scan_tmp_bytes;
    int nslices;
    int *slice_tile;     /* (nslices + 1) host: the plan's k-th slice is tiles [slice_tile[k], slice_tile[k + 1]) */
    long long *slice_off;/* (nslices) host: offset of the plan's k-th slice in the flat buffers */
} ScapeBucketPlan;

/* Plan of the bucket made of tab's slices slices[0..n) (in payload order, normally memory order). */
static void scape_plan_build(ScapeBucketPlan *pl, const ParamTable *tab, const int *slices, int n) {
    memset(pl, 0, sizeof *pl);
    long long nt = 0;
    for (int k = 0; k < n; k++) nt += ((long long)tab->slices[slices[k]].numel + SCAPE_TILE - 1) / SCAPE_TILE;
    if (nt >= INT_MAX) scape_cuda_fail("scape_plan_build: bucket has too many tiles; split the bucket");
    ScapeTile *h = (ScapeTile *)calloc(nt ? (size_t)nt : 1, sizeof(ScapeTile));
    pl->slice_tile = (int *)malloc((size_t)(n + 1) * sizeof(int));
    pl->slice_off = (long long *)malloc((size_t)(n ? n : 1) * sizeof(long long));
    if (!h || !pl->slice_tile || !pl->slice_off) scape_cuda_fail("scape_plan_build: out of host memory");
    pl->nslices = n;
    int t = 0;
    for (int k = 0; k < n; k++) {
        const ParamSlice *sl = &tab->slices[slices[k]];
        pl->slice_tile[k] = t;
        pl->slice_off[k] = (long long)sl->offset;
        for (size_t off = 0; off < sl->numel; off += SCAPE_TILE) {
            ScapeTile *x = &h[t++];
            x->start = (long long)(sl->offset + off);
            x->slice_off = (long long)sl->offset;
            x->len = (int)(sl->numel - off < SCAPE_TILE ? sl->numel - off : SCAPE_TILE);
            x->slice = slices[k];
            x->decay = sl->decay;
        }
        pl->numel += (long long)sl->numel;
    }
    pl->slice_tile[n] = t;
    pl->ntiles = (int)nt;
    cudaCheck(cudaMalloc(&pl->tiles, (nt ? nt : 1) * sizeof(ScapeTile)));
    cudaCheck(cudaMemcpy(pl->tiles, h, nt * sizeof(ScapeTile), cudaMemcpyHostToDevice));
    free(h);
    cudaCheck(cudaMalloc(&pl->count, (nt + 1) * sizeof(long long)));
    cudaCheck(cudaMalloc(&pl->q, (nt + 1) * sizeof(long long)));
    cudaCheck(cudaMemset(pl->count, 0, (nt + 1) * sizeof(long long)));
    cudaCheck(cudaMemset(pl->q, 0, (nt + 1) * sizeof(long long)));
    cudaCheck(cub::DeviceScan::ExclusiveSum(nullptr, pl->scan_tmp_bytes, pl->count, pl->q, (int)nt + 1));
    cudaCheck(cudaMalloc(&pl->scan_tmp, pl->scan_tmp_bytes ? pl->scan_tmp_bytes : 1));
}
static void scape_plan_free(ScapeBucketPlan *pl) {
    cudaCheck(cudaFree(pl->tiles));
    cudaCheck(cudaFree(pl->count));
    cudaCheck(cudaFree(pl->q));
    cudaCheck(cudaFree(pl->scan_tmp));
    free(pl->slice_tile);
    free(pl->slice_off);
    memset(pl, 0, sizeof *pl);
}
/* Device address of K_b (a long long), valid after scape_payload_offsets, for a cudaMemcpyAsync to the host. */
static inline const long long *scape_plan_count_ptr(const ScapeBucketPlan *pl) { return pl->q + pl->ntiles; }

__global__ static void scape_tile_count_kernel(long long *count, const ScapeTile *tiles, const uint32_t *mask) {
    const ScapeTile t = tiles[blockIdx.x];
    const long long lo = t.start, hi = t.start + t.len;
    long long c = 0;
    for (long long w = (lo >> 5) + threadIdx.x; w <= (hi - 1) >> 5; w += blockDim.x)
        c += __popc(mask[w] & scape_range_bits(w, lo, hi));
    c = scape_block_sum(c);
    if (threadIdx.x == 0) count[blockIdx.x] = c;
}
/* For the mask M_t: pl->q[i] = masked elements of the bucket before tile i, pl->q[ntiles] = K_b. Call once per
 * step per bucket, after M_t is known and before scape_momentum_compact / scape_norm_partial / scape_update;
 * the plan's q then stays valid until the next call (the three read it). mask: (scape_mask_words(P)) words. */
static void scape_payload_offsets(ScapeBucketPlan *pl, const uint32_t *mask, cudaStream_t s) {
    if (pl->ntiles == 0) return;
    scape_tile_count_kernel<<<pl->ntiles, SCAPE_THREADS, 0, s>>>(pl->count, pl->tiles, mask);
    cudaCheckLaunch();
    size_t bytes = pl->scan_tmp_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(pl->scan_tmp, bytes, pl->count, pl->q, pl->ntiles + 1, s));
}

/* ---- corrected first moment + compaction (SCAPE.md section 3 items 1-2) ---- */

/* One block per tile. c and r are indexed by j - rc_origin: 0 for (P) buffers, the slice offset for a one-slice
 * staging buffer. */
template <typename Tg>
__global__ static void scape_momentum_compact_kernel(float *c, float *payload, int *nonfinite, const ScapeTile *tiles,
                                                     const long long *q, const Tg *grad, const float *m,
                                                     const float *r, long long rc_origin, const uint32_t *mask,
                                                     float b1, float omb1, const float *ez) {
    __shared__ int sh[32];
    const ScapeTile t = tiles[blockIdx.x];
    long long base = q[blockIdx.x];
    int bad = 0;
    for (int e0 = 0; e0 < t.len; e0 += blockDim.x) { /* uniform over the block */
        const int e = e0 + threadIdx.x;
        const long long j = t.start + e;
        float cj = 0.0f;
        int on = 0;
        if (e < t.len) {
            /* scape_corrected_momentum: beta1 * m[j] + omb1 * g[j] + r[j], left to right; with ZeRO-1 (m NULL) r
             * holds beta1 m_{t-1} already (the fold, optim/dist_scape_zero.c): (omb1 * g[j] + r[j]) + 0 */
            if (m) cj = __fadd_rn(__fadd_rn(__fmul_rn(b1, m[j]), __fmul_rn(omb1, to_float(grad[j]))), r[j - rc_origin]);
            else cj = __fadd_rn(__fadd_rn(__fmul_rn(omb1, to_float(grad[j])), r[j - rc_origin]), ez ? ez[j] : 0.0f);
            c[j - rc_origin] = cj; /* after this thread's read of r: c may be r itself */
            on = (int)scape_mask_bit(mask, j);
            bad |= !isfinite(cj);
        }
        int tot;
        const int pos = scape_block_exclusive_count(on, &tot, sh);
        if (on) payload[base + pos] = cj;
        base += tot;
    }
    if (bad && nonfinite) atomicOr(nonfinite, 1);
}
/* SCAPE.md section 3 items 1-2 for one bucket (scape_corrected_momentum then scape_gather_masked over the
 * bucket's slices, in scape_c_bucket / scape_queue_bucket):
 *   c[j] = b1 * m[j] + (1 - b1) * grad[j] + r[j]   for every j of the bucket  (c, m, r, grad: (P) flat buffers)
 *   payload[0 .. K_b) = c[j] for the masked j, slice after slice in plan order, j ascending
 * payload: the bucket's part of the payload buffer (K_b floats). c may be r itself (in place: r then holds c,
 * which is the new residual off the mask; scape_update zeroes it on the mask). nonfinite (device int, may be
 * NULL) is ORed with 1 if any c is NaN or inf (the CPU norm pass's check; the caller clears it each step).
 * m NULL (SCAPE with ZeRO-1, whose r holds fl(b1 m_{t-1}) on the mask m is on): c[j] = ((1 - b1) * grad[j] + r[j])
 * + ez[j], optim/dist_scape.c's scape_c_chunk under cfg.zero, the same bits as the dense expression; ez (P, may
 * be NULL for 0) is what the unsharded r holds on that mask (the bf16 payload's rounding losses), 0 elsewhere.
 * Needs scape_payload_offsets for this mask first. grad: floatX or float. */
template <typename Tg>
static void scape_momentum_compact(float *c, float *payload, int *nonfinite, const ScapeBucketPlan *pl, const Tg *grad,
                                   const float *m, const float *r, const uint32_t *mask, float b1, cudaStream_t s,
                                   const float *ez = NULL) {
    if (pl->ntiles == 0) return;
    scape_momentum_compact_kernel<Tg><<<pl->ntiles, SCAPE_THREADS, 0, s>>>(c, payload, nonfinite, pl->tiles, pl->q, grad,
                                                                          m, r, 0, mask, b1, 1.0f - b1, ez);
    cudaCheckLaunch();
}
/* The same for the plan's k-th slice alone, its residual and c in staging buffers of that slice (residual
 * offload, SCAPE.md section 7): r_slice[i] and c_slice[i] are element pl->slice_off[k] + i (c_slice may be
 * r_slice). payload is still the whole bucket's: the slice's values go to their place in it. */
template <typename Tg>
static void scape_momentum_compact_slice(float *c_slice, float *payload, int *nonfinite, const ScapeBucketPlan *pl, int k,
                                         const Tg *grad, const float *m, const float *r_slice, const uint32_t *mask,
                                         float b1, cudaStream_t s) {
    const int t0 = pl->slice_tile[k], nt = pl->slice_tile[k + 1] - t0;
    if (nt == 0) return;
    scape_momentum_compact_kernel<Tg><<<nt, SCAPE_THREADS, 0, s>>>(c_slice, payload, nonfinite, pl->tiles + t0, pl->q + t0,
                                                                  grad, m, r_slice, pl->slice_off[k], mask, b1, 1.0f - b1,
                                                                  NULL);
    cudaCheckLaunch();
}

/* payload[q(tile) + rank among the tile's masked elements] = c[j] for the masked j of each tile: the compaction
 * half of scape_momentum_compact, for step 1 whose mask is made after c (optim/dist_scape.c: scape_c_bucket for all buckets,
 * then the mask, then scape_queue_bucket). One block per tile. */
__global__ static void scape_gather_kernel(float *payload, const ScapeTile *tiles, const long long *q, const float *c,
                                           const uint32_t *mask) {
    __shared__ int sh[32];
    const ScapeTile t = tiles[blockIdx.x];
    long long base = q[blockIdx.x];
    for (int e0 = 0; e0 < t.len; e0 += blockDim.x) { /* uniform over the block */
        const int e = e0 + threadIdx.x;
        const long long j = t.start + e;
        const int on = e < t.len ? (int)scape_mask_bit(mask, j) : 0;
        int tot;
        const int pos = scape_block_exclusive_count(on, &tot, sh);
        if (on) payload[base + pos] = c[j];
        base += tot;
    }
}
static void scape_gather(float *payload, const ScapeBucketPlan *pl, const float *c, const uint32_t *mask, cudaStream_t s) {
    if (pl->ntiles == 0) return;
    scape_gather_kernel<<<pl->ntiles, SCAPE_THREADS, 0, s>>>(payload, pl->tiles, pl->q, c, mask);
    cudaCheckLaunch();
}
/* The same over the plan's tiles [t0, t1) alone (ZeRO-1's sync: an owner's parameters); payload is the plan's whole
 * buffer. */
static void scape_gather_tiles(float *payload, const ScapeBucketPlan *pl, int t0, int t1, const float *c,
                               const uint32_t *mask, cudaStream_t s) {
    if (t1 <= t0) return;
    scape_gather_kernel<<<t1 - t0, SCAPE_THREADS, 0, s>>>(payload, pl->tiles + t0, pl->q + t0, c, mask);
    cudaCheckLaunch();
}

/* ---- g_hat norm and the masked AdamS update (SCAPE.md section 3 items 3-7) ---- */

/* g_hat = (mt - b1 * m_{t-1}) / (1 - b1), as scape_norm_pass and scape_update_on compute it */
static __device__ inline float scape_ghat(float mt, float mp, float b1, float omb1) {
    return __fdiv_rn(__fsub_rn(mt, __fmul_rn(b1, mp)), omb1);
}

__global__ static void scape_norm_partial_kernel(double *partial, const ScapeTile *tiles, int ntiles, const long long *q,
                                                 const float *payload, const float *m, const uint32_t *mask, float b1,
                                                 float omb1) {
    __shared__ int sh[32];
    double ss = 0.0;
    for (int ti = blockIdx.x; ti < ntiles; ti += gridDim.x) {
        const ScapeTile t = tiles[ti];
        long long base = q[ti];
        for (int e0 = 0; e0 < t.len; e0 += blockDim.x) {
            const int e = e0 + threadIdx.x;
            const long long j = t.start + e;
            const int on = e < t.len ? (int)scape_mask_bit(mask, j) : 0;
            int tot;
            const int pos = scape_block_exclusive_count(on, &tot, sh);
            if (on) {
                const double gh = (double)scape_ghat(payload[base + pos], m[j], b1, omb1);
                ss = __dadd_rn(ss, __dmul_rn(gh, gh));
            }
            base += tot;
        }
    }
    ss = scape_block_sum(ss);
    if (threadIdx.x == 0) partial[blockIdx.x] = ss;
}
/* Number of partial sums scape_norm_partial writes for this bucket (fixed by its shape). */
static inline int scape_norm_partials(const ScapeBucketPlan *pl) {
    return pl->ntiles < SCAPE_NORM_BLOCKS ? pl->ntiles : SCAPE_NORM_BLOCKS;
}
/* Partial sums of g_hat^2 (in double) over the bucket's masked coordinates, g_hat from the averaged payload
 * (scape_norm_pass): writes partial[0 .. scape_norm_partials(pl)). A fixed grid (depends only on the bucket) and
 * a fixed summation order make the result reproducible bit for bit; the CPU adds the same double terms in
 * another order (16384-element chunks), so the two agree to the rounding of the double sums, not bit for bit. */
static void scape_norm_partial(double *partial, const ScapeBucketPlan *pl, const float *payload, const float *m,
                               const uint32_t *mask, float b1, cudaStream_t s) {
    int np = scape_norm_partials(pl);
    if (np == 0) return;
    scape_norm_partial_kernel<<<np, SCAPE_THREADS, 0, s>>>(partial, pl->tiles, pl->ntiles, pl->q, payload, m, mask, b1,
                                                           1.0f - b1);
    cudaCheckLaunch();
}
__global__ static void scape_norm_finish_kernel(double *out, const double *partial, int np) {
    double s = 0.0;
    for (int i = threadIdx.x; i < np; i += blockDim.x) s = __dadd_rn(s, partial[i]);
    s = scape_block_sum(s);
    if (threadIdx.x == 0) *out = s;
}
/* *out (device double) = the sum of partial[0 .. np) in a fixed order: sum g_hat^2 over all buckets' partials
 * laid out one after the other. The CPU's grad norm is (float)sqrt(*out). */
static void scape_norm_finish(double *out, const double *partial, int np, cudaStream_t s) {
    scape_norm_finish_kernel<<<1, SCAPE_THREADS, 0, s>>>(out, partial, np);
    cudaCheckLaunch();
}

/* The step's constants of the masked update. */
typedef struct {
    float lr, b1, omb1, b2, omb2, eps, bc1, sqrt_bc2, wd, sc;
    int clipped;
    int step;
    uint32_t seed_mix; /* (uint32)seed ^ (uint32)(seed >> 32), sr_seed's second argument */
    /* bf16 payload (dist.h, distopt_create): on M_t r = (c - bf16(c)) + fN * qerr[q] instead of 0; qerr is the
     * bucket's rounding errors of the mean by payload index, NULL for none (one rank). Set per bucket. */
    int payload_bf16;
    float fN;
    const float *qerr;
    /* SCAPE with ZeRO-1 (optim/dist_scape_zero.c): zero 1 = another rank's tiles: off M_t error feedback and
     * decay as usual (m is not touched: this rank holds none there), on M_t only r = 0 (m_t, params and the copy
     * there come with the sync, scape_zero_fold / scape_zero_scatter); the owner's tiles run
     * scape_zero_update_owned. 0: unsharded. */
    int zero;
    /* ZeRO-1 with the bf16 payload: (P) what the unsharded r would hold, written here instead of r (whose place on
     * M_t the fold takes): the residual above on M_t (the owner's mean error for its own tiles, c - bf16(c) for
     * the others'), 0 off it. NULL otherwise. */
    float *ez;
} ScapeUpdateArgs;

/* Constants of step t >= 1 exactly as scape_update_pass derives them: bc1 = 1 - b1^t and sqrt_bc2 =
 * sqrt(1 - b2^t) in double, cast to float. wd: the decay of decayed slices (0 is used for the others). clipped,
 * sc: from the norm, as scape_step decides them (sc = clip / (norm + 1e-6f) when norm > clip > 0). seed: base
 * seed of the stochastically rounded floatX copy (sr_seed). */
static ScapeUpdateArgs scape_update_args(int t, float lr, float b1, float b2, float eps, float wd, int clipped, float sc,
                                         uint64_t seed) {
    ScapeUpdateArgs a;
    a.lr = lr;
    a.b1 = b1;
    a.omb1 = 1.0f - b1;
    a.b2 = b2;
    a.omb2 = 1.0f - b2;
    a.eps = eps;
    a.bc1 = (float)(1.0 - pow((double)b1, t));
    a.sqrt_bc2 = (float)sqrt(1.0 - pow((double)b2, t));
    a.wd = wd;
    a.sc = sc;
    a.clipped = clipped;
    a.step = t;
    a.seed_mix = (uint32_t)seed ^ (uint32_t)(seed >> 32);
    a.payload_bf16 = 0;
    a.fN = 1.0f;
    a.qerr = NULL;
    a.zero = 0;
    a.ez = NULL;
    return a;
}

/* The residual on M_t with the bf16 payload, optim/dist_scape.c's RESIDUAL_ON: (c - bf16(c)) + fN * e (c - bf16(c) is exact). */
static __device__ inline float scape_bf16_residual(float c, float e, float fN) {
    return __fadd_rn(__fsub_rn(c, bf16_to_f32(bf16_from_f32(c))), __fmul_rn(fN, e));
}

/* scape_update_on (optim/scape.h), operation for operation */
static __device__ inline void scape_update_on_dev(float *p, float *m, float mt, const ScapeUpdateArgs &a, float wd) {
    const float mp = *m;
    float gh = scape_ghat(mt, mp, a.b1, a.omb1);
    if (a.clipped) {
        gh = __fmul_rn(gh, a.sc);
        mt = __fadd_rn(__fmul_rn(a.b1, mp), __fmul_rn(a.omb1, gh));
    }
    const float nu = __fadd_rn(__fmul_rn(__fmul_rn(a.b2, mp), mp), __fmul_rn(__fmul_rn(a.omb2, gh), gh));
    *m = mt;
    const float pv = *p;
    const float upd = __fadd_rn(__fdiv_rn(__fdiv_rn(mt, a.bc1), __fadd_rn(__fdiv_rn(__fsqrt_rn(nu), a.sqrt_bc2), a.eps)),
                                __fmul_rn(wd, pv));
    *p = __fsub_rn(pv, __fmul_rn(a.lr, upd));
}

/* One block per tile; r and c indexed by j - rc_origin as in scape_momentum_compact_kernel. */
__global__ static void scape_update_kernel(float *params, floatX *copy, float *m, float *r, const float *c,
                                           long long rc_origin, const ScapeTile *tiles, const long long *q,
                                           const float *payload, const uint32_t *mask, ScapeUpdateArgs a) {
    __shared__ int sh[32];
    const ScapeTile t = tiles[blockIdx.x];
    const float wd = t.decay ? a.wd : 0.0f;
    /* sr_seed(seed, step, slice) of cuda/common.cuh, computed here (the test checks it against sr_seed) */
    const uint32_t seed = hash_u32((uint32_t)t.slice * 0x27D4EB2Fu + (uint32_t)a.step, a.seed_mix);
    long long base = q[blockIdx.x];
    for (int e0 = 0; e0 < t.len; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        const long long j = t.start + e;
        const int on = e < t.len ? (int)scape_mask_bit(mask, j) : 0;
        int tot;
        const int pos = scape_block_exclusive_count(on, &tot, sh);
        if (e < t.len && on && a.zero) {
            /* another rank's coordinate on M_t: its owner's m_t and p come with the sync (the bf16 payload's mean
             * error is the owner's: this rank lost only its own rounding) */
            const float cj = c[j - rc_origin];
            if (a.ez) a.ez[j] = __fsub_rn(cj, bf16_to_f32(bf16_from_f32(cj)));
            r[j - rc_origin] = 0.0f;
        } else if (e < t.len) {
            float pj = params[j];
            if (on) {
                float mj = m[j];
                r[j - rc_origin] = a.payload_bf16 ? scape_bf16_residual(c[j - rc_origin], a.qerr ? a.qerr[base + pos] : 0.0f, a.fN)
                                                  : 0.0f;
                scape_update_on_dev(&pj, &mj, payload[base + pos], a, wd);
                m[j] = mj;
            } else {
                r[j - rc_origin] = c[j - rc_origin]; /* a no-op when c is r */
                if (a.ez) a.ez[j] = 0.0f;
                if (!a.zero) m[j] = 0.0f;
                pj = __fsub_rn(pj, __fmul_rn(a.lr, __fmul_rn(wd, pj)));
            }
            params[j] = pj;
            if (copy) store_rounded(copy + j, pj, hash_u32((uint32_t)(j - t.slice_off), seed));
        }
        base += tot;
    }
}
/* The end of a SCAPE step for one bucket (scape_update_pass), every coordinate j of the bucket:
 *   on M_t:  r[j] = 0; scape_update_on(&params[j], &m[j], payload[q], ...) with q its payload index
 *   off M_t: r[j] = c[j]; m[j] = 0; params[j] -= lr * (wd * params[j])
 * payload: the bucket's averaged payload b (K_b floats, after the all-reduce); c: this step's corrected
 * momentum (may be r itself, see scape_momentum_compact); copy (may be NULL): floatX copy of the new params,
 * stochastically rounded with hash_u32(j - slice offset, sr_seed(seed, t, slice)) like adams_update_tensor.
 * Needs this step's scape_payload_offsets. Each coordinate is independent: the result is bitwise the CPU's. */
static void scape_update(float *params, floatX *copy, float *m, float *r, const float *c, const ScapeBucketPlan *pl,
                         const float *payload, const uint32_t *mask, const ScapeUpdateArgs *a, cudaStream_t s) {
    if (pl->ntiles == 0) return;
    scape_update_kernel<<<pl->ntiles, SCAPE_THREADS, 0, s>>>(params, copy, m, r, c, 0, pl->tiles, pl->q, payload, mask, *a);
    cudaCheckLaunch();
}
/* The same over the plan's tiles [t0, t1) alone (SCAPE with ZeRO-1: the other ranks' tiles, a->zero = 1); r, c and
 * payload are the (P) / whole-bucket buffers as in scape_update. */
static void scape_update_tiles(float *params, floatX *copy, float *m, float *r, const float *c, const ScapeBucketPlan *pl,
                               int t0, int t1, const float *payload, const uint32_t *mask, const ScapeUpdateArgs *a,
                               cudaStream_t s) {
    if (t1 <= t0) return;
    scape_update_kernel<<<t1 - t0, SCAPE_THREADS, 0, s>>>(params, copy, m, r, c, 0, pl->tiles + t0, pl->q + t0, payload,
                                                          mask, *a);
    cudaCheckLaunch();
}
/* The same for the plan's k-th slice alone with its residual and c in staging buffers of that slice (see
 * scape_momentum_compact_slice); payload is the whole bucket's averaged payload. */
static void scape_update_slice(float *params, floatX *copy, float *m, float *r_slice, const float *c_slice,
                               const ScapeBucketPlan *pl, int k, const float *payload, const uint32_t *mask,
                               const ScapeUpdateArgs *a, cudaStream_t s) {
    const int t0 = pl->slice_tile[k], nt = pl->slice_tile[k + 1] - t0;
    if (nt == 0) return;
    scape_update_kernel<<<nt, SCAPE_THREADS, 0, s>>>(params, copy, m, r_slice, c_slice, pl->slice_off[k], pl->tiles + t0,
                                                     pl->q + t0, payload, mask, *a);
    cudaCheckLaunch();
}

/* ---- bf16 payload (SCAPE.md section 7): optim/dist.c with payload_bf16 and comm_iallreduce_avg_bf16 ----
 * The payload of a bucket is rounded to bf16 before it goes out (q = bf16(c) on M_t), the owner of each part
 * averages the parts in fp32 in rank order and rounds the mean, the rounded parts are gathered, and the error of
 * both roundings goes to r in the update (ScapeUpdateArgs.payload_bf16). Same formulas as the host, so in fp32
 * the device equals optim/dist.c bit for bit. */

/* q < n (n = *count when count is not NULL, else n_fixed): out16[q] = bf16(pay[q]) if out16, and with widen
 * pay[q] = (float)bf16(pay[q]) in place (one rank: the rounded payload is the mean). Grid-stride. */
__global__ static void scape_bf16_round_kernel(uint16_t *out16, float *pay, const long long *count, long long n_fixed,
                                               int widen) {
    const long long n = count ? *count : n_fixed;
    for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (long long)gridDim.x * blockDim.x) {
        const uint16_t h = bf16_from_f32(pay[q]);
        if (out16) out16[q] = h;
        if (widen) pay[q] = bf16_to_f32(h);
    }
}
/* Rounds a bucket's payload: at most max_n values (the bucket's size), the count read on the device. */
static void scape_bf16_round(uint16_t *out16, float *pay, const long long *count, long long n_fixed, long long max_n,
                             int widen, cudaStream_t s) {
    if (max_n <= 0) return;
    const long long blocks = ceil_div(max_n, SCAPE_THREADS);
    scape_bf16_round_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), SCAPE_THREADS, 0, s>>>(out16, pay, count, n_fixed,
                                                                                              widen);
    cudaCheckLaunch();
}

/* The owner's part of comm_iallreduce_avg_bf16: recv holds world parts of `mine` bf16 values (rank r's at
 * r * mine); own16[i] = bf16(mean), err[i] = mean - bf16(mean), mean = (fp32 sum in rank order) / world. */
__global__ static void scape_bf16_mean_kernel(uint16_t *own16, float *err, const uint16_t *recv, long long mine, int world) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= mine) return;
    float s = 0.0f;
    for (int r = 0; r < world; r++) s = __fadd_rn(s, bf16_to_f32(recv[(long long)r * mine + i]));
    const float mean = __fdiv_rn(s, (float)world);
    const uint16_t b = bf16_from_f32(mean);
    own16[i] = b;
    err[i] = __fsub_rn(mean, bf16_to_f32(b));
}
static void scape_bf16_mean(uint16_t *own16, float *err, const uint16_t *recv, long long mine, int world, cudaStream_t s) {
    if (mine <= 0) return;
    scape_bf16_mean_kernel<<<ceil_div(mine, SCAPE_THREADS), SCAPE_THREADS, 0, s>>>(own16, err, recv, mine, world);
    cudaCheckLaunch();
}

/* pay[q] = (float)p16[q], q < n: the reduced bf16 payload into the fp32 buffer the norm and update read. */
__global__ static void scape_bf16_widen_kernel(float *pay, const uint16_t *p16, long long n) {
    const long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (q < n) pay[q] = bf16_to_f32(p16[q]);
}
static void scape_bf16_widen(float *pay, const uint16_t *p16, long long n, cudaStream_t s) {
    if (n <= 0) return;
    scape_bf16_widen_kernel<<<ceil_div(n, SCAPE_THREADS), SCAPE_THREADS, 0, s>>>(pay, p16, n);
    cudaCheckLaunch();
}

/* the kernels of SCAPE with ZeRO-1: compact first moment, owners' norm and update, the sparse sync */
#include "cuda/scape_zero.cuh"

/* the kernels that make and measure masks: top-k, segment assembly, statistics */
#include "cuda/scape_mask.cuh"

#endif

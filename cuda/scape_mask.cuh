/*
 * cuda/scape_mask.cuh - SCAPE's kernels that make and measure masks: the exact per-slice top-k of |c| (optim/scape.c's
 * scape_topk_mask on the device), the OR of an owner's segment into the full mask (mask_or_bits), and the mask
 * statistics' popcounts and energies (optim/dist_mask_stats.c's mask_jaccard and mask_energy). Part of
 * cuda/scape.cuh, which includes it at its end (its helpers, plans and constants are defined there); include that.
 */
#ifndef CUDA_SCAPE_MASK_CUH
#define CUDA_SCAPE_MASK_CUH

/* ---- exact per-slice top-k of |c| (scape_topk_mask) ----
 * Radix select on the 31-bit key |c| = bits(c) & 0x7FFFFFFF (for non-negative floats the unsigned order of the
 * bits is the numeric order, and NaN keys lie above inf's): three histogram passes over digits of 11, 11 and 9
 * bits from the top, each followed by a one-block select step, give the key T of the k-th largest element and
 * need = k - #{key > T}. Then the elements equal to T are counted per TOPK_CHUNK chunk, the counts scanned (CUB),
 * and the marking pass sets every key > T and the first `need` keys == T in index order. All counts are
 * integers, so the result does not depend on the grid or on timing; it is exactly scape_topk_mask's. */

/* ScapeTopkState (the select steps' state) is in optim/scape.h, shared with the host. */

/* Scratch of the top-k of slices up to max_n elements; one per stream that runs top-k concurrently. */
typedef struct {
    long long max_n;
    int hist_blocks;        /* most blocks of a histogram pass */
    unsigned int *hist;     /* (3, TOPK_BINS) device */
    ScapeTopkState *state;  /* device */
    long long *eq, *eqscan; /* (ceil(max_n / TOPK_CHUNK)) device: keys equal to T per chunk, exclusive scan */
    void *scan_tmp;
    size_t scan_tmp_bytes;
} ScapeTopkWork;

static void scape_topk_work_create(ScapeTopkWork *w, long long max_n) {
    memset(w, 0, sizeof *w);
    if (max_n < 1) max_n = 1;
    if (max_n >= INT_MAX) scape_cuda_fail("scape_topk_work_create: slices of 2^31 elements or more are not supported; split the tensor");
    w->max_n = max_n;
    int dev = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    w->hist_blocks = 8 * sms; /* 8 blocks of 256 threads fill an SM; only speed depends on it */
    int nch = ceil_div(max_n, TOPK_CHUNK);
    cudaCheck(cudaMalloc(&w->hist, 3 * TOPK_BINS * sizeof(unsigned int)));
    cudaCheck(cudaMalloc(&w->state, sizeof(ScapeTopkState)));
    cudaCheck(cudaMalloc(&w->eq, nch * sizeof(long long)));
    cudaCheck(cudaMalloc(&w->eqscan, nch * sizeof(long long)));
    cudaCheck(cub::DeviceScan::ExclusiveSum(nullptr, w->scan_tmp_bytes, w->eq, w->eqscan, nch));
    cudaCheck(cudaMalloc(&w->scan_tmp, w->scan_tmp_bytes ? w->scan_tmp_bytes : 1));
}
static void scape_topk_work_free(ScapeTopkWork *w) {
    cudaCheck(cudaFree(w->hist));
    cudaCheck(cudaFree(w->state));
    cudaCheck(cudaFree(w->eq));
    cudaCheck(cudaFree(w->eqscan));
    cudaCheck(cudaFree(w->scan_tmp));
    memset(w, 0, sizeof *w);
}

/* Histogram of digit (key >> shift) & dmask over the keys that match the state's prefix (pass 0: all keys). */
__global__ static void scape_topk_hist_kernel(unsigned int *hist, const ScapeTopkState *st, const float *c, long long n,
                                              int pass, int shift, uint32_t dmask) {
    __shared__ unsigned int sh[TOPK_BINS];
    for (int i = threadIdx.x; i < TOPK_BINS; i += blockDim.x) sh[i] = 0;
    uint32_t prefix = 0, pmask = 0;
    if (pass > 0) {
        prefix = st->prefix;
        pmask = st->pmask;
    }
    __syncthreads();
    const unsigned lane = threadIdx.x & 31;
    const long long step = (long long)gridDim.x * blockDim.x * TOPK_UNROLL;
    /* base is the same for the whole block, so every lane runs every iteration (needed by the warp votes) */
    for (long long base = (long long)blockIdx.x * blockDim.x * TOPK_UNROLL; base < n; base += step) {
        uint32_t key[TOPK_UNROLL];
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) {
            const long long j = base + (long long)u * blockDim.x + threadIdx.x;
            key[u] = j < n ? scape_topk_key(__float_as_uint(c[j])) : 0xFFFFFFFFu; /* 0xFFFFFFFF: no element */
        }
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) {
            const int bin = key[u] != 0xFFFFFFFFu && (key[u] & pmask) == prefix ? (int)((key[u] >> shift) & dmask) : -1;
            if (__any_sync(0xFFFFFFFFu, bin >= 0)) {
                /* lanes with the same bin add once (many equal values would otherwise serialise on one bin) */
                const unsigned peers = __match_any_sync(0xFFFFFFFFu, bin);
                if (bin >= 0 && lane == (unsigned)(__ffs(peers) - 1)) atomicAdd(&sh[bin], (unsigned)__popc(peers));
            }
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TOPK_BINS; i += blockDim.x)
        if (sh[i]) atomicAdd(&hist[i], sh[i]);
}

/* One block: the select step (scape_topk_select of optim/scape.h, the CPU loop's equivalent) on this pass's
 * histogram, the group sums computed one per thread. */
__global__ static void scape_topk_select_kernel(ScapeTopkState *st, const unsigned int *hist, int pass, long long k) {
    __shared__ unsigned int h[TOPK_BINS];
    __shared__ unsigned long long gsum[SCAPE_TOPK_GROUPS];
    const int nb = 1 << scape_topk_width(pass), per = nb / SCAPE_TOPK_GROUPS; /* 8 or 2 bins per group */
    for (int i = threadIdx.x; i < nb; i += blockDim.x) h[i] = hist[i];
    __syncthreads();
    gsum[threadIdx.x] = scape_topk_group_sum(h, per, threadIdx.x); /* blockDim.x == SCAPE_TOPK_GROUPS */
    __syncthreads();
    if (threadIdx.x == 0) scape_topk_select(st, pass, h, gsum, k);
}

/* The keys of this block's chunk, one per round of the block (element lo + r * SCAPE_THREADS + threadIdx.x), all
 * loaded before any is used so that 16 loads per thread are in flight; key 0 past the end (not used there). */
#define TOPK_ROUNDS (TOPK_CHUNK / SCAPE_THREADS)
static __device__ inline void scape_topk_load_chunk(uint32_t key[TOPK_ROUNDS], const float *c, long long lo, long long n) {
#pragma unroll
    for (int r = 0; r < TOPK_ROUNDS; r++) {
        const long long j = lo + (long long)r * SCAPE_THREADS + threadIdx.x;
        key[r] = j < n ? scape_topk_key(__float_as_uint(c[j])) : 0u;
    }
}

/* Keys equal to T in each chunk (0 everywhere when all ties are taken anyway). blockDim.x == SCAPE_THREADS. */
__global__ static void scape_topk_eq_count_kernel(long long *eq, const ScapeTopkState *st, const float *c, long long n) {
    if (st->all_ties) { /* the same for the whole block */
        if (threadIdx.x == 0) eq[blockIdx.x] = 0;
        return;
    }
    const uint32_t T = st->prefix;
    const long long lo = (long long)blockIdx.x * TOPK_CHUNK;
    uint32_t key[TOPK_ROUNDS];
    scape_topk_load_chunk(key, c, lo, n);
    long long cnt = 0;
#pragma unroll
    for (int r = 0; r < TOPK_ROUNDS; r++) cnt += lo + (long long)r * SCAPE_THREADS + threadIdx.x < n && key[r] == T;
    cnt = scape_block_sum(cnt);
    if (threadIdx.x == 0) eq[blockIdx.x] = cnt;
}

/* Sets the bits of the selected elements of this chunk: key > T, or key == T among the first `need` in index
 * order (eqscan: keys equal to T before the chunk). 32 consecutive elements are one warp's ballot, ORed into the
 * one or two words they straddle (neighbouring warps, blocks and slices may share those words).
 * blockDim.x == SCAPE_THREADS. */
__global__ static void scape_topk_mark_kernel(uint32_t *bits, long long bit_off, const ScapeTopkState *st,
                                              const long long *eqscan, const float *c, long long n) {
    __shared__ int sh[32];
    const uint32_t T = st->prefix;
    const long long need = st->need;
    const int all = st->all_ties;
    long long taken = all ? 0 : eqscan[blockIdx.x]; /* same value in every thread */
    const long long lo = (long long)blockIdx.x * TOPK_CHUNK;
    const unsigned lane = threadIdx.x & 31;
    uint32_t keys[TOPK_ROUNDS];
    scape_topk_load_chunk(keys, c, lo, n);
#pragma unroll
    for (int r = 0; r < TOPK_ROUNDS; r++) {
        const long long e0 = (long long)r * SCAPE_THREADS;
        if (lo + e0 >= n) break; /* uniform over the block */
        const long long j = lo + e0 + threadIdx.x;
        const uint32_t key = keys[r];
        const int eqf = j < n && key == T;
        long long tie_rank = need; /* keys equal to T before j; >= need: not taken */
        if (all) {
            tie_rank = 0; /* every tie is taken */
        } else if (taken < need) { /* uniform: taken is the same in every thread */
            int tot;
            tie_rank = taken + scape_block_exclusive_count(eqf, &tot, sh);
            taken += tot;
        }
        const int sel = j < n && scape_topk_take(key, T, tie_rank, need);
        const unsigned bal = __ballot_sync(0xFFFFFFFFu, sel);
        if (lane == 0 && bal) {
            const long long bp = bit_off + lo + e0 + (threadIdx.x & ~31u); /* bit of this warp's first element */
            const long long w = bp >> 5;
            const int s = (int)(bp & 31);
            atomicOr(&bits[w], bal << s);
            if (s && (bal >> (32 - s))) atomicOr(&bits[w + 1], bal >> (32 - s));
        }
    }
}

/* Top-k of one slice (scape_topk_mask): ORs bit (bit_off + j) of bits for the k largest |c[j]|, j < n, ties
 * toward the lower index, NaN above inf; the slice's target bits must be 0 on entry (bits of neighbouring slices
 * sharing a word are kept). k >= n sets all n bits, k == 0 none. n <= w->max_n. c: (n) device floats. No host
 * synchronisation; w must not be used by another stream at the same time. */
static void scape_topk_mask_gpu(uint32_t *bits, long long bit_off, const float *c, long long n, long long k,
                                ScapeTopkWork *w, cudaStream_t s) {
    if (n <= 0 || k <= 0) return;
    if (k >= n) {
        scape_mask_set_range(bits, bit_off, n, s);
        return;
    }
    if (n > w->max_n) scape_cuda_fail("scape_topk_mask_gpu: slice larger than the ScapeTopkWork's max_n; create it with the largest slice");
    cudaCheck(cudaMemsetAsync(w->hist, 0, 3 * TOPK_BINS * sizeof(unsigned int), s));
    int grid = ceil_div(n, (long)SCAPE_THREADS * TOPK_UNROLL);
    if (grid > w->hist_blocks) grid = w->hist_blocks;
    for (int pass = 0; pass < 3; pass++) {
        unsigned int *h = w->hist + pass * TOPK_BINS;
        scape_topk_hist_kernel<<<grid, SCAPE_THREADS, 0, s>>>(h, w->state, c, n, pass, scape_topk_shift(pass),
                                                               (1u << scape_topk_width(pass)) - 1u);
        cudaCheckLaunch();
        scape_topk_select_kernel<<<1, SCAPE_TOPK_GROUPS, 0, s>>>(w->state, h, pass, k);
        cudaCheckLaunch();
    }
    const int nch = ceil_div(n, TOPK_CHUNK);
    scape_topk_eq_count_kernel<<<nch, SCAPE_THREADS, 0, s>>>(w->eq, w->state, c, n);
    cudaCheckLaunch();
    size_t bytes = 0;
    cudaCheck(cub::DeviceScan::ExclusiveSum(nullptr, bytes, w->eq, w->eqscan, nch, s));
    if (bytes > w->scan_tmp_bytes) scape_cuda_fail("scape_topk_mask_gpu: CUB scan needs more scratch than at creation");
    bytes = w->scan_tmp_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(w->scan_tmp, bytes, w->eq, w->eqscan, nch, s));
    scape_topk_mark_kernel<<<nch, SCAPE_THREADS, 0, s>>>(bits, bit_off, w->state, w->eqscan, c, n);
    cudaCheckLaunch();
}


/* dst bits [dst_off, dst_off + n) |= src bits [0, n) (src: word-aligned packed mask, element e = bit e & 31 of
 * word e >> 5). One thread per destination word; partial words at the ends use atomicOr (a neighbour's segment
 * shares them). mask_or_bits of optim/scape.h on device words. */
__global__ static void scape_or_segment_kernel(uint32_t *dst, long long dst_off, const uint32_t *src, long long n) {
    long long w = (dst_off >> 5) + (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (w > (dst_off + n - 1) >> 5) return;
    const uint32_t range = scape_range_bits(w, dst_off, dst_off + n);
    const long long e0 = (w << 5) - dst_off; /* source element at bit 0 of word w (negative in a first partial word) */
    uint32_t v = 0;
    for (int i = 0; i < 32; i++) {
        if (!((range >> i) & 1u)) continue;
        const long long e = e0 + i; /* 0 <= e < n here */
        v |= ((src[e >> 5] >> (e & 31)) & 1u) << i;
    }
    if (range == 0xFFFFFFFFu) dst[w] |= v; /* a whole word inside the range: only this thread writes it */
    else if (v) atomicOr(&dst[w], v);
}
static void scape_or_segment(uint32_t *dst, long long dst_off, const uint32_t *src, long long n, cudaStream_t s) {
    if (n <= 0) return;
    long long nw = ((dst_off + n - 1) >> 5) - (dst_off >> 5) + 1;
    scape_or_segment_kernel<<<ceil_div(nw, SCAPE_THREADS), SCAPE_THREADS, 0, s>>>(dst, dst_off, src, n);
    cudaCheckLaunch();
}

/* ---- mask statistics (optim/dist_mask_stats.c's mask_jaccard and mask_energy, for DistMaskStats) ----
 * Per slice s of a plan (scape_plan_build over the slices to report), for a mask `cur`, the previous step's mask
 * `prev` and a vector x (all indexed by the flat element index):
 *   inter = |cur n prev| and uni = |cur u prev| over s (popcounts of the packed words' AND / OR; exact integers),
 *   kept = sum_{j in s, cur_j} x_j^2 and all = sum_{j in s} x_j^2 (double; x_j^2 of a float is exact in double,
 *   so only the order of the additions can differ from dist.c's running sum: the grid is fixed by the plan and
 *   the order by scape_block_sum, hence the same bits on every run, within a few ulps of the CPU's).
 * jaccard = inter / uni (1 when uni = 0) and energy = kept / all (1 when all = 0) are left to the caller, which
 * forms them in double exactly as dist.c does. */
typedef struct {
    unsigned long long inter, uni; /* 0 when there is no previous mask */
    double kept, all;
} ScapeMaskStatsSums;

/* One block per tile of the plan: the tile's sums into part[blockIdx.x]. prev may be NULL. */
__global__ static void scape_mask_stats_tile_kernel(ScapeMaskStatsSums *part, const ScapeTile *tiles,
                                                    const uint32_t *cur, const uint32_t *prev, const float *x) {
    const ScapeTile t = tiles[blockIdx.x];
    const long long lo = t.start, hi = t.start + t.len;
    unsigned long long in = 0, un = 0;
    if (prev)
        for (long long w = (lo >> 5) + threadIdx.x; w <= (hi - 1) >> 5; w += blockDim.x) {
            const uint32_t rb = scape_range_bits(w, lo, hi), a = cur[w] & rb, b = prev[w] & rb;
            in += (unsigned long long)__popc(a & b);
            un += (unsigned long long)__popc(a | b);
        }
    double kept = 0.0, all = 0.0;
    for (long long j = lo + threadIdx.x; j < hi; j += blockDim.x) {
        const double v = __dmul_rn((double)x[j], (double)x[j]);
        all = __dadd_rn(all, v);
        if (scape_mask_bit(cur, j)) kept = __dadd_rn(kept, v);
    }
    in = scape_block_sum(in);
    un = scape_block_sum(un);
    kept = scape_block_sum(kept);
    all = scape_block_sum(all);
    if (threadIdx.x == 0) part[blockIdx.x] = ScapeMaskStatsSums{in, un, kept, all};
}
/* One block per slice of the plan: its tiles' sums, in tile order, into out[blockIdx.x]. */
__global__ static void scape_mask_stats_slice_kernel(ScapeMaskStatsSums *out, const ScapeMaskStatsSums *part,
                                                     const int *slice_tile) {
    const int t0 = slice_tile[blockIdx.x], t1 = slice_tile[blockIdx.x + 1];
    unsigned long long in = 0, un = 0;
    double kept = 0.0, all = 0.0;
    for (int i = t0 + threadIdx.x; i < t1; i += blockDim.x) {
        in += part[i].inter;
        un += part[i].uni;
        kept = __dadd_rn(kept, part[i].kept);
        all = __dadd_rn(all, part[i].all);
    }
    in = scape_block_sum(in);
    un = scape_block_sum(un);
    kept = scape_block_sum(kept);
    all = scape_block_sum(all);
    if (threadIdx.x == 0) out[blockIdx.x] = ScapeMaskStatsSums{in, un, kept, all};
}
/* out[k] (device, pl->nslices entries) = the sums above for the plan's k-th slice; part: (pl->ntiles) device
 * scratch; slice_tile: a device copy of pl->slice_tile (nslices + 1 ints). cur, prev (NULL: none, the counts are
 * 0): scape_mask_words(P) words; x: (P) device floats. Two launches on s, no host synchronisation. */
static void scape_mask_stats(ScapeMaskStatsSums *out, ScapeMaskStatsSums *part, const ScapeBucketPlan *pl,
                             const int *slice_tile, const uint32_t *cur, const uint32_t *prev, const float *x,
                             cudaStream_t s) {
    if (pl->nslices == 0) return;
    if (pl->ntiles > 0) {
        scape_mask_stats_tile_kernel<<<pl->ntiles, SCAPE_THREADS, 0, s>>>(part, pl->tiles, cur, prev, x);
        cudaCheckLaunch();
    }
    scape_mask_stats_slice_kernel<<<pl->nslices, SCAPE_THREADS, 0, s>>>(out, part, slice_tile);
    cudaCheckLaunch();
}

#endif

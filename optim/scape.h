/*
 * optim/scape.h - the pieces of SCAPE (SCAPE.md) that need no communication: the owner table (which rank makes
 * the mask of which slices; also the ZeRO-1 shard layout), the density schedule, packed 1-bit masks, the
 * per-slice top-k selection, and the per-bucket payload and masked AdamS update. optim/dist_scape.c strings them
 * together with the collectives. Masks are packed LSB first: element j is bit (j & 7) of byte j >> 3.
 * Not for: communication or state ownership (optim/dist_scape.c), dense optimizers (optim/optim.c).
 */
#ifndef SCAPE_SCAPE_H
#define SCAPE_SCAPE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/params.h"

#ifdef __cplusplus /* CUDA files include this header too (cuda/scape.cuh, dev/cuda/scape.cu) */
extern "C" {
#endif

/* Owners (SCAPE.md section 4): rank r owns slices [first[r], first[r+1]) = elements [lo[r], hi[r]), contiguous
 * runs in memory order, the boundaries placed at the slice boundary nearest to r * P / N (so balanced by
 * element count; a rank may own nothing when there are fewer slices than ranks). */
typedef struct {
    int world;
    int *first;  /* (world + 1) slice indices */
    size_t *lo;  /* (world) first owned element */
    size_t *hi;  /* (world) one past the last owned element */
} OwnerTable;

void owner_table_build(OwnerTable *o, const ParamTable *tab, int world);
void owner_table_free(OwnerTable *o);
/* The rank owning slice i (0 <= i < the table's slice count). */
static inline int owner_table_owner(const OwnerTable *o, int i) {
    int r = 0;
    while (r + 1 < o->world && i >= o->first[r + 1]) r++;
    return r;
}

/* Density at step t >= 1 (SCAPE.md section 5 as the authors' reducer runs it): d_start * (d / d_start)^min(1,
 * (t - 1) / W), in double, so step 1 runs at d_start and steps t > W at exactly d; W <= 0 gives d throughout. */
double scape_density(double d, double d_start, int W, int t);
/* k_s = max(1, floor(d * n)) clamped to n (SCAPE.md section 3 item 8), the product in double as the authors'
 * Python computes int(d * numel): scape_k(0.01, 32000 * 1536) = 491520. */
size_t scape_k(double d, size_t n);

/* Bytes of slack every mask buffer read with mask_load64 carries after its mask_bytes(P). */
#define MASK_PAD 16
/* Bits [j, j + 64) of a packed mask as one word, bit i = element j + i (reads 9 bytes from byte j >> 3, hence
 * MASK_PAD). Little-endian hosts only (x86-64, AArch64), which is what the word-at-a-time passes assume. */
static inline uint64_t mask_load64(const uint8_t *bits, size_t j) {
    uint64_t w;
    __builtin_memcpy(&w, bits + (j >> 3), 8);
    unsigned sh = (unsigned)(j & 7);
    if (sh) w = (w >> sh) | ((uint64_t)bits[(j >> 3) + 8] << (64 - sh));
    return w;
}
static inline int mask_get(const uint8_t *bits, size_t j) { return (bits[j >> 3] >> (j & 7)) & 1; }
static inline void mask_set(uint8_t *bits, size_t j) { bits[j >> 3] |= (uint8_t)(1u << (j & 7)); }
static inline size_t mask_bytes(size_t n) { return (n + 7) / 8; }
/* Number of set bits among elements [lo, hi). */
size_t mask_count(const uint8_t *bits, size_t lo, size_t hi);
/* ORs n bits of src (starting at its bit 0) into dst starting at bit dst_off. dst's target bits must be 0. */
void mask_or_bits(uint8_t *dst, size_t dst_off, const uint8_t *src, size_t n);
/* Sets bits [off, off + n) of bits. */
void mask_set_range(uint8_t *bits, size_t off, size_t n);

/* Top-k selection of one slice: sets bit (bit_off + j) of bits for the k largest |c[j]|, j < n, ties broken
 * toward the lower index; the target bits must be 0 on entry. Sort-free: radix select over the bit patterns of
 * |c| (for non-negative floats the unsigned order of the bits is the numeric order; NaN ranks above inf), 4
 * histogram passes of 8 bits and one marking pass, O(n). tmp is scratch of n uint32. OpenMP-parallel: the
 * histograms are integer counts and the tie fix-up takes equal keys in index order block by block, so the
 * result does not depend on the thread count; threads write disjoint bytes of bits. */
void scape_topk_mask(const float *c, size_t n, size_t k, uint8_t *bits, size_t bit_off, uint32_t *tmp);

/* Corrected local momentum of the elements [lo, hi) (SCAPE.md section 3 item 1), written over the gradient:
 *   g[j] <- beta1 * m[j] + (1 - beta1) * g[j] + r[j]        (every coordinate) */
void scape_corrected_momentum(float *g, const float *m, const float *r, size_t lo, size_t hi, float beta1);
/* Appends c[j] for the masked j in [lo, hi), in index order, to out; returns how many. */
size_t scape_gather_masked(const float *c, const uint8_t *mask, size_t lo, size_t hi, float *out);

/* The normalised step u of scape_update_on below (its first lines; shared with the variants of issue 31, which
 * change u for the coordinates entering the mask): mp = m_{t-1}, *mt = b in and m_t (clipped) out. */
static inline float scape_update_u(float mp, float *mt, float sc, int clipped, float b1, float omb1, float b2, float eps,
                                   float bc1, float sqrt_bc2) {
    float gh = (*mt - b1 * mp) / omb1;
    if (clipped) {
        gh = gh * sc;
        *mt = b1 * mp + omb1 * gh;
    }
    float nu = b2 * mp * mp + (1.0f - b2) * gh * gh;
    return (*mt / bc1) / (sqrtf(nu) / sqrt_bc2 + eps);
}

/* The masked AdamS update of one coordinate with reduced payload value mt = b = m_t (SCAPE.md section 3 items
 * 4-7; section 1's formula with g_hat in place of g); p, m: the coordinate's master weight and first moment
 * (m_{t-1} in, m_t out). sc, clipped: the clipping scale and whether it applies; omb1 = 1 - b1 (float);
 * bc1 = 1 - b1^t, sqrt_bc2 = sqrt(1 - b2^t) (computed in double, cast); wd = 0 for undecayed slices.
 *   g_hat = (mt - b1 m) / (1 - b1);  if clipped: g_hat *= sc, mt = b1 m + (1 - b1) g_hat
 *   nu = b2 m^2 + (1 - b2) g_hat^2;  m = mt;  p -= lr ((mt / bc1) / (sqrt(nu) / sqrt_bc2 + eps) + wd p)
 * The one CPU formula: optim/dist_scape.c's update pass and the GPU test (dev/cuda/scape.cu) both call it, and
 * cuda/scape.cuh's scape_update_on_dev repeats it operation for operation. Compile with -ffp-contract=off. */
static inline void scape_update_on(float *p, float *m, float mt, float sc, int clipped, float b1, float omb1, float b2,
                                   float eps, float bc1, float sqrt_bc2, float lr, float wd) {
    float u = scape_update_u(*m, &mt, sc, clipped, b1, omb1, b2, eps, bc1, sqrt_bc2);
    *m = mt;
    *p -= lr * (u + wd * *p);
}

/* ---- the GPU top-k's per-step logic, shared with the host ----
 * cuda/scape.cuh's scape_topk_mask_gpu computes the same mask as scape_topk_mask by a grid of blocks: three
 * histogram passes over digits of the 31-bit key (11, 11, 9 bits from the top), each followed by one select step,
 * then per-chunk counts of the keys equal to the threshold T, their exclusive scan, and a marking pass. The
 * functions below are that select step and marking rule, compiled for the device (SCAPE_HD) and the host, so
 * test/test_scape_topk_emul.c can run the decomposition on the CPU with the kernels' own code. */
#ifdef __CUDACC__
#define SCAPE_HD __host__ __device__
#else
#define SCAPE_HD
#endif
#define SCAPE_TOPK_BINS 2048   /* bins of the widest digit */
#define SCAPE_TOPK_GROUPS 256  /* the select step's groups of bins (one per thread of its block) */
#define SCAPE_TOPK_CHUNK 4096  /* elements per block of the tie-count and marking passes */
/* SCAPE's host step passes cut each slice into chunks of at most this many elements (optim/dist_scape.c); with
 * ZeRO-1 the per-chunk norm sums travel in the control all-reduce, so the device SCAPE (cuda/dist_scape.cuh)
 * cuts the same chunks (whole tiles of cuda/scape.cuh) */
#define SCAPE_CHUNK 16384

/* The radix key of a float's bits: |c| (for non-negative floats unsigned order is numeric; NaN above inf). */
static inline SCAPE_HD uint32_t scape_topk_key(uint32_t float_bits) { return float_bits & 0x7FFFFFFFu; }
/* Digit of pass 0, 1, 2: bits [shift, shift + width) of the key. */
static inline SCAPE_HD int scape_topk_shift(int pass) { return pass == 0 ? 20 : pass == 1 ? 9 : 0; }
static inline SCAPE_HD int scape_topk_width(int pass) { return pass == 2 ? 9 : 11; }

/* One select step. h[0..nb): histogram of the current digit over the keys that match the digits chosen so far;
 * gsum[g] = h[g*per] + ... + h[g*per + per - 1] for the ngroups = nb / per groups. *rem (>= 1): elements still to
 * take among those keys. Returns the digit b of the wanted key and leaves in *rem how many to take among the keys
 * with digit b, exactly as scape_topk_mask's loop
 *     for (b = nb - 1; b > 0; b--) { if (h[b] >= rem) break; rem -= h[b]; }
 * does: a group whose sum is below rem is passed whole (the loop passes each of its bins, each being below rem
 * too), then the loop runs inside the group it stopped at (in group 0 it stops at b = 0, as the loop does). */
static inline SCAPE_HD int scape_topk_walk(const unsigned int *h, const unsigned long long *gsum, int ngroups, int per,
                                           long long *rem) {
    long long r = *rem;
    int g = ngroups - 1;
    while (g > 0 && (long long)gsum[g] < r) {
        r -= (long long)gsum[g];
        g--;
    }
    int b = (g + 1) * per - 1;
    for (; b > 0; b--) {
        if ((long long)h[b] >= r) break;
        r -= (long long)h[b];
    }
    *rem = r;
    return b;
}
/* State of the select steps: the digits of the threshold key T chosen so far (prefix, under pmask) and how many
 * elements are still to take among the keys matching them (need); after the last pass prefix = T and all_ties
 * says whether every key equal to T is taken (then no tie count is needed). */
typedef struct {
    uint32_t prefix, pmask;
    long long need;
    int all_ties;
    int pad;
} ScapeTopkState;
/* Sum of group g of a histogram: bins [g * per, (g + 1) * per). */
static inline SCAPE_HD unsigned long long scape_topk_group_sum(const unsigned int *h, int per, int g) {
    unsigned long long s = 0;
    for (int i = 0; i < per; i++) s += h[g * per + i];
    return s;
}
/* The select step after histogram pass `pass` (0, 1, 2) of the keys matching st's prefix (pass 0: all keys, and
 * st is initialised from k, 1 <= k < n). gsum: scape_topk_group_sum of the SCAPE_TOPK_GROUPS groups. */
static inline SCAPE_HD void scape_topk_select(ScapeTopkState *st, int pass, const unsigned int *h,
                                              const unsigned long long *gsum, long long k) {
    const int nb = 1 << scape_topk_width(pass), shift = scape_topk_shift(pass);
    long long rem = pass == 0 ? k : st->need;
    const uint32_t prefix = pass == 0 ? 0u : st->prefix, pmask = pass == 0 ? 0u : st->pmask;
    const int b = scape_topk_walk(h, gsum, SCAPE_TOPK_GROUPS, nb / SCAPE_TOPK_GROUPS, &rem);
    st->prefix = prefix | ((uint32_t)b << shift);
    st->pmask = pmask | ((uint32_t)(nb - 1) << shift);
    st->need = rem;
    st->all_ties = pass == 2 && (long long)h[b] == rem;
}
/* The marking rule: an element with key above the threshold T is taken; one equal to T is taken when fewer than
 * need keys equal to T precede it in index order (tie_rank), i.e. ties go to the lower index. */
static inline SCAPE_HD int scape_topk_take(uint32_t key, uint32_t T, long long tie_rank, long long need) {
    return key > T || (key == T && tie_rank < need);
}

#ifdef __cplusplus
}
#endif

#endif

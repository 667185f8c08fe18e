/*
 * scape/scape.h - the pieces of SCAPE (SCAPE.md) that need no communication: the owner table (which rank makes
 * the mask of which slices; also the ZeRO-1 shard layout), the density schedule, packed 1-bit masks, the
 * per-slice top-k selection, and the per-bucket payload and masked AdamS update. scape/dist.c strings them
 * together with the collectives. Masks are packed LSB first: element j is bit (j & 7) of byte j >> 3.
 * Not for: communication or state ownership (scape/dist.c), dense optimizers (scape/optim.c).
 */
#ifndef SCAPE_SCAPE_H
#define SCAPE_SCAPE_H

#include <stddef.h>
#include <stdint.h>

#include "common/params.h"

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

/* Density at step t >= 1 (SCAPE.md section 5): d_start * (d / d_start)^min(1, t / W), in double; W <= 0 or
 * t >= W gives exactly d. */
double scape_density(float d, float d_start, int W, int t);
/* k_s = max(1, floor(d * n)) clamped to n (SCAPE.md section 3 item 8). A 1e-6 slack absorbs the float
 * rounding of d itself, so d = 0.7f on 10 elements gives 7. */
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

#endif

/*
 * optim/scape.c - see scape.h: owner table, density schedule, packed masks, sort-free per-slice top-k.
 * Built with -ffp-contract=off (optim/module.mk) so that no fused multiply-add changes a result: the
 * conservation test recomputes c bit for bit.
 */
#include "optim/scape.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

void owner_table_build(OwnerTable *o, const ParamTable *tab, int world) {
    if (world < 1) fatal("owner_table_build: world %d < 1", world);
    o->world = world;
    o->first = xmalloc((size_t)(world + 1) * sizeof(int), "owner table");
    o->lo = xmalloc((size_t)world * sizeof(size_t), "owner table");
    o->hi = xmalloc((size_t)world * sizeof(size_t), "owner table");
    o->first[0] = 0;
    o->first[world] = tab->n;
    int s = 0;
    for (int r = 1; r < world; r++) {
        /* boundary: the slice start closest to r * P / N, never before the previous boundary */
        double target = (double)tab->total * r / world;
        while (s < tab->n) {
            double here = (double)tab->slices[s].offset;
            double next = s + 1 < tab->n ? (double)tab->slices[s + 1].offset : (double)tab->total;
            if (fabs(next - target) < fabs(here - target) && s + 1 <= tab->n) s++;
            else break;
        }
        o->first[r] = s;
    }
    for (int r = 0; r < world; r++) {
        int a = o->first[r], b = o->first[r + 1];
        o->lo[r] = a < tab->n ? tab->slices[a].offset : tab->total;
        o->hi[r] = b < tab->n ? tab->slices[b].offset : tab->total;
        if (b <= a) o->hi[r] = o->lo[r];
    }
}

void owner_table_free(OwnerTable *o) {
    free(o->first);
    free(o->lo);
    free(o->hi);
    memset(o, 0, sizeof *o);
}

double scape_density(double d, double d_start, int W, int t) {
    if (W <= 0 || t - 1 >= W) return d;
    double f = (double)(t - 1) / (double)W;
    return d_start * pow(d / d_start, f);
}

size_t scape_k(double d, size_t n) {
    double k = floor(d * (double)n);
    if (k < 1) k = 1;
    if (k > (double)n) k = (double)n;
    return (size_t)k;
}

size_t mask_count(const uint8_t *bits, size_t lo, size_t hi) {
    size_t c = 0, j = lo;
    for (; j < hi && (j & 7); j++) c += mask_get(bits, j);
    for (; j + 8 <= hi; j += 8) c += (size_t)__builtin_popcount(bits[j >> 3]);
    for (; j < hi; j++) c += mask_get(bits, j);
    return c;
}

void mask_or_bits(uint8_t *dst, size_t dst_off, const uint8_t *src, size_t n) {
    size_t nb = n / 8, sh = dst_off & 7, q = dst_off >> 3;
    for (size_t i = 0; i < nb; i++) {
        unsigned v = src[i];
        dst[q + i] |= (uint8_t)(v << sh);
        if (sh) dst[q + i + 1] |= (uint8_t)(v >> (8 - sh));
    }
    for (size_t j = nb * 8; j < n; j++)
        if (mask_get(src, j)) mask_set(dst, dst_off + j);
}

void mask_set_range(uint8_t *bits, size_t off, size_t n) {
    size_t j = off, end = off + n;
    for (; j < end && (j & 7); j++) mask_set(bits, j);
    if (j + 8 <= end) {
        memset(bits + (j >> 3), 0xFF, (end - j) / 8);
        j += (end - j) / 8 * 8;
    }
    for (; j < end; j++) mask_set(bits, j);
}

/* Elements per block of the parallel top-k passes; blocks start where bit_off + j is a multiple of TOPK_BLOCK, so
 * no two threads write the same mask byte. */
#define TOPK_BLOCK 16384

void scape_topk_mask(const float *c, size_t n, size_t k, uint8_t *bits, size_t bit_off, uint32_t *key) {
    if (k >= n) {
        mask_set_range(bits, bit_off, n);
        return;
    }
    if (k == 0) return;
    /* Radix select from the top digit down (digits of 11, 11 and 10 bits of the 31-bit key): find the key T of
     * the k-th largest and how many of the elements equal to T must be taken (need). The first pass also
     * writes the keys. Small slices stay on one thread: a parallel region costs more than they do. */
    static const int shifts[3] = {20, 9, 0}, widths[3] = {11, 11, 9};
    uint32_t prefix = 0, pmask = 0;
    size_t need = k;
    const int par = n >= 4 * TOPK_BLOCK;
    for (int pass = 0; pass < 3; pass++) {
        const int shift = shifts[pass], nb = 1 << widths[pass];
        const uint32_t dmask = (uint32_t)nb - 1;
        size_t hist[2048] = {0};
        #pragma omp parallel if (par)
        {
            size_t h[2048];
            memset(h, 0, (size_t)nb * sizeof(size_t));
            if (pass == 0) {
                #pragma omp for schedule(static) nowait
                for (size_t j = 0; j < n; j++) {
                    uint32_t u;
                    memcpy(&u, &c[j], 4);
                    key[j] = u & 0x7FFFFFFFu; /* |c| */
                    h[key[j] >> shift]++;
                }
            } else {
                #pragma omp for schedule(static) nowait
                for (size_t j = 0; j < n; j++)
                    if ((key[j] & pmask) == prefix) h[(key[j] >> shift) & dmask]++;
            }
            #pragma omp critical
            for (int i = 0; i < nb; i++) hist[i] += h[i];
        }
        int b = nb - 1;
        for (; b > 0; b--) {
            if (hist[b] >= need) break;
            need -= hist[b];
        }
        prefix |= (uint32_t)b << shift;
        pmask |= dmask << shift;
    }
    /* everything above T, and the first `need` elements equal to T (lower index wins a tie): count the ties per
     * block, then each block takes its share of the remaining `need` in block order */
    size_t first_end = TOPK_BLOCK - (bit_off % TOPK_BLOCK);
    size_t nblk = n <= first_end ? 1 : 1 + (n - first_end + TOPK_BLOCK - 1) / TOPK_BLOCK;
    size_t *take = xmalloc(nblk * sizeof(size_t), "top-k tie counts");
    #pragma omp parallel for schedule(static) if (par)
    for (size_t bk = 0; bk < nblk; bk++) {
        size_t lo = bk ? first_end + (bk - 1) * TOPK_BLOCK : 0, hi = bk ? lo + TOPK_BLOCK : first_end;
        if (hi > n) hi = n;
        size_t e = 0;
        for (size_t j = lo; j < hi; j++) e += key[j] == prefix;
        take[bk] = e;
    }
    for (size_t bk = 0; bk < nblk; bk++) {
        size_t t = take[bk] < need ? take[bk] : need;
        take[bk] = t;
        need -= t;
    }
    #pragma omp parallel for schedule(static) if (par)
    for (size_t bk = 0; bk < nblk; bk++) {
        size_t lo = bk ? first_end + (bk - 1) * TOPK_BLOCK : 0, hi = bk ? lo + TOPK_BLOCK : first_end;
        if (hi > n) hi = n;
        size_t t = take[bk];
        for (size_t j = lo; j < hi; j++) {
            if (key[j] > prefix) mask_set(bits, bit_off + j);
            else if (key[j] == prefix && t) {
                mask_set(bits, bit_off + j);
                t--;
            }
        }
    }
    free(take);
}

void scape_corrected_momentum(float *g, const float *m, const float *r, size_t lo, size_t hi, float beta1) {
    float omb1 = 1.0f - beta1;
    #pragma omp parallel for schedule(static) if (hi - lo >= 65536)
    for (size_t j = lo; j < hi; j++) g[j] = beta1 * m[j] + omb1 * g[j] + r[j];
}

size_t scape_gather_masked(const float *c, const uint8_t *mask, size_t lo, size_t hi, float *out) {
    size_t k = 0, j = lo;
    for (; j < hi && (j & 7); j++)
        if (mask_get(mask, j)) out[k++] = c[j];
    for (; j + 8 <= hi; j += 8) {
        uint8_t b = mask[j >> 3];
        if (b == 0xFF) {
            memcpy(out + k, c + j, 8 * sizeof(float));
            k += 8;
        } else if (b) {
            for (int i = 0; i < 8; i++)
                if ((b >> i) & 1) out[k++] = c[j + i];
        }
    }
    for (; j < hi; j++)
        if (mask_get(mask, j)) out[k++] = c[j];
    return k;
}

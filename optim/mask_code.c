/*
 * optim/mask_code.c - see mask_code.h. The encoder walks the segment's set bits word by word (and those of its XOR
 * with the previous mask): to count them, to size the Rice codes for six parameters b, and to write the smallest
 * of the three codes. The decoder checks every field before it uses it. Neither allocates. Their cost inside a
 * step is what `build/bench_step` measures (scape+code against scape; docs/reproduction.md section 8).
 */
#include "optim/mask_code.h"

#include <string.h>

#include "optim/scape.h"

#define RICE_B_MAX 40 /* gaps are < n < 2^40 elements in any model this runtime trains */

/* ---- bit writer / reader, LSB first, 64 bits at a time ---- */

typedef struct {
    uint8_t *p;      /* zeroed output */
    size_t byte;     /* bytes flushed */
    uint64_t acc;    /* pending bits, LSB first */
    unsigned nacc;   /* how many (< 64 between calls) */
} BitW;
/* appends the nbits (<= 32) low bits of v */
static void bw_put(BitW *w, uint64_t v, unsigned nbits) {
    if (!nbits) return;
    w->acc |= (v & ((1ull << nbits) - 1)) << w->nacc;
    w->nacc += nbits;
    while (w->nacc >= 8) {
        w->p[w->byte++] = (uint8_t)w->acc;
        w->acc >>= 8;
        w->nacc -= 8;
    }
}
static void bw_ones(BitW *w, uint64_t q) { /* q ones then a zero */
    for (; q >= 32; q -= 32) bw_put(w, 0xFFFFFFFFull, 32);
    bw_put(w, (1ull << q) - 1, (unsigned)q + 1);
}
static size_t bw_finish(BitW *w) { /* bytes used */
    if (w->nacc) w->p[w->byte++] = (uint8_t)w->acc;
    w->acc = 0;
    w->nacc = 0;
    return w->byte;
}

typedef struct {
    const uint8_t *p;
    size_t nbytes, nbits, bit;
} BitR;
/* the next 57 bits (bit 0 = the next one); bits past the end read as 0 */
static uint64_t br_peek(const BitR *r) {
    size_t byte = r->bit >> 3;
    uint64_t w = 0;
    if (byte + 8 <= r->nbytes) memcpy(&w, r->p + byte, 8);
    else
        for (size_t i = 0; byte + i < r->nbytes; i++) w |= (uint64_t)r->p[byte + i] << (8 * i);
    return w >> (r->bit & 7);
}

/* ---- gaps ----
 * The encoder never stores the gaps (a store per set bit into fresh memory costs a page fault per 512 gaps, which
 * dominated): it walks the set bits of the segment (or of its XOR with prev) three times, to count them, to size
 * the Rice code for six parameters, and to write the chosen code. */

/* the 64 bits [j, j + 64) of seg (XOR prev's [prev_off + j, ...) when prev), those past n cleared */
static inline uint64_t seg_word(const uint8_t *seg, size_t n, const uint8_t *prev, size_t prev_off, size_t j) {
    uint64_t w = mask_load64(seg, j);
    if (prev) w ^= mask_load64(prev, prev_off + j);
    return n - j < 64 ? w & ((1ull << (n - j)) - 1) : w;
}

static size_t count_set(const uint8_t *seg, size_t n, const uint8_t *prev, size_t prev_off) {
    size_t k = 0;
    for (size_t j = 0; j < n; j += 64) k += (size_t)__builtin_popcountll(seg_word(seg, n, prev, prev_off, j));
    return k;
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 128) {
        v >>= 7;
        n++;
    }
    return n;
}

#define RICE_TRIES 6
/* The Rice parameters tried for k set bits among n: the total bits for parameter b, k (1 + b) + sum_i (g_i >> b),
 * is convex in b with its minimum within a few steps of log2 of the mean gap (for geometric gaps, Gallager and
 * van Voorhis 1975), so the RICE_TRIES values from l - 3 are sized exactly, l = the bit length of the mean gap. */
static unsigned rice_first_b(size_t k, size_t n) {
    unsigned l = 0;
    uint64_t mean = k ? (uint64_t)(n - k) / k : 0;
    while (l < RICE_B_MAX && (mean >> l) > 1) l++;
    unsigned lo = l > 3 ? l - 3 : 0;
    return lo + RICE_TRIES - 1 > RICE_B_MAX ? RICE_B_MAX - (RICE_TRIES - 1) : lo;
}

/* bytes of the Rice body (varint k, b, codes) of the k set bits for the best of the tried b; *best_b gets it */
static size_t rice_size(const uint8_t *seg, size_t n, const uint8_t *prev, size_t prev_off, size_t k, unsigned *best_b) {
    const unsigned lo = rice_first_b(k, n);
    uint64_t sum[RICE_TRIES] = {0}, last = (uint64_t)-1;
    for (size_t j = 0; j < n; j += 64)
        for (uint64_t w = seg_word(seg, n, prev, prev_off, j); w; w &= w - 1) {
            uint64_t pos = j + (uint64_t)__builtin_ctzll(w), g = pos - last - 1;
            last = pos;
            for (unsigned t = 0; t < RICE_TRIES; t++) sum[t] += g >> (lo + t);
        }
    uint64_t best = UINT64_MAX;
    *best_b = lo;
    for (unsigned t = 0; t < RICE_TRIES; t++) {
        uint64_t bits = (uint64_t)k * (1 + lo + t) + sum[t];
        if (bits < best) {
            best = bits;
            *best_b = lo + t;
        }
    }
    return varint_len(k) + 1 + (size_t)((best + 7) / 8);
}

static size_t rice_write(const uint8_t *seg, size_t n, const uint8_t *prev, size_t prev_off, size_t k, unsigned b,
                         uint8_t *out) {
    size_t o = 0;
    uint64_t v = k;
    do {
        uint8_t byte = v & 127;
        v >>= 7;
        out[o++] = (uint8_t)(byte | (v ? 128 : 0));
    } while (v);
    out[o++] = (uint8_t)b;
    BitW bw = {out + o, 0, 0, 0};
    uint64_t last = (uint64_t)-1;
    for (size_t j = 0; j < n; j += 64)
        for (uint64_t w = seg_word(seg, n, prev, prev_off, j); w; w &= w - 1) {
            uint64_t pos = j + (uint64_t)__builtin_ctzll(w), g = pos - last - 1;
            last = pos;
            bw_ones(&bw, g >> b);
            bw_put(&bw, g, b);
        }
    return o + bw_finish(&bw);
}

size_t mask_encode(const uint8_t *seg, size_t n, const uint8_t *prev, size_t prev_off, uint8_t *out, int *method) {
    const size_t raw = mask_code_bound(n);
    unsigned b1, b2 = 0;
    size_t k1 = count_set(seg, n, NULL, 0);
    size_t s1 = 1 + rice_size(seg, n, NULL, 0, k1, &b1);
    size_t s2 = SIZE_MAX, k2 = 0;
    if (prev) {
        k2 = count_set(seg, n, prev, prev_off);
        s2 = 1 + rice_size(seg, n, prev, prev_off, k2, &b2);
    }
    memset(out, 0, raw);
    int m;
    size_t len;
    if (raw <= s1 && raw <= s2) {
        m = MASK_CODE_RAW;
        out[0] = MASK_CODE_RAW;
        memcpy(out + 1, seg, (n + 7) / 8);
        if (n & 7) out[raw - 1] &= (uint8_t)((1u << (n & 7)) - 1); /* padding bits zero: the code is canonical */
        len = raw;
    } else if (s1 <= s2) {
        m = MASK_CODE_RICE;
        out[0] = MASK_CODE_RICE;
        len = 1 + rice_write(seg, n, NULL, 0, k1, b1, out + 1);
    } else {
        m = MASK_CODE_XOR;
        out[0] = MASK_CODE_XOR;
        len = 1 + rice_write(seg, n, prev, prev_off, k2, b2, out + 1);
    }
    if (method) *method = m;
    return len;
}

int mask_decode(const uint8_t *in, size_t len, size_t n, const uint8_t *prev, size_t prev_off, uint8_t *seg) {
    const size_t nb = (n + 7) / 8;
    memset(seg, 0, nb);
    if (len < 1) return -1;
    const int m = in[0];
    if (m == MASK_CODE_RAW) {
        if (len != 1 + nb) return -1;
        memcpy(seg, in + 1, nb);
        if ((n & 7) && (seg[nb - 1] >> (n & 7))) return -1; /* bits past n */
        return 0;
    }
    if (m != MASK_CODE_RICE && m != MASK_CODE_XOR) return -1;
    if (m == MASK_CODE_XOR && !prev) return -1;
    size_t o = 1;
    uint64_t k = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (o >= len || shift > 63) return -1;
        uint8_t byte = in[o++];
        if (shift == 63 && byte > 1) return -1;
        k |= (uint64_t)(byte & 127) << shift;
        if (!(byte & 128)) {
            if (byte == 0 && shift > 0) return -1; /* not the shortest varint */
            break;
        }
    }
    if (k > n || o >= len) return -1;
    unsigned b = in[o++];
    if (b > RICE_B_MAX) return -1;
    BitR r = {in + o, len - o, (len - o) * 8, 0};
    uint64_t pos = (uint64_t)-1;
    for (uint64_t i = 0; i < k; i++) {
        uint64_t q = 0;
        for (;;) { /* the unary quotient: ones up to a zero, 57 bits per look */
            uint64_t w = br_peek(&r) & ((1ull << 57) - 1);
            unsigned ones = (unsigned)__builtin_ctzll(~w); /* <= 57: bit 57 of ~w is set */
            q += ones;
            r.bit += ones;
            if (q > n || r.bit >= r.nbits) return -1; /* beyond any gap, or no terminating zero before the end */
            if (ones < 57) {
                r.bit++; /* the zero */
                break;
            }
        }
        if (r.bit + b > r.nbits) return -1;
        uint64_t g = (q << b) | (b ? br_peek(&r) & ((1ull << b) - 1) : 0);
        r.bit += b;
        if (g >= n || pos + 1 + g >= n) return -1; /* position past the segment (pos + 1 wraps to 0 at the start) */
        pos = pos + 1 + g;
        seg[pos >> 3] |= (uint8_t)(1u << (pos & 7));
    }
    /* exactly the bytes the codes need, and their padding bits zero */
    if ((r.bit + 7) / 8 != len - o) return -1;
    for (size_t t = r.bit; t < r.nbits; t++)
        if ((in[o + (t >> 3)] >> (t & 7)) & 1) return -1;
    if (m == MASK_CODE_XOR) /* seg ^= prev's bits [prev_off, prev_off + n), 64 at a time */
        for (size_t j = 0; j < n; j += 64) {
            size_t c = n - j < 64 ? n - j : 64;
            uint64_t w = mask_load64(prev, prev_off + j) & (c == 64 ? ~0ull : (1ull << c) - 1);
            for (size_t t = 0; t < (c + 7) / 8; t++) seg[(j >> 3) + t] ^= (uint8_t)(w >> (8 * t));
        }
    return 0;
}

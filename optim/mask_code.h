/*
 * optim/mask_code.h - lossless coding of one owner's segment of a SCAPE mask for the mask all-gather (SCAPE.md
 * section 6: a mask of density d carries about H(d) bits per parameter, 0.081 at d = 0.01, against the 1 bit of
 * the packed bitmask). A coded segment is one method byte and the method's body:
 *   MASK_CODE_RAW   the packed bits as they are: mask_bytes(n) bytes, bits past n zero.
 *   MASK_CODE_RICE  the set positions p_0 < p_1 < ... as gaps g_i = p_i - p_{i-1} - 1 (p_{-1} = -1), each a
 *                   Golomb-Rice code with parameter b (Golomb 1966, Rice 1979): g >> b in unary (that many 1 bits,
 *                   then a 0), then the b low bits of g. Body: the count k as a LEB128 varint, b (one byte), the
 *                   codes packed LSB first into bytes, zero bits to the end of the last byte.
 *   MASK_CODE_XOR   MASK_CODE_RICE of the segment XOR the previous step's mask on the same elements, which every
 *                   rank holds (consecutive first-moment masks overlap: Jaccard 0.6-0.7 measured here, so the
 *                   difference has fewer positions than the mask).
 * The encoder writes whichever is smallest (ties: RAW, then RICE); b is the best for the gaps at hand.
 * Masks are packed LSB first as in optim/scape.h; segments start at bit 0 of their buffer.
 * Not for: choosing the mask (scape.c), sending it (dist_scape.c through comm.h).
 */
#ifndef SCAPE_MASK_CODE_H
#define SCAPE_MASK_CODE_H

#include <stddef.h>
#include <stdint.h>

enum { MASK_CODE_RAW = 0, MASK_CODE_RICE = 1, MASK_CODE_XOR = 2 };

/* Most bytes a coded segment of n elements takes (the RAW fallback and its method byte). */
static inline size_t mask_code_bound(size_t n) { return 1 + (n + 7) / 8; }

/* Codes bits [0, n) of seg (packed, with scape.h's MASK_PAD bytes of slack after mask_bytes(n)) into out
 * (mask_code_bound(n) bytes) and returns the bytes written. prev: the previous mask, whose bits [prev_off,
 * prev_off + n) are this segment's elements (MASK_PAD slack too), or NULL when there is none (MASK_CODE_XOR is then
 * not used). *method (may be NULL) gets the method chosen. */
size_t mask_encode(const uint8_t *seg, size_t n, const uint8_t *prev, size_t prev_off, uint8_t *out, int *method);

/* Decodes `len` bytes of in into seg: bits [0, n) set exactly as encoded, the rest of its mask_bytes(n) bytes
 * zero. prev, prev_off: as given to mask_encode (needed by MASK_CODE_XOR; NULL rejects it). Returns 0, or -1 for
 * input that is not a complete, canonical code of an n-element segment (unknown method, a position past n or
 * out of order, truncated or trailing bytes, nonzero padding bits): then seg holds no meaningful bits, and
 * nothing outside its mask_bytes(n) bytes was written. */
int mask_decode(const uint8_t *in, size_t len, size_t n, const uint8_t *prev, size_t prev_off, uint8_t *seg);

#endif

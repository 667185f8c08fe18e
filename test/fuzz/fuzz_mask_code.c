/*
 * test/fuzz/fuzz_mask_code.c - SCAPE's coded mask segments (optim/mask_code.c), as a rank receives them from the
 * mask all-gather. Input: two bytes of segment length n (< 4096 elements), two of the previous mask's bit offset,
 * then the coded segment. mask_decode must refuse it (-1) or accept it; it must never read or write outside its
 * buffers (the sanitizers watch: seg is allocated at exactly mask_bytes(n)), and an accepted segment must have no
 * bit past n and must survive mask_encode + mask_decode unchanged (the oracle).
 */
#include <stdlib.h>
#include <string.h>

#include "optim/mask_code.h"
#include "optim/scape.h"
#include "test/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    size_t n = ((size_t)data[0] | (size_t)data[1] << 8) & 4095, off = ((size_t)data[2] | (size_t)data[3] << 8) & 1023;
    const uint8_t *in = data + 4;
    size_t len = size - 4;
    /* a fixed, irregular previous mask of off + n bits, with the slack mask_load64 reads */
    size_t pb = mask_bytes(off + n) + MASK_PAD;
    uint8_t *prev = calloc(pb, 1);
    for (size_t j = 0; j < off + n; j++)
        if ((j * 2654435761u >> 7) % 5 == 0) mask_set(prev, j);
    size_t nb = mask_bytes(n);
    uint8_t *seg = malloc(nb ? nb : 1);
    int use_prev = len && (in[0] & 0x80) == 0; /* inputs with a set high bit in the method byte test prev = NULL */
    if (mask_decode(in, len, n, use_prev ? prev : NULL, off, seg) == 0) {
        if ((n & 7) && (seg[nb - 1] >> (n & 7))) abort(); /* bits past n */
        uint8_t *padded = calloc(nb + MASK_PAD, 1), *code = malloc(mask_code_bound(n)), *back = malloc(nb ? nb : 1);
        memcpy(padded, seg, nb);
        size_t cl = mask_encode(padded, n, use_prev ? prev : NULL, off, code, NULL);
        if (cl > mask_code_bound(n)) abort();
        if (mask_decode(code, cl, n, use_prev ? prev : NULL, off, back) != 0 || memcmp(back, seg, nb) != 0) abort();
        free(padded);
        free(code);
        free(back);
    }
    free(seg);
    free(prev);
    return 0;
}

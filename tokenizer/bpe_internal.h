/*
 * tokenizer/bpe_internal.h - pieces of the tokenizers (tokenizer/bpe*.c) that only their own tests and the BPE
 * trainer call.
 * Not for: programs (use tokenizer/tokenizer.h).
 */
#ifndef TOKENIZER_BPE_INTERNAL_H
#define TOKENIZER_BPE_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

/* The hashes of the vocabulary, merge and piece tables (bpe.c, bpe_encode.c, bpe_train.c): bytes, and a 64-bit key. */
static inline uint64_t bpe_hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return h;
}

static inline uint64_t bpe_hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    return x;
}

/* Runs the BPE merges on one pre-tokenized piece of len bytes (no regex, no cache, no whole-piece shortcut).
 * out must hold len ids; returns the number written. use_heap: 0 = the quadratic scan used for short pieces,
 * 1 = the heap used for long ones, -1 = whichever encode would pick. */
size_t bpe_merge_piece(const Tokenizer *tok, const unsigned char *piece, size_t len, int use_heap, int32_t *out);

/* The id whose bytes are exactly piece[0..len), or -1 (the special token is never returned). */
int bpe_lookup_bytes(const Tokenizer *tok, const unsigned char *piece, size_t len);

/* Calls fn(piece, n, ctx) for every piece of text[0..len) that GPT-2's pre-tokenizer makes, in order: the regex's
 * matches, and each run of invalid UTF-8 between them as a piece of its own (as encoding splits). */
void bpe_pretokenize_gpt2(const char *text, size_t len, void (*fn)(const unsigned char *, size_t, void *), void *ctx);

/* GPT-2's bytes_to_unicode: cp_of[b] is the code point that spells byte b in encoder.json and vocab.bpe. */
void bpe_byte_to_unicode(int cp_of[256]);

#endif

/*
 * tokenizer/bpe_impl.h - the inside of a Tokenizer, shared by the files that implement tokenizer/tokenizer.h:
 *   bpe.c         the vocabulary and merge tables, the queries on them, decoding
 *   bpe_load.c    the vocabulary files into those tables (GPT-2's encoder.json + vocab.bpe, Llama's vocab.txt +
 *                 merges.txt), the tokenizer names, the vocabulary hash
 *   bpe_pretok.c  the byte-level pre-tokenizers (GPT-2's and Llama 3's regexes, PCRE2)
 *   bpe_encode.c  the merge engine and encoding (per-thread piece cache, Llama 2's SentencePiece encoding)
 * Not for: programs (tokenizer/tokenizer.h), the tests and the BPE trainer (tokenizer/bpe_internal.h).
 */
#ifndef TOKENIZER_BPE_IMPL_H
#define TOKENIZER_BPE_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/bpe_internal.h"
#include "tokenizer/tokenizer.h"

#define NO_RANK UINT32_MAX
#define LLAMA3_N_BASE 128000
#define LLAMA3_N_SPECIAL 256
#define LLAMA2_N_VOCAB 32000

typedef enum { KIND_GPT2, KIND_LLAMA2, KIND_LLAMA3 } Kind;

struct Tokenizer {
    Kind kind;
    int vocab_size;    /* V: 50257 GPT-2, 32000 Llama 2, 128256 Llama 3 */
    int eot;           /* 50256 GPT-2, 2 Llama 2 (</s>), 128001 Llama 3 (<|end_of_text|>) */
    int bos;           /* 50256 GPT-2 (its EOT starts documents), 1 Llama 2 (<s>), 128000 Llama 3 */
    int special_first; /* ids special_first..special_last are the special tokens text may spell when allowed */
    int special_last;  /* (GPT-2: EOT only; Llama 3: all 256; Llama 2: none, special_first > special_last) */
    int space_id;      /* Llama 2: the U+2581 piece */
    const char *name;  /* tokenizer_kind(): "gpt2", "bpe4k" (a GPT-2-style vocabulary of this project's), ... */
    char *bytes;    /* all tokens' bytes, concatenated */
    uint32_t *off;  /* (V+1) token i is bytes[off[i] .. off[i+1]) */
    /* bytes -> id, open addressing; slot holds id+1, 0 = empty */
    uint32_t *vocab_slots;
    size_t vocab_mask;
    /* (left id, right id) -> (rank, merged id), open addressing; key UINT64_MAX = empty */
    uint64_t *merge_key;
    uint32_t *merge_rank, *merge_id;
    size_t merge_mask;
    int byte_id[256]; /* id of each single byte (Llama 2: its <0xNN> byte-fallback token) */
    pcre2_code *re;   /* the pre-tokenizer; NULL for Llama 2 */
    pthread_key_t state_key; /* the per-thread encoding state (bpe_encode.c) */
};

/* ---- the tables (bpe.c) ---- */

/* The power of two at least 2n: the slot count of an open-addressing table for n entries. */
size_t bpe_table_size_for(size_t n);
/* Enters token id (its bytes already in t->bytes/off) into the bytes -> id table. */
void bpe_vocab_insert(Tokenizer *t, int id);
/* Allocates an empty merge table for n merges. */
void bpe_merge_table_alloc(Tokenizer *t, size_t n);
/* Records that (a, b) merges into m with this rank; a repeated pair keeps its first (lowest) rank. */
void bpe_merge_insert(Tokenizer *t, int a, int b, int m, uint32_t rank);

static inline uint64_t bpe_pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

/* Rank of merging (a, b), NO_RANK if they never merge; *merged gets the result's id. Inline: the merge engine's
 * inner loop. */
static inline uint32_t bpe_merge_lookup(const Tokenizer *t, int32_t a, int32_t b, int32_t *merged) {
    uint64_t k = bpe_pair_key(a, b);
    for (size_t i = bpe_hash_u64(k) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merge_key[i] == k) {
            *merged = (int32_t)t->merge_id[i];
            return t->merge_rank[i];
        }
        if (t->merge_key[i] == UINT64_MAX) return NO_RANK;
    }
}

/* ---- the pre-tokenizer (bpe_pretok.c) ---- */

/* The compiled pre-tokenizer of a kind (GPT-2's or Llama 3's regex, JIT); NULL for Llama 2, which has none.
 * fatal() if PCRE2 cannot compile it (a libpcre2-8 older than 10.34). */
pcre2_code *bpe_pretokenizer_compile(Kind kind);
/* The next pre-tokenizer piece of text[0..len) from pos: *start..*end is the regex's match, and pos..*start
 * (when not empty) a run of invalid UTF-8 that no pattern item matches, a piece of its own. *end == len and
 * *start == len when nothing matches any more. fatal() on a PCRE2 error other than no match. */
void bpe_next_piece(const pcre2_code *re, pcre2_match_data *md, const unsigned char *text, size_t len, size_t pos,
                    size_t *start, size_t *end);

/* ---- encoding (bpe_encode.c) ---- */

/* The last step of every load: compiles t->kind's pre-tokenizer and creates the per-thread state key. */
void bpe_encoder_init(Tokenizer *t);
/* Frees what bpe_encoder_init made and this thread's encoding state (tokenizer_free). */
void bpe_encoder_free(Tokenizer *t);

#endif

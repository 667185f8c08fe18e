/*
 * tokenizer/bpe.c - the three tokenizers behind tokenizer/tokenizer.h share one vocabulary table (token bytes, and
 * bytes -> id), one merge table ((left id, right id) -> rank and result) and one merge engine (rank-ordered BPE over
 * token ids):
 *   gpt2   GPT-2's byte-level BPE (r50k_base): encoder.json and vocab.bpe, GPT-2's regex (PCRE2, JIT).
 *   llama3 Llama 3's byte-level BPE (tiktoken cl100k-style): the same machinery with Llama 3's regex, 128000
 *          merge-built tokens plus 256 special tokens (128000..128255).
 *   llama2 Llama 2's SentencePiece BPE (32000 pieces): no pre-tokenizer; the text, with ' ' written U+2581 and
 *          one U+2581 prefixed, starts as one symbol per character (byte-fallback <0xNN> tokens for characters
 *          not in the vocabulary) and merges by priority over the whole text, as llama-tokenizer-js and
 *          Hugging Face's tokenizer.json do (their merge list is SentencePiece's piece scores in order).
 * This file holds the two tables (tokenizer/bpe_impl.h lays them out), what reads them back (token bytes and
 * spelling, the merge list for exporters) and decoding. The other parts: bpe_load.c (the vocabulary files),
 * bpe_pretok.c (the regex pre-tokenizers), bpe_encode.c (the merge engine and encoding), bpe_train.c (learning a
 * vocabulary).
 *
 * Byte-level BPE (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", sec. 2.2; the
 * reference is openai/gpt-2 src/encoder.py): text is split into pieces by a regex, each piece's bytes start as
 * one symbol each, and the adjacent pair with the lowest merge rank is merged until no ranked pair is left.
 *
 * Not for: reading the vocabulary files (bpe_load.c), encoding (bpe_encode.c), shard files (tok_shards.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tokenizer/bpe_impl.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* hash tables (the hashes are in bpe_internal.h) */

size_t bpe_table_size_for(size_t n) {
    size_t s = 1;
    while (s < 2 * n) s <<= 1;
    return s;
}

void bpe_vocab_insert(Tokenizer *t, int id) {
    const unsigned char *p = (const unsigned char *)t->bytes + t->off[id];
    size_t n = t->off[id + 1] - t->off[id];
    size_t i = bpe_hash_bytes(p, n) & t->vocab_mask;
    while (t->vocab_slots[i]) i = (i + 1) & t->vocab_mask;
    t->vocab_slots[i] = (uint32_t)id + 1;
}

int bpe_lookup_bytes(const Tokenizer *t, const unsigned char *p, size_t n) {
    size_t i = bpe_hash_bytes(p, n) & t->vocab_mask;
    for (uint32_t s; (s = t->vocab_slots[i]); i = (i + 1) & t->vocab_mask) {
        int id = (int)s - 1;
        if (t->off[id + 1] - t->off[id] == n && memcmp(t->bytes + t->off[id], p, n) == 0) return id;
    }
    return -1;
}

void bpe_merge_table_alloc(Tokenizer *t, size_t n) {
    t->merge_mask = bpe_table_size_for(n + 1) - 1;
    t->merge_key = xmalloc((t->merge_mask + 1) * sizeof(uint64_t), "merge table");
    t->merge_rank = xmalloc((t->merge_mask + 1) * sizeof(uint32_t), "merge table");
    t->merge_id = xmalloc((t->merge_mask + 1) * sizeof(uint32_t), "merge table");
    memset(t->merge_key, 0xFF, (t->merge_mask + 1) * sizeof(uint64_t));
}

void bpe_merge_insert(Tokenizer *t, int a, int b, int m, uint32_t rank) {
    uint64_t k = bpe_pair_key(a, b);
    size_t i = bpe_hash_u64(k) & t->merge_mask;
    while (t->merge_key[i] != UINT64_MAX && t->merge_key[i] != k) i = (i + 1) & t->merge_mask;
    if (t->merge_key[i] == UINT64_MAX) {
        t->merge_key[i] = k;
        t->merge_rank[i] = rank;
        t->merge_id[i] = (uint32_t)m;
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* what reads the tables */

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    bpe_encoder_free(t);
    free(t->bytes);
    free(t->off);
    free(t->vocab_slots);
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_id);
    free(t);
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->vocab_size; }

/* one merge of the table, for tokenizer_merges' sort by rank */
typedef struct {
    uint32_t rank;
    int32_t left, right, result;
} MergeEntry;
static int merge_entry_cmp(const void *a, const void *b) {
    uint32_t ra = ((const MergeEntry *)a)->rank, rb = ((const MergeEntry *)b)->rank;
    return ra < rb ? -1 : ra > rb;
}

size_t tokenizer_merges(const Tokenizer *t, int32_t **merges) {
    size_t n = 0;
    for (size_t i = 0; i <= t->merge_mask; i++) n += t->merge_key[i] != UINT64_MAX;
    MergeEntry *e = xmalloc((n ? n : 1) * sizeof *e, "merge list");
    size_t k = 0;
    for (size_t i = 0; i <= t->merge_mask; i++) {
        if (t->merge_key[i] == UINT64_MAX) continue;
        e[k].rank = t->merge_rank[i];
        e[k].left = (int32_t)(t->merge_key[i] >> 32);
        e[k].right = (int32_t)(t->merge_key[i] & 0xFFFFFFFFu);
        e[k].result = (int32_t)t->merge_id[i];
        k++;
    }
    qsort(e, n, sizeof *e, merge_entry_cmp);
    int32_t *out = xmalloc((n ? n : 1) * 3 * sizeof(int32_t), "merge list");
    for (size_t i = 0; i < n; i++) {
        out[3 * i] = e[i].left;
        out[3 * i + 1] = e[i].right;
        out[3 * i + 2] = e[i].result;
    }
    free(e);
    *merges = out;
    return n;
}

int tokenizer_eot(const Tokenizer *t) { return t->eot; }
int tokenizer_bos(const Tokenizer *t) { return t->bos; }
const char *tokenizer_kind(const Tokenizer *t) { return t->name; }

const char *tokenizer_token_bytes(const Tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->vocab_size) { *len = 0; return NULL; }
    *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

size_t tokenizer_token_spelling(const Tokenizer *t, int id, char *out) {
    size_t n;
    const unsigned char *b = (const unsigned char *)tokenizer_token_bytes(t, id, &n);
    if (!b) return 0;
    size_t o = 0;
    if (t->kind == KIND_LLAMA2) {
        if (id >= 3 && id < 3 + 256) return (size_t)snprintf(out, 8, "<0x%02X>", id - 3); /* byte fallback */
        for (size_t i = 0; i < n; i++) {
            if (id >= 3 && b[i] == ' ') { memcpy(out + o, "\xE2\x96\x81", 3); o += 3; } /* U+2581 */
            else out[o++] = (char)b[i];
        }
        return o;
    }
    if (id >= t->special_first && id <= t->special_last) { /* special tokens: their text */
        memcpy(out, b, n);
        return n;
    }
    int cp_of[256];
    bpe_byte_to_unicode(cp_of);
    for (size_t i = 0; i < n; i++) { /* code points < 324 take 1 or 2 UTF-8 bytes */
        int cp = cp_of[b[i]];
        if (cp < 0x80) out[o++] = (char)cp;
        else {
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return o;
}

char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    /* Llama 2, as llama-tokenizer-js decodes: a leading BOS is dropped, and so is the first byte if it is the
     * space the encoder prefixed */
    int spm = t->kind == KIND_LLAMA2;
    if (spm && n && ids[0] == t->bos) { ids++; n--; }
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->vocab_size) total += t->off[ids[i] + 1] - t->off[ids[i]];
    char *out = xmalloc(total + 1, "decoded text");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size) continue;
        size_t bl = t->off[ids[i] + 1] - t->off[ids[i]];
        memcpy(out + o, t->bytes + t->off[ids[i]], bl);
        o += bl;
    }
    if (spm && o && out[0] == ' ') memmove(out, out + 1, o--);
    out[o] = 0;
    *len = o;
    return out;
}

/*
 * tokenizer/bpe_encode.c - encoding: text to token ids with the tables of bpe.c. Byte-level BPE (GPT-2, bpe4k, a
 * learned vocabulary, Llama 3) cuts the text into pieces (bpe_pretok.c) and merges each piece on its own, through a
 * per-thread cache of short pieces; Llama 2 (SentencePiece BPE) merges the whole text as one sequence. The merge
 * engine: the lowest-ranked adjacent pair first, by a scan for short pieces and a heap for long ones.
 * Llama 2 and invalid UTF-8: each invalid byte becomes its byte-fallback token.
 * Not for: the regexes (bpe_pretok.c), loading (bpe_load.c), decoding (bpe.c), learning merges (bpe_train.c).
 */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tokenizer/bpe_impl.h"

#define HEAP_MIN_LEN 64 /* pieces this long or longer merge with a heap (O(n log n)), shorter ones by scanning */

/* Per-thread state: PCRE2 match data cannot be shared between threads, and the piece cache is per thread so
 * concurrent encodes need no locks. Direct-mapped; a piece is cached if it fits CACHE_KEY_MAX bytes and
 * CACHE_IDS_MAX ids. */
#define CACHE_SLOTS 8192
#define CACHE_KEY_MAX 24
#define CACHE_IDS_MAX 10
typedef struct {
    uint64_t hash;
    uint8_t len, n_ids; /* len 0 = empty slot */
    unsigned char key[CACHE_KEY_MAX];
    int32_t ids[CACHE_IDS_MAX];
} CacheSlot;

typedef struct {
    pcre2_match_data *md;
    CacheSlot *cache; /* (CACHE_SLOTS) */
} ThreadState;

static void free_thread_state(void *p) {
    ThreadState *s = p;
    if (!s) return;
    pcre2_match_data_free(s->md);
    free(s->cache);
    free(s);
}

void bpe_encoder_init(Tokenizer *t) {
    t->re = bpe_pretokenizer_compile(t->kind);
    if (pthread_key_create(&t->state_key, free_thread_state) != 0) fatal("pthread_key_create failed");
}

void bpe_encoder_free(Tokenizer *t) {
    /* other threads' states were freed when they exited; this thread's is freed here */
    free_thread_state(pthread_getspecific(t->state_key));
    pthread_key_delete(t->state_key);
    pcre2_code_free(t->re);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* merging one piece */

/* Short pieces: scan for the lowest-ranked pair, merge it, repeat. Ties go to the leftmost pair, which gives
 * the same result as encoder.py merging every occurrence of the best pair in one left-to-right sweep. */
static size_t merge_scan(const Tokenizer *t, const unsigned char *p, size_t n, int32_t *sym) {
    uint32_t rank[HEAP_MIN_LEN];      /* rank[i]: of the pair (sym[i], sym[i+1]) */
    int32_t merged[HEAP_MIN_LEN];
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[p[i]];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = bpe_merge_lookup(t, sym[i], sym[i + 1], &merged[i]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == NO_RANK) break;
        sym[best] = merged[best];
        memmove(sym + best + 1, sym + best + 2, (n - best - 2) * sizeof(int32_t));
        memmove(rank + best + 1, rank + best + 2, (n - best - 2) * sizeof(uint32_t));
        memmove(merged + best + 1, merged + best + 2, (n - best - 2) * sizeof(int32_t));
        n--;
        if (best > 0) rank[best - 1] = bpe_merge_lookup(t, sym[best - 1], sym[best], &merged[best - 1]);
        if (best + 1 < n) rank[best] = bpe_merge_lookup(t, sym[best], sym[best + 1], &merged[best]);
    }
    return n;
}

/* Long pieces (e.g. a run of thousands of digits or spaces): a binary min-heap of (rank, position) entries
 * over a linked list of symbols. Entries go stale when a neighbour merges; a popped entry is used only if the
 * pair now at its position still has its rank (ranks are unique per pair, so that identifies the pair). */
static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Merges the n symbols sym[] (initial token ids; overwritten) into out (may be sym); returns the count. */
static size_t merge_heap_ids(const Tokenizer *t, int32_t *sym, size_t n, int32_t *out) {
    if (n == 0) return 0;
    int64_t *next = xmalloc(n * sizeof(int64_t), "bpe links"), *prev = xmalloc(n * sizeof(int64_t), "bpe links");
    uint64_t *heap = xmalloc(3 * n * sizeof(uint64_t), "bpe heap"); /* n initial + at most 2 per merge */
    size_t hn = 0;
    int32_t m;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int64_t)i + 1 : -1;
        prev[i] = (int64_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = bpe_merge_lookup(t, sym[i], sym[i + 1], &m);
        if (r != NO_RANK) heap_push(heap, &hn, ((uint64_t)r << 32) | i);
    }
    while (hn) {
        uint64_t e = heap_pop(heap, &hn);
        uint32_t r = (uint32_t)(e >> 32);
        size_t i = (size_t)(e & 0xFFFFFFFFu);
        if (sym[i] < 0 || next[i] < 0) continue; /* merged away, or now last */
        if (bpe_merge_lookup(t, sym[i], sym[next[i]], &m) != r) continue;
        int64_t j = next[i];
        sym[i] = m;
        sym[j] = -1;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = (int64_t)i;
        if (prev[i] >= 0 && (r = bpe_merge_lookup(t, sym[prev[i]], sym[i], &m)) != NO_RANK)
            heap_push(heap, &hn, ((uint64_t)r << 32) | (uint64_t)prev[i]);
        if (next[i] >= 0 && (r = bpe_merge_lookup(t, sym[i], sym[next[i]], &m)) != NO_RANK)
            heap_push(heap, &hn, ((uint64_t)r << 32) | i);
    }
    size_t k = 0; /* k <= i throughout, so out may alias sym */
    for (int64_t i = 0; i >= 0; i = next[i]) out[k++] = sym[i];
    free(next);
    free(prev);
    free(heap);
    return k;
}

static size_t merge_heap(const Tokenizer *t, const unsigned char *p, size_t n, int32_t *out) {
    int32_t *sym = xmalloc(n * sizeof(int32_t), "bpe symbols");
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[p[i]];
    size_t k = merge_heap_ids(t, sym, n, out);
    free(sym);
    return k;
}

size_t bpe_merge_piece(const Tokenizer *t, const unsigned char *p, size_t n, int use_heap, int32_t *out) {
    if (n == 0) return 0;
    if (use_heap < 0) use_heap = n >= HEAP_MIN_LEN;
    if (use_heap) return merge_heap(t, p, n, out);
    if (n > HEAP_MIN_LEN) fatal("bpe_merge_piece: the scan handles pieces below %d bytes", HEAP_MIN_LEN);
    return merge_scan(t, p, n, out);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* encoding */

static ThreadState *thread_state(const Tokenizer *t) {
    ThreadState *s = pthread_getspecific(t->state_key);
    if (s) return s;
    s = xmalloc(sizeof(ThreadState), "tokenizer thread state");
    s->md = pcre2_match_data_create(1, NULL);
    if (!s->md) fatal("out of memory creating PCRE2 match data");
    s->cache = xcalloc(CACHE_SLOTS, sizeof(CacheSlot), "tokenizer cache");
    pthread_setspecific(t->state_key, s);
    return s;
}

/* Encodes one piece into out (room for n ids); returns the id count. */
static size_t encode_piece(const Tokenizer *t, ThreadState *s, const unsigned char *p, size_t n, int32_t *out) {
    if (n == 1) { out[0] = t->byte_id[p[0]]; return 1; }
    CacheSlot *slot = NULL;
    uint64_t h = 0;
    if (n <= CACHE_KEY_MAX) {
        h = bpe_hash_bytes(p, n);
        slot = &s->cache[h & (CACHE_SLOTS - 1)];
        if (slot->len == n && slot->hash == h && memcmp(slot->key, p, n) == 0) {
            memcpy(out, slot->ids, slot->n_ids * sizeof(int32_t));
            return slot->n_ids;
        }
    }
    size_t k;
    /* A piece that is a whole token is that token: BPE could only rebuild it (checked for every GPT-2 token in
     * test/test_tokenizer.c); tiktoken takes the same shortcut. */
    int whole = bpe_lookup_bytes(t, p, n);
    if (whole >= 0) { out[0] = whole; k = 1; }
    else k = bpe_merge_piece(t, p, n, -1, out);
    if (slot && k <= CACHE_IDS_MAX) {
        slot->hash = h;
        slot->len = (uint8_t)n;
        slot->n_ids = (uint8_t)k;
        memcpy(slot->key, p, n);
        memcpy(slot->ids, out, k * sizeof(int32_t));
    }
    return k;
}

static void reserve(int32_t **ids, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    int32_t *p = realloc(*ids, c * sizeof(int32_t));
    if (!p) fatal("out of memory growing the token buffer to %zu ids", c);
    *ids = p;
    *cap = c;
}

/* Pre-tokenizes and merges text[0..len) (no special tokens), appending at (*ids)[at]; returns the new count. */
static size_t encode_ordinary(const Tokenizer *t, ThreadState *s, const unsigned char *text, size_t len,
                              int32_t **ids, size_t *cap, size_t at) {
    reserve(ids, cap, at + len); /* a piece never yields more ids than bytes */
    for (size_t pos = 0, start, end; pos < len; pos = end) {
        bpe_next_piece(t->re, s->md, text, len, pos, &start, &end);
        if (start > pos) at += encode_piece(t, s, text + pos, start - pos, *ids + at); /* invalid UTF-8 */
        if (end > start) at += encode_piece(t, s, text + start, end - start, *ids + at);
    }
    return at;
}

/* Length of the valid UTF-8 sequence at p[0..n) (1..4), or 0 if p[0] does not start one (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < k || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return k;
}

/* Llama 2 (SentencePiece BPE, as llama-tokenizer-js encodes): one U+2581 piece, then per character its
 * single-character piece (' ' and U+2581 itself both being the U+2581 piece) or its bytes' <0xNN> tokens (every
 * byte of invalid UTF-8 likewise); then merges by priority over the whole sequence. Appends at (*ids)[at]. */
static size_t encode_spm(const Tokenizer *t, const unsigned char *p, size_t len, int32_t **ids, size_t *cap,
                         size_t at) {
    if (len == 0) return at; /* the package returns nothing, not even the prefixed space, for "" */
    int32_t *sym = xmalloc((len + 1) * sizeof(int32_t), "bpe symbols");
    size_t n = 0;
    sym[n++] = t->space_id;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_len(p + i, len - i);
        int id = -1;
        if (k == 1 && p[i] == ' ') id = t->space_id;
        else if (k == 3 && !memcmp(p + i, "\xE2\x96\x81", 3)) id = t->space_id;
        else if (k) id = bpe_lookup_bytes(t, p + i, k);
        if (id >= 0) sym[n++] = id;
        else
            for (size_t j = 0; j < (k ? k : 1); j++) sym[n++] = t->byte_id[p[i + j]];
        i += k ? k : 1;
    }
    n = merge_heap_ids(t, sym, n, sym);
    reserve(ids, cap, at + n);
    memcpy(*ids + at, sym, n * sizeof(int32_t));
    free(sym);
    return at + n;
}

/* The special token whose text starts at p[0..len), or -1. All specials look like "<|...|>". */
static int special_at(const Tokenizer *t, const unsigned char *p, size_t len) {
    for (int id = t->special_first; id <= t->special_last; id++) {
        size_t n = t->off[id + 1] - t->off[id];
        if (n <= len && !memcmp(p, t->bytes + t->off[id], n)) return id;
    }
    return -1;
}

size_t tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int allow_special, int32_t **ids,
                        size_t *cap) {
    const unsigned char *p = (const unsigned char *)text;
    if (t->kind == KIND_LLAMA2) return encode_spm(t, p, len, ids, cap, 0);
    ThreadState *s = thread_state(t);
    size_t at = 0;
    if (allow_special) {
        /* tiktoken's rule: each special token's text becomes its id, the text between is encoded on its own */
        for (const unsigned char *from = p;;) {
            const unsigned char *hit = memmem(from, len - (size_t)(from - p), "<|", 2);
            if (!hit) break;
            int id = special_at(t, hit, len - (size_t)(hit - p));
            if (id < 0) { from = hit + 1; continue; }
            size_t sl = t->off[id + 1] - t->off[id];
            at = encode_ordinary(t, s, p, (size_t)(hit - p), ids, cap, at);
            reserve(ids, cap, at + 1);
            (*ids)[at++] = id;
            len -= (size_t)(hit - p) + sl;
            p = from = hit + sl;
        }
    }
    return encode_ordinary(t, s, p, len, ids, cap, at);
}

/*
 * tokenizer/bpe.c - the three tokenizers behind tokenizer/tokenizer.h, sharing one vocabulary table, one merge
 * table and one merge engine (rank-ordered BPE over token ids):
 *   gpt2   GPT-2's byte-level BPE (r50k_base): encoder.json and vocab.bpe, GPT-2's regex (PCRE2, JIT).
 *   llama3 Llama 3's byte-level BPE (tiktoken cl100k-style): the same machinery with Llama 3's regex, 128000
 *          merge-built tokens plus 256 special tokens (128000..128255).
 *   llama2 Llama 2's SentencePiece BPE (32000 pieces): no pre-tokenizer; the text, with ' ' written U+2581 and
 *          one U+2581 prefixed, starts as one symbol per character (byte-fallback <0xNN> tokens for characters
 *          not in the vocabulary) and merges by priority over the whole text, as llama-tokenizer-js and
 *          Hugging Face's tokenizer.json do (their merge list is SentencePiece's piece scores in order).
 * Llama vocabularies come from data/llama{2,3}/vocab.txt and merges.txt (tokenizer/extract_llama.mjs).
 *
 * Byte-level BPE (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", sec. 2.2; the
 * reference is openai/gpt-2 src/encoder.py): text is split into pieces by a regex, each piece's bytes start as
 * one symbol each, and the adjacent pair with the lowest merge rank is merged until no ranked pair is left.
 * encoder.json spells each token's bytes in a printable alphabet (bytes_to_unicode), undone here at load.
 *
 * Invalid UTF-8: OpenAI's encoders take Unicode strings, so they define nothing for it. Here PCRE2 runs with
 * PCRE2_MATCH_INVALID_UTF, under which an invalid sequence matches no pattern item: each valid stretch is
 * pre-tokenized exactly as it would be alone (the stretch's end acts as end of text), and each run of bytes
 * between stretches becomes one piece of its own, merged like any other. Every byte lands in exactly one
 * piece, so decode(encode(x)) == x for all x.
 *
 * Llama 2 and invalid UTF-8: each invalid byte becomes its byte-fallback token.
 *
 * Not for: shard files (tok.c writes them).
 */
#define _GNU_SOURCE /* memmem */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define XXH_INLINE_ALL /* header-only: every program linking bpe.c (fuzz harnesses too) needs no -lxxhash */
#include <xxhash.h>

#include "common/util.h"
#include "tokenizer/bpe_internal.h"
#include "tokenizer/tokenizer.h"

#define NO_RANK UINT32_MAX
#define HEAP_MIN_LEN 64 /* pieces this long or longer merge with a heap (O(n log n)), shorter ones by scanning */

/* GPT-2's pre-tokenizer: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * \s is spelled out as Unicode's White_Space property, which is what tiktoken's Rust regex uses. Engines' own \s
 * disagree on a few characters (U+0085, U+180E, U+FEFF, U+001C..U+001F; JavaScript's, Python's and PCRE2's
 * differ), so spelling it out makes the result independent of the PCRE2 build; scripts/bench_tokenizer.sh
 * checks those characters against tiktoken. \p{L} and \p{N} come from PCRE2's Unicode tables. */
#define WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

static const char EOT_TEXT[] = "<|endoftext|>";

/* Llama 3's pre-tokenizer, as in Meta's tiktoken setup and the tokenizer.json that llama3-tokenizer-js bakes in:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|
 * \s+(?!\S)|\s+   with \s spelled out as for GPT-2. (?i) is PCRE2's Unicode caseless matching, as in tiktoken's
 * Rust regex (so 's also matches U+017F); the JS package rewrites it as [sS]... (ASCII only). */
static const char LLAMA3_PATTERN[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|"
    "[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
#define LLAMA3_N_BASE 128000
#define LLAMA3_N_SPECIAL 256
#define LLAMA2_N_VOCAB 32000

typedef enum { KIND_GPT2, KIND_LLAMA2, KIND_LLAMA3 } Kind;

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
    pthread_key_t state_key;
};

/* ---------------------------------------------------------------------------------------------------------- */
/* hash tables (the hashes are in bpe_internal.h) */

static size_t table_size_for(size_t n) {
    size_t s = 1;
    while (s < 2 * n) s <<= 1;
    return s;
}

static void vocab_insert(Tokenizer *t, int id) {
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

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

/* Rank of merging (a, b), NO_RANK if they never merge; *merged gets the result's id. */
static inline uint32_t merge_lookup(const Tokenizer *t, int32_t a, int32_t b, int32_t *merged) {
    uint64_t k = pair_key(a, b);
    for (size_t i = bpe_hash_u64(k) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merge_key[i] == k) {
            *merged = (int32_t)t->merge_id[i];
            return t->merge_rank[i];
        }
        if (t->merge_key[i] == UINT64_MAX) return NO_RANK;
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* loading */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 to U+0100.. in byte order.
 * Fills byte_of[code point] (code points < 324) with the byte, -1 elsewhere. */
static void unicode_to_byte_table(int byte_of[324]) {
    for (int i = 0; i < 324; i++) byte_of[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_of[printable ? b : 256 + n++] = b;
    }
}

void bpe_byte_to_unicode(int cp_of[256]) {
    int byte_of[324];
    unicode_to_byte_table(byte_of);
    for (int cp = 0; cp < 324; cp++)
        if (byte_of[cp] >= 0) cp_of[byte_of[cp]] = cp;
}

/* Reads a whole file, NUL-terminated; fatal() naming the file and `make data` if it cannot. */
static char *read_file(const char *path, size_t *len) {
    if (!file_exists(path))
        fatal("tokenizer file %s not found; run `make data` (or scripts/fetch_data.sh) to fetch it", path);
    FILE *f = xfopen(path, "rb", "run `make data` to fetch the tokenizer files");
    char *buf = read_stream(f, len);
    int err = errno;
    fclose(f);
    if (!buf) fatal("cannot read %s: %s; run `make data` to fetch it again", path, strerror(err));
    return buf;
}

/* Appends code point cp as UTF-8 to out; returns bytes written. */
static int put_utf8(unsigned char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { out[0] = 0xC0 | (cp >> 6); out[1] = 0x80 | (cp & 63); return 2; }
    if (cp < 0x10000) {
        out[0] = 0xE0 | (cp >> 12); out[1] = 0x80 | ((cp >> 6) & 63); out[2] = 0x80 | (cp & 63);
        return 3;
    }
    out[0] = 0xF0 | (cp >> 18); out[1] = 0x80 | ((cp >> 12) & 63); out[2] = 0x80 | ((cp >> 6) & 63);
    out[3] = 0x80 | (cp & 63);
    return 4;
}

/* Decodes one UTF-8 code point at *p (known valid: produced by put_utf8 or checked by the caller). */
static uint32_t get_utf8(const unsigned char **p) {
    const unsigned char *s = *p;
    uint32_t cp;
    int n;
    if (s[0] < 0x80) { cp = s[0]; n = 1; }
    else if (s[0] < 0xE0) { cp = s[0] & 31; n = 2; }
    else if (s[0] < 0xF0) { cp = s[0] & 15; n = 3; }
    else { cp = s[0] & 7; n = 4; }
    for (int i = 1; i < n; i++) cp = (cp << 6) | (s[i] & 63);
    *p = s + n;
    return cp;
}

typedef struct {
    const char *path, *s;
    size_t pos, len;
} JsonIn;

static void json_fail(const JsonIn *in, const char *what) {
    fatal("%s: malformed JSON at byte %zu (%s); delete it and run `make data` to fetch it again", in->path,
          in->pos, what);
}

static void json_ws(JsonIn *in) {
    while (in->pos < in->len && (in->s[in->pos] == ' ' || in->s[in->pos] == '\t' || in->s[in->pos] == '\r' ||
                                  in->s[in->pos] == '\n'))
        in->pos++;
}

static unsigned json_hex4(JsonIn *in) {
    if (in->pos + 4 > in->len) json_fail(in, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = in->s[in->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else json_fail(in, "bad hex digit in \\u escape");
    }
    return v;
}

/* Parses a JSON string at in->pos into UTF-8 in out (at most as long as the JSON text); returns its length.
 * \uXXXX escapes, including surrogate pairs, become UTF-8. */
static size_t json_string(JsonIn *in, unsigned char *out) {
    json_ws(in);
    if (in->pos >= in->len || in->s[in->pos] != '"') json_fail(in, "expected a string");
    in->pos++;
    size_t n = 0;
    for (;;) {
        if (in->pos >= in->len) json_fail(in, "unterminated string");
        unsigned char c = (unsigned char)in->s[in->pos++];
        if (c == '"') return n;
        if (c < 0x20) json_fail(in, "control character in string");
        if (c != '\\') { out[n++] = c; continue; }
        if (in->pos >= in->len) json_fail(in, "unterminated escape");
        char e = in->s[in->pos++];
        switch (e) {
        case '"': case '\\': case '/': out[n++] = (unsigned char)e; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            uint32_t cp = json_hex4(in);
            if (cp >= 0xD800 && cp < 0xDC00) { /* high surrogate: a low one must follow */
                if (in->pos + 2 > in->len || in->s[in->pos] != '\\' || in->s[in->pos + 1] != 'u')
                    json_fail(in, "high surrogate without a low surrogate");
                in->pos += 2;
                uint32_t lo = json_hex4(in);
                if (lo < 0xDC00 || lo >= 0xE000) json_fail(in, "high surrogate without a low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                json_fail(in, "lone low surrogate");
            }
            n += put_utf8(out + n, cp); /* at most 4 bytes for 6 or 12 bytes of escape */
            break;
        }
        default: json_fail(in, "unknown escape");
        }
    }
}

/* Converts a token spelled in GPT-2's byte alphabet (UTF-8 in s[0..n)) to its raw bytes in place; returns the
 * byte count, or -1 if a character is outside the alphabet. */
static long alphabet_to_bytes(unsigned char *s, size_t n, const int byte_of[324]) {
    const unsigned char *p = s, *end = s + n;
    size_t m = 0;
    while (p < end) {
        uint32_t cp = get_utf8(&p);
        if (cp >= 324 || byte_of[cp] < 0) return -1;
        s[m++] = (unsigned char)byte_of[cp];
    }
    return (long)m;
}

static void load_encoder_json(Tokenizer *t, const char *path, const int byte_of[324]) {
    size_t len;
    char *text = read_file(path, &len);
    JsonIn in = {path, text, 0, len};
    /* first pass collects (id, bytes) in file order; ids must come out dense 0..V-1 */
    /* every entry takes at least 5 bytes of the file ("":0,), so len / 4 + 16 entries never need to grow; sized
     * by the file, a short rejected file costs little (the fuzzers leak what fatal() abandons, test/fuzz/README.md) */
    size_t cap = len / 4 + 16, n = 0, bytes_used = 0;
    int32_t *ids = xmalloc(cap * sizeof(int32_t), "encoder ids");
    uint32_t *starts = xmalloc(cap * sizeof(uint32_t), "encoder offsets");
    unsigned char *bytes = xmalloc(len + 1, "encoder bytes");
    json_ws(&in);
    if (in.pos >= len || text[in.pos] != '{') json_fail(&in, "expected '{'");
    in.pos++;
    json_ws(&in);
    if (in.pos < len && text[in.pos] == '}') json_fail(&in, "empty vocabulary");
    for (;;) {
        if (n == cap) {
            cap *= 2;
            ids = realloc(ids, cap * sizeof(int32_t));
            starts = realloc(starts, cap * sizeof(uint32_t));
            if (!ids || !starts) fatal("out of memory reading %s", path);
        }
        size_t slen = json_string(&in, bytes + bytes_used);
        long b = alphabet_to_bytes(bytes + bytes_used, slen, byte_of); /* "<|endoftext|>" maps to itself */
        if (b < 0) json_fail(&in, "token outside GPT-2's byte alphabet");
        slen = (size_t)b;
        json_ws(&in);
        if (in.pos >= len || text[in.pos] != ':') json_fail(&in, "expected ':'");
        in.pos++;
        json_ws(&in);
        char *endp;
        long id = strtol(text + in.pos, &endp, 10);
        if (endp == text + in.pos || id < 0 || id > 10000000) json_fail(&in, "expected a token id");
        in.pos = (size_t)(endp - text);
        ids[n] = (int32_t)id;
        starts[n] = (uint32_t)bytes_used;
        bytes_used += slen;
        n++;
        json_ws(&in);
        if (in.pos < len && text[in.pos] == ',') { in.pos++; continue; }
        if (in.pos < len && text[in.pos] == '}') break;
        json_fail(&in, "expected ',' or '}'");
    }
    t->vocab_size = (int)n;
    /* place tokens by id */
    int32_t *where = xmalloc(n * sizeof(int32_t), "encoder index");
    for (size_t i = 0; i < n; i++) where[i] = -1;
    for (size_t i = 0; i < n; i++) {
        if ((size_t)ids[i] >= n) fatal("%s: token id %d out of range 0..%zu; run `make data` again", path, ids[i], n - 1);
        if (where[ids[i]] >= 0) fatal("%s: token id %d appears twice; run `make data` again", path, ids[i]);
        where[ids[i]] = (int32_t)i;
    }
    t->off = xmalloc((n + 1) * sizeof(uint32_t), "token offsets");
    t->bytes = xmalloc(bytes_used + 1, "token bytes");
    size_t o = 0;
    for (size_t id = 0; id < n; id++) {
        size_t i = (size_t)where[id];
        size_t blen = (i + 1 < n ? starts[i + 1] : bytes_used) - starts[i];
        memcpy(t->bytes + o, bytes + starts[i], blen);
        t->off[id] = (uint32_t)o;
        o += blen;
    }
    t->off[n] = (uint32_t)o;
    for (size_t id = 0; id < n; id++)
        if (t->off[id + 1] - t->off[id] == sizeof(EOT_TEXT) - 1 && !memcmp(t->bytes + t->off[id], EOT_TEXT, sizeof(EOT_TEXT) - 1))
            t->eot = (int)id;
    if (t->eot < 0) fatal("%s has no \"<|endoftext|>\" entry; delete it and run `make data` again", path);
    t->vocab_mask = table_size_for(n) - 1;
    t->vocab_slots = xcalloc(t->vocab_mask + 1, sizeof(uint32_t), "vocabulary table");
    for (size_t id = 0; id < n; id++)
        if ((int)id != t->eot) vocab_insert(t, (int)id);
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = bpe_lookup_bytes(t, &c, 1);
        if (t->byte_id[b] < 0) fatal("%s lacks the single-byte token for byte %d; run `make data` again", path, b);
    }
    free(where);
    free(ids);
    free(starts);
    free(bytes);
    free(text);
}

static void merge_table_alloc(Tokenizer *t, size_t n) {
    t->merge_mask = table_size_for(n + 1) - 1;
    t->merge_key = xmalloc((t->merge_mask + 1) * sizeof(uint64_t), "merge table");
    t->merge_rank = xmalloc((t->merge_mask + 1) * sizeof(uint32_t), "merge table");
    t->merge_id = xmalloc((t->merge_mask + 1) * sizeof(uint32_t), "merge table");
    memset(t->merge_key, 0xFF, (t->merge_mask + 1) * sizeof(uint64_t));
}

/* Records that (a, b) merges into m with this rank; a repeated pair keeps its first (lowest) rank. */
static void merge_insert(Tokenizer *t, int a, int b, int m, uint32_t rank) {
    uint64_t k = pair_key(a, b);
    size_t i = bpe_hash_u64(k) & t->merge_mask;
    while (t->merge_key[i] != UINT64_MAX && t->merge_key[i] != k) i = (i + 1) & t->merge_mask;
    if (t->merge_key[i] == UINT64_MAX) {
        t->merge_key[i] = k;
        t->merge_rank[i] = rank;
        t->merge_id[i] = (uint32_t)m;
    }
}

static void load_vocab_bpe(Tokenizer *t, const char *path, const int byte_of[324]) {
    size_t len;
    char *text = read_file(path, &len);
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    merge_table_alloc(t, n_lines);
    unsigned char *buf = xmalloc(len + 1, "merge line");
    uint32_t rank = 0;
    size_t line_no = 0;
    for (char *line = text; line < text + len;) {
        char *eol = memchr(line, '\n', (size_t)(text + len - line));
        if (!eol) eol = text + len;
        line_no++;
        size_t ll = (size_t)(eol - line);
        if (ll && line[ll - 1] == '\r') ll--;
        if (ll == 0 || (line_no == 1 && line[0] == '#')) { line = eol + 1; continue; }
        char *sp = memchr(line, ' ', ll);
        if (!sp || sp == line || sp == line + ll - 1)
            fatal("%s:%zu: expected two tokens separated by one space; run `make data` again", path, line_no);
        size_t la = (size_t)(sp - line), lb = ll - la - 1;
        memcpy(buf, line, la);
        memcpy(buf + la, sp + 1, lb);
        long ba = alphabet_to_bytes(buf, la, byte_of);
        long bb = alphabet_to_bytes(buf + la, lb, byte_of);
        if (ba < 0 || bb < 0) fatal("%s:%zu: character outside GPT-2's byte alphabet; run `make data` again", path, line_no);
        memmove(buf + ba, buf + la, (size_t)bb); /* alphabet_to_bytes shrinks in place: close the gap */
        int a = bpe_lookup_bytes(t, buf, (size_t)ba);
        int b = bpe_lookup_bytes(t, buf + ba, (size_t)bb);
        int m = bpe_lookup_bytes(t, buf, (size_t)(ba + bb));
        if (a < 0 || b < 0 || m < 0)
            fatal("%s:%zu: merge of tokens not in encoder.json; the two files do not belong together, run `make data` again",
                  path, line_no);
        merge_insert(t, a, b, m, rank);
        rank++;
        line = eol + 1;
    }
    if (rank == 0) fatal("%s holds no merges; delete it and run `make data` again", path);
    free(buf);
    free(text);
}

static void free_thread_state(void *p) {
    ThreadState *s = p;
    if (!s) return;
    pcre2_match_data_free(s->md);
    free(s->cache);
    free(s);
}

/* Compiles a pre-tokenizer pattern (UTF, Unicode properties, invalid UTF-8 matching nothing) with JIT. */
static pcre2_code *compile_pattern(const char *pattern, const char *what) {
    int err;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        fatal("PCRE2 cannot compile %s's pattern at offset %zu: %s; libpcre2-8 10.34 or newer is needed", what,
              (size_t)erroff, (char *)msg);
    }
    /* JIT is a speed-up only; without it pcre2_match interprets the same pattern */
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

/* Compiles the pre-tokenizer (if any) and sets up the per-thread state key. */
static void finish_load(Tokenizer *t, const char *pattern, const char *what) {
    if (pattern) t->re = compile_pattern(pattern, what);
    if (pthread_key_create(&t->state_key, free_thread_state) != 0) fatal("pthread_key_create failed");
}

Tokenizer *tokenizer_load_gpt2(const char *encoder_json, const char *vocab_bpe) {
    Tokenizer *t = xcalloc(1, sizeof(Tokenizer), "tokenizer");
    t->kind = KIND_GPT2;
    t->name = "gpt2";
    t->eot = -1;
    int byte_of[324];
    unicode_to_byte_table(byte_of);
    load_encoder_json(t, encoder_json, byte_of);
    load_vocab_bpe(t, vocab_bpe, byte_of);
    t->bos = t->special_first = t->special_last = t->eot;
    t->space_id = -1;
    finish_load(t, GPT2_PATTERN, "GPT-2");
    return t;
}

/* Llama 3's special tokens in id order from 128000, as llama3-tokenizer-js (and Meta's tokenizer.py) lists them. */
static void llama3_special_text(int i, char *out, size_t cap) {
    static const char *named[] = {"begin_of_text", "end_of_text", "reserved_special_token_0",
                                  "reserved_special_token_1", "finetune_right_pad_id", "reserved_special_token_2",
                                  "start_header_id", "end_header_id", "eom_id", "eot_id", "python_tag"};
    if (i < 11) snprintf(out, cap, "<|%s|>", named[i]);
    else snprintf(out, cap, "<|reserved_special_token_%d|>", i - 8);
}

/* Llama 2's byte-fallback piece "<0xNN>" (upper-case hex): returns NN, or -1. */
static int byte_piece(const unsigned char *p, size_t n) {
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        int c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Reads DIR/vocab.txt (one token a line, line i = id i, spelled as the JS package spells it) into t->bytes/off
 * as raw bytes, appends Llama 3's special tokens, and fills the lookup table and byte_id[]. */
static void load_llama_vocab(Tokenizer *t, const char *path) {
    size_t len;
    char *text = read_file(path, &len);
    int n_base = t->kind == KIND_LLAMA3 ? LLAMA3_N_BASE : LLAMA2_N_VOCAB;
    int n_special = t->kind == KIND_LLAMA3 ? LLAMA3_N_SPECIAL : 0;
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    if (lines != (size_t)n_base || (len && text[len - 1] != '\n'))
        fatal("%s: expected %d lines, found %zu; delete it and run `make data` to extract it again", path, n_base,
              lines);
    t->vocab_size = n_base + n_special;
    t->off = xmalloc(((size_t)t->vocab_size + 1) * sizeof(uint32_t), "token offsets");
    t->bytes = xmalloc(len + (size_t)n_special * 40 + 1, "token bytes");
    int byte_of[324];
    unicode_to_byte_table(byte_of);
    size_t o = 0;
    int id = 0;
    for (char *line = text; id < n_base; id++) {
        char *eol = memchr(line, '\n', (size_t)(text + len - line));
        size_t n = (size_t)(eol - line);
        unsigned char *dst = (unsigned char *)t->bytes + o;
        t->off[id] = (uint32_t)o;
        if (n == 0) fatal("%s:%d: empty token; delete it and run `make data` again", path, id + 1);
        if (t->kind == KIND_LLAMA3) {
            memcpy(dst, line, n);
            long b = alphabet_to_bytes(dst, n, byte_of);
            if (b < 0) fatal("%s:%d: character outside GPT-2's byte alphabet; run `make data` again", path, id + 1);
            o += (size_t)b;
        } else {
            int byte = byte_piece((const unsigned char *)line, n);
            if (byte >= 0) { dst[0] = (unsigned char)byte; o += 1; }
            else { /* U+2581 (E2 96 81) stands for a space */
                for (size_t i = 0; i < n; i++) {
                    if (i + 2 < n && !memcmp(line + i, "\xE2\x96\x81", 3)) { t->bytes[o++] = ' '; i += 2; }
                    else t->bytes[o++] = line[i];
                }
            }
            if (id < 3 + 256 && (id < 3) == (byte >= 0))
                fatal("%s:%d: expected <unk> <s> </s> then <0x00>..<0xFF>; run `make data` again", path, id + 1);
            if (byte >= 0 && byte != id - 3) fatal("%s:%d: byte token out of order; run `make data` again", path, id + 1);
        }
        line = eol + 1;
    }
    for (int i = 0; i < n_special; i++, id++) {
        t->off[id] = (uint32_t)o;
        llama3_special_text(i, t->bytes + o, 40);
        o += strlen(t->bytes + o);
    }
    t->off[id] = (uint32_t)o;
    t->vocab_mask = table_size_for((size_t)t->vocab_size) - 1;
    t->vocab_slots = xcalloc(t->vocab_mask + 1, sizeof(uint32_t), "vocabulary table");
    /* only tokens text can become through merges or single characters: not specials, not byte fallbacks */
    int first = t->kind == KIND_LLAMA2 ? 3 + 256 : 0;
    for (int i = first; i < n_base; i++) {
        size_t n = t->off[i + 1] - t->off[i];
        int dup = bpe_lookup_bytes(t, (const unsigned char *)t->bytes + t->off[i], n);
        if (dup >= 0) fatal("%s: tokens %d and %d are the same bytes; run `make data` again", path, dup, i);
        vocab_insert(t, i);
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = t->kind == KIND_LLAMA2 ? 3 + b : bpe_lookup_bytes(t, &c, 1);
        if (t->byte_id[b] < 0) fatal("%s lacks the single-byte token for byte %d; run `make data` again", path, b);
    }
    free(text);
}

/* Reads DIR/merges.txt: "left right result" ids a line, in priority order. */
static void load_llama_merges(Tokenizer *t, const char *path) {
    size_t len;
    char *text = read_file(path, &len);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    merge_table_alloc(t, lines);
    uint32_t rank = 0;
    for (char *p = text; p < text + len; rank++) {
        long v[3];
        for (int k = 0; k < 3; k++) {
            char *end;
            v[k] = strtol(p, &end, 10);
            if (end == p || v[k] < 0 || v[k] >= t->vocab_size || (*end != (k < 2 ? ' ' : '\n')))
                fatal("%s:%u: expected three token ids \"left right result\"; delete it and run `make data` again",
                      path, rank + 1);
            p = end + 1;
        }
        size_t la = t->off[v[0] + 1] - t->off[v[0]], lb = t->off[v[1] + 1] - t->off[v[1]];
        if (t->off[v[2] + 1] - t->off[v[2]] != la + lb || memcmp(t->bytes + t->off[v[2]], t->bytes + t->off[v[0]], la) ||
            memcmp(t->bytes + t->off[v[2]] + la, t->bytes + t->off[v[1]], lb))
            fatal("%s:%u: token %ld is not tokens %ld and %ld joined; run `make data` again", path, rank + 1, v[2],
                  v[0], v[1]);
        merge_insert(t, (int)v[0], (int)v[1], (int)v[2], rank);
    }
    if (rank == 0) fatal("%s holds no merges; delete it and run `make data` again", path);
    free(text);
}

Tokenizer *tokenizer_load_llama(const char *kind, const char *dir) {
    Tokenizer *t = xcalloc(1, sizeof(Tokenizer), "tokenizer");
    int l3 = !strcmp(kind, "llama3");
    if (!l3 && strcmp(kind, "llama2") != 0) fatal("tokenizer_load_llama: kind '%s' is not llama2 or llama3", kind);
    t->kind = l3 ? KIND_LLAMA3 : KIND_LLAMA2;
    t->name = l3 ? "llama3" : "llama2";
    size_t n = strlen(dir) + 32;
    char *path = xmalloc(n, "path");
    snprintf(path, n, "%s/vocab.txt", dir);
    load_llama_vocab(t, path);
    snprintf(path, n, "%s/merges.txt", dir);
    load_llama_merges(t, path);
    free(path);
    if (l3) {
        t->bos = LLAMA3_N_BASE;     /* <|begin_of_text|> */
        t->eot = LLAMA3_N_BASE + 1; /* <|end_of_text|> */
        t->special_first = LLAMA3_N_BASE;
        t->special_last = LLAMA3_N_BASE + LLAMA3_N_SPECIAL - 1;
        t->space_id = -1;
    } else {
        t->bos = 1; /* <s> */
        t->eot = 2; /* </s> */
        t->special_first = 1;
        t->special_last = 0; /* none: SentencePiece never makes control tokens from text */
        t->space_id = bpe_lookup_bytes(t, (const unsigned char *)" ", 1);
        if (t->space_id < 0) fatal("%s/vocab.txt has no U+2581 piece; run `make data` again", dir);
    }
    finish_load(t, l3 ? LLAMA3_PATTERN : NULL, "Llama 3");
    return t;
}

int tokenizer_is_dir(const char *kind) {
    if (!strcmp(kind, "gpt2") || !strcmp(kind, "bpe4k") || !strcmp(kind, "llama2") || !strcmp(kind, "llama3"))
        return 0;
    struct stat st;
    if (stat(kind, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    size_t n = strlen(kind) + 32;
    char *p = xmalloc(n, "path");
    snprintf(p, n, "%s/encoder.json", kind);
    int ok = stat(p, &st) == 0;
    snprintf(p, n, "%s/vocab.bpe", kind);
    ok = ok && stat(p, &st) == 0;
    free(p);
    return ok;
}

/* The two files of kind's vocabulary into a and b (cap bytes each): encoder.json and vocab.bpe (GPT-2, bpe4k, a
 * learned folder), vocab.txt and merges.txt (Llama). 0 for an unknown kind. */
static int vocab_files(const char *kind, const char *data_dir, char *a, char *b, size_t cap) {
    int llama = !strcmp(kind, "llama2") || !strcmp(kind, "llama3");
    const char *dir = data_dir, *sub = kind, *fa = llama ? "vocab.txt" : "encoder.json";
    const char *fb = llama ? "merges.txt" : "vocab.bpe";
    if (!llama && strcmp(kind, "gpt2") && strcmp(kind, "bpe4k")) {
        if (!tokenizer_is_dir(kind)) return 0;
        dir = kind; /* a learned vocabulary's own folder */
        sub = ".";
    }
    snprintf(a, cap, "%s/%s/%s", dir, sub, fa);
    snprintf(b, cap, "%s/%s/%s", dir, sub, fb);
    return 1;
}

/* Adds the bytes of the file at path to st; 0 if it cannot be opened or read. */
static int hash_file(XXH3_state_t *st, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char buf[1 << 16];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) XXH3_64bits_update(st, buf, r);
    int ok = !ferror(f);
    fclose(f);
    return ok;
}

uint64_t tokenizer_vocab_hash(const char *kind, const char *data_dir) {
    size_t cap = strlen(kind) + strlen(data_dir) + 32;
    char *a = xmalloc(cap, "path"), *b = xmalloc(cap, "path");
    uint64_t h = 0;
    XXH3_state_t *st = XXH3_createState();
    if (!st) fatal("out of memory hashing the vocabulary of %s", kind);
    XXH3_64bits_reset(st);
    if (vocab_files(kind, data_dir, a, b, cap) && hash_file(st, a) && hash_file(st, b)) {
        h = XXH3_64bits_digest(st);
        if (h == 0) h = 1; /* 0 means "no hash" in a shard header */
    }
    XXH3_freeState(st);
    free(a);
    free(b);
    return h;
}

Tokenizer *tokenizer_load(const char *kind, const char *data_dir) {
    size_t n = strlen(data_dir) + 32;
    char *a = xmalloc(n, "path"), *b = xmalloc(n, "path");
    Tokenizer *t;
    if (!strcmp(kind, "gpt2")) {
        snprintf(a, n, "%s/gpt2/encoder.json", data_dir);
        snprintf(b, n, "%s/gpt2/vocab.bpe", data_dir);
        t = tokenizer_load_gpt2(a, b);
    } else if (!strcmp(kind, "bpe4k")) {
        snprintf(a, n, "%s/bpe4k/encoder.json", data_dir);
        snprintf(b, n, "%s/bpe4k/vocab.bpe", data_dir);
        t = tokenizer_load_gpt2(a, b);
        if (t->vocab_size != BPE4K_VOCAB || t->eot != BPE4K_VOCAB - 1)
            fatal("%s: %d tokens with <|endoftext|> at %d, where bpe4k has %d with it last; delete %s/bpe4k and "
                  "run `make data` to train it again", a, t->vocab_size, t->eot, BPE4K_VOCAB, data_dir);
        t->name = "bpe4k";
    } else if (!strcmp(kind, "llama2") || !strcmp(kind, "llama3")) {
        snprintf(a, n, "%s/%s", data_dir, kind);
        t = tokenizer_load_llama(kind, a);
    } else if (tokenizer_is_dir(kind)) {
        /* a vocabulary learned by `tok train --out DIR`: GPT-2's files and pre-tokenizer, any size */
        free(a);
        free(b);
        n = strlen(kind) + 32;
        a = xmalloc(n, "path");
        b = xmalloc(n, "path");
        snprintf(a, n, "%s/encoder.json", kind);
        snprintf(b, n, "%s/vocab.bpe", kind);
        t = tokenizer_load_gpt2(a, b);
        t->name = "bpe";
    } else {
        fatal("unknown tokenizer '%s'; use gpt2, bpe4k, llama2, llama3 or the folder of a vocabulary learned by `tok "
              "train --out DIR` (it holds encoder.json and vocab.bpe)", kind);
    }
    free(a);
    free(b);
    return t;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    /* other threads' states were freed when they exited; this thread's is freed here */
    free_thread_state(pthread_getspecific(t->state_key));
    pthread_key_delete(t->state_key);
    pcre2_code_free(t->re);
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

/* ---------------------------------------------------------------------------------------------------------- */
/* merging one piece */

/* Short pieces: scan for the lowest-ranked pair, merge it, repeat. Ties go to the leftmost pair, which gives
 * the same result as encoder.py merging every occurrence of the best pair in one left-to-right sweep. */
static size_t merge_scan(const Tokenizer *t, const unsigned char *p, size_t n, int32_t *sym) {
    uint32_t rank[HEAP_MIN_LEN];      /* rank[i]: of the pair (sym[i], sym[i+1]) */
    int32_t merged[HEAP_MIN_LEN];
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[p[i]];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = merge_lookup(t, sym[i], sym[i + 1], &merged[i]);
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
        if (best > 0) rank[best - 1] = merge_lookup(t, sym[best - 1], sym[best], &merged[best - 1]);
        if (best + 1 < n) rank[best] = merge_lookup(t, sym[best], sym[best + 1], &merged[best]);
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
        uint32_t r = merge_lookup(t, sym[i], sym[i + 1], &m);
        if (r != NO_RANK) heap_push(heap, &hn, ((uint64_t)r << 32) | i);
    }
    while (hn) {
        uint64_t e = heap_pop(heap, &hn);
        uint32_t r = (uint32_t)(e >> 32);
        size_t i = (size_t)(e & 0xFFFFFFFFu);
        if (sym[i] < 0 || next[i] < 0) continue; /* merged away, or now last */
        if (merge_lookup(t, sym[i], sym[next[i]], &m) != r) continue;
        int64_t j = next[i];
        sym[i] = m;
        sym[j] = -1;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = (int64_t)i;
        if (prev[i] >= 0 && (r = merge_lookup(t, sym[prev[i]], sym[i], &m)) != NO_RANK)
            heap_push(heap, &hn, ((uint64_t)r << 32) | (uint64_t)prev[i]);
        if (next[i] >= 0 && (r = merge_lookup(t, sym[i], sym[next[i]], &m)) != NO_RANK)
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

/* The next pre-tokenizer piece of text[0..len) from pos: *start..*end is the regex's match, and pos..*start
 * (when not empty) a run of invalid UTF-8 that no pattern item matches, a piece of its own. *end == len and
 * *start == len when nothing matches any more. */
static void next_piece(const pcre2_code *re, pcre2_match_data *md, const unsigned char *text, size_t len,
                       size_t pos, size_t *start, size_t *end) {
    int rc = pcre2_match(re, (PCRE2_SPTR)text, len, pos, 0, md, NULL);
    *start = *end = len;
    if (rc >= 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        *start = ov[0];
        *end = ov[1];
    } else if (rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fatal("PCRE2 match failed at byte %zu: %s", pos, (char *)msg);
    }
}

/* Pre-tokenizes and merges text[0..len) (no special tokens), appending at (*ids)[at]; returns the new count. */
static size_t encode_ordinary(const Tokenizer *t, ThreadState *s, const unsigned char *text, size_t len,
                              int32_t **ids, size_t *cap, size_t at) {
    reserve(ids, cap, at + len); /* a piece never yields more ids than bytes */
    for (size_t pos = 0, start, end; pos < len; pos = end) {
        next_piece(t->re, s->md, text, len, pos, &start, &end);
        if (start > pos) at += encode_piece(t, s, text + pos, start - pos, *ids + at); /* invalid UTF-8 */
        if (end > start) at += encode_piece(t, s, text + start, end - start, *ids + at);
    }
    return at;
}

/* GPT-2's pattern for bpe_pretokenize_gpt2, compiled once per process (a compiled pattern is read-only and
 * shareable; match data is not) */
static pcre2_code *gpt2_re;
static void compile_gpt2_re(void) { gpt2_re = compile_pattern(GPT2_PATTERN, "GPT-2"); }

void bpe_pretokenize_gpt2(const char *text, size_t len, void (*fn)(const unsigned char *, size_t, void *),
                          void *ctx) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, compile_gpt2_re);
    const pcre2_code *re = gpt2_re;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) fatal("out of memory creating PCRE2 match data");
    const unsigned char *p = (const unsigned char *)text;
    for (size_t pos = 0, start, end; pos < len; pos = end) {
        next_piece(re, md, p, len, pos, &start, &end);
        if (start > pos) fn(p + pos, start - pos, ctx);
        if (end > start) fn(p + start, end - start, ctx);
    }
    pcre2_match_data_free(md);
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

/*
 * tokenizer/bpe_load.c - the vocabulary files into bpe.c's tables, and the tokenizers' names:
 *   gpt2, bpe4k, a learned folder   encoder.json (token -> id, each token spelled in GPT-2's printable byte
 *                                   alphabet, bytes_to_unicode, undone here) and vocab.bpe (merges in rank order)
 *   llama2, llama3                  vocab.txt and merges.txt (written by tokenizer/extract_llama.mjs)
 * Every file is checked as it is read: a malformed or mismatched one is fatal() naming the file (and line) and the
 * fix (`make data`). Also the vocabulary's hash recorded in shard headers.
 * Not for: the tables themselves (bpe.c), encoding (bpe_encode.c), writing vocabularies (bpe_train.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define XXH_INLINE_ALL /* header-only: every program linking bpe_load.c (fuzz harnesses too) needs no -lxxhash */
#include <xxhash.h>

#include "common/util.h"
#include "tokenizer/bpe_impl.h"

static const char EOT_TEXT[] = "<|endoftext|>";


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

/* Decodes one UTF-8 code point at *p, before end; UINT32_MAX (outside every alphabet) for one that end cuts. A
 * vocabulary line is not checked for valid UTF-8 before this: a lead byte near its end must not read past it. */
static uint32_t get_utf8(const unsigned char **p, const unsigned char *end) {
    const unsigned char *s = *p;
    uint32_t cp;
    int n;
    if (s[0] < 0x80) { cp = s[0]; n = 1; }
    else if (s[0] < 0xE0) { cp = s[0] & 31; n = 2; }
    else if (s[0] < 0xF0) { cp = s[0] & 15; n = 3; }
    else { cp = s[0] & 7; n = 4; }
    if (end - s < n) { *p = end; return UINT32_MAX; } /* a character cut by the end: no byte past it is read */
    for (int i = 1; i < n; i++) cp = (cp << 6) | (s[i] & 63);
    *p = s + n;
    return cp;
}

/* encoder.json is read by the small reader below, not jansson (issue 44 asks for jansson where its speed allows): on
 * GPT-2's encoder.json (1 MB, 50257 entries), loading it with a one-merge vocab.bpe took 61.6 ms of CPU through
 * jansson's json_loadb and a walk of the object against 21.1 ms through this reader, and the whole tokenizer_load_gpt2
 * 99 ms against 47 ms (medians of 5 runs of 21 and 11 loads; bpe4k: 3.5 ms against 2.0 ms, medians of 3 runs of 51;
 * a 2-core x86-64, libjansson 2.14). Every program that tokenizes pays this load, so the reader stays. */
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
        uint32_t cp = get_utf8(&p, end);
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
    t->vocab_mask = bpe_table_size_for(n) - 1;
    t->vocab_slots = xcalloc(t->vocab_mask + 1, sizeof(uint32_t), "vocabulary table");
    for (size_t id = 0; id < n; id++)
        if ((int)id != t->eot) bpe_vocab_insert(t, (int)id);
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

static void load_vocab_bpe(Tokenizer *t, const char *path, const int byte_of[324]) {
    size_t len;
    char *text = read_file(path, &len);
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    bpe_merge_table_alloc(t, n_lines);
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
        bpe_merge_insert(t, a, b, m, rank);
        rank++;
        line = eol + 1;
    }
    if (rank == 0) fatal("%s holds no merges; delete it and run `make data` again", path);
    free(buf);
    free(text);
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
    bpe_encoder_init(t);
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
    t->vocab_mask = bpe_table_size_for((size_t)t->vocab_size) - 1;
    t->vocab_slots = xcalloc(t->vocab_mask + 1, sizeof(uint32_t), "vocabulary table");
    /* only tokens text can become through merges or single characters: not specials, not byte fallbacks */
    int first = t->kind == KIND_LLAMA2 ? 3 + 256 : 0;
    for (int i = first; i < n_base; i++) {
        size_t n = t->off[i + 1] - t->off[i];
        int dup = bpe_lookup_bytes(t, (const unsigned char *)t->bytes + t->off[i], n);
        if (dup >= 0) fatal("%s: tokens %d and %d are the same bytes; run `make data` again", path, dup, i);
        bpe_vocab_insert(t, i);
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
    bpe_merge_table_alloc(t, lines);
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
        bpe_merge_insert(t, (int)v[0], (int)v[1], (int)v[2], rank);
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
    bpe_encoder_init(t);
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

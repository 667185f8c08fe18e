/*
 * tokenizer/tok_jsonl.c - one line of a .jsonl input: the string value of one top-level key, decoded to UTF-8. A
 * minimal JSON reader that skips the other values without building them: `tok shards` reads every line through it.
 * Not jansson (issue 44 asks for it where its speed allows, and allows this hot path 10%): json_loadb and
 * json_object_get in its place cost `tok shards` 26% more CPU (0.67 s against 0.53 s; 2.08 M tokens, the default
 * corpus as 11 MB of jsonl, 3,561 documents of about 3 KB with three other fields, --threads 2, medians of 9 runs;
 * a 2-core x86-64, libjansson 2.14), and 1.24 M against 1.33 M tokens/s of wall time on that machine, which was
 * busy. jansson would also refuse lines this reader takes (a lone surrogate, U+FFFD here as in Python's
 * errors="replace"; a line malformed only after the field).
 * Not for: JSON anywhere else (eval/ reads task files through jansson), finding the lines (tok_docs.c).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tokenizer/tok.h"

static int json_skip_ws(const char *s, size_t n, size_t *p) {
    while (*p < n && one_of(" \t\r\n", s[*p])) (*p)++;
    return *p < n;
}

static void put_utf8(char *out, size_t *o, uint32_t cp) {
    if (cp < 0x80) out[(*o)++] = (char)cp;
    else if (cp < 0x800) { out[(*o)++] = (char)(0xC0 | cp >> 6); out[(*o)++] = (char)(0x80 | (cp & 63)); }
    else if (cp < 0x10000) {
        out[(*o)++] = (char)(0xE0 | cp >> 12); out[(*o)++] = (char)(0x80 | ((cp >> 6) & 63));
        out[(*o)++] = (char)(0x80 | (cp & 63));
    } else {
        out[(*o)++] = (char)(0xF0 | cp >> 18); out[(*o)++] = (char)(0x80 | ((cp >> 12) & 63));
        out[(*o)++] = (char)(0x80 | ((cp >> 6) & 63)); out[(*o)++] = (char)(0x80 | (cp & 63));
    }
}

static long hex4(const char *s, size_t n, size_t p) {
    if (p + 4 > n) return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[p + i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Parses the string at s[*p] (which is '"'); if out is non-NULL writes its UTF-8 there (at most as long as
 * the JSON). Returns the decoded length, or -1 if malformed. A lone surrogate becomes U+FFFD, as in
 * Python's json with errors="replace" (it cannot be UTF-8). */
static long json_str(const char *s, size_t n, size_t *p, char *out) {
    size_t o = 0;
    (*p)++;
    while (*p < n) {
        char c = s[(*p)++];
        if (c == '"') return (long)o;
        if (c != '\\') { if (out) out[o] = c; o++; continue; }
        if (*p >= n) return -1;
        char e = s[(*p)++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, e);
        if (e && k) { if (out) out[o] = to[k - from]; o++; continue; }
        if (e != 'u') return -1;
        long cp = hex4(s, n, *p);
        if (cp < 0) return -1;
        *p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && *p + 6 <= n && s[*p] == '\\' && s[*p + 1] == 'u') {
            long lo = hex4(s, n, *p + 2);
            if (lo >= 0xDC00 && lo < 0xE000) { cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00); *p += 6; }
        }
        if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
        char tmp[4];
        size_t t = 0;
        put_utf8(tmp, &t, (uint32_t)cp);
        if (out) memcpy(out + o, tmp, t);
        o += t;
    }
    return -1;
}

/* Skips one JSON value (any type) at s[*p]; returns 0 if malformed. */
static int json_skip(const char *s, size_t n, size_t *p) {
    if (!json_skip_ws(s, n, p)) return 0;
    if (s[*p] == '"') return json_str(s, n, p, NULL) >= 0;
    if (s[*p] == '{' || s[*p] == '[') {
        int depth = 0;
        while (*p < n) {
            char c = s[*p];
            if (c == '"') { if (json_str(s, n, p, NULL) < 0) return 0; continue; }
            (*p)++;
            if (c == '{' || c == '[') depth++;
            else if ((c == '}' || c == ']') && --depth == 0) return 1;
        }
        return 0;
    }
    size_t q = *p;
    while (*p < n && s[*p] && !one_of(",}] \t\r\n", s[*p])) (*p)++;
    return *p > q;
}

/* The text of a jsonl document: its `field` string; fatal() naming file and line if absent or malformed. */
char *jsonl_text(const Doc *d, const char *line, const char *field, size_t *len) {
    size_t n = d->len, p = 0;
    if (!json_skip_ws(line, n, &p) || line[p] != '{')
        fatal("%s:%ld: not a JSON object; each line of a .jsonl input must be one", d->path, d->line);
    p++;
    for (;;) {
        if (!json_skip_ws(line, n, &p) || line[p] != '"') break;
        size_t key_at = p;
        long kl = json_str(line, n, &p, NULL);
        if (kl < 0) break;
        char *key = xmalloc((size_t)kl + 1, "json key");
        json_str(line, n, &key_at, key);
        key[kl] = 0;
        if (!json_skip_ws(line, n, &p) || line[p] != ':') { free(key); break; }
        p++;
        int match = !strcmp(key, field);
        free(key);
        if (!json_skip_ws(line, n, &p)) break;
        if (match) {
            if (line[p] != '"') fatal("%s:%ld: field \"%s\" is not a string", d->path, d->line, field);
            size_t at = p;
            long tl = json_str(line, n, &p, NULL);
            if (tl < 0) break;
            char *text = xmalloc((size_t)tl + 1, "document");
            json_str(line, n, &at, text);
            *len = (size_t)tl;
            return text;
        }
        if (!json_skip(line, n, &p)) break;
        json_skip_ws(line, n, &p);
        if (p < n && line[p] == ',') { p++; continue; }
        break;
    }
    fatal("%s:%ld: no string field \"%s\" (or malformed JSON); choose the field with --jsonl-field", d->path,
          d->line, field);
}

/*
 * tokenizer/tok.c - the `tok` program: encode / decode on stdin, and `tok shards`, which turns text files,
 * directories of them, or .jsonl files into llm.c token shards (dataloader/dataloader.h's format). Every command
 * takes --model gpt2|bpe4k|llama2|llama3 or the folder of a vocabulary learned by `tok train --out DIR` (default gpt2).
 *
 *   tok encode [--model M] [--allow-special] [--bos] [--eos] [--data DIR]   stdin (any bytes) -> ids, one line
 *   tok decode [--model M] [--data DIR]          ids (whitespace or comma separated) on stdin -> bytes
 *   tok shards --out DIR [options] INPUTS...    see `tok shards --help`
 *   tok train --vocab N --out DIR [options] INPUTS...   learns a byte-level BPE from the training documents
 *
 * Shards: every document is prefixed by the model's document start, tokenizer_bos(): GPT-2 EOT 50256 (uint16
 * shards, magic 20240520 v1, as llm.c), Llama 3 <|begin_of_text|> 128000 and Llama 2 <s> 1 (uint32 shards,
 * magic 20240801 v7, as llm.c's Llama 3 data; <s> because Llama 2 was trained with BOS per document); documents go to train or validation by a hash of their
 * name (the file's base name, plus ":line" for jsonl), so the split does not depend on the order or number of
 * threads; documents are encoded in parallel and written in input order, so the bytes of every shard are the
 * same for any --threads. A shard holds --shard-tokens tokens (the last one fewer); a document may continue
 * into the next shard, as in llm.c's fineweb.py.
 * Not for: reading shards (dataloader/), training.
 */
#define _GNU_SOURCE
#define _FILE_OFFSET_BITS 64
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "dataloader/dataloader.h"
#include "tokenizer/tokenizer.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* options: one table drives getopt_long and --help */

typedef struct {
    const char *name, *metavar, *help; /* metavar NULL: a flag */
    char **value;                       /* where the argument (or "1" for a flag) goes */
} Opt;

static void print_help(FILE *f, const char *usage, const Opt *opts, int n) {
    fprintf(f, "%s\n", usage);
    for (int i = 0; i < n; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].metavar ? " " : "",
                 opts[i].metavar ? opts[i].metavar : "");
        fprintf(f, "  %-22s %s%s%s%s\n", left, opts[i].help, *opts[i].value ? " (default " : "",
                *opts[i].value ? *opts[i].value : "", *opts[i].value ? ")" : "");
    }
    fprintf(f, "  %-22s %s\n", "--help", "show this help");
}

/* Parses argv with getopt_long from the table; returns the index of the first positional argument. */
static int parse_opts(int argc, char **argv, const char *usage, const Opt *opts, int n) {
    struct option lo[32];
    for (int i = 0; i < n; i++) lo[i] = (struct option){opts[i].name, opts[i].metavar ? 1 : 0, NULL, i};
    lo[n] = (struct option){"help", 0, NULL, 'h'};
    lo[n + 1] = (struct option){0, 0, 0, 0};
    opterr = 0;
    optind = 1;
    for (;;) {
        int c = getopt_long(argc, argv, "h", lo, NULL);
        if (c == -1) break;
        if (c == 'h') { print_help(stdout, usage, opts, n); exit(0); }
        if (c == '?' || c == ':') {
            const char *bad = argv[optind - 1];
            fatal("tok %s: unknown option or missing value in '%s'; see `tok %s --help`", argv[0], bad, argv[0]);
        }
        *opts[c].value = opts[c].metavar ? optarg : "1";
    }
    return optind;
}

static long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        fatal("--%s: '%s' is not an integer in [%ld, %ld]", flag, s, lo, hi);
    return v;
}

/* Reads all of f; fatal() on a read error. */
static char *read_all(FILE *f, const char *name, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap, name);
    for (;;) {
        if (n == cap) {
            buf = xrealloc(buf, cap *= 2, "tok buffers");
            if (!buf) fatal("out of memory reading %s", name);
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    if (ferror(f)) fatal("cannot read %s: %s", name, strerror(errno));
    buf = xrealloc(buf, n + 1, "tok buffers");
    buf[n] = 0;
    *len = n;
    return buf;
}

/* strchr(set, c) that is false for c == 0 (strchr would find the terminator): NUL is never a separator */
static int one_of(const char *set, char c) { return c != 0 && strchr(set, c) != NULL; }

/* ---------------------------------------------------------------------------------------------------------- */
/* encode / decode */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define MODEL_HELP "tokenizer: gpt2, bpe4k, llama2, llama3, or the folder of a vocabulary learned by `tok train --out DIR`"
#define DATA_HELP "data cache holding gpt2/, bpe4k/ (encoder.json, vocab.bpe) and llama2/, llama3/ (vocab.txt, merges.txt)"

static void check_model(const char *model) {
    if (strcmp(model, "gpt2") && strcmp(model, "bpe4k") && strcmp(model, "llama2") && strcmp(model, "llama3") &&
        !tokenizer_is_dir(model))
        fatal("--model: '%s' is not a tokenizer; use gpt2, bpe4k, llama2, llama3 or the folder of a vocabulary "
              "learned by `tok train --out DIR` (holding encoder.json and vocab.bpe)", model);
}

static int cmd_encode(int argc, char **argv) {
    char *data = "data", *special = NULL, *bench = NULL, *model = "gpt2", *bos = NULL, *eos = NULL;
    Opt opts[] = {
        {"model", "M", MODEL_HELP, &model},
        {"data", "DIR", DATA_HELP, &data},
        {"allow-special", NULL, "encode special-token text (<|endoftext|>, Llama 3's <|...|>) as its id", &special},
        {"bos", NULL, "start with the model's BOS id (tokenizer_bos: 50256, 1 or 128000)", &bos},
        {"eos", NULL, "end with the model's end-of-text id (tokenizer_eot: 50256, 2 or 128001)", &eos},
        {"bench", "N", "also time N encodes, each with a freshly loaded tokenizer (cold cache, load not timed), "
                       "and print the median tokens/s on stderr", &bench},
    };
    int first = parse_opts(argc, argv, "usage: tok encode [options] < text\nEncodes stdin (any bytes) to token ids "
                                       "on one line, separated by spaces.", opts, 6);
    check_model(model);
    if (first != argc) fatal("tok encode: unexpected argument '%s'; the text comes on stdin", argv[first]);
    int reps = bench ? (int)parse_long("bench", bench, 1, 1000) : 0;
    size_t len, cap = 0, n = 0;
    char *text = read_all(stdin, "stdin", &len);
    int32_t *ids = NULL;
    double *secs = xmalloc((size_t)(reps + 1) * sizeof(double), "timings");
    for (int r = 0; r <= reps; r++) { /* run 0 makes the output; runs 1..reps are timed */
        Tokenizer *tok = tokenizer_load(model, data);
        double t0 = now_seconds();
        n = tokenizer_encode(tok, text, len, special != NULL, &ids, &cap);
        secs[r] = now_seconds() - t0;
        if (r == 0 && (bos || eos)) {
            ids = xrealloc(ids, (n + 2) * sizeof(int32_t), "tok buffers");
            if (!ids) fatal("out of memory");
            if (bos) { memmove(ids + 1, ids, n * sizeof(int32_t)); ids[0] = tokenizer_bos(tok); n++; }
            if (eos) ids[n++] = tokenizer_eot(tok);
            cap = n;
        }
        tokenizer_free(tok);
    }
    if (reps) {
        qsort(secs + 1, (size_t)reps, sizeof(double), cmp_double);
        double med = secs[1 + reps / 2];
        fprintf(stderr, "tok encode: %zu bytes -> %zu tokens, median of %d: %.3f s, %.0f tokens/s, %.1f MB/s\n",
                len, n, reps, med, n / med, len / med / 1e6);
    }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(secs);
    free(ids);
    free(text);
    return fflush(stdout) ? 1 : 0;
}

static int cmd_decode(int argc, char **argv) {
    char *data = "data", *model = "gpt2";
    Opt opts[] = {{"model", "M", MODEL_HELP, &model}, {"data", "DIR", DATA_HELP, &data}};
    int first = parse_opts(argc, argv, "usage: tok decode [options] < ids\nDecodes token ids (separated by "
                                       "spaces, newlines or commas) on stdin to bytes on stdout.", opts, 2);
    if (first != argc) fatal("tok decode: unexpected argument '%s'; the ids come on stdin", argv[first]);
    check_model(model);
    Tokenizer *tok = tokenizer_load(model, data);
    size_t len, n = 0, cap = 1024;
    char *text = read_all(stdin, "stdin", &len);
    int32_t *ids = xmalloc(cap * sizeof(int32_t), "ids");
    for (char *p = text; p < text + len;) {
        if (one_of(" \t\r\n,[]", *p)) { p++; continue; }
        char *end;
        long v = strtol(p, &end, 10);
        if (end < text + len && *end == 0)
            fatal("tok decode: stdin: NUL byte at offset %zu; give decimal ids separated by spaces", (size_t)(end - text));
        if (end == p || (end < text + len && !one_of(" \t\r\n,[]", *end)))
            fatal("tok decode: stdin: '%.*s' is not a token id; give decimal ids separated by spaces",
                  (int)strcspn(p, " \t\r\n,[]"), p);
        if (v < 0 || v >= tokenizer_vocab_size(tok))
            fatal("tok decode: stdin: id %ld is out of range [0, %d)", v, tokenizer_vocab_size(tok));
        if (n == cap) ids = xrealloc(ids, (cap *= 2) * sizeof(int32_t), "tok buffers");
        ids[n++] = (int32_t)v;
        p = end;
    }
    size_t dl;
    char *out = tokenizer_decode(tok, ids, n, &dl);
    fwrite(out, 1, dl, stdout);
    free(out);
    free(ids);
    free(text);
    tokenizer_free(tok);
    return fflush(stdout) ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* shards: documents */

typedef struct {
    char *path;      /* the file it comes from */
    long line;       /* jsonl: 1-based line number; text files: 0 */
    size_t off, len; /* jsonl: the line's bytes in the file */
    char *name;      /* what the split hashes: base name, plus ":line" for jsonl */
    int is_val;
} Doc;

typedef struct {
    Doc *docs;
    size_t n, cap;
} DocList;

static void add_doc(DocList *l, const char *path, long line, size_t off, size_t len) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->docs = xrealloc(l->docs, l->cap * sizeof(Doc), "tok buffers");
        if (!l->docs) fatal("out of memory listing documents");
    }
    Doc *d = &l->docs[l->n++];
    d->path = strdup(path);
    d->line = line;
    d->off = off;
    d->len = len;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t nl = strlen(base) + 24;
    d->name = xmalloc(nl, "document name");
    if (line) snprintf(d->name, nl, "%s:%ld", base, line);
    else snprintf(d->name, nl, "%s", base);
    d->is_val = 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static void add_file(DocList *l, const char *path) {
    if (!ends_with(path, ".jsonl")) { add_doc(l, path, 0, 0, 0); return; }
    FILE *f = xfopen(path, "rb", "check the input path");
    size_t len;
    char *text = read_all(f, path, &len);
    fclose(f);
    long line = 0;
    for (size_t p = 0; p < len;) {
        char *eol = memchr(text + p, '\n', len - p);
        size_t e = eol ? (size_t)(eol - text) : len;
        line++;
        size_t q = p;
        while (q < e && one_of(" \t\r", text[q])) q++;
        if (q < e) add_doc(l, path, line, p, e - p); /* blank lines are not documents */
        p = e + 1;
    }
    free(text);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every regular file under path (not hidden; subfolders followed to any depth), into *names (full paths). */
static void collect_files(const char *path, char ***names, size_t *n, size_t *cap, int depth) {
    if (depth > 64) fatal("tok: %s: folders nested deeper than 64 (a loop of links?)", path);
    DIR *d = opendir(path);
    if (!d) fatal("tok: cannot open directory %s: %s", path, strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        size_t pl = strlen(path) + strlen(e->d_name) + 2;
        char *full = xmalloc(pl, "path");
        snprintf(full, pl, "%s/%s", path, e->d_name);
        struct stat st;
        if (stat(full, &st) != 0) {
            free(full);
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            collect_files(full, names, n, cap, depth + 1);
            free(full);
            continue;
        }
        if (!S_ISREG(st.st_mode)) { free(full); continue; }
        if (*n == *cap) *names = xrealloc(*names, (*cap = *cap ? 2 * *cap : 256) * sizeof(char *), "tok buffers");
        (*names)[(*n)++] = full;
    }
    closedir(d);
}

/* A file is added as it is; a directory adds its regular files and those of its subfolders, at any depth (not
 * hidden ones), sorted by path. */
static void add_input(DocList *l, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) fatal("tok: input %s: %s; give text files, directories or .jsonl files", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) { add_file(l, path); return; }
    char **names = NULL;
    size_t n = 0, cap = 0;
    collect_files(path, &names, &n, &cap, 0);
    if (n == 0) fatal("tok: directory %s holds no files", path);
    qsort(names, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n; i++) {
        add_file(l, names[i]);
        free(names[i]);
    }
    free(names);
}

/* --val-percent: a number in [0, 100); fatal() otherwise. */
static double parse_val_percent(const char *s) {
    char *end;
    double percent = strtod(s, &end);
    if (end == s || *end || percent < 0 || percent >= 100) fatal("--val-percent: '%s' is not a number in [0, 100)", s);
    return percent;
}

static void free_docs(DocList *l) {
    for (size_t i = 0; i < l->n; i++) { free(l->docs[i].path); free(l->docs[i].name); }
    free(l->docs);
}

/* FNV-1a, 64-bit: a fixed, documented hash so the split is the same everywhere. */
static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

typedef struct { uint64_t h; size_t i; } HashIdx;
static int cmp_hash(const void *a, const void *b) {
    const HashIdx *x = a, *y = b;
    return x->h < y->h ? -1 : x->h > y->h ? 1 : (x->i < y->i ? -1 : x->i > y->i);
}

/* Validation = the round(n * percent / 100) documents (at least one if percent > 0) with the smallest hashes
 * of their names: an exact share, and a document's side does not depend on input order or thread count. */
static size_t choose_val(DocList *l, double percent) {
    if (percent <= 0) return 0;
    size_t k = (size_t)(l->n * percent / 100.0 + 0.5);
    if (k == 0) k = 1;
    if (k >= l->n) fatal("tok: --val-percent %g leaves no training documents out of %zu", percent, l->n);
    HashIdx *hs = xmalloc(l->n * sizeof(HashIdx), "split");
    for (size_t i = 0; i < l->n; i++) hs[i] = (HashIdx){fnv1a(l->docs[i].name), i};
    qsort(hs, l->n, sizeof(HashIdx), cmp_hash);
    for (size_t i = 0; i < k; i++) l->docs[hs[i].i].is_val = 1;
    free(hs);
    return k;
}

/* Minimal JSON reading for jsonl documents: the string value of a top-level key. */
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
static char *jsonl_text(const Doc *d, const char *line, const char *field, size_t *len) {
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

/* ---------------------------------------------------------------------------------------------------------- */
/* shards: parallel encoding, in-order writing */

typedef struct {
    int32_t *ids; /* the document start (tokenizer_bos) then the document's tokens */
    size_t n;
    int done;
} Result;

typedef struct {
    const Tokenizer *tok;
    DocList *docs;
    const char *field;
    Result *res;
    size_t next;     /* next document to hand out */
    size_t consumed; /* documents the writer has taken */
    size_t window;   /* how far encoding may run ahead of writing (bounds memory) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} Pool;

/* Reads one document's text (a file, or a jsonl line's field). */
static char *doc_text(const Doc *d, const char *field, size_t *len) {
    FILE *f = xfopen(d->path, "rb", "check the input path");
    char *text;
    if (d->line) {
        char *line = xmalloc(d->len + 1, "jsonl line");
        if (fseeko(f, (off_t)d->off, SEEK_SET) != 0) fatal("cannot seek in %s", d->path);
        xfread(line, d->len, f, d->path, "a jsonl line");
        line[d->len] = 0;
        text = jsonl_text(d, line, field, len);
        free(line);
    } else {
        text = read_all(f, d->path, len);
    }
    fclose(f);
    return text;
}

static void encode_doc(const Pool *pool, size_t i, Result *r) {
    size_t len;
    char *text = doc_text(&pool->docs->docs[i], pool->field, &len);
    int32_t *ids = NULL;
    size_t cap = 0;
    size_t n = tokenizer_encode(pool->tok, text, len, 0, &ids, &cap);
    ids = xrealloc(ids, (n + 1) * sizeof(int32_t), "tok buffers");
    memmove(ids + 1, ids, n * sizeof(int32_t));
    ids[0] = tokenizer_bos(pool->tok);
    r->ids = ids;
    r->n = n + 1;
    free(text);
}

static void *worker(void *arg) {
    Pool *pool = arg;
    for (;;) {
        pthread_mutex_lock(&pool->mu);
        while (pool->next < pool->docs->n && pool->next >= pool->consumed + pool->window)
            pthread_cond_wait(&pool->cv, &pool->mu);
        size_t i = pool->next;
        if (i >= pool->docs->n) { pthread_mutex_unlock(&pool->mu); return NULL; }
        pool->next++;
        pthread_mutex_unlock(&pool->mu);
        Result r;
        encode_doc(pool, i, &r);
        pthread_mutex_lock(&pool->mu);
        pool->res[i] = r;
        pool->res[i].done = 1;
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
}

/* Accumulates one split's tokens and writes a shard whenever shard_tokens are ready. */
typedef struct {
    const char *out, *prefix, *split;
    int32_t *buf;
    size_t n, shard_tokens, total;
    int files;
    int token_bytes; /* 2 (GPT-2) or 4 (Llama) */
    const char *tokenizer; /* recorded in every shard's header (dataloader.h) */
} Writer;

static void writer_flush(Writer *w) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s_%s_%06d.bin", w->out, w->prefix, w->split, w->files++);
    shard_write_tokenizer(path, w->buf, w->n, w->token_bytes, w->tokenizer);
    w->n = 0;
}

static void writer_add(Writer *w, const int32_t *ids, size_t n) {
    while (n) {
        size_t take = w->shard_tokens - w->n < n ? w->shard_tokens - w->n : n;
        memcpy(w->buf + w->n, ids, take * sizeof(int32_t));
        w->n += take;
        w->total += take;
        ids += take;
        n -= take;
        if (w->n == w->shard_tokens) writer_flush(w);
    }
}

/* Removes PREFIX_SPLIT_NNNNNN.bin files numbered `from` and up, left by an earlier, larger run. */
static void remove_stale(const char *out, const char *prefix, const char *split, int from) {
    for (int i = from;; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s_%s_%06d.bin", out, prefix, split, i);
        if (unlink(path) != 0) break;
    }
}

static int cmd_shards(int argc, char **argv) {
    char *out = NULL, *name = "shard", *val_percent = "5", *shard_tokens = "100000000", *threads_s = NULL,
         *field = "text", *data = "data", *model = "gpt2";
    char threads_def[24];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(threads_def, sizeof threads_def, "%ld", ncpu > 0 ? ncpu : 1);
    threads_s = threads_def;
    Opt opts[] = {
        {"out", "DIR", "directory for the shards (created)", &out},
        {"name", "PREFIX", "shard file prefix: PREFIX_train_000000.bin, PREFIX_val_000000.bin", &name},
        {"val-percent", "P", "share of documents for validation, chosen by a hash of the document name", &val_percent},
        {"shard-tokens", "N", "tokens per shard file (the last one of a split holds fewer)", &shard_tokens},
        {"threads", "N", "encoding threads (the default is the number of cores)", &threads_s},
        {"jsonl-field", "KEY", "string field holding the text in .jsonl inputs", &field},
        {"model", "M", MODEL_HELP, &model},
        {"data", "DIR", DATA_HELP, &data},
    };
    const int nopts = (int)(sizeof opts / sizeof *opts);
    const char *usage = "usage: tok shards --out DIR [options] INPUTS...\n"
                        "Encodes documents into llm.c shards, each document preceded by the model's document start:\n"
                        "gpt2: uint16 tokens, EOT 50256; bpe4k: uint16, EOT 4095; llama3: uint32, <|begin_of_text|>\n"
                        "128000; llama2: uint32, <s> 1. INPUTS: text files (one document each), directories of them,\n"
                        "or .jsonl files (one document per line).";
    int first = parse_opts(argc, argv, usage, opts, nopts);
    check_model(model);
    if (!out) fatal("tok shards: --out DIR is required; see `tok shards --help`");
    if (first == argc) fatal("tok shards: no INPUTS given; name text files, directories or .jsonl files");
    double percent = parse_val_percent(val_percent);
    size_t per_shard = (size_t)parse_long("shard-tokens", shard_tokens, 2, 2000000000L);
    int threads = (int)parse_long("threads", threads_s, 1, 256);
    if (strchr(name, '/') || !*name) fatal("--name: '%s' must be a plain file prefix without '/'", name);

    double t0 = now_seconds();
    DocList docs = {0};
    for (int i = first; i < argc; i++) add_input(&docs, argv[i]);
    if (docs.n == 0) fatal("tok shards: the inputs hold no documents");
    size_t n_val = choose_val(&docs, percent);
    Tokenizer *tok = tokenizer_load(model, data);
    /* llm.c's layouts: uint16 GPT-2 style, uint32 Llama and any vocabulary beyond 65536 tokens */
    int token_bytes = strncmp(model, "llama", 5) && tokenizer_vocab_size(tok) <= 65536 ? 2 : 4;
    const char *kind = tokenizer_kind(tok); /* recorded in each shard's header ("bpe" for a learned folder) */
    make_dirs(out);

    Pool pool = {.tok = tok, .docs = &docs, .field = field, .window = (size_t)threads * 8 + 16};
    pool.res = xcalloc(docs.n, sizeof(Result), "results");
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    pthread_t *tids = xmalloc((size_t)threads * sizeof(pthread_t), "threads");
    for (int i = 0; i < threads; i++)
        if (pthread_create(&tids[i], NULL, worker, &pool) != 0) fatal("tok shards: cannot start thread %d", i);

    Writer wt = {out, name, "train", xmalloc(per_shard * sizeof(int32_t), "shard buffer"), 0, per_shard, 0, 0,
                 token_bytes, kind};
    Writer wv = {out, name, "val", NULL, 0, per_shard, 0, 0, token_bytes, kind};
    if (n_val) wv.buf = xmalloc(per_shard * sizeof(int32_t), "shard buffer");
    double last = t0;
    for (size_t i = 0; i < docs.n; i++) {
        pthread_mutex_lock(&pool.mu);
        while (!pool.res[i].done) pthread_cond_wait(&pool.cv, &pool.mu);
        Result r = pool.res[i];
        pool.res[i].ids = NULL;
        pool.consumed = i + 1;
        pthread_cond_broadcast(&pool.cv);
        pthread_mutex_unlock(&pool.mu);
        writer_add(docs.docs[i].is_val ? &wv : &wt, r.ids, r.n);
        free(r.ids);
        double t = now_seconds();
        if (t - last > 1.0 || i + 1 == docs.n) {
            fprintf(stderr, "\rtok shards: %zu/%zu documents, %zu tokens", i + 1, docs.n, wt.total + wv.total);
            last = t;
        }
    }
    fprintf(stderr, "\n");
    for (int i = 0; i < threads; i++) pthread_join(tids[i], NULL);
    if (wt.n || wt.files == 0) writer_flush(&wt);
    if (n_val && (wv.n || wv.files == 0)) writer_flush(&wv);
    remove_stale(out, name, "train", wt.files);
    remove_stale(out, name, "val", wv.files);
    double secs = now_seconds() - t0;
    printf("tok shards: %zu documents (%zu val), %zu tokens (train %zu, val %zu) in %.2f s, %.0f tokens/s, "
           "%d threads; %d train + %d val shards in %s\n",
           docs.n, n_val, wt.total + wv.total, wt.total, wv.total, secs, (wt.total + wv.total) / secs, threads,
           wt.files, wv.files, out);

    free_docs(&docs);
    free(pool.res);
    free(tids);
    free(wt.buf);
    free(wv.buf);
    tokenizer_free(tok);
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* train */

static int cmd_train(int argc, char **argv) {
    char *out = NULL, *vocab_s = NULL, *val_percent = "5", *field = "text", *words = NULL;
    Opt opts[] = {
        {"vocab", "N", "vocabulary size V, 257..65536: 256 bytes, V - 257 merges, <|endoftext|> (required)", &vocab_s},
        {"out", "DIR", "directory for encoder.json and vocab.bpe (created)", &out},
        {"val-percent", "P", "share of documents held out as `tok shards --val-percent P` holds them out: the "
                             "merges are learned from the training documents only", &val_percent},
        {"jsonl-field", "KEY", "string field holding the text in .jsonl inputs", &field},
        {"words-out", "FILE", "also write the counted pieces (\"count<TAB>hex\" lines) for an independent trainer "
                              "to check against (test/ref/bpe_train_ref.py)", &words},
    };
    const int nopts = (int)(sizeof opts / sizeof *opts);
    const char *usage = "usage: tok train --vocab N --out DIR [options] INPUTS...\n"
                        "Learns a byte-level BPE vocabulary (GPT-2's pre-tokenizer, most frequent pair first) from the\n"
                        "training documents of INPUTS (as for tok shards) and writes it as GPT-2's encoder.json and\n"
                        "vocab.bpe. `make data` runs `tok train --vocab 4096` on the default corpus for bpe4k.";
    int first = parse_opts(argc, argv, usage, opts, nopts);
    if (!vocab_s) fatal("tok train: --vocab N is required (e.g. --vocab 4096); see `tok train --help`");
    int vocab = (int)parse_long("vocab", vocab_s, 257, 65536);
    if (!out) fatal("tok train: --out DIR is required; see `tok train --help`");
    if (first == argc) fatal("tok train: no INPUTS given; name text files, directories or .jsonl files");
    double percent = parse_val_percent(val_percent);

    double t0 = now_seconds();
    DocList docs = {0};
    for (int i = first; i < argc; i++) add_input(&docs, argv[i]);
    if (docs.n == 0) fatal("tok train: the inputs hold no documents");
    size_t n_val = choose_val(&docs, percent);
    BpeTrainer *bt = bpe_trainer_new();
    for (size_t i = 0; i < docs.n; i++) {
        if (docs.docs[i].is_val) continue;
        size_t len;
        char *text = doc_text(&docs.docs[i], field, &len);
        bpe_trainer_add(bt, text, len);
        free(text);
    }
    if (bpe_trainer_text_bytes(bt) == 0)
        fatal("tok train: the training documents of the inputs are empty; give text to learn from");
    double t1 = now_seconds();
    if (words) bpe_trainer_write_words(bt, words);
    bpe_trainer_train(bt, vocab);
    bpe_trainer_write(bt, out);
    printf("tok train: %zu training documents (%zu held out), %lld bytes, %zu distinct pieces; %d tokens (%d "
           "merges) in %.2f s (counting %.2f s); wrote %s/encoder.json and %s/vocab.bpe\n",
           docs.n - n_val, n_val, (long long)bpe_trainer_text_bytes(bt), bpe_trainer_n_words(bt), vocab,
           bpe_trainer_n_merges(bt), now_seconds() - t0, t1 - t0, out, out);
    free_docs(&docs);
    bpe_trainer_free(bt);
    return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *usage = "usage: tok encode|decode|shards|train [options]  (tok COMMAND --help for each)";
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("%s\n", usage);
        return argc < 2;
    }
    if (!strcmp(argv[1], "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decode")) return cmd_decode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "shards")) return cmd_shards(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    fatal("tok: unknown command '%s'; use encode, decode, shards or train (tok --help)", argv[1]);
}

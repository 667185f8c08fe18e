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
 * into the next shard, as in llm.c's fineweb.py. Every shard records the tokenizer and its vocabulary's hash
 * (dataloader.h). The set of one --name is replaced whole: written into a temp folder inside --out and moved into
 * place once complete, so an error or a signal leaves the earlier set as it was (see Staging).
 * Inputs: each real folder and file is read once (device and inode), whatever links lead to it, with a note for
 * what is skipped; an --out inside an input folder is refused.
 * Not for: reading shards (dataloader/), training.
 */
#define _GNU_SOURCE
#define _FILE_OFFSET_BITS 64
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
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

/* Parses argv with getopt_long from the table, in order (no permutation, so an error names the argument that caused
 * it); moves the positional arguments (those before and after the options, and all after "--") to the end of argv
 * in their order and returns the index of the first. fatal() naming the argument on an unknown option or a missing
 * value. */
static int parse_opts(int argc, char **argv, const char *usage, const Opt *opts, int n) {
    struct option lo[32];
    for (int i = 0; i < n; i++) lo[i] = (struct option){opts[i].name, opts[i].metavar ? 1 : 0, NULL, 256 + i};
    lo[n] = (struct option){"help", 0, NULL, 'h'};
    lo[n + 1] = (struct option){0, 0, 0, 0};
    char **pos = xmalloc((size_t)argc * sizeof(char *), "arguments");
    int npos = 0;
    opterr = 0;
    optind = 1;
    for (;;) {
        int at = optind;
        int c = getopt_long(argc, argv, "-:h", lo, NULL);
        if (c == -1) break;
        if (c == 1) { pos[npos++] = optarg; continue; } /* a positional argument, in its place */
        if (c == 'h') { print_help(stdout, usage, opts, n); exit(0); }
        if (c == ':') fatal("tok %s: %s needs a value; see `tok %s --help`", argv[0], argv[at], argv[0]);
        if (c == '?')
            fatal("tok %s: unknown option '%s'; see `tok %s --help` (an input whose name starts with '-' goes after "
                  "`--`, or as ./%s)", argv[0], argv[at], argv[0], argv[at]);
        *opts[c - 256].value = opts[c - 256].metavar ? optarg : "1";
    }
    while (optind < argc) pos[npos++] = argv[optind++];
    for (int i = 0; i < npos; i++) argv[argc - npos + i] = pos[i];
    free(pos);
    return argc - npos;
}

static long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        fatal("--%s: '%s' is not an integer in [%ld, %ld]", flag, s, lo, hi);
    return v;
}

/* Reads all of f (read_stream), NUL-terminated; fatal() on a read error. */
static char *read_all(FILE *f, const char *name, size_t *len) {
    char *buf = read_stream(f, len);
    if (!buf) fatal("cannot read %s: %s", name, strerror(errno));
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
    xflush_stdout();
    free(secs);
    free(ids);
    free(text);
    return 0;
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
    xflush_stdout();
    free(out);
    free(ids);
    free(text);
    tokenizer_free(tok);
    return 0;
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

/* Every folder and file a walk of the inputs has met, by device and inode (an open-addressing set): each is read
 * once however many links lead to it, and a link back to a folder above ends nothing but that branch. */
typedef struct { dev_t dev; ino_t ino; } FileId;
typedef struct {
    FileId *ids; /* (cap) slots; ino 0 and dev 0 marks an empty one */
    size_t n, cap;
    size_t skipped; /* entries passed over, each with a note */
} Seen;

/* The slot of st's file in the set: where it is, or the empty slot where it would go (s->cap > 0, never full). */
static FileId *seen_slot(const Seen *s, const struct stat *st) {
    uint64_t h = ((uint64_t)st->st_dev * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)st->st_ino * 0xc2b2ae3d27d4eb4full);
    for (size_t i = (size_t)(h % s->cap);; i = (i + 1) % s->cap) {
        FileId *e = &s->ids[i];
        if ((e->dev == st->st_dev && e->ino == st->st_ino) || (!e->dev && !e->ino)) return e;
    }
}

/* 1 if st's file is in the set. */
static int was_visited(const Seen *s, const struct stat *st) {
    if (!s->cap) return 0;
    const FileId *e = seen_slot(s, st);
    return e->dev || e->ino;
}

/* 1 (and remembers it) the first time the file st describes is met; 0 after that. */
static int first_visit(Seen *s, const struct stat *st) {
    if (was_visited(s, st)) return 0;
    if (2 * (s->n + 1) > s->cap) { /* grow, keeping the table at most half full */
        Seen g = {xcalloc(s->cap ? 2 * s->cap : 1024, sizeof(FileId), "seen files"), 0, s->cap ? 2 * s->cap : 1024, 0};
        for (size_t i = 0; i < s->cap; i++)
            if (s->ids[i].dev || s->ids[i].ino)
                *seen_slot(&g, &(struct stat){.st_dev = s->ids[i].dev, .st_ino = s->ids[i].ino}) = s->ids[i];
        free(s->ids);
        s->ids = g.ids;
        s->cap = g.cap;
    }
    *seen_slot(s, st) = (FileId){st->st_dev, st->st_ino};
    s->n++;
    return 1;
}

static void skip_note(Seen *s, const char *path, const char *why) {
    fprintf(stderr, "note: tok: skipping %s: %s\n", path, why);
    s->skipped++;
}

/* Every regular file under path (not hidden; subfolders followed to any depth, each real folder and file once), into
 * *names (full paths). What is passed over (a folder or file met before through a link, a dangling link, a device or
 * pipe) gets a note on stderr. */
static void collect_files(const char *path, char ***names, size_t *n, size_t *cap, int depth, Seen *seen) {
    if (depth > 64) fatal("tok: %s: folders nested deeper than 64; give a folder nearer the files", path);
    DIR *d = opendir(path);
    if (!d) fatal("tok: cannot open directory %s: %s", path, strerror(errno));
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        size_t pl = strlen(path) + strlen(e->d_name) + 2;
        char *full = xmalloc(pl, "path");
        snprintf(full, pl, "%s/%s", path, e->d_name);
        struct stat st;
        if (stat(full, &st) != 0) {
            skip_note(seen, full, errno == ENOENT ? "a link to nothing" : strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            if (first_visit(seen, &st)) collect_files(full, names, n, cap, depth + 1, seen);
            else skip_note(seen, full, "a folder already read (a link to it, or back to a folder above)");
        } else if (!S_ISREG(st.st_mode)) {
            skip_note(seen, full, "not a regular file");
        } else if (!first_visit(seen, &st)) {
            skip_note(seen, full, "the same file as one already read (a link)");
        } else {
            if (*n == *cap) *names = xrealloc(*names, (*cap = *cap ? 2 * *cap : 256) * sizeof(char *), "tok buffers");
            (*names)[(*n)++] = full;
            continue;
        }
        free(full);
    }
    closedir(d);
}

/* A file is added as it is; a directory adds its regular files and those of its subfolders, at any depth (not
 * hidden ones), sorted by path. A folder or file already met (named twice, or through a link) is read once. */
static void add_input(DocList *l, const char *path, Seen *seen) {
    struct stat st;
    if (stat(path, &st) != 0) fatal("tok: input %s: %s; give text files, directories or .jsonl files", path, strerror(errno));
    if (!first_visit(seen, &st)) { skip_note(seen, path, "already read (named twice, or through a link)"); return; }
    if (!S_ISDIR(st.st_mode)) { add_file(l, path); return; }
    char **names = NULL;
    size_t n = 0, cap = 0;
    collect_files(path, &names, &n, &cap, 0, seen);
    if (n == 0) fatal("tok: directory %s holds no files", path);
    qsort(names, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n; i++) {
        add_file(l, names[i]);
        free(names[i]);
    }
    free(names);
}

/* All INPUTS into docs (fatal() if they hold none); the folders and files met are left in *seen. */
static void add_inputs(DocList *docs, char **inputs, int n, Seen *seen, const char *cmd) {
    for (int i = 0; i < n; i++) add_input(docs, inputs[i], seen);
    if (docs->n == 0) fatal("tok %s: the inputs hold no documents", cmd);
    if (seen->skipped) fprintf(stderr, "note: tok %s: %zu entries of the inputs skipped (see above)\n", cmd, seen->skipped);
}

/* fatal() if the folder dir (of `flag shown`) is an input folder or lies inside one: what is written there would be
 * read as documents by the next run over the same inputs (and could replace an input). dir need not exist yet: its
 * nearest existing folder is checked, then each folder above it. */
static void refuse_in_inputs(const char *flag, const char *shown, const char *dir, const Seen *seen) {
    size_t cap = strlen(dir) + 8 + 3 * 4096;
    char *p = xmalloc(cap, "path");
    snprintf(p, cap, "%s", dir);
    struct stat st;
    while (stat(p, &st) != 0) { /* the nearest existing ancestor */
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) { snprintf(p, cap, "%s", slash == p ? "/" : "."); break; }
        *slash = 0;
    }
    for (int up = 0; up < 4096 && stat(p, &st) == 0; up++) {
        if (was_visited(seen, &st))
            fatal("%s %s lies inside the input folder %s: the next run would read what is written there as "
                  "documents; choose %s outside the inputs", flag, shown, p, !strcmp(flag, "--out") ? "an --out" :
                  "a file");
        struct stat parent;
        size_t l = strlen(p);
        if (l + 4 >= cap) break;
        strcpy(p + l, "/..");
        if (stat(p, &parent) != 0 || (parent.st_dev == st.st_dev && parent.st_ino == st.st_ino)) break; /* the root */
    }
    free(p);
}

static void refuse_out_in_inputs(const char *out, const Seen *seen) { refuse_in_inputs("--out", out, out, seen); }

/* fatal() unless tok train's --words-out names a file of its own: not an input document (it was written over), not
 * in an input folder, not the encoder.json or vocab.bpe of --out (the vocabulary would replace it). */
static void refuse_words_out(const char *words, const char *out, const Seen *seen) {
    struct stat st, d, o;
    if (stat(words, &st) == 0 && was_visited(seen, &st))
        fatal("--words-out %s is an input of this run: writing it would destroy it; name a file outside the inputs",
              words);
    size_t len = strlen(words);
    char *dir = xmalloc(len + 2, "path");
    snprintf(dir, len + 2, "%s", words);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? words + (slash - dir) + 1 : words;
    if (!slash) snprintf(dir, len + 2, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    refuse_in_inputs("--words-out", words, dir, seen);
    if ((!strcmp(base, "encoder.json") || !strcmp(base, "vocab.bpe")) && stat(dir, &d) == 0 && stat(out, &o) == 0 &&
        d.st_dev == o.st_dev && d.st_ino == o.st_ino)
        fatal("--words-out %s is the %s that --out %s receives: the vocabulary would replace it; name another file",
              words, base, out);
    free(dir);
}

/* fatal() if an input document's file is one of the shards of this --name in --out, which the run replaces or
 * removes (`tok shards --out o --name s o/s_train_000000.bin`). */
static void refuse_inputs_among_shards(const DocList *docs, const char *out, const char *prefix) {
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < docs->n; i++) {
        const char *path = docs->docs[i].path, *slash = strrchr(path, '/');
        const char *base = slash ? slash + 1 : path;
        if (strncmp(base, prefix, pl) || (strncmp(base + pl, "_train_", 7) && strncmp(base + pl, "_val_", 5)) ||
            !ends_with(base, ".bin"))
            continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
        if (same_file(dir, out))
            fatal("tok shards: input %s is a shard of --name %s in --out %s, which this run replaces; give other "
                  "inputs, another --out or another --name", path, prefix, out);
    }
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
    for (size_t i = 0; i < l->n; i++) /* FNV-1a 64: a fixed, documented hash, so the split is the same everywhere */
        hs[i] = (HashIdx){hash_fnv1a64(HASH_FNV1A64_OFFSET, l->docs[i].name, strlen(l->docs[i].name)), i};
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

/* The new shard set is written into a temp folder inside --out (OUT/.PREFIX.tok-shards.XXXXXX) and moved into place
 * only once every shard is complete (staging_commit), so the set in --out is the old one or the new one, never a
 * mixture of two corpora. Until then an error (fatal() on any thread) or SIGINT, SIGTERM or SIGHUP removes the temp
 * folder and leaves --out as it was. One staging per process (the fatal hook and the signal thread find it here). */
typedef struct {
    const char *out, *prefix;
    char tmp[4200];        /* the temp folder */
    int committed;         /* the new set is in place */
    int made_out;          /* --out did not exist before this run: an error or signal removes it again (if empty) */
    pthread_mutex_t mu;    /* recursive: held while a shard is written and during the commit */
} Staging;
static Staging staging;

/* The signals that stop a run: SIGINT, SIGTERM, SIGHUP. */
static void stop_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
}

/* Blocks them in the calling thread (old: the mask before, or NULL); a blocked signal waits until unblocked. */
static void block_stop_signals(sigset_t *old) {
    sigset_t set;
    stop_signals(&set);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

/* Removes the temp folder and what is in it (our shards and shard temp files only; no subfolders). */
static void staging_remove(void) {
    DIR *d = opendir(staging.tmp);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[4500];
            snprintf(p, sizeof p, "%s/%s", staging.tmp, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(staging.tmp);
    if (staging.made_out) rmdir(staging.out); /* a failed run leaves no empty --out of its own making */
}

/* fatal()'s hook: no temp shard outlives an error, whichever thread hit it. */
static void staging_abort(int status) {
    (void)status;
    pthread_mutex_lock(&staging.mu); /* waits for a shard being written; never unlocked: the process ends */
    if (!staging.committed) staging_remove();
}

/* The signal thread: SIGINT, SIGTERM and SIGHUP (blocked in every other thread) end the run here, between shard
 * writes, so the temp folder is removed whole and an old set is never half replaced. Exit status 128 + signal. */
static void *staging_signals(void *arg) {
    sigset_t *set = arg;
    int sig = 0;
    sigwait(set, &sig);
    pthread_mutex_lock(&staging.mu);
    if (!staging.committed) staging_remove();
    fprintf(stderr, "\ntok shards: stopped by signal %d (%s); %s\n", sig, strsignal(sig),
            staging.committed ? "the new shards were already in place"
                              : "the unfinished shards were removed and the shards in --out are as they were");
    _exit(128 + sig);
}

/* Creates the temp folder inside out (which exists), sets the fatal hook and starts the signal thread. */
static void staging_begin(const char *out, const char *prefix) {
    staging.out = out;
    staging.prefix = prefix;
    snprintf(staging.tmp, sizeof staging.tmp, "%s/.%s.tok-shards.XXXXXX", out, prefix);
    if (!mkdtemp(staging.tmp))
        fatal("cannot create a temp folder in --out %s: %s; check that it is a writable folder", out, strerror(errno));
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&staging.mu, &ma);
    set_fatal_hook(staging_abort);
    static sigset_t set;
    block_stop_signals(NULL); /* threads started after this inherit the mask */
    stop_signals(&set);
    pthread_t t;
    if (pthread_create(&t, NULL, staging_signals, &set) != 0) fatal("tok shards: cannot start the signal thread");
    pthread_detach(t);
}

static void shard_name(char *path, size_t cap, const char *dir, const char *split, int i) {
    snprintf(path, cap, "%s/%s_%s_%06d.bin", dir, staging.prefix, split, i);
}

/* Removes the shards of this prefix in --out numbered at or past the new set's count of their split (counts: train,
 * val), gaps and all: what is left of the old set once the new one is in place. */
static void remove_old_extra(const int counts[2]) {
    static const char *const splits[2] = {"_train_", "_val_"};
    DIR *d = opendir(staging.out);
    if (!d) return;
    size_t pl = strlen(staging.prefix);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, staging.prefix, pl)) continue;
        for (int k = 0; k < 2; k++) {
            size_t sl = strlen(splits[k]);
            const char *num = e->d_name + pl + sl; /* NNNNNN.bin */
            if (strncmp(e->d_name + pl, splits[k], sl) || strlen(num) != 10 || strspn(num, "0123456789") != 6 ||
                strcmp(num + 6, ".bin") || atoi(num) < counts[k])
                continue;
            char path[4500];
            snprintf(path, sizeof path, "%s/%s", staging.out, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

/* Moves the n_train + n_val new shards from the temp folder into --out, then removes the old set's shards of this
 * prefix the new one does not have (numbered from n on), then the temp folder. A destination that is a folder is
 * refused before anything moves. Signals wait until it is done, and so does another `tok shards` committing into the
 * same --out (an flock on the folder), so two runs at once leave one set or the other. */
static void staging_commit(int n_train, int n_val) {
    const char *splits[2] = {"train", "val"};
    int counts[2] = {n_train, n_val};
    char from[4500], to[4500];
    pthread_mutex_lock(&staging.mu);
    int dfd = open(staging.out, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || flock(dfd, LOCK_EX) != 0)
        fatal("cannot lock --out %s to move the new shards into place: %s", staging.out, strerror(errno));
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < counts[k]; i++) {
            struct stat st;
            shard_name(to, sizeof to, staging.out, splits[k], i);
            if (lstat(to, &st) == 0 && S_ISDIR(st.st_mode))
                fatal("%s is a folder, where a shard goes; move it away and run tok shards again (nothing was "
                      "replaced)", to);
        }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < counts[k]; i++) {
            shard_name(from, sizeof from, staging.tmp, splits[k], i);
            shard_name(to, sizeof to, staging.out, splits[k], i);
            if (rename(from, to) != 0)
                fatal("cannot move %s into place: %s; --out now holds some new shards beside old ones: run tok shards "
                      "again", to, strerror(errno));
        }
    remove_old_extra(counts);
    staging_remove();
    fsync_parent_dir(to);
    staging.committed = 1;
    close(dfd); /* releases the lock */
    pthread_mutex_unlock(&staging.mu);
}

/* Accumulates one split's tokens and writes a shard into the temp folder whenever shard_tokens are ready. */
typedef struct {
    const char *split;
    int32_t *buf;
    size_t n, shard_tokens, total;
    int files;
    int token_bytes; /* 2 (GPT-2) or 4 (Llama) */
    const char *tokenizer; /* recorded in every shard's header (dataloader.h) */
    uint64_t vocab_hash;   /* likewise */
} Writer;

static void writer_flush(Writer *w) {
    char path[4500];
    shard_name(path, sizeof path, staging.tmp, w->split, w->files++);
    pthread_mutex_lock(&staging.mu);
    shard_write_tokenizer(path, w->buf, w->n, w->token_bytes, w->tokenizer, w->vocab_hash);
    pthread_mutex_unlock(&staging.mu);
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

static int cmd_shards(int argc, char **argv) {
    char *out = NULL, *name = "shard", *val_percent = "5", *shard_tokens = "100000000", *threads_s = NULL,
         *field = "text", *data = "data", *model = "gpt2";
    char threads_def[24];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(threads_def, sizeof threads_def, "%ld", ncpu > 0 ? ncpu : 1);
    threads_s = threads_def;
    Opt opts[] = {
        {"out", "DIR", "directory for the shards (created; the earlier PREFIX_* set there is replaced whole, "
                       "once the new one is complete: room for both is needed meanwhile)", &out},
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
    Seen seen = {0};
    add_inputs(&docs, argv + first, argc - first, &seen, "shards");
    refuse_out_in_inputs(out, &seen);
    refuse_inputs_among_shards(&docs, out, name);
    size_t n_val = choose_val(&docs, percent);
    Tokenizer *tok = tokenizer_load(model, data);
    /* llm.c's layouts: uint16 GPT-2 style, uint32 Llama and any vocabulary beyond 65536 tokens */
    int token_bytes = strncmp(model, "llama", 5) && tokenizer_vocab_size(tok) <= 65536 ? 2 : 4;
    const char *kind = tokenizer_kind(tok); /* recorded in each shard's header ("bpe" for a learned folder) */
    uint64_t vocab_hash = tokenizer_vocab_hash(model, data); /* likewise: tells learned vocabularies apart */
    if (!vocab_hash) fatal("tok shards: cannot read the vocabulary files of --model %s to hash them", model);
    struct stat out_st;
    staging.made_out = stat(out, &out_st) != 0;
    make_dirs(out);
    staging_begin(out, name);

    Pool pool = {.tok = tok, .docs = &docs, .field = field, .window = (size_t)threads * 8 + 16};
    pool.res = xcalloc(docs.n, sizeof(Result), "results");
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    pthread_t *tids = xmalloc((size_t)threads * sizeof(pthread_t), "threads");
    for (int i = 0; i < threads; i++)
        if (pthread_create(&tids[i], NULL, worker, &pool) != 0) fatal("tok shards: cannot start thread %d", i);

    Writer wt = {"train", xmalloc(per_shard * sizeof(int32_t), "shard buffer"), 0, per_shard, 0, 0, token_bytes, kind,
                 vocab_hash};
    Writer wv = {"val", NULL, 0, per_shard, 0, 0, token_bytes, kind, vocab_hash};
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
    staging_commit(wt.files, wv.files);
    double secs = now_seconds() - t0;
    printf("tok shards: %zu documents (%zu val), %zu tokens (train %zu, val %zu) in %.2f s, %.0f tokens/s, "
           "%d threads; %d train + %d val shards in %s\n",
           docs.n, n_val, wt.total + wv.total, wt.total, wv.total, secs, (wt.total + wv.total) / secs, threads,
           wt.files, wv.files, out);
    xflush_stdout();

    free_docs(&docs);
    free(seen.ids);
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
    Seen seen = {0};
    add_inputs(&docs, argv + first, argc - first, &seen, "train");
    refuse_out_in_inputs(out, &seen);
    if (words) refuse_words_out(words, out, &seen);
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
    /* a signal waits until a file being written is in place (a few ms), so none is left half-written */
    sigset_t old;
    if (words) {
        block_stop_signals(&old);
        bpe_trainer_write_words(bt, words);
        sigprocmask(SIG_SETMASK, &old, NULL);
    }
    bpe_trainer_train(bt, vocab);
    block_stop_signals(&old);
    bpe_trainer_write(bt, out);
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("tok train: %zu training documents (%zu held out), %lld bytes, %zu distinct pieces; %d tokens (%d "
           "merges) in %.2f s (counting %.2f s); wrote %s/encoder.json and %s/vocab.bpe\n",
           docs.n - n_val, n_val, (long long)bpe_trainer_text_bytes(bt), bpe_trainer_n_words(bt), vocab,
           bpe_trainer_n_merges(bt), now_seconds() - t0, t1 - t0, out, out);
    xflush_stdout();
    free_docs(&docs);
    free(seen.ids);
    bpe_trainer_free(bt);
    return 0;
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

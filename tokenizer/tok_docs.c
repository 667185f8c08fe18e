/*
 * tokenizer/tok_docs.c - the inputs of `tok shards` and `tok train` as a list of documents: the walk of files and
 * folders (each real folder and file once, whatever links lead to it; a note for what is skipped), a .jsonl file as
 * one document a non-blank line, the refusal of outputs that lie among the inputs, the train/validation split by a
 * hash of each document's name, and one document's text.
 * Not for: parsing a jsonl line (tok_jsonl.c), encoding or writing shards (tok_shards.c).
 */
#define _GNU_SOURCE
#define _FILE_OFFSET_BITS 64
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/util.h"
#include "tokenizer/tok.h"

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
void add_inputs(DocList *docs, char **inputs, int n, Seen *seen, const char *cmd) {
    for (int i = 0; i < n; i++) add_input(docs, inputs[i], seen);
    if (docs->n == 0) fatal("tok %s: the inputs hold no documents", cmd);
    if (seen->skipped) fprintf(stderr, "note: tok %s: %zu entries of the inputs skipped (see above)\n", cmd, seen->skipped);
}

/* fatal() if the folder dir (of `flag shown`) is an input folder or lies inside one: what is written there would be
 * read as documents by the next run over the same inputs (and could replace an input); or if dir is (or lies under)
 * an input file. dir need not exist yet: its nearest existing path is checked, then each folder above it. */
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
        if (was_visited(seen, &st) && !S_ISDIR(st.st_mode)) /* the path, or a folder of it, is an input file */
            fatal("%s %s names an input: %s is an input file of this run; choose %s outside the inputs", flag, shown,
                  p, !strcmp(flag, "--out") ? "an --out" : "a file");
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

void refuse_out_in_inputs(const char *out, const Seen *seen) { refuse_in_inputs("--out", out, out, seen); }

void refuse_words_out(const char *words, const char *out, const Seen *seen) {
    struct stat st, d, o;
    if (stat(words, &st) == 0 && was_visited(seen, &st))
        fatal("--words-out %s is an input of this run: writing it would destroy it; name a file outside the inputs",
              words);
    /* refused now, not after the training (which writes it only once it succeeded), as bpe_trainer_write_words would */
    if (lstat(words, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        fatal("%s exists and is not a regular file (a folder, device or pipe); name another file", words);
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

void refuse_inputs_among_shards(const DocList *docs, const char *out, const char *prefix) {
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

double parse_val_percent(const char *s) {
    char *end;
    double percent = strtod(s, &end);
    if (end == s || *end || percent < 0 || percent >= 100) fatal("--val-percent: '%s' is not a number in [0, 100)", s);
    return percent;
}

void free_docs(DocList *l) {
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
size_t choose_val(DocList *l, double percent) {
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

/* Reads one document's text (a file, or a jsonl line's field). */
char *doc_text(const Doc *d, const char *field, size_t *len) {
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

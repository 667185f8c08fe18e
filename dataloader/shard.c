/*
 * dataloader/shard.c - the token-shard file: atomic writer, header validation, whole-file reader, and the
 * expansion of a shard specification (file, directory, glob) into a sorted path list.
 * Not for: batching, sampling or shuffling (dataloader.c).
 *
 * All sizes and offsets are 64-bit so shards over 4 GB work. The header's token count header[2] is read as an
 * unsigned 32-bit value: llm.c writes it as a non-negative int32, so every llm.c shard reads the same, and our
 * shards may hold up to 2^32 - 1 tokens.
 */
#define _FILE_OFFSET_BITS 64
#include "dataloader/dataloader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define HEADER_BYTES (SHARD_HEADER_INTS * 4)

static uint32_t le32_get(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void le32_put(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static char *path_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n, "path");
    memcpy(p, s, n);
    return p;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* writer */

/* fatal() naming the OS error err after removing the half-written temp file (a, or NULL where the atomic write
 * removed it), so a failed write leaves nothing behind. */
static void write_failed(AtomicFile *a, const char *path, const char *what, int err) {
    atomic_discard(a);
    fatal("%s: %s failed (%s); check free disk space and permissions of the directory", path, what,
          strerror(err));
}

static const char *const TOKENIZER_CODES[] = {NULL, "gpt2", "llama2", "llama3", "bpe4k", "bpe"};

void shard_write(const char *path, const int32_t *tokens, size_t n, int token_bytes) {
    shard_write_tokenizer(path, tokens, n, token_bytes, NULL, 0);
}

void shard_write_tokenizer(const char *path, const int32_t *tokens, size_t n, int token_bytes, const char *tokenizer,
                           uint64_t vocab_hash) {
    uint32_t code = 0;
    for (uint32_t c = 1; tokenizer && c < sizeof TOKENIZER_CODES / sizeof TOKENIZER_CODES[0]; c++)
        if (!strcmp(tokenizer, TOKENIZER_CODES[c])) code = c;
    if (tokenizer && !code) fatal("%s: unknown tokenizer '%s' for the shard header; use gpt2, bpe4k, llama2, llama3 or bpe", path, tokenizer);
    if (token_bytes != 2 && token_bytes != 4)
        fatal("%s: token size %d bytes is not supported; use 2 (uint16, GPT-2) or 4 (uint32, Llama)", path,
              token_bytes);
    if ((uint64_t)n > UINT32_MAX)
        fatal("%s: %zu tokens do not fit one shard (at most %u); split the data into several shards", path, n,
              UINT32_MAX);
    /* Check every id before creating any file: nothing half-written on bad input. */
    int32_t max_id = token_bytes == 2 ? 65535 : INT32_MAX;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > max_id)
            fatal("%s: token %zu has id %d, which does not fit a %s shard; use token_bytes 4 for vocabularies "
                  "over 65536 tokens",
                  path, i, tokens[i], token_bytes == 2 ? "uint16" : "uint32");

    AtomicFile *a = atomic_open(path); /* a temp file beside path (never a planted link), renamed onto it at the end */
    if (!a)
        fatal("cannot open %s.tmp.XXXXXX for writing: %s; check that the directory exists and is writable", path,
              strerror(errno));
    FILE *f = atomic_stream(a);

    unsigned char header[HEADER_BYTES];
    memset(header, 0, sizeof header);
    le32_put(header + 0, token_bytes == 2 ? SHARD_MAGIC_U16 : SHARD_MAGIC_U32);
    le32_put(header + 4, token_bytes == 2 ? SHARD_VERSION_U16 : SHARD_VERSION_U32);
    le32_put(header + 8, (uint32_t)n);
    if (code) {
        le32_put(header + 12, SHARD_TOKENIZER_MARK);
        le32_put(header + 16, code);
        le32_put(header + 20, (uint32_t)vocab_hash);
        le32_put(header + 24, (uint32_t)(vocab_hash >> 32));
    }
    if (fwrite(header, 1, sizeof header, f) != sizeof header) write_failed(a, path, "writing the header", atomic_error(a));

    /* Encode in chunks so memory stays small for large shards. */
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = xmalloc((size_t)CHUNK * 4, "shard write buffer");
    for (size_t start = 0; start < n; start += CHUNK) {
        size_t m = n - start < CHUNK ? n - start : CHUNK;
        for (size_t i = 0; i < m; i++) {
            uint32_t v = (uint32_t)tokens[start + i];
            if (token_bytes == 2) {
                buf[2 * i] = (unsigned char)v;
                buf[2 * i + 1] = (unsigned char)(v >> 8);
            } else {
                le32_put(buf + 4 * i, v);
            }
        }
        if (fwrite(buf, 1, m * (size_t)token_bytes, f) != m * (size_t)token_bytes) {
            free(buf);
            write_failed(a, path, "writing tokens", atomic_error(a));
        }
    }
    free(buf);
    int err = atomic_close(a); /* flush, fsync, close */
    if (err) write_failed(a, path, "fsync or close", err);
    /* the rename, then an fsync of the directory so the rename itself survives a crash */
    if ((err = atomic_place(a, path))) write_failed(NULL, path, "rename of the temp file", err);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* readers */

/* Reads and validates path's header into header[] (HEADER_BYTES); returns the token count, *token_bytes the size. */
static int64_t read_checked_header(const char *path, unsigned char *header, int *token_bytes);

int64_t shard_check_header(const char *path, int *token_bytes) {
    unsigned char header[HEADER_BYTES];
    return read_checked_header(path, header, token_bytes);
}

const char *shard_tokenizer(const char *path) {
    unsigned char header[HEADER_BYTES];
    read_checked_header(path, header, NULL);
    if (le32_get(header + 12) != SHARD_TOKENIZER_MARK) return NULL;
    uint32_t code = le32_get(header + 16);
    if (code == 0 || code >= sizeof TOKENIZER_CODES / sizeof TOKENIZER_CODES[0])
        fatal("%s: unknown tokenizer code %u in the header; re-create the shard with this runtime's `tok shards`", path,
              code);
    return TOKENIZER_CODES[code];
}

uint64_t shard_vocab_hash(const char *path) {
    unsigned char header[HEADER_BYTES];
    read_checked_header(path, header, NULL);
    if (le32_get(header + 12) != SHARD_TOKENIZER_MARK) return 0;
    return (uint64_t)le32_get(header + 20) | (uint64_t)le32_get(header + 24) << 32;
}

void shard_check_vocab(const char *spec, uint64_t vocab_hash, const char *tokenizer, int notes) {
    int n, unhashed = 0, hashed = 0;
    char **paths = shard_list(spec, &n);
    for (int i = 0; i < n; i++) {
        uint64_t h = shard_vocab_hash(paths[i]);
        if (h && vocab_hash && h != vocab_hash)
            fatal("%s was made with a vocabulary of hash %016llx, but the tokenizer %s has hash %016llx (another "
                  "vocabulary of the same size?); pass the --tokenizer the shards were made with, or re-make them with "
                  "`tok shards --model %s`", paths[i], (unsigned long long)h, tokenizer ? tokenizer : "(none)",
                  (unsigned long long)vocab_hash, tokenizer ? tokenizer : "DIR");
        hashed += h != 0;
        unhashed += !h && shard_tokenizer(paths[i]) != NULL;
    }
    if (notes && vocab_hash && unhashed)
        fprintf(stderr, "note: %d of %d shards of %s record no vocabulary hash (made before `tok shards` recorded it); "
                "only their tokenizer kind is checked; re-make them to check the vocabulary too\n", unhashed, n, spec);
    if (notes && !vocab_hash && hashed)
        fprintf(stderr, "note: the vocabulary hash the shards of %s record is not checked: the files of tokenizer %s "
                "are not at hand\n", spec, tokenizer ? tokenizer : "(none)");
    shard_list_free(paths, n);
}

static int64_t read_checked_header(const char *path, unsigned char *header, int *token_bytes) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        int err = errno;
        fatal("cannot open token shard %s: %s; check the path (see scripts/fetch_data.sh to make shards)", path,
              strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        fatal("cannot stat token shard %s: %s", path, strerror(err));
    }
    ssize_t got = pread(fd, header, HEADER_BYTES, 0);
    close(fd);
    if (got != (ssize_t)HEADER_BYTES)
        fatal("%s: file has %lld bytes, shorter than the %d-byte shard header; is this a token shard?", path,
              (long long)st.st_size, HEADER_BYTES);

    uint32_t magic = le32_get(header), version = le32_get(header + 4), n = le32_get(header + 8);
    int tb;
    if (magic == SHARD_MAGIC_U16) {
        if (version != SHARD_VERSION_U16)
            fatal("%s: unknown version %u for magic %d (expected %d, uint16 tokens); re-create the shard with "
                  "this runtime's tokenizer",
                  path, version, SHARD_MAGIC_U16, SHARD_VERSION_U16);
        tb = 2;
    } else if (magic == SHARD_MAGIC_U32) {
        if (version != SHARD_VERSION_U32)
            fatal("%s: unknown version %u for magic %d (expected %d, uint32 tokens); re-create the shard with "
                  "this runtime's tokenizer",
                  path, version, SHARD_MAGIC_U32, SHARD_VERSION_U32);
        tb = 4;
    } else {
        fatal("%s: bad magic %u (expected %d for GPT-2 uint16 shards or %d for uint32 shards); is this a token "
              "shard?",
              path, magic, SHARD_MAGIC_U16, SHARD_MAGIC_U32);
    }
    int64_t expected = (int64_t)HEADER_BYTES + (int64_t)n * tb;
    int64_t actual = (int64_t)st.st_size;
    if (actual < expected)
        fatal("%s: truncated: header says %u tokens (%lld bytes) but the file has %lld bytes; re-create the shard",
              path, n, (long long)expected, (long long)actual);
    if (actual > expected)
        fatal("%s: %lld bytes longer than its header says (%u tokens, %lld bytes); the header's token count is "
              "wrong or data were appended; re-create the shard",
              path, (long long)(actual - expected), n, (long long)expected);
    if (token_bytes) *token_bytes = tb;
    return (int64_t)n;
}

int32_t *shard_read_all(const char *path, int64_t *n_tokens, int vocab_size) {
    int tb;
    int64_t n = shard_check_header(path, &tb);
    if ((uint64_t)n > SIZE_MAX / 4) fatal("%s: %lld tokens do not fit in memory on this machine", path, (long long)n);
    int32_t *tokens = xmalloc((size_t)n * 4, "shard tokens");
    FILE *f = xfopen(path, "rb", "check the path");
    if (fseeko(f, HEADER_BYTES, SEEK_SET) != 0) fatal("%s: cannot seek past the header", path);
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = xmalloc((size_t)CHUNK * 4, "shard read buffer");
    for (int64_t start = 0; start < n; start += CHUNK) {
        size_t m = (size_t)(n - start < CHUNK ? n - start : CHUNK);
        xfread(buf, m * (size_t)tb, f, path, "tokens");
        for (size_t i = 0; i < m; i++) {
            uint32_t v = tb == 2 ? (uint32_t)buf[2 * i] | (uint32_t)buf[2 * i + 1] << 8 : le32_get(buf + 4 * i);
            if (v > INT32_MAX)
                fatal("%s: token id %u at token offset %lld does not fit an int32 token id; the shard is corrupt, "
                      "re-create it", path, v, (long long)(start + (int64_t)i));
            if (vocab_size > 0 && v >= (uint32_t)vocab_size)
                fatal("%s: token id %u at token offset %lld is >= vocab_size %d; the data were tokenized for a "
                      "different vocabulary than the model's (re-tokenize or pick the matching model)",
                      path, v, (long long)(start + (int64_t)i), vocab_size);
            tokens[start + (int64_t)i] = (int32_t)v;
        }
    }
    free(buf);
    fclose(f);
    *n_tokens = n;
    return tokens;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* shard lists */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int ends_with_bin(const char *name) {
    size_t n = strlen(name);
    return n > 4 && strcmp(name + n - 4, ".bin") == 0;
}

char **shard_list(const char *spec, int *count) {
    char **paths = NULL;
    int n = 0, cap = 0;
    struct stat st;
    if (spec == NULL || spec[0] == '\0') fatal("empty shard specification; pass a file, directory or glob");
    if (stat(spec, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(spec);
        if (!d) {
            int err = errno;
            fatal("cannot read directory %s: %s", spec, strerror(err));
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (!ends_with_bin(e->d_name)) continue;
            size_t len = strlen(spec) + strlen(e->d_name) + 2;
            char *p = xmalloc(len, "path");
            snprintf(p, len, "%s/%s", spec, e->d_name);
            struct stat fst;
            if (stat(p, &fst) != 0 || !S_ISREG(fst.st_mode)) {
                free(p);
                continue;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                paths = realloc(paths, (size_t)cap * sizeof *paths);
                if (!paths) fatal("out of memory listing %s", spec);
            }
            paths[n++] = p;
        }
        closedir(d);
        if (n == 0) fatal("%s: directory holds no *.bin token shards; tokenize data into it first", spec);
    } else if (stat(spec, &st) == 0) {
        /* a FIFO would block the run and a pipe (--train <(cat shard.bin)) gives its bytes once: a shard is read
         * by offset, many times */
        if (!S_ISREG(st.st_mode))
            fatal("%s: is not a regular file (a pipe, FIFO or device); token shards are read by offset, again and "
                  "again: pass the shard file itself, a folder or a glob", spec);
        paths = xmalloc(sizeof *paths, "path list");
        paths[n++] = path_dup(spec);
    } else {
        glob_t g;
        int rc = glob(spec, 0, NULL, &g);
        if (rc != 0 || g.gl_pathc == 0) {
            if (rc == 0) globfree(&g);
            fatal("%s: no token shard matches (not a file, directory or matching glob); check the path", spec);
        }
        paths = xmalloc(g.gl_pathc * sizeof *paths, "path list");
        for (size_t i = 0; i < g.gl_pathc; i++) {
            struct stat fst;
            if (stat(g.gl_pathv[i], &fst) == 0 && S_ISREG(fst.st_mode)) paths[n++] = path_dup(g.gl_pathv[i]);
        }
        globfree(&g);
        if (n == 0) fatal("%s: the glob matches no regular files; check the path", spec);
    }
    qsort(paths, (size_t)n, sizeof *paths, cmp_str);
    *count = n;
    return paths;
}

void shard_list_free(char **paths, int count) {
    if (!paths) return;
    for (int i = 0; i < count; i++) free(paths[i]);
    free(paths);
}

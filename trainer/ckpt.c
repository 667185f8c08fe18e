/* trainer/ckpt.c - see ckpt.h. The files of one checkpoint: the per-rank state files, the manifest (written, read,
 * verified) and the options it records. Knows nothing about models or optimizers; the checkpoints of an --out as a
 * line (listing, latest, retention, roll-back) are in ckpt_line.c. */
#define _GNU_SOURCE
#include "trainer/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/log.h"
#include "common/util.h"

#include <xxhash.h>

_Static_assert(sizeof(CkptState) == 256, "CkptState must have a fixed 256-byte layout");

uint64_t param_table_hash(const ParamTable *t) {
    uint64_t h = HASH_FNV1A64_OFFSET;
    for (int i = 0; i < t->n; i++) {
        const ParamSlice *s = &t->slices[i];
        h = hash_fnv1a64(h, s->name, strlen(s->name) + 1);
        int64_t v[4 + PARAM_MAX_DIMS] = {s->layer, s->decay, s->dense_only, s->bucket};
        for (int d = 0; d < s->ndim; d++) v[4 + d] = (int64_t)s->shape[d];
        h = hash_fnv1a64(h, v, sizeof v);
        uint64_t off = s->offset;
        h = hash_fnv1a64(h, &off, sizeof off);
    }
    return h;
}

void ckpt_dir(char *buf, size_t cap, const char *out, int step) {
    if ((size_t)snprintf(buf, cap, "%s/ckpt_%d", out, step) >= cap) fatal("--out path '%s' is too long", out);
}

void ckpt_write_state(const char *dir, CkptState *h, const void *blob) {
    char path[4200];
    snprintf(path, sizeof path, "%s/state_rank%d.bin", dir, h->rank);
    h->magic = CKPT_MAGIC;
    h->version = CKPT_VERSION;
    h->header_bytes = sizeof(CkptState);
    h->blob_fnv = hash_fnv1a64(HASH_FNV1A64_OFFSET, blob, h->blob_bytes);
    write_file_atomic(path, h, sizeof *h, blob, h->blob_bytes);
}

void *ckpt_read_state(const char *path, CkptState *h) {
    const char *fix = "the checkpoint is damaged; resume from an older one (--resume <out>/ckpt_<step>)";
    FILE *f = xfopen(path, "rb", "pass a complete checkpoint directory to --resume, or --resume latest");
    int64_t size = file_size(path);
    if (size < (int64_t)sizeof *h) fatal("%s: %lld bytes, shorter than the %zu-byte header; %s", path,
                                         (long long)size, sizeof *h, fix);
    xfread(h, sizeof *h, f, path, "the checkpoint header");
    if (h->magic != CKPT_MAGIC) fatal("%s: bad magic 0x%08x, not a training-state file; %s", path, h->magic, fix);
    if (h->version != CKPT_VERSION)
        fatal("%s: version %u, this program reads version %d; resume with the program that wrote it", path,
              h->version, CKPT_VERSION);
    if (h->header_bytes != sizeof *h) fatal("%s: header of %u bytes, expected %zu; %s", path, h->header_bytes,
                                            sizeof *h, fix);
    if (h->blob_bytes > (uint64_t)size || (uint64_t)size != sizeof *h + h->blob_bytes) /* first test: no wrap */
        fatal("%s: %lld bytes, header says %llu; the file is truncated. %s", path, (long long)size,
              (unsigned long long)(sizeof *h + h->blob_bytes), fix);
    h->model_id[CKPT_ID_MAX - 1] = '\0';
    void *blob = xmalloc(h->blob_bytes, "optimizer state");
    xfread(blob, h->blob_bytes, f, path, "the optimizer state");
    fclose(f);
    if (hash_fnv1a64(HASH_FNV1A64_OFFSET, blob, h->blob_bytes) != h->blob_fnv)
        fatal("%s: optimizer state fails its checksum; %s", path, fix);
    return blob;
}

int ckpt_file_hash(const char *path, int64_t *bytes, uint64_t *hash) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    XXH3_state_t *st = XXH3_createState();
    if (!st) fatal("out of memory hashing %s", path);
    XXH3_64bits_reset(st);
    size_t cap = (size_t)8 << 20, got;
    unsigned char *buf = xmalloc(cap, "checksum buffer");
    int64_t n = 0;
    while ((got = fread(buf, 1, cap, f)) > 0) {
        XXH3_64bits_update(st, buf, got);
        n += (int64_t)got;
    }
    int ok = !ferror(f);
    fclose(f);
    free(buf);
    *bytes = n;
    *hash = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return ok;
}

int utf8_valid(const char *str) { return utf8_valid_n(str, strlen(str)); }

/* A value as the manifest records it: a JSON string when it is valid UTF-8, else {"hex": "<its bytes>"} so that
 * any bytes (a Latin-1 path, a prompt cut mid-character) come back exactly. */
static void put_value(char *buf, size_t cap, size_t *len, const char *v) {
    if (utf8_valid(v)) {
        json_escape(buf, cap, len, v);
        return;
    }
    *len += (size_t)snprintf(buf + *len, cap - *len, "{\"hex\": \"");
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        *len += (size_t)snprintf(buf + *len, cap - *len, "%02x", *p);
    *len += (size_t)snprintf(buf + *len, cap - *len, "\"}");
}

/* The key of the manifest's own checksum, its last member: XXH3-64 of the text before it (version 3 on). */
#define MANIFEST_SEAL_KEY ", \"manifest_xxh3\": \""

void ckpt_write_manifest(const char *dir, int world, int step, int n_files, const CkptFile *files, int n_opts,
                         const char *const *opt_names, const char *const *opt_values, const char *init_hash,
                         const char *run_id, const char *parent) {
    size_t cap = 1024 + (size_t)n_files * 400 + 6 * strlen(parent ? parent : ""), len = 0;
    for (int i = 0; i < n_opts; i++) cap += 6 * (strlen(opt_names[i]) + strlen(opt_values[i])) + 32;
    char *buf = xmalloc(cap, "manifest");
    len += (size_t)snprintf(buf, cap, "{\"format\": \"scape-ckpt\", \"version\": %d, \"world\": %d, \"step\": %d, "
                                      "\"files\": [", CKPT_MANIFEST_VERSION, world, step);
    for (int i = 0; i < n_files; i++) {
        len += (size_t)snprintf(buf + len, cap - len, "%s{\"name\": ", i ? ", " : "");
        json_escape(buf, cap, &len, files[i].name);
        len += (size_t)snprintf(buf + len, cap - len, ", \"bytes\": %lld, \"xxh3\": \"%016llx\"}",
                                (long long)files[i].bytes, (unsigned long long)files[i].xxh3);
    }
    len += (size_t)snprintf(buf + len, cap - len, "], \"init_xxh3\": \"%s\", \"run_id\": \"%s\", \"parent\": ",
                            init_hash ? init_hash : "", run_id ? run_id : "");
    put_value(buf, cap, &len, parent ? parent : "");
    len += (size_t)snprintf(buf + len, cap - len, ", \"options\": {");
    for (int i = 0; i < n_opts; i++) {
        if (i) len += (size_t)snprintf(buf + len, cap - len, ", ");
        json_escape(buf, cap, &len, opt_names[i]);
        len += (size_t)snprintf(buf + len, cap - len, ": ");
        put_value(buf, cap, &len, opt_values[i]);
    }
    /* last, the manifest's own checksum: of every byte before the key, so that a byte changed anywhere in it (an
     * option's value, which a resume takes as given) makes the checkpoint fail verification (manifest_seal_ok) */
    len += (size_t)snprintf(buf + len, cap - len, "}");
    if (len + 64 >= cap) fatal("%s: manifest longer than its buffer (internal error)", dir);
    unsigned long long seal = (unsigned long long)XXH3_64bits(buf, len);
    len += (size_t)snprintf(buf + len, cap - len, MANIFEST_SEAL_KEY "%016llx\"}\n", seal);
    if (len + 1 >= cap) fatal("%s: manifest longer than its buffer (internal error)", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    write_file_atomic(path, buf, len, NULL, 0);
    free(buf);
}

char *ckpt_read_text(const char *path, size_t max) {
    /* O_NONBLOCK: a FIFO planted at the name never blocks the reader (--verify-ckpt, --resume latest); only a
     * regular file is read, and one already too long is not read at all */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return NULL;
    }
    size_t len;
    char *buf = read_stream(f, &len); /* NULL on a read error: unreadable */
    fclose(f);
    if (buf && len > max) { /* it grew since the size was taken */
        free(buf);
        return NULL;
    }
    return buf;
}

/* The manifest is our own fixed format, so a key search is enough; anything unexpected makes it incomplete. */
static int json_int_after(const char *s, const char *key, long long *v) {
    const char *p = strstr(s, key);
    if (!p) return 0;
    p += strlen(key);
    char *end;
    *v = strtoll(p, &end, 10);
    return end != p;
}

static int hexval(char h) {
    return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
}

static void put_utf8(char *out, size_t cap, size_t *n, unsigned cp) {
    unsigned char b[4];
    int k;
    if (cp < 0x80) { b[0] = (unsigned char)cp; k = 1; }
    else if (cp < 0x800) { b[0] = (unsigned char)(0xC0 | cp >> 6); b[1] = (unsigned char)(0x80 | (cp & 0x3F)); k = 2; }
    else { b[0] = (unsigned char)(0xE0 | cp >> 12); b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
           b[2] = (unsigned char)(0x80 | (cp & 0x3F)); k = 3; }
    for (int i = 0; i < k; i++)
        if (*n + 1 < cap) out[(*n)++] = (char)b[i];
}

/* Parses the JSON string literal at *p (which must point at its opening quote) into out (NUL-terminated, cut at
 * cap - 1 bytes); advances *p past the closing quote. 0 if it is not a well-formed literal. Handles the escapes
 * json_escape writes (and \/ \b \f \r and any \uXXXX of the BMP). */
static int parse_json_string(const char **p, char *out, size_t cap) {
    const char *s = *p;
    size_t n = 0;
    if (*s != '"') return 0;
    for (s++; *s && *s != '"'; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch != '\\') {
            if (n + 1 < cap) out[n++] = (char)ch;
            continue;
        }
        s++;
        switch (*s) {
        case '"': case '\\': case '/': if (n + 1 < cap) out[n++] = *s; break;
        case 'n': if (n + 1 < cap) out[n++] = '\n'; break;
        case 't': if (n + 1 < cap) out[n++] = '\t'; break;
        case 'r': if (n + 1 < cap) out[n++] = '\r'; break;
        case 'b': if (n + 1 < cap) out[n++] = '\b'; break;
        case 'f': if (n + 1 < cap) out[n++] = '\f'; break;
        case 'u': {
            unsigned cp = 0;
            for (int i = 1; i <= 4; i++) {
                int v = hexval(s[i]);
                if (v < 0) return 0;
                cp = cp * 16 + (unsigned)v;
            }
            if (cp == 0) return 0; /* would cut the C string */
            put_utf8(out, cap, &n, cp);
            s += 4;
            break;
        }
        default: return 0;
        }
    }
    if (*s != '"') return 0;
    if (cap) out[n] = '\0';
    *p = s + 1;
    return 1;
}

static void skip_ws(const char **p) {
    while (**p == ' ' || **p == '\n' || **p == '\t' || **p == '\r') (*p)++;
}

/* 1 if the manifest text m carries its own checksum and the bytes before it match; a manifest of
 * version 3 or later must carry one (an older one has none), and one that carries one is checked whatever its
 * version says. 0 with the reason in why. */
static int manifest_seal_ok(const char *m, long long version, char *why, size_t why_cap) {
    const char *key = NULL;
    for (const char *p = strstr(m, MANIFEST_SEAL_KEY); p; p = strstr(p + 1, MANIFEST_SEAL_KEY)) key = p;
    if (!key) {
        if (version < 3) return 1;
        snprintf(why, why_cap, "manifest.json has no checksum of its own (manifest_xxh3): it was cut or edited");
        return 0;
    }
    const char *hex = key + strlen(MANIFEST_SEAL_KEY), *end = hex;
    unsigned long long want = 0;
    while (end - hex < 16 && hexval(*end) >= 0) want = want * 16 + (unsigned long long)hexval(*end++);
    const char *rest = end - hex == 16 && end[0] == '"' && end[1] == '}' ? end + 2 : NULL;
    while (rest && (*rest == '\n' || *rest == ' ' || *rest == '\r' || *rest == '\t')) rest++;
    if (!rest || *rest) { /* the checksum is the last member: nothing after it but the closing brace */
        snprintf(why, why_cap, "manifest.json is malformed (its own checksum)");
        return 0;
    }
    unsigned long long got = (unsigned long long)XXH3_64bits(m, (size_t)(key - m));
    if (got != want) {
        snprintf(why, why_cap, "manifest.json fails its own checksum (xxh3 %016llx, it says %016llx): its content is "
                 "damaged", got, want);
        return 0;
    }
    return 1;
}

/* The manifest check behind ckpt_is_complete (hashes = 0) and ckpt_verify (hashes = 1). */
static int check_dir(const char *dir, int hashes, CkptInfo *info, char *why, size_t why_cap) {
    char path[4200];
    memset(info, 0, sizeof *info);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *m = ckpt_read_text(path, CKPT_MANIFEST_MAX);
    if (!m) {
        struct stat st;
        if (lstat(path, &st) == 0)
            snprintf(why, why_cap, "manifest.json cannot be read as a file (a FIFO, a folder, unreadable, or over %d "
                     "MiB)", CKPT_MANIFEST_MAX >> 20);
        else snprintf(why, why_cap, "no manifest.json (the run stopped while writing it)");
        return 0;
    }
    long long w, s, version = 1;
    json_int_after(m, "\"version\":", &version);
    if (!manifest_seal_ok(m, version, why, why_cap)) {
        free(m);
        return 0;
    }
    int ok = json_int_after(m, "\"world\":", &w) && json_int_after(m, "\"step\":", &s) && w >= 1 && w <= INT_MAX &&
             s >= 0 && s <= INT_MAX;
    if (!ok) snprintf(why, why_cap, "manifest.json is malformed");
    const char *p = strstr(m, "\"files\":");
    const char *files_end = p ? strchr(p, ']') : NULL;
    while (ok && p && files_end && (p = strstr(p, "{\"name\": ")) && p < files_end) {
        p += 9;
        char name[256];
        const char *obj_end = strchr(p, '}');
        long long bytes;
        if (!parse_json_string(&p, name, sizeof name) || !obj_end || strchr(name, '/') || !name[0] ||
            !json_int_after(p, "\"bytes\":", &bytes) || strstr(p, "\"bytes\":") > obj_end) {
            snprintf(why, why_cap, "manifest.json is malformed");
            ok = 0;
            break;
        }
        char file[4500];
        snprintf(file, sizeof file, "%s/%s", dir, name);
        int64_t have = file_size(file);
        if (have != bytes) {
            if (have < 0) snprintf(why, why_cap, "%s is missing", name);
            else snprintf(why, why_cap, "%s has %lld bytes, manifest says %lld", name, (long long)have, bytes);
            ok = 0;
            break;
        }
        const char *hx = strstr(p, "\"xxh3\": \"");
        if (version >= 2 && (!hx || hx > obj_end)) {
            snprintf(why, why_cap, "manifest.json has no checksum for %s", name);
            ok = 0;
            break;
        }
        if (hashes && hx && hx < obj_end) {
            char *end;
            unsigned long long want = strtoull(hx + 9, &end, 16);
            int64_t got_bytes;
            uint64_t got;
            if (end != hx + 9 + 16 || *end != '"') {
                snprintf(why, why_cap, "manifest.json is malformed (checksum of %s)", name);
                ok = 0;
                break;
            }
            if (!ckpt_file_hash(file, &got_bytes, &got)) {
                snprintf(why, why_cap, "%s cannot be read: %s", name, strerror(errno));
                ok = 0;
                break;
            }
            if (got != (uint64_t)want || got_bytes != bytes) {
                snprintf(why, why_cap, "%s fails its checksum (xxh3 %016llx, manifest says %016llx): its content is "
                         "damaged", name, (unsigned long long)got, want);
                ok = 0;
                break;
            }
            info->n_hashed++;
        }
        info->n_files++;
        info->bytes += bytes;
        p = obj_end;
    }
    if (ok && info->n_files == 0) {
        snprintf(why, why_cap, "manifest.json lists no files");
        ok = 0;
    }
    free(m);
    if (ok) {
        info->step = (int)s;
        info->world = (int)w;
    }
    return ok;
}

int ckpt_is_complete(const char *dir, int *step, int *world, char *why, size_t why_cap) {
    CkptInfo info;
    if (!check_dir(dir, 0, &info, why, why_cap)) return 0;
    *step = info.step;
    *world = info.world;
    return 1;
}

int ckpt_verify(const char *dir, CkptInfo *info, char *why, size_t why_cap) {
    return check_dir(dir, 1, info, why, why_cap);
}

/* Parses a value put_value wrote at *p into out (cap bytes with the NUL); 0 if malformed. */
static int parse_value(const char **p, char *out, size_t cap) {
    if (**p == '"') return parse_json_string(p, out, cap);
    const char *s = *p;
    if (strncmp(s, "{\"hex\": \"", 9) != 0) return 0;
    s += 9;
    size_t n = 0;
    while (*s != '"') {
        int hi = hexval(s[0]), lo = hi < 0 ? -1 : hexval(s[1]);
        if (hi < 0 || lo < 0 || n + 1 >= cap || (hi == 0 && lo == 0)) return 0;
        out[n++] = (char)(hi * 16 + lo);
        s += 2;
    }
    if (strncmp(s, "\"}", 2) != 0) return 0;
    out[n] = '\0';
    *p = s + 2;
    return 1;
}

/* The run_id a manifest's text records into id ("" when it has none). */
static void run_id_of(const char *m, char *id, size_t cap) {
    const char *ri = strstr(m, "\"run_id\": ");
    id[0] = '\0';
    if (ri) {
        ri += 10;
        if (!parse_json_string(&ri, id, cap)) id[0] = '\0';
    }
}

void ckpt_run_id(const char *dir, char *id, size_t cap) {
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *m = ckpt_read_text(path, CKPT_MANIFEST_MAX);
    id[0] = '\0';
    if (m) run_id_of(m, id, cap);
    free(m);
}

int ckpt_read_options(const char *dir, CkptOptions *o) {
    memset(o, 0, sizeof *o);
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *m = ckpt_read_text(path, CKPT_MANIFEST_MAX);
    if (!m) return 0;
    const char *ih = strstr(m, "\"init_xxh3\": ");
    if (ih) {
        ih += 13;
        if (!parse_json_string(&ih, o->init_hash, sizeof o->init_hash)) o->init_hash[0] = '\0';
    }
    run_id_of(m, o->run_id, sizeof o->run_id);
    const char *p = strstr(m, "\"options\": {");
    int ok = p != NULL;
    if (ok) p += 12;
    /* every step checks before it moves, so p never passes the terminating NUL; values are parsed into one scratch
     * buffer as long as the manifest (no value is cut) and kept at their own length */
    size_t vcap = strlen(m) + 1;
    char *value = xmalloc(vcap, "checkpoint option");
    while (ok) {
        skip_ws(&p);
        if (*p == '}') break;
        if (o->n) {
            if (*p != ',') { ok = 0; break; }
            p++;
            skip_ws(&p);
        }
        char name[64];
        ok = parse_json_string(&p, name, sizeof name);
        if (ok) skip_ws(&p);
        ok = ok && *p == ':';
        if (ok) {
            p++;
            skip_ws(&p);
        }
        ok = ok && parse_value(&p, value, vcap) && o->n < CKPT_MAX_OPTIONS;
        if (!ok) break;
        snprintf(o->names[o->n], sizeof o->names[o->n], "%s", name);
        o->values[o->n] = strdup(value);
        if (!o->values[o->n++]) fatal("out of memory reading the options of %s", path);
    }
    free(value);
    free(m);
    if (!ok) ckpt_options_free(o);
    return ok;
}

void ckpt_options_free(CkptOptions *o) {
    for (int i = 0; i < o->n; i++) free(o->values[i]);
    o->n = 0;
}

void ckpt_invalidate(const char *dir) {
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (unlink(path) == 0) fsync_parent_dir(path);
}

/* trainer/ckpt.c - see ckpt.h. File I/O for checkpoints; knows nothing about models or optimizers. */
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

#include "common/log.h"
#include "common/util.h"

#include <xxhash.h>

_Static_assert(sizeof(CkptState) == 256, "CkptState must have a fixed 256-byte layout");

uint64_t fnv1a64(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t param_table_hash(const ParamTable *t) {
    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < t->n; i++) {
        const ParamSlice *s = &t->slices[i];
        h = fnv1a64(h, s->name, strlen(s->name) + 1);
        int64_t v[4 + PARAM_MAX_DIMS] = {s->layer, s->decay, s->dense_only, s->bucket};
        for (int d = 0; d < s->ndim; d++) v[4 + d] = (int64_t)s->shape[d];
        h = fnv1a64(h, v, sizeof v);
        uint64_t off = s->offset;
        h = fnv1a64(h, &off, sizeof off);
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
    h->blob_fnv = fnv1a64(FNV_OFFSET, blob, h->blob_bytes);
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
    if (fnv1a64(FNV_OFFSET, blob, h->blob_bytes) != h->blob_fnv)
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
    len += (size_t)snprintf(buf + len, cap - len, "}}\n");
    if (len + 1 >= cap) fatal("%s: manifest longer than its buffer (internal error)", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    write_file_atomic(path, buf, len, NULL, 0);
    free(buf);
}

static char *slurp(const char *path, size_t max) {
    int64_t size = file_size(path);
    if (size < 0 || (uint64_t)size > max) return NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = xmalloc((size_t)size + 1, "manifest");
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    buf[got] = '\0';
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

/* The manifest check behind ckpt_is_complete (hashes = 0) and ckpt_verify (hashes = 1). */
static int check_dir(const char *dir, int hashes, CkptInfo *info, char *why, size_t why_cap) {
    char path[4200];
    memset(info, 0, sizeof *info);
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *m = slurp(path, CKPT_MANIFEST_MAX);
    if (!m) {
        snprintf(why, why_cap, "no manifest.json (the run stopped while writing it)");
        return 0;
    }
    long long w, s, version = 1;
    json_int_after(m, "\"version\":", &version);
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

/* The run_id of the checkpoint <dir> into id ("" when its manifest records none or cannot be read). */
static void dir_run_id(const char *dir, char *id, size_t cap) {
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *m = slurp(path, CKPT_MANIFEST_MAX);
    id[0] = '\0';
    if (m) run_id_of(m, id, cap);
    free(m);
}

int ckpt_read_options(const char *dir, CkptOptions *o) {
    memset(o, 0, sizeof *o);
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *m = slurp(path, CKPT_MANIFEST_MAX);
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

int ckpt_parse_name(const char *name, int *step) {
    if (strncmp(name, "ckpt_", 5) != 0) return 0;
    const char *d = name + 5;
    size_t n = strlen(d);
    if (n == 0 || n > 10 || (d[0] == '0' && n > 1)) return 0; /* "ckpt_010" is not step 10's name */
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] < '0' || d[i] > '9') return 0; /* no sign, space or suffix */
        v = v * 10 + (d[i] - '0');
    }
    if (v > INT_MAX) return 0;
    *step = (int)v;
    return 1;
}

int ckpt_list(const char *out, int **steps_out) {
    DIR *d = opendir(out);
    int n = 0, cap = 16;
    int *steps = xmalloc((size_t)cap * sizeof(int), "checkpoint list");
    if (d) {
        struct dirent *e;
        /* readdir_r is deprecated in glibc; only the compute thread of rank 0 lists checkpoints */
        // cppcheck-suppress readdirCalled
        while ((e = readdir(d))) {
            int v;
            if (!ckpt_parse_name(e->d_name, &v)) continue;
            if (n == cap) {
                cap *= 2;
                steps = xrealloc(steps, (size_t)cap * sizeof(int), "checkpoint list");
            }
            steps[n++] = v;
        }
        closedir(d);
    }
    for (int i = 1; i < n; i++) /* insertion sort, descending: a run has few checkpoints */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    *steps_out = steps;
    return n;
}

int ckpt_find_latest_why(const char *out, char *buf, size_t cap, int *n_seen, char *why_all, size_t why_cap) {
    return ckpt_find_latest_upto(out, INT_MAX, buf, cap, n_seen, why_all, why_cap);
}

int ckpt_find_latest_upto(const char *out, int max_step, char *buf, size_t cap, int *n_seen, char *why_all,
                          size_t why_cap) {
    int *steps;
    int n = ckpt_list(out, &steps), found = -1;
    size_t wl = 0;
    if (why_all && why_cap) why_all[0] = '\0';
    for (int i = 0; i < n && found < 0; i++) {
        if (steps[i] > max_step) continue;
        char dir[4200], why[512];
        CkptInfo info;
        ckpt_dir(dir, sizeof dir, out, steps[i]);
        int ok = ckpt_verify(dir, &info, why, sizeof why);
        if (ok && info.step != steps[i]) {
            snprintf(why, sizeof why, "its manifest says step %d", info.step);
            ok = 0;
        }
        if (ok) {
            snprintf(buf, cap, "%s", dir);
            found = info.step;
        } else {
            if (!why_all) fprintf(stderr, "note: skipping checkpoint %s: %s\n", dir, why);
            else if (wl + 1 < why_cap)
                wl += (size_t)snprintf(why_all + wl, why_cap - wl, "note: skipping checkpoint %s: %s\n", dir, why);
            if (why_all && wl >= why_cap) wl = why_cap - 1;
        }
    }
    if (n_seen) *n_seen = n;
    free(steps);
    return found;
}

int ckpt_find_latest(const char *out, char *buf, size_t cap) {
    return ckpt_find_latest_why(out, buf, cap, NULL, NULL, 0);
}

/* Removes every entry of the directory open as dfd (never following a link: a link inside is removed itself), then
 * the directory `name` under parent. Best effort. */
static void remove_dir_at(int parent, const char *name) {
    int dfd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd >= 0) {
        DIR *d = fdopendir(dfd);
        if (d) {
            struct dirent *e;
            // cppcheck-suppress readdirCalled ; see ckpt_list
            while ((e = readdir(d))) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
                if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno == EISDIR) remove_dir_at(dirfd(d), e->d_name);
            }
            closedir(d); /* closes dfd */
        } else {
            close(dfd);
        }
    }
    unlinkat(parent, name, AT_REMOVEDIR);
}

#define CKPT_DELETING ".deleting-" /* prefix of a checkpoint being removed: ".deleting-ckpt_<step>" */

/* Removes <out>/ckpt_<step>: renamed first to .deleting-ckpt_<step> (atomic: from then on it is no checkpoint for
 * anyone), then emptied and removed; a run killed half-way leaves the renamed folder, which the next prune
 * finishes. A symbolic link is never followed: only real directories get here (ckpt_prune). */
static void remove_ckpt_dir(const char *out, int step) {
    int ofd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (ofd < 0) return;
    char name[64], gone[96];
    snprintf(name, sizeof name, "ckpt_%d", step);
    snprintf(gone, sizeof gone, CKPT_DELETING "%s", name);
    struct stat st; /* a removal of this step killed half-way left its folder: renaming onto it would fail */
    if (fstatat(ofd, gone, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISDIR(st.st_mode)) remove_dir_at(ofd, gone);
        else unlinkat(ofd, gone, 0);
    }
    if (renameat(ofd, name, ofd, gone) == 0) {
        fsync(ofd);
        remove_dir_at(ofd, gone);
    }
    close(ofd);
}

void ckpt_remove(const char *out, int step) {
    char dir[4200];
    ckpt_dir(dir, sizeof dir, out, step);
    if (is_symlink(dir)) return;
    remove_ckpt_dir(out, step);
}

int ckpt_recorded(const char *out, int *newest) {
    int *steps;
    int n = ckpt_list(out, &steps), count = 0;
    *newest = -1;
    for (int i = 0; i < n; i++) {
        char path[4300];
        ckpt_dir(path, sizeof path, out, steps[i]);
        strncat(path, "/manifest.json", sizeof path - strlen(path) - 1);
        if (file_exists(path)) {
            if (!count) *newest = steps[i];
            count++;
        }
    }
    free(steps);
    return count;
}

/* Finishes removals that a killed run left half-done (.deleting-ckpt_<step> folders). */
static void finish_removals(const char *out) {
    int ofd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (ofd < 0) return;
    DIR *d = fdopendir(dup(ofd));
    if (d) {
        struct dirent *e;
        // cppcheck-suppress readdirCalled ; see ckpt_list
        while ((e = readdir(d))) {
            int v;
            if (strncmp(e->d_name, CKPT_DELETING, strlen(CKPT_DELETING)) == 0 &&
                ckpt_parse_name(e->d_name + strlen(CKPT_DELETING), &v)) {
                struct stat st;
                if (fstatat(ofd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
                    remove_dir_at(ofd, e->d_name);
            }
        }
        closedir(d);
    }
    close(ofd);
}

void ckpt_prune(const char *out, int keep, int verified_step) {
    finish_removals(out);
    char ours[32] = "", dir[4200];
    if (verified_step >= 0) {
        ckpt_dir(dir, sizeof dir, out, verified_step);
        dir_run_id(dir, ours, sizeof ours);
    }
    int *steps;
    int n = ckpt_list(out, &steps), kept = 0;
    for (int i = 0; i < n; i++) {
        char why[512], man[4300], id[32];
        int s, w;
        ckpt_dir(dir, sizeof dir, out, steps[i]);
        struct stat st;
        /* a link (another run's checkpoint linked in to continue from it) is not ours: neither counted nor removed */
        if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (!ckpt_is_complete(dir, &s, &w, why, sizeof why)) { /* never delete what we did not finish, but: */
            /* a folder older than the checkpoint just verified with no manifest was never finished nor will be:
             * what a removal killed between its unlinks (or an older save that died) left; nothing complete */
            snprintf(man, sizeof man, "%s/manifest.json", dir);
            if (verified_step >= 0 && steps[i] < verified_step && lstat(man, &st) != 0 && errno == ENOENT)
                remove_ckpt_dir(out, steps[i]);
            continue;
        }
        dir_run_id(dir, id, sizeof id);
        if (ours[0] && id[0] && strcmp(id, ours) != 0) continue; /* another run's, copied in: not ours either */
        if (keep <= 0) continue;
        if (kept < keep) kept++;
        else if (steps[i] != verified_step) remove_ckpt_dir(out, steps[i]);
    }
    free(steps);
}

void ckpt_invalidate(const char *dir) {
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (unlink(path) == 0) fsync_parent_dir(path);
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Lineage: one line of checkpoints per --out. */

#define ROLLBACK_FILE ".rollback" /* "<step> abandoned/<leaf>\n" while checkpoints are being moved aside */
#define ABANDONED "abandoned"

/* Opens the folder `name` under the folder open as parent, making it if absent, never through a link (a link planted
 * there would take the checkpoints outside --out): the descriptor, or -1 with why naming shown. */
static int open_own_dir(int parent, const char *name, const char *shown, char *why, size_t why_cap) {
    if (mkdirat(parent, name, 0755) != 0 && errno != EEXIST) {
        snprintf(why, why_cap, "cannot create %s: %s", shown, strerror(errno));
        return -1;
    }
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR))
        snprintf(why, why_cap, "%s is a symbolic link or not a folder; the checkpoints a roll-back moves aside stay "
                 "inside --out: remove it", shown);
    else if (fd < 0)
        snprintf(why, why_cap, "cannot open %s: %s", shown, strerror(errno));
    return fd;
}

/* 1 if <out>/ckpt_<step> is a folder that never got its manifest (an unfinished write: nothing to keep). */
static int unfinished(const char *out, int step) {
    char dir[4200], man[4300];
    ckpt_dir(dir, sizeof dir, out, step);
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    return !is_symlink(dir) && !file_exists(man);
}

/* Moves every ckpt_<s> with s > step into <out>/abandoned/<leaf>/ (names kept; a link moves as a link), through
 * descriptors opened without following links; an unfinished one is removed instead. 0 on success. */
static int move_newer(const char *out, int step, const char *leaf, char *why, size_t why_cap) {
    char shown[4400];
    int ofd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC), afd = -1, dfd = -1, rc = -1;
    if (ofd < 0) {
        snprintf(why, why_cap, "cannot open %s: %s", out, strerror(errno));
        return -1;
    }
    snprintf(shown, sizeof shown, "%s/" ABANDONED, out);
    afd = open_own_dir(ofd, ABANDONED, shown, why, why_cap);
    snprintf(shown, sizeof shown, "%s/" ABANDONED "/%s", out, leaf);
    if (afd >= 0) dfd = open_own_dir(afd, leaf, shown, why, why_cap);
    if (dfd >= 0) {
        int *steps;
        int n = ckpt_list(out, &steps);
        rc = 0;
        for (int i = 0; i < n && rc == 0; i++) {
            if (steps[i] <= step) continue;
            if (unfinished(out, steps[i])) {
                remove_ckpt_dir(out, steps[i]);
                continue;
            }
            char name[64];
            snprintf(name, sizeof name, "ckpt_%d", steps[i]);
            if (renameat(ofd, name, dfd, name) != 0) {
                snprintf(why, why_cap, "cannot move %s/%s to %s: %s", out, name, shown, strerror(errno));
                rc = -1;
            }
        }
        free(steps);
        fsync(dfd);
        fsync(afd);
        fsync(ofd);
        close(dfd);
    }
    if (afd >= 0) close(afd);
    close(ofd);
    return rc;
}

/* The pending roll-back's step and folder leaf (the name under abandoned/): 1, 0 if none is pending, -1 with why. */
static int read_rollback(const char *out, int *step, char *leaf, size_t leaf_cap, char *why, size_t why_cap) {
    char path[4400];
    snprintf(path, sizeof path, "%s/" ROLLBACK_FILE, out);
    if (is_symlink(path)) {
        snprintf(why, why_cap, "%s is a symbolic link; remove it", path);
        return -1;
    }
    char *m = slurp(path, 4096);
    if (!m) return 0;
    char dest[256];
    const char *pre = ABANDONED "/";
    int ok = sscanf(m, "%d %255s", step, dest) == 2 && *step >= 0 && strncmp(dest, pre, strlen(pre)) == 0;
    const char *l = dest + strlen(pre);
    ok = ok && l[0] && !strchr(l, '/') && strcmp(l, ".") != 0 && strcmp(l, "..") != 0 && strlen(l) < leaf_cap;
    free(m);
    if (!ok) {
        snprintf(why, why_cap, "%s is malformed; remove it after checking the ckpt_<step> folders", path);
        return -1;
    }
    snprintf(leaf, leaf_cap, "%s", l);
    return 1;
}

int ckpt_rollback_pending(const char *out, int *step, char *why, size_t why_cap) {
    char leaf[256];
    return read_rollback(out, step, leaf, sizeof leaf, why, why_cap);
}

int ckpt_finish_rollback(const char *out, char *why, size_t why_cap) {
    int step;
    char leaf[256], path[4400];
    int pending = read_rollback(out, &step, leaf, sizeof leaf, why, why_cap);
    if (pending <= 0) return pending;
    if (move_newer(out, step, leaf, why, why_cap) != 0) return -1;
    snprintf(path, sizeof path, "%s/" ROLLBACK_FILE, out);
    if (unlink(path) == 0) fsync_parent_dir(path);
    return 1;
}

/* How many ckpt_<s> with s > step a roll-back to step would move (links and those with a manifest). */
static int count_later(const char *out, int step) {
    int *steps;
    int n = ckpt_list(out, &steps), later = 0;
    for (int i = 0; i < n; i++)
        if (steps[i] > step && !unfinished(out, steps[i])) later++;
    free(steps);
    return later;
}

int ckpt_abandon_check(const char *out, int step, char *why, size_t why_cap) {
    if (count_later(out, step) == 0) return 0;
    char path[4400];
    snprintf(path, sizeof path, "%s/" ABANDONED, out);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        snprintf(why, why_cap, "%s is a symbolic link or not a folder; the checkpoints a roll-back moves aside stay "
                 "inside --out: remove it", path);
        return -1;
    }
    return 0;
}

int ckpt_abandon_after(const char *out, int step, char *dest_out, size_t dest_cap, char *why, size_t why_cap) {
    if (ckpt_abandon_check(out, step, why, why_cap) < 0) return -1; /* before anything changes */
    int *steps;
    int n = ckpt_list(out, &steps);
    for (int i = 0; i < n; i++)
        if (steps[i] > step && unfinished(out, steps[i])) remove_ckpt_dir(out, steps[i]);
    free(steps);
    int newer = count_later(out, step);
    if (!newer) return 0;
    char shown[4400], leaf[64];
    snprintf(shown, sizeof shown, "%s/" ABANDONED, out);
    int ofd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int afd = ofd < 0 ? -1 : open_own_dir(ofd, ABANDONED, shown, why, why_cap);
    if (ofd >= 0) close(ofd);
    if (afd < 0) return -1;
    for (int k = 1;; k++) { /* a name no earlier roll-back used */
        if (k == 1) snprintf(leaf, sizeof leaf, "after_ckpt_%d", step);
        else snprintf(leaf, sizeof leaf, "after_ckpt_%d.%d", step, k);
        struct stat st;
        if (fstatat(afd, leaf, &st, AT_SYMLINK_NOFOLLOW) != 0) break;
    }
    close(afd);
    char line[300], path[4400];
    int len = snprintf(line, sizeof line, "%d " ABANDONED "/%s\n", step, leaf);
    snprintf(path, sizeof path, "%s/" ROLLBACK_FILE, out);
    write_file_atomic(path, line, (size_t)len, NULL, 0);
    if (ckpt_finish_rollback(out, why, why_cap) < 0) return -1;
    snprintf(dest_out, dest_cap, "%s/" ABANDONED "/%s", out, leaf);
    return newer;
}

int ckpt_line_check(const char *out, char *why, size_t why_cap) {
    int *steps;
    int n = ckpt_list(out, &steps), n_runs = 0;
    char (*ids)[32] = xcalloc((size_t)(n ? n : 1), 32, "run identities");
    char (*runs)[32] = xcalloc((size_t)(n ? n : 1), 32, "run identities");
    for (int i = 0; i < n; i++) {
        char dir[4200];
        ckpt_dir(dir, sizeof dir, out, steps[i]);
        dir_run_id(dir, ids[i], sizeof ids[i]);
        int seen = !ids[i][0]; /* a checkpoint from before run identities fits any run */
        for (int k = 0; k < n_runs && !seen; k++) seen = strcmp(runs[k], ids[i]) == 0;
        if (!seen) snprintf(runs[n_runs++], sizeof runs[0], "%s", ids[i]);
    }
    size_t len = 0;
    if (why_cap) why[0] = '\0';
    for (int k = 0; n_runs > 1 && k < n_runs; k++) { /* "run X: ckpt_6; run Y: ckpt_4, ckpt_2" */
        len += (size_t)snprintf(why + len, len < why_cap ? why_cap - len : 0, "%srun %s:", k ? "; " : "", runs[k]);
        for (int i = 0, first = 1; i < n && len < why_cap; i++)
            if (strcmp(ids[i], runs[k]) == 0) {
                len += (size_t)snprintf(why + len, why_cap - len, "%s ckpt_%d", first ? "" : ",", steps[i]);
                first = 0;
            }
        if (len >= why_cap) len = why_cap - 1;
    }
    free(ids);
    free(runs);
    free(steps);
    return n_runs > 1 ? -1 : 0;
}

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
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

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

void ckpt_write_manifest(const char *dir, int world, int step, int n_files, const char *const *names,
                         const int64_t *sizes) {
    size_t cap = 256 + (size_t)n_files * 320, len = 0;
    char *buf = xmalloc(cap, "manifest");
    len += (size_t)snprintf(buf, cap, "{\"format\": \"scape-ckpt\", \"version\": 1, \"world\": %d, \"step\": %d, "
                                      "\"files\": [", world, step);
    for (int i = 0; i < n_files; i++) {
        len += (size_t)snprintf(buf + len, cap - len, "%s{\"name\": ", i ? ", " : "");
        json_escape(buf, cap, &len, names[i]);
        len += (size_t)snprintf(buf + len, cap - len, ", \"bytes\": %lld}", (long long)sizes[i]);
    }
    len += (size_t)snprintf(buf + len, cap - len, "]}\n");
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

int ckpt_is_complete(const char *dir, int *step, int *world, char *why, size_t why_cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *m = slurp(path, 1 << 20);
    if (!m) {
        snprintf(why, why_cap, "no manifest.json (the run stopped while writing it)");
        return 0;
    }
    long long w, s;
    int ok = json_int_after(m, "\"world\":", &w) && json_int_after(m, "\"step\":", &s) && w >= 1 && w <= INT_MAX && s >= 0 && s <= INT_MAX;
    if (!ok) snprintf(why, why_cap, "manifest.json is malformed");
    const char *p = strstr(m, "\"files\":");
    int n_files = 0;
    while (ok && p && (p = strstr(p, "{\"name\": \""))) {
        p += 10;
        const char *q = strchr(p, '"');
        long long bytes;
        if (!q || q - p >= 256 || memchr(p, '/', (size_t)(q - p)) || !json_int_after(q, "\"bytes\":", &bytes)) {
            snprintf(why, why_cap, "manifest.json is malformed");
            ok = 0;
            break;
        }
        char file[4500];
        snprintf(file, sizeof file, "%s/%.*s", dir, (int)(q - p), p);
        int64_t have = file_size(file);
        if (have != bytes) {
            if (have < 0) snprintf(why, why_cap, "%.*s is missing", (int)(q - p), p);
            else snprintf(why, why_cap, "%.*s has %lld bytes, manifest says %lld", (int)(q - p), p,
                          (long long)have, bytes);
            ok = 0;
        }
        n_files++;
        p = q;
    }
    if (ok && n_files == 0) {
        snprintf(why, why_cap, "manifest.json lists no files");
        ok = 0;
    }
    free(m);
    if (ok) {
        *step = (int)s;
        *world = (int)w;
    }
    return ok;
}

/* Steps of all ckpt_<step> directories under out, newest first; returns the count. */
static int list_ckpts(const char *out, int **steps_out) {
    DIR *d = opendir(out);
    int n = 0, cap = 16;
    int *steps = xmalloc((size_t)cap * sizeof(int), "checkpoint list");
    if (d) {
        struct dirent *e;
        /* readdir_r is deprecated in glibc; only the compute thread of rank 0 lists checkpoints */
        // cppcheck-suppress readdirCalled
        while ((e = readdir(d))) {
            char *end;
            if (strncmp(e->d_name, "ckpt_", 5) != 0) continue;
            long v = strtol(e->d_name + 5, &end, 10);
            if (end == e->d_name + 5 || *end != '\0' || v < 0) continue;
            if (n == cap) {
                cap *= 2;
                steps = realloc(steps, (size_t)cap * sizeof(int));
                if (!steps) fatal("out of memory listing checkpoints");
            }
            steps[n++] = (int)v;
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

int ckpt_find_latest(const char *out, char *buf, size_t cap) {
    int *steps;
    int n = list_ckpts(out, &steps), found = -1;
    for (int i = 0; i < n && found < 0; i++) {
        char dir[4200], why[512];
        int s, w;
        ckpt_dir(dir, sizeof dir, out, steps[i]);
        if (ckpt_is_complete(dir, &s, &w, why, sizeof why) && s == steps[i]) {
            snprintf(buf, cap, "%s", dir);
            found = s;
        } else {
            fprintf(stderr, "note: skipping incomplete checkpoint %s: %s\n", dir, why);
        }
    }
    free(steps);
    return found;
}

static void remove_ckpt_dir(const char *dir) {
    ckpt_invalidate(dir);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    // cppcheck-suppress readdirCalled ; see list_ckpts
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[4500];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

void ckpt_prune(const char *out, int keep) {
    if (keep <= 0) return;
    int *steps;
    int n = list_ckpts(out, &steps), kept = 0;
    for (int i = 0; i < n; i++) {
        char dir[4200], why[512];
        int s, w;
        ckpt_dir(dir, sizeof dir, out, steps[i]);
        if (!ckpt_is_complete(dir, &s, &w, why, sizeof why)) continue; /* never delete what we did not finish */
        if (kept < keep) kept++;
        else remove_ckpt_dir(dir);
    }
    free(steps);
}

void ckpt_invalidate(const char *dir) {
    char path[4400];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (unlink(path) == 0) fsync_parent_dir(path);
}

/* common/log.c - see log.h. Each event is built in memory and written with write(2) on an O_APPEND descriptor. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

struct JsonLog {
    int fd;
    char *path;
    char *line; /* the event being built; grows as needed (samples can be long) */
    size_t len, cap;
};

static void reserve(JsonLog *l, size_t more) {
    if (l->len + more + 1 <= l->cap) return;
    while (l->len + more + 1 > l->cap) l->cap = l->cap ? 2 * l->cap : 4096;
    l->line = realloc(l->line, l->cap);
    if (!l->line) fatal("out of memory building a log line of %zu bytes", l->cap);
}

static void append(JsonLog *l, const char *fmt, ...) PRINTF_LIKE(2, 3);
static void append(JsonLog *l, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    reserve(l, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(l->line + l->len, l->cap - l->len, fmt, ap);
    va_end(ap);
    l->len += (size_t)n;
}

void json_escape(char *buf, size_t cap, size_t *len, const char *s) {
    size_t n = *len;
#define PUT(c) do { if (n + 1 < cap) buf[n++] = (c); } while (0)
    PUT('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') { PUT('\\'); PUT((char)*p); }
        else if (*p == '\n') { PUT('\\'); PUT('n'); }
        else if (*p == '\t') { PUT('\\'); PUT('t'); }
        else if (*p < 0x20) {
            char tmp[8];
            snprintf(tmp, sizeof tmp, "\\u%04x", *p);
            for (char *q = tmp; *q; q++) PUT(*q);
        } else if (*p < 0x80) {
            PUT((char)*p);
        } else {
            /* copy a well-formed UTF-8 sequence; a stray byte (a sample can end mid-character) becomes U+FFFD so
             * the line stays valid JSON for strict readers */
            int need = (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 ? 3 : -1;
            int k = 1;
            if (need > 0)
                while (k <= need && (p[k] & 0xC0) == 0x80) k++;
            if (need > 0 && k == need + 1 && *p >= 0xC2) {
                for (int j = 0; j <= need; j++) PUT((char)p[j]);
                p += need;
            } else {
                const char *rep = "\\ufffd";
                for (const char *q = rep; *q; q++) PUT(*q);
            }
        }
    }
    PUT('"');
#undef PUT
    if (n < cap) buf[n] = '\0';
    *len = n;
}

JsonLog *jlog_open(const char *path) {
    JsonLog *l = xcalloc(1, sizeof *l, "log");
    /* never through a link to a file, never a FIFO (which would block the run), never an input of the run: see
     * out_open_append (a link to a character device, /dev/null or the tests' /dev/full, is followed) */
    char err[4600];
    if ((l->fd = out_open_append(path, err, sizeof err)) < 0) fatal("%s", err);
    l->path = strdup(path);
    if (!l->path) fatal("out of memory opening %s", path);
    /* a log that ends inside a line (an older run died mid-write) loses that partial line, so that every line
     * stays one whole JSON object */
    off_t end = lseek(l->fd, 0, SEEK_END);
    if (end > 0) {
        int rd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        off_t keep = end;
        char buf[4096];
        while (rd >= 0 && keep > 0) {
            off_t from = keep > (off_t)sizeof buf ? keep - (off_t)sizeof buf : 0;
            ssize_t n = pread(rd, buf, (size_t)(keep - from), from);
            if (n != (ssize_t)(keep - from)) break;
            ssize_t i = n - 1;
            while (i >= 0 && buf[i] != '\n') i--;
            if (i >= 0) {
                keep = from + i + 1;
                break;
            }
            keep = from;
        }
        if (rd >= 0) close(rd);
        if (keep < end) {
            if (ftruncate(l->fd, keep) != 0)
                fatal("cannot cut the partial last line of %s: %s; check free space and permissions", path,
                      strerror(errno));
            fprintf(stderr, "note: %s ended inside a line (a run died while writing it); dropped its last %lld "
                    "bytes\n", path, (long long)(end - keep));
        }
    }
    return l;
}

void jlog_close(JsonLog *l) {
    if (!l) return;
    if (close(l->fd) != 0) fatal("cannot write %s: %s; check free space", l->path, strerror(errno));
    free(l->path);
    free(l->line);
    free(l);
}

void jlog_begin(JsonLog *l, const char *event) {
    if (!l) return;
    l->len = 0;
    append(l, "{\"event\": ");
    reserve(l, 6 * strlen(event) + 2);
    json_escape(l->line, l->cap, &l->len, event);
}

void jlog_int(JsonLog *l, const char *key, int64_t v) {
    if (!l) return;
    append(l, ", \"%s\": %lld", key, (long long)v);
}

void jlog_num(JsonLog *l, const char *key, double v) {
    if (!l) return;
    if (isfinite(v)) append(l, ", \"%s\": %.9g", key, v);
    else append(l, ", \"%s\": null", key);
}

void jlog_float(JsonLog *l, const char *key, float v) {
    if (!l) return;
    if (!isfinite(v)) { append(l, ", \"%s\": null", key); return; }
    char buf[32];
    format_float_shortest(buf, sizeof buf, v);
    append(l, ", \"%s\": %s", key, buf);
}

void jlog_str(JsonLog *l, const char *key, const char *v) {
    if (!l) return;
    append(l, ", \"%s\": ", key);
    reserve(l, 6 * strlen(v) + 2); /* worst case: every byte becomes \u00XX or \ufffd */
    json_escape(l->line, l->cap, &l->len, v);
}

void jlog_nums(JsonLog *l, const char *key, const double *v, int n) {
    if (!l) return;
    append(l, ", \"%s\": [", key);
    for (int i = 0; i < n; i++) {
        if (isfinite(v[i])) append(l, "%s%.9g", i ? ", " : "", v[i]);
        else append(l, "%snull", i ? ", " : "");
    }
    append(l, "]");
}

void jlog_strs(JsonLog *l, const char *key, const char *const *v, int n) {
    if (!l) return;
    append(l, ", \"%s\": [", key);
    for (int i = 0; i < n; i++) {
        if (i) append(l, ", ");
        reserve(l, 6 * strlen(v[i]) + 2);
        json_escape(l->line, l->cap, &l->len, v[i]);
    }
    append(l, "]");
}

void jlog_end(JsonLog *l) {
    if (!l) return;
    append(l, "}\n");
    off_t before = lseek(l->fd, 0, SEEK_END);
    size_t done = 0;
    while (done < l->len) {
        ssize_t n = write(l->fd, l->line + done, l->len - done);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        int err = n < 0 ? errno : ENOSPC;
        /* never leave half a line: cut what part of it landed (a file that cannot be cut, /dev/full say, has
         * nothing to cut) */
        if (before >= 0 && ftruncate(l->fd, before) != 0) { /* nothing more can be done; the error below stands */ }
        fatal("cannot write %s: %s; the run stops here, its newest checkpoint is intact: free space, then continue "
              "with --resume latest", l->path, strerror(err));
    }
}

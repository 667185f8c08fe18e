/* common/util.c - see util.h. */
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void (*fatal_hook)(int) = NULL;

void set_fatal_hook(void (*hook)(int status)) { fatal_hook = hook; }

void fatal(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    if (fatal_hook) fatal_hook(1);
    exit(1);
}

void *xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fatal("out of memory allocating %zu bytes for %s; use a smaller model or batch", bytes, what);
    return p;
}

void *xcalloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) fatal("out of memory allocating %zu x %zu bytes for %s; use a smaller model or batch", n, size, what);
    return p;
}

void *xrealloc(void *p, size_t bytes, const char *what) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) fatal("out of memory growing %s to %zu bytes", what, bytes);
    return q;
}

FILE *xfopen(const char *path, const char *mode, const char *hint) {
    FILE *f = fopen(path, mode);
    if (!f)
        fatal("cannot open %s for %s: %s%s%s", path, mode[0] == 'r' ? "reading" : "writing", strerror(errno),
              hint ? ". " : "", hint ? hint : "");
    return f;
}

void xfread(void *dst, size_t bytes, FILE *f, const char *path, const char *what) {
    if (bytes && fread(dst, 1, bytes, f) != bytes)
        fatal("%s: file ends early while reading %s (%zu bytes); the file is truncated or corrupt", path, what,
              bytes);
}

void xfwrite(const void *src, size_t bytes, FILE *f, const char *path, const char *what) {
    if (bytes && fwrite(src, 1, bytes, f) != bytes)
        fatal("%s: write of %s failed (%s); check free disk space", path, what, strerror(errno));
}

int64_t file_size(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    return (int64_t)st.st_size;
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

void make_dirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) fatal("bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                fatal("cannot create directory %s: %s", buf, strerror(errno));
            buf[i] = c;
        }
    }
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* common/util.c - see util.h. */
#define _GNU_SOURCE /* mkostemp */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

static void (*fatal_hook)(int) = NULL;

void set_fatal_hook(void (*hook)(int status)) { fatal_hook = hook; }

void xflush_stdout(void) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int err = errno ? errno : EIO;
        clearerr(stdout);
        fatal("cannot write standard output: %s; free space where it is redirected (or mend the pipe)", strerror(err));
    }
}

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

void fsync_parent_dir(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else strcpy(dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* some file systems refuse a directory fsync, which is harmless here */
        close(fd);
    }
}

int open_temp_beside(const char *path, char *tmp, size_t cap) {
    if ((size_t)snprintf(tmp, cap, "%s.tmp.XXXXXX", path) >= cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkostemp(tmp, O_CLOEXEC); /* O_CREAT | O_EXCL: a name that exists, a planted link included, is skipped */
}

void write_file_atomic(const char *path, const void *head, size_t head_bytes, const void *body, size_t body_bytes) {
    char tmp[4200];
    int fd = open_temp_beside(path, tmp, sizeof tmp);
    if (fd < 0) fatal("cannot create a temp file beside %s: %s; check that the directory exists and is writable",
                      path, strerror(errno));
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int err = errno;
        close(fd);
        unlink(tmp);
        fatal("cannot write %s: %s", path, strerror(err));
    }
    /* no xfwrite: a failed write must remove the temp file before fatal(), so nothing half-written is left */
    int ok = (!head_bytes || fwrite(head, 1, head_bytes, f) == head_bytes) &&
             (!body_bytes || fwrite(body, 1, body_bytes, f) == body_bytes) && fflush(f) == 0 &&
             fchmod(fd, 0644) == 0 && fsync(fd) == 0;
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    /* rename replaces a link at path itself, never the file it points to */
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        fatal("cannot write %s: %s; check free disk space and permissions", path, strerror(err));
    }
    fsync_parent_dir(path);
}

/* The first number in file path (for /proc and cgroup files), or -1. */
static double read_number(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    double v = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = line;
        if (key) {
            if (strncmp(line, key, strlen(key)) != 0) continue;
            p += strlen(key);
        }
        char *end;
        double x = strtod(p, &end);
        if (end != p) v = x;
        break;
    }
    fclose(f);
    return v;
}

double mem_available_bytes(char *source, size_t cap) {
    double best = -1;
    const char *why = "unknown";
    /* tests only (test/test_rundir.sh under the sanitizers, which cannot run under an address-space limit) */
    const char *t = getenv("SCAPE_TEST_MEM_AVAILABLE");
    if (t && atof(t) > 0) {
        if (source) snprintf(source, cap, "SCAPE_TEST_MEM_AVAILABLE");
        return atof(t);
    }
    double kb = read_number("/proc/meminfo", "MemAvailable:");
    if (kb > 0) {
        best = kb * 1024;
        why = "MemAvailable in /proc/meminfo";
    }
    /* cgroup v2 (memory.max is "max" when unlimited: no number) and v1 */
    double lim = read_number("/sys/fs/cgroup/memory.max", NULL), cur = read_number("/sys/fs/cgroup/memory.current", NULL);
    if (lim > 0 && cur >= 0 && (best < 0 || lim - cur < best)) {
        best = lim - cur;
        why = "the cgroup's memory.max";
    }
    lim = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL);
    cur = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes", NULL);
    if (lim > 0 && lim < 1e18 && cur >= 0 && (best < 0 || lim - cur < best)) {
        best = lim - cur;
        why = "the cgroup's memory limit";
    }
    /* an address-space limit (ulimit -v) less what this process has mapped already */
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        double pages = read_number("/proc/self/statm", NULL);
        double room = (double)rl.rlim_cur - (pages > 0 ? pages * (double)sysconf(_SC_PAGESIZE) : 0);
        if (best < 0 || room < best) {
            best = room;
            why = "the address-space limit (ulimit -v)";
        }
    }
    if (source) snprintf(source, cap, "%s", why);
    return best;
}

int is_symlink(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void fp_flush_denormals(void) {
#if defined(__SSE2__)
    _mm_setcsr(_mm_getcsr() | 0x8040); /* bit 15 FTZ: results; bit 6 DAZ: inputs */
#endif
}

int utf8_valid_n(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], cp, min;
        size_t k;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (k > n - i - 1) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0; /* overlong, beyond, surrogate */
        i += k + 1;
    }
    return 1;
}

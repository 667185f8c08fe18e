/* common/util.c - see util.h. */
#define _GNU_SOURCE /* mkostemp */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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
static void (*fatal_cleanup)(void) = NULL;
static void remove_open_temps(void);

void set_fatal_hook(void (*hook)(int status)) { fatal_hook = hook; }
void set_fatal_cleanup(void (*cleanup)(void)) { fatal_cleanup = cleanup; }

int launcher_rank(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}

void xflush_stdout(void) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int err = errno ? errno : EIO;
        clearerr(stdout);
        fatal("cannot write standard output: %s; free space where it is redirected (or mend the pipe)", strerror(err));
    }
}

void error_line_v(const char *fmt, va_list ap) {
    char line[8192];
    int n = vsnprintf(line + 7, sizeof line - 8, fmt, ap);
    size_t len = 7 + (n < 0 ? 0 : (size_t)n < sizeof line - 8 ? (size_t)n : sizeof line - 9);
    memcpy(line, "error: ", 7);
    line[len++] = '\n';
    fflush(stderr);
    for (size_t done = 0; done < len;) {
        ssize_t w = write(STDERR_FILENO, line + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
}

static atomic_int fatal_taken;      /* a thread is ending the process in fatal() */
static _Thread_local int fatal_mine; /* ... and it is this one */

NORETURN static void fatal_v(int status, const char *fmt, va_list ap) {
    /* one line per process: a second thread failing meanwhile (tok's encoders on two bad lines) waits for the exit */
    if (atomic_exchange(&fatal_taken, 1) && !fatal_mine)
        for (;;) pause();
    fatal_mine = 1;
    fflush(stdout);
    error_line_v(fmt, ap);
    remove_open_temps(); /* the hook (MPI_Abort) ends the process without running atexit */
    if (fatal_cleanup) fatal_cleanup();
    if (fatal_hook) fatal_hook(status);
    exit(status);
}

void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fatal_v(1, fmt, ap);
    va_end(ap); /* not reached: fatal_v exits */
}

void fatal_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fatal_v(2, fmt, ap);
    va_end(ap); /* not reached: fatal_v exits */
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

char *read_stream(FILE *f, size_t *len) {
    size_t n = 0, cap = 1 << 16;
    char *buf = xmalloc(cap + 1, "a file's content");
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) buf = xrealloc(buf, (cap *= 2) + 1, "a file's content");
    }
    if (ferror(f)) {
        int e = errno ? errno : EIO;
        free(buf);
        errno = e;
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
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

/* fatal() when the path an option named (flag) is there but no folder: a file, or a link to nothing (which mkdir
 * calls existing); "cannot open X/.lock: Not a directory" said neither what it is nor the fix. */
static void refuse_no_folder(const char *flag, const char *path) {
    struct stat st;
    const char *what = NULL;
    if (stat(path, &st) != 0)
        what = lstat(path, &st) == 0 && S_ISLNK(st.st_mode) ? "a symbolic link to nothing" : NULL;
    else if (!S_ISDIR(st.st_mode))
        what = S_ISREG(st.st_mode) ? "a file" : "a FIFO, socket or device";
    if (what) fatal("%s %s is %s, not a folder; pass a folder (one that is not there is made)", flag, path, what);
}

/* mkdir -p; flag: the option that named path (in the error line with the fix), or NULL. made (cap entries, or NULL):
 * the lengths of the prefixes of path whose mkdir made a folder, shortest first; *n_made their count. */
static void make_dirs_named(const char *flag, const char *path, size_t *made, int cap, int *n_made) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        if (flag) fatal("%s '%s': bad directory path; name a folder (under 4096 bytes)", flag, path);
        fatal("bad directory path '%s'", path);
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            int rc = mkdir(buf, 0755);
            if (rc == 0 && made && *n_made < cap) made[(*n_made)++] = i;
            if (rc != 0 && errno != EEXIST) {
                if (flag)
                    fatal("%s %s: cannot create directory %s: %s; choose a writable folder", flag, path, buf,
                          strerror(errno));
                fatal("cannot create directory %s: %s", buf, strerror(errno));
            }
            if (rc != 0 && flag && c == '\0') refuse_no_folder(flag, path);
            buf[i] = c;
        }
    }
}

void make_dirs(const char *path) { make_dirs_named(NULL, path, NULL, 0, NULL); }

void make_dirs_for(const char *flag, const char *path) { make_dirs_named(flag, path, NULL, 0, NULL); }

int make_dirs_for_noting(const char *flag, const char *path, size_t *made, int cap) {
    int n = 0;
    make_dirs_named(flag, path, made, cap, &n);
    return n;
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

/* ---- the atomic write: one implementation under every whole-file writer ---- */

struct AtomicFile {
    FILE *f;      /* a stream on atomic_write below, so the first OS error of a write is kept (err) */
    int fd, err;  /* fd: the temp file, -1 once closed */
    char tmp[4200];
};

/* The atomic writes in progress, for atomic_remove_temps in a signal handler: fixed slots, no lock, no allocation.
 * A write is listed from atomic_open until its temp is renamed or removed (more than LIVE_MAX at once: the rest go
 * unlisted, as before). */
#define LIVE_MAX 64
static AtomicFile *_Atomic live[LIVE_MAX];
static void live_add(AtomicFile *a) {
    for (int i = 0; i < LIVE_MAX; i++) {
        AtomicFile *none = NULL;
        if (atomic_compare_exchange_strong(&live[i], &none, a)) return;
    }
}
static void live_remove(AtomicFile *a) {
    for (int i = 0; i < LIVE_MAX; i++) {
        AtomicFile *mine = a;
        if (atomic_compare_exchange_strong(&live[i], &mine, NULL)) return;
    }
}

void atomic_remove_temps(void) {
    for (int i = 0; i < LIVE_MAX; i++) {
        AtomicFile *a = atomic_load(&live[i]);
        if (a) unlink(a->tmp);
    }
}

/* The handler of atomic_temps_go_with_signals: the temps removed, then the signal's own action (the process ends by
 * it, so a shell sees status 128 + sig). */
static void remove_temps_and_die(int sig) {
    atomic_remove_temps();
    signal(sig, SIG_DFL);
    raise(sig);
}

void atomic_temps_go_with_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = remove_temps_and_die;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* the stream's write: all of it, or -1 with the OS error kept in a->err */
static ssize_t atomic_write(void *cookie, const char *buf, size_t n) {
    AtomicFile *a = cookie;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(a->fd, buf + done, n - done);
        if (w > 0) { done += (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;
        if (!a->err) a->err = w < 0 ? errno : ENOSPC;
        return -1;
    }
    return (ssize_t)n;
}

AtomicFile *atomic_open(const char *path) {
    AtomicFile *a = xcalloc(1, sizeof *a, "a temp file");
    a->fd = open_temp_beside(path, a->tmp, sizeof a->tmp);
    if (a->fd < 0 || !(a->f = fopencookie(a, "w", (cookie_io_functions_t){.write = atomic_write}))) {
        int e = errno;
        if (a->fd >= 0) { close(a->fd); unlink(a->tmp); }
        free(a);
        errno = e;
        return NULL;
    }
    live_add(a);
    return a;
}

FILE *atomic_stream(AtomicFile *a) { return a->f; }
const char *atomic_temp_name(const AtomicFile *a) { return a->tmp; }

int atomic_error(AtomicFile *a) {
    if (fflush(a->f) == 0 && !ferror(a->f) && !a->err) return 0;
    return a->err ? a->err : EIO;
}

int atomic_close(AtomicFile *a) {
    int e = atomic_error(a);
    if (!e && (fchmod(a->fd, 0644) != 0 || fsync(a->fd) != 0)) e = errno;
    fclose(a->f); /* flushed above; the cookie has no close of its own */
    a->f = NULL;
    if (close(a->fd) != 0 && !e) e = errno;
    a->fd = -1;
    if (e) unlink(a->tmp);
    return e;
}

int atomic_place(AtomicFile *a, const char *path) {
    /* rename replaces a link at path itself, never the file it points to */
    int e = rename(a->tmp, path) != 0 ? errno : 0;
    if (e) unlink(a->tmp);
    live_remove(a); /* after the rename: a signal before it still finds the temp */
    if (!e) fsync_parent_dir(path);
    free(a);
    return e;
}

int atomic_commit(AtomicFile *a, const char *path) {
    int e = atomic_close(a);
    if (e) {
        atomic_discard(a);
        return e;
    }
    return atomic_place(a, path);
}

void atomic_discard(AtomicFile *a) {
    if (!a) return;
    if (a->f) fclose(a->f);
    if (a->fd >= 0) close(a->fd);
    unlink(a->tmp);
    live_remove(a);
    free(a);
}

void write_file_atomic(const char *path, const void *head, size_t head_bytes, const void *body, size_t body_bytes) {
    AtomicFile *a = atomic_open(path);
    if (!a) fatal("cannot create a temp file beside %s: %s; check that the directory exists and is writable",
                  path, strerror(errno));
    /* no xfwrite: a failed write must remove the temp file before fatal(), so nothing half-written is left;
     * atomic_commit sees a failed write */
    if (head_bytes) fwrite(head, 1, head_bytes, atomic_stream(a));
    if (body_bytes) fwrite(body, 1, body_bytes, atomic_stream(a));
    int err = atomic_commit(a, path);
    if (err) fatal("cannot write %s: %s; check free disk space and permissions", path, strerror(err));
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

void format_float_shortest(char *buf, size_t cap, float v) {
    for (int digits = 1; digits <= 9; digits++) { /* 9 digits always read back as the same float */
        snprintf(buf, cap, "%.*g", digits, (double)v);
        if (!isfinite(v) || strtof(buf, NULL) == v) return;
    }
}

void format_double_shortest(char *buf, size_t cap, double v) {
    for (int digits = 1; digits <= 17; digits++) { /* 17 digits always read back as the same double */
        snprintf(buf, cap, "%.*g", digits, v);
        if (!isfinite(v) || strtod(buf, NULL) == v) return;
    }
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

/* ---------------------------------------------------------------- output files (util.h) */

typedef struct {
    char name[4200]; /* the folder resolved, the last component as given */
    dev_t dev;
    ino_t ino;
    int has_id;      /* dev/ino hold the file's identity (it existed when guarded) */
    char what[96];
    int log;         /* a log of the run (out_open_append): appending to it again is fine, a whole output is not */
} Guard;
static Guard *guards;
static int nguards;

struct OutFile {
    AtomicFile *a; /* the temp file and its stream */
    char path[4096], what[96];
    OutFile *next;
};
static OutFile *open_outs; /* temps not yet committed: removed at exit */

static const char *kind_of(mode_t m) {
    return S_ISDIR(m) ? "folder" : S_ISFIFO(m) ? "FIFO (named pipe)" : S_ISSOCK(m) ? "socket" :
           S_ISBLK(m) ? "block device" : S_ISCHR(m) ? "character device" : S_ISLNK(m) ? "symbolic link" : "special file";
}

/* path with its folder resolved (realpath) and its last component as given; "" when the folder cannot be resolved */
static void resolved_name(const char *path, char *out, size_t cap) {
    char dir[4096], real[PATH_MAX];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    snprintf(dir, sizeof dir, "%.*s", slash ? (slash == path ? 1 : (int)(slash - path)) : 1, slash ? path : ".");
    out[0] = 0;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        if (realpath(path, real)) snprintf(out, cap, "%s", real);
    } else if (realpath(dir, real)) snprintf(out, cap, "%s/%s", strcmp(real, "/") ? real : "", base);
}

static void add_guard(const char *path, const char *what) {
    guards = xrealloc(guards, (size_t)(nguards + 1) * sizeof(Guard), "the run's file list");
    Guard *g = &guards[nguards++];
    memset(g, 0, sizeof *g);
    resolved_name(path, g->name, sizeof g->name);
    struct stat st;
    if (stat(path, &st) == 0) { g->dev = st.st_dev; g->ino = st.st_ino; g->has_id = 1; }
    snprintf(g->what, sizeof g->what, "%s", what);
}

void out_guard_input(const char *path, const char *what) { add_guard(path, what); }

/* the input or output of this run that path names, or NULL; appending, a log is passed over (a run reopens its own
 * log; a whole output is never renamed onto one) */
static const Guard *guarded_for(const char *path, int appending) {
    char name[4200];
    resolved_name(path, name, sizeof name);
    struct stat st;
    int have = stat(path, &st) == 0;
    for (int i = 0; i < nguards; i++) {
        const Guard *g = &guards[i];
        if (appending && g->log) continue;
        if ((name[0] && !strcmp(name, g->name)) || (have && g->has_id && st.st_dev == g->dev && st.st_ino == g->ino))
            return g;
    }
    return NULL;
}
static const Guard *guarded(const char *path) { return guarded_for(path, 0); }

static void remove_open_temps(void) {
    for (OutFile *o = open_outs; o; o = o->next) unlink(atomic_temp_name(o->a));
}
static void unlist(OutFile *o) {
    for (OutFile **p = &open_outs; *p; p = &(*p)->next)
        if (*p == o) { *p = o->next; break; }
}

OutFile *out_open(const char *path, const char *what, char *err, size_t cap) {
    static int at_exit_set;
    struct stat st;
    const Guard *g;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        snprintf(err, cap, "%s %s: is a symbolic link; the file is written only as a file of its own, never through a "
                 "link: remove the link or name another file", what, path);
        return NULL;
    }
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, cap, "%s %s: is a %s, not a regular file; name a file (it is replaced whole)", what, path,
                 kind_of(st.st_mode));
        return NULL;
    }
    if ((g = guarded(path))) {
        snprintf(err, cap, "%s %s: is %s of this run; writing it would destroy it: name another file", what, path,
                 g->what);
        return NULL;
    }
    OutFile *o = xcalloc(1, sizeof *o, "an output file");
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->what, sizeof o->what, "%s", what);
    if (!(o->a = atomic_open(path))) {
        snprintf(err, cap, "%s %s: cannot create a temp file beside it: %s; check that its folder exists and is "
                 "writable", what, path, strerror(errno));
        free(o);
        return NULL;
    }
    if (!at_exit_set) { atexit(remove_open_temps); at_exit_set = 1; }
    o->next = open_outs;
    open_outs = o;
    char gw[128];
    snprintf(gw, sizeof gw, "the %s file", what);
    add_guard(path, gw);
    return o;
}

FILE *out_stream(OutFile *o) { return atomic_stream(o->a); }

/* the one line of a failed write of o */
static void out_failed(const OutFile *o, int e, char *err, size_t cap) {
    snprintf(err, cap, "%s %s: cannot write: %s; nothing of it is kept: free space (or check permissions) and run "
             "again", o->what, o->path, strerror(e));
}

int out_ok(OutFile *o, char *err, size_t cap) {
    int e = atomic_error(o->a);
    if (e) out_failed(o, e, err, cap);
    return !e;
}

int out_commit(OutFile *o, char *err, size_t cap) {
    int e = atomic_commit(o->a, o->path);
    if (e) out_failed(o, e, err, cap);
    unlist(o);
    free(o);
    return !e;
}

void out_discard(OutFile *o) {
    if (!o) return;
    atomic_discard(o->a);
    unlist(o);
    free(o);
}

int out_open_append(const char *path, char *err, size_t cap) {
    struct stat st;
    const Guard *g = guarded_for(path, 1);
    if (g) {
        snprintf(err, cap, "%s: is %s of this run; a log never appends to it: give one of them another name", path,
                 g->what);
        return -1;
    }
    int linked = lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
    if (linked && (stat(path, &st) != 0 || !S_ISCHR(st.st_mode))) {
        snprintf(err, cap, "%s is a symbolic link; the run writes (and may cut) its log only in a file of its own: "
                 "remove the link", path);
        return -1;
    }
    /* O_NONBLOCK: a FIFO without a reader fails at once (ENXIO) instead of blocking the run before its first step */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | (linked ? 0 : O_NOFOLLOW), 0644);
    if (fd < 0 && errno == ENXIO) {
        snprintf(err, cap, "%s is a FIFO (named pipe), not a regular file; the log is appended only to a file of its "
                 "own: remove it", path);
        return -1;
    }
    if (fd < 0) {
        snprintf(err, cap, "cannot open %s: %s; check that --out is a writable directory", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || (linked && S_ISCHR(st.st_mode)))) {
        snprintf(err, cap, "%s is a %s, not a regular file; the log is appended only to a file of its own: remove it",
                 path, kind_of(st.st_mode));
        close(fd);
        return -1;
    }
    /* a hard link is another file's content under this name: appending (and cutting a partial last line) would
     * change that file too */
    if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
        snprintf(err, cap, "%s has %lu names (a hard link of another file, or of a copy made with cp -l); the run "
                 "appends to (and may cut) its log only in a file of its own: give it one with cp %s %s.own && mv "
                 "%s.own %s", path, (unsigned long)st.st_nlink, path, path, path, path);
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (S_ISREG(st.st_mode)) { /* no whole output opened later replaces it */
        add_guard(path, "the log file");
        guards[nguards - 1].log = 1;
    }
    return fd;
}

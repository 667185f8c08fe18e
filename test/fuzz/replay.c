/*
 * test/fuzz/replay.c - main() of the replay binaries (build/fuzz/replay_<h>): runs a harness's
 * LLVMFuzzerTestOneInput on committed inputs without libFuzzer, so `make test` (gcc, no clang needed) checks
 * that no seed and no past crash input crashes again, under AddressSanitizer and UBSan.
 *
 * usage: replay_<h> [--any-error] NAME PATH...   (PATH: a file, or a directory replayed in name order)
 * --any-error: an error line need not name the input file (for readers of values that come from elsewhere,
 * e.g. a loader position taken from a checkpoint, whose message cannot know the checkpoint's path).
 * Each input runs in a forked child with stderr captured. Verdicts, one line per input:
 *   ok NAME/<file> (accepted)   the harness returned normally and the child exited 0 (LeakSanitizer ran)
 *   ok NAME/<file> (rejected)   fatal() refused it (in one or more of the harness's FUZZ_RUNs) and stderr holds
 *                               only "error: ..." lines, each naming the input file (a path under the harness's
 *                               temp directory): DESIGN.md's rule of one clear line that names the file
 *   FAIL NAME/<file>: ...       a signal, a sanitizer report, a plain exit(), or a bad error message
 * Exits 1 if any input failed or no input was found. REPLAY_VERBOSE=1 also shows every child's stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#define SANITIZER_STATUS 86

/* Sanitizer reports end the child with a status of their own, so they are never mistaken for fatal()'s. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "exitcode=86:halt_on_error=1:detect_leaks=1"; }
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "exitcode=86:halt_on_error=1:print_stacktrace=1"; }

static int failures = 0, cases = 0, any_error = 0;

static uint8_t *read_input(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    fclose(f);
    *n = len;
    return buf;
}

/* The child's stderr, NUL-terminated (at most 64 KiB kept). */
static char *drain(int fd) {
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    char tmp[4096];
    ssize_t r;
    while ((r = read(fd, tmp, sizeof tmp)) > 0 || (r < 0 && errno == EINTR)) {
        if (r < 0) continue;
        size_t m = (size_t)r < cap - len ? (size_t)r : cap - len;
        memcpy(buf + len, tmp, m);
        len += m;
    }
    buf[len] = '\0';
    return buf;
}

/* The last max_chars characters of s. */
static const char *tail_lines(const char *s, int max_chars) {
    size_t n = strlen(s);
    return n > (size_t)max_chars ? s + n - max_chars : s;
}

static void replay_one(const char *name, const char *path, const char *label) {
    size_t n = 0;
    uint8_t *data = read_input(path, &n);
    cases++;
    if (!data) {
        printf("FAIL %s/%s: cannot read %s: %s\n", name, label, path, strerror(errno));
        failures++;
        return;
    }
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        perror("pipe");
        exit(1);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], 2);
        close(pipefd[1]);
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 1); /* readers may print progress; the verdict is ours to print */
        fuzz_replay = 1;
        LLVMFuzzerTestOneInput(data, n);
        free(data);
        /* a refused input leaks what the reader held when fatal() jumped out (the process would have exited):
           skip LeakSanitizer then; an accepted input must free everything */
        if (fuzz_rejections) {
            fflush(stderr);
            _exit(FUZZ_REJECTED);
        }
        exit(0);
    }
    close(pipefd[1]);
    char *err = drain(pipefd[0]);
    close(pipefd[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    free(data);

    const char *tmp = fuzz_tmpdir();
    if (getenv("REPLAY_VERBOSE")) fprintf(stderr, "--- %s stderr:\n%s", label, err);
    if (WIFSIGNALED(st)) {
        printf("FAIL %s/%s: killed by signal %d (%s); stderr ends:\n%s\n", name, label, WTERMSIG(st),
               strsignal(WTERMSIG(st)), tail_lines(err, 2000));
        failures++;
    } else if (WEXITSTATUS(st) == 0) {
        printf("ok %s/%s (accepted)\n", name, label);
    } else if (WEXITSTATUS(st) == FUZZ_REJECTED) {
        /* every stderr line is an "error: " line (one per refusal), and each names the input file */
        int error_lines = 0, other_lines = 0;
        const char *unnamed = NULL;
        for (const char *p = err; *p;) {
            const char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (strncmp(p, "error: ", 7) == 0) {
                error_lines++;
                char *line = strndup(p, len);
                if (!strstr(line, tmp) && !unnamed) unnamed = p;
                free(line);
            } else if (len) {
                other_lines++;
            }
            p = e ? e + 1 : p + len;
        }
        if (error_lines == 0 || other_lines) {
            printf("FAIL %s/%s: rejected, but stderr is not only \"error: \" lines; it was:\n%s\n", name, label,
                   tail_lines(err, 2000));
            failures++;
        } else if (!any_error && unnamed) {
            printf("FAIL %s/%s: the error line does not name the input file (under %s): %.*s\n", name, label, tmp,
                   (int)strcspn(unnamed, "\n"), unnamed);
            failures++;
        } else {
            printf("ok %s/%s (rejected)\n", name, label);
        }
    } else if (WEXITSTATUS(st) == SANITIZER_STATUS) {
        printf("FAIL %s/%s: sanitizer report:\n%s\n", name, label, tail_lines(err, 4000));
        failures++;
    } else {
        printf("FAIL %s/%s: exited with status %d without going through fatal(); stderr ends:\n%s\n", name, label,
               WEXITSTATUS(st), tail_lines(err, 2000));
        failures++;
    }
    free(err);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void replay_path(const char *name, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        printf("FAIL %s: %s: %s\n", name, path, strerror(errno));
        failures++;
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        const char *base = strrchr(path, '/');
        replay_one(name, path, base ? base + 1 : path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) return;
    char **names = NULL;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue; /* README-free dirs; .gitkeep and friends */
        char **grown = realloc(names, (size_t)(count + 1) * sizeof *names);
        if (!grown) {
            perror("replay: realloc");
            exit(1);
        }
        names = grown;
        names[count++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)count, sizeof *names, cmp_str);
    for (int i = 0; i < count; i++) {
        char *full, *label;
        if (asprintf(&full, "%s/%s", path, names[i]) < 0) exit(1);
        /* test/fuzz/corpus/shard/x -> corpus/x, test/fuzz/regress/shard/y -> regress/y */
        char *parent = strdup(path);
        char *slash = strrchr(parent, '/');
        if (slash) *slash = '\0';
        slash = strrchr(parent, '/');
        if (asprintf(&label, "%s/%s", slash ? slash + 1 : parent, names[i]) < 0) exit(1);
        replay_one(name, full, label);
        free(full);
        free(label);
        free(parent);
        free(names[i]);
    }
    free(names);
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *full;
        if (asprintf(&full, "%s/%s", dir, e->d_name) < 0) break;
        unlink(full);
        free(full);
    }
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv) {
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--any-error") == 0) any_error = 1, first = 2;
    if (argc < first + 2) {
        fprintf(stderr, "usage: %s [--any-error] NAME PATH...  (replays fuzz inputs: files or directories)\n",
                argv[0]);
        return 2;
    }
    /* one temp directory for all children, so error lines can be matched against it and it is removed once */
    const char *base = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/fuzz-replay.XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("FUZZ_TMPDIR", dir, 1);
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = first + 1; i < argc; i++) replay_path(argv[first], argv[i]);
    remove_dir(dir);
    if (cases == 0) {
        printf("FAIL %s: no inputs found in the given paths\n", argv[first]);
        return 1;
    }
    return failures ? 1 : 0;
}

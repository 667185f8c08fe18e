/* test/fuzz/fuzz.c - see fuzz.h: the fatal hook, descriptor clean-up and temp files shared by all harnesses. */
#define _GNU_SOURCE
#include "test/fuzz/fuzz.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

jmp_buf fuzz_jmp;
volatile int fuzz_armed = 0;
int fuzz_replay = 0;
int fuzz_rejections = 0;

/* Readers open few files; descriptors above this are not tracked. */
#define FUZZ_MAX_FD 64
static unsigned char fd_was_open[FUZZ_MAX_FD];

static void fuzz_fatal_hook(int status) {
    (void)status;
    if (fuzz_armed) {
        fuzz_armed = 0;
        longjmp(fuzz_jmp, 1);
    }
}

void fuzz_begin(void) {
    set_fatal_hook(fuzz_fatal_hook);
    for (int fd = 0; fd < FUZZ_MAX_FD; fd++) fd_was_open[fd] = fcntl(fd, F_GETFD) != -1;
}

void fuzz_rejected(void) {
    fuzz_rejections++;
    for (int fd = 3; fd < FUZZ_MAX_FD; fd++)
        if (!fd_was_open[fd] && fcntl(fd, F_GETFD) != -1) close(fd);
}

static char tmpdir[4096];
static char paths[4][4200];

static void remove_tmpdir(void) {
    for (int i = 0; i < 4; i++)
        if (paths[i][0]) unlink(paths[i]);
    rmdir(tmpdir);
}

const char *fuzz_tmpdir(void) {
    if (tmpdir[0]) return tmpdir;
    const char *env = getenv("FUZZ_TMPDIR");
    if (env && env[0]) {
        snprintf(tmpdir, sizeof tmpdir, "%s", env);
        return tmpdir;
    }
    /* memory-backed when possible: the harnesses write every input to a file, which triples the speed */
    const char *base = getenv("TMPDIR");
    if (!base || !base[0]) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/fuzz.XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(remove_tmpdir);
    return tmpdir;
}

const char *fuzz_write_file(int slot, const char *name, const uint8_t *data, size_t n) {
    if (slot < 0 || slot > 3) abort();
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", fuzz_tmpdir(), name);
    FILE *f = fopen(paths[slot], "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(paths[slot]);
        abort();
    }
    return paths[slot];
}

size_t fuzz_split(const uint8_t *data, size_t n, const uint8_t **rest, size_t *rest_n) {
    static const uint8_t sep[4] = {'\n', '%', '%', '\n'};
    for (size_t i = 0; i + 4 <= n; i++)
        if (memcmp(data + i, sep, 4) == 0) {
            *rest = data + i + 4;
            *rest_n = n - i - 4;
            return i;
        }
    *rest = data + n;
    *rest_n = 0;
    return n;
}

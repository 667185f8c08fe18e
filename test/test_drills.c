/*
 * test/test_drills.c - failure drills for the writers of files the runtime must be able to trust afterwards:
 * a full disk (RLIMIT_FSIZE, so writes fail with EFBIG exactly as on a full file system, without a tmpfs) and
 * SIGKILL in the middle of checkpointing. DESIGN.md: "Errors: one line that says what is wrong ..., exit code
 * non-zero, nothing half-written left behind"; trainer/ckpt.h: a checkpoint counts only once its manifest lists
 * every file with its size.
 * Each writer runs in a forked child; the parent checks the exit status, the error line, the directory
 * (no temp files left), and that what was there before is intact.
 * Not for: the training loop's own resume logic (test/test_train*.sh).
 */
#define TESTING
#include "train_gpt.c" /* gpt2_save and gpt2_new are static */

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "trainer/ckpt.h"
#include "dataloader/dataloader.h"
#include "test/test.h"

static char base[256];

/* Runs fn(arg) in a child with file size limit `limit` bytes (SIGXFSZ ignored, so write() fails with EFBIG);
 * returns the exit status (-signal if killed) and the child's stderr in err. */
static int run_limited(void (*fn)(void *), void *arg, rlim_t limit, char *err, size_t cap) {
    int p[2];
    if (pipe(p) != 0) abort();
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 2);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {limit, limit};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(99);
        fn(arg);
        _exit(0);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(p[0], err + n, cap - 1 - n)) > 0) n += (size_t)r;
    err[n] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Names in dir containing "tmp" (temp files of atomic writers), joined into out; returns how many. */
static int temp_files(const char *dir, char *out, size_t cap) {
    DIR *d = opendir(dir);
    int n = 0;
    out[0] = '\0';
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, "tmp")) {
            n++;
            snprintf(out + strlen(out), cap - strlen(out), "%s ", e->d_name);
        }
    closedir(d);
    return n;
}

static void make_dir(const char *sub, char *dir, size_t cap) {
    snprintf(dir, cap, "%s/%s", base, sub);
    make_dirs(dir);
}

/* checks every full-disk drill makes on its child */
#define CHECK_FAILED_CLEANLY(rc, err, dir, name)                                                               \
    do {                                                                                                       \
        char tmps_[1024];                                                                                      \
        CHECK(rc == 1, "exit status 1 from fatal(), got %d; stderr: %s", rc, err);                              \
        CHECK(strncmp(err, "error: ", 7) == 0 && count_lines(err) == 1, "one \"error: \" line, got: %s", err); \
        CHECK(strstr(err, name) != NULL, "the error names %s: %s", name, err);                                  \
        CHECK(temp_files(dir, tmps_, sizeof tmps_) == 0, "no temp file left in %s, found: %s", dir, tmps_);     \
    } while (0)

/* ---- full disk: checkpoint state file */
typedef struct {
    const char *dir;
    size_t blob_bytes;
    unsigned char fill;
} StateArg;

static void write_state(void *p) {
    const StateArg *a = p;
    unsigned char *blob = malloc(a->blob_bytes);
    memset(blob, a->fill, a->blob_bytes);
    CkptState h;
    memset(&h, 0, sizeof h);
    h.rank = 0;
    h.world = 1;
    h.step = a->fill;
    h.blob_bytes = a->blob_bytes;
    ckpt_write_state(a->dir, &h, blob);
    free(blob);
}

TEST(full_disk_while_writing_checkpoint_state_keeps_the_old_file) {
    char dir[512], err[8192], path[600];
    make_dir("state", dir, sizeof dir);
    StateArg old = {dir, 1000, 7}, big = {dir, 1 << 20, 9};
    int rc = run_limited(write_state, &old, RLIM_INFINITY, err, sizeof err);
    CHECK(rc == 0, "writing a small state file works, got status %d: %s", rc, err);
    rc = run_limited(write_state, &big, 64 << 10, err, sizeof err);
    CHECK_FAILED_CLEANLY(rc, err, dir, "state_rank0.bin");
    snprintf(path, sizeof path, "%s/state_rank0.bin", dir);
    CkptState h;
    unsigned char *blob = ckpt_read_state(path, &h);
    CHECK(h.blob_bytes == 1000 && blob[999] == 7 && h.step == 7, "old state intact: %llu bytes, step %d",
          (unsigned long long)h.blob_bytes, h.step);
    free(blob);
}

/* ---- full disk: manifest */
static void write_manifest(void *p) {
    const char *dir = p;
    enum { N = 64 };
    CkptFile files[N];
    for (int i = 0; i < N; i++)
        files[i] = (CkptFile){"state_rank_with_a_long_name_to_fill_the_manifest.bin", i, 0x0123456789abcdefull};
    ckpt_write_manifest(dir, N, 5, N, files, 0, NULL, NULL, NULL, NULL, NULL);
}

TEST(full_disk_while_writing_manifest_leaves_no_manifest) {
    char dir[512], err[8192], path[600];
    make_dir("manifest", dir, sizeof dir);
    int rc = run_limited(write_manifest, dir, 512, err, sizeof err);
    CHECK_FAILED_CLEANLY(rc, err, dir, "manifest.json");
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    CHECK(!file_exists(path), "no manifest.json after a failed write");
    int step, world;
    char why[256];
    CHECK(!ckpt_is_complete(dir, &step, &world, why, sizeof why), "the directory is not a complete checkpoint");
}

/* ---- full disk: token shard */
typedef struct {
    const char *path;
    size_t n;
} ShardArg;

static void write_shard(void *p) {
    const ShardArg *a = p;
    int32_t *t = malloc(a->n * sizeof *t);
    for (size_t i = 0; i < a->n; i++) t[i] = (int32_t)(i % 50257);
    shard_write(a->path, t, a->n, 2);
    free(t);
}

TEST(full_disk_while_writing_shard_keeps_the_old_shard) {
    char dir[512], err[8192], path[600];
    make_dir("shard", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/s.bin", dir);
    ShardArg old = {path, 100}, big = {path, 1 << 20};
    int rc = run_limited(write_shard, &old, RLIM_INFINITY, err, sizeof err);
    CHECK(rc == 0, "writing a small shard works, got status %d: %s", rc, err);
    rc = run_limited(write_shard, &big, 64 << 10, err, sizeof err);
    CHECK_FAILED_CLEANLY(rc, err, dir, "s.bin");
    int tb;
    CHECK(shard_check_header(path, &tb) == 100, "old shard intact");
}

/* ---- full disk: GPT-2 model file */
static void write_model(void *p) {
    GPT2Config cfg = {.maxT = 16, .V = 100, .L = 2, .NH = 2, .C = 32, .Vp = 128};
    Model *m = gpt2_new(&cfg, 1, 16);
    gpt2_save(m, p);
    gpt2_free(m);
}

TEST(full_disk_while_saving_model_keeps_the_old_model) {
    char dir[512], err[8192], path[600];
    make_dir("model", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.bin", dir);
    int rc = run_limited(write_model, path, RLIM_INFINITY, err, sizeof err);
    CHECK(rc == 0, "saving a model works, got status %d: %s", rc, err);
    int64_t size = file_size(path);
    rc = run_limited(write_model, path, 16 << 10, err, sizeof err);
    CHECK_FAILED_CLEANLY(rc, err, dir, "model.bin");
    CHECK(file_size(path) == size, "old model intact: %lld bytes, was %lld", (long long)file_size(path),
          (long long)size);
}

/* ---- SIGKILL while checkpointing: whatever "latest" finds must read back completely */
enum { KILL_RANKS = 2, KILL_BLOB = 256 << 10 };

static void checkpoint_forever(const char *out, int first_step) {
    unsigned char *blob = malloc(KILL_BLOB);
    for (int step = first_step;; step++) {
        char dir[600];
        ckpt_dir(dir, sizeof dir, out, step);
        make_dirs(dir);
        CkptFile files[KILL_RANKS] = {{"state_rank0.bin", 0, 0}, {"state_rank1.bin", 0, 0}};
        for (int r = 0; r < KILL_RANKS; r++) {
            memset(blob, (step * 2 + r) & 255, KILL_BLOB);
            CkptState h;
            memset(&h, 0, sizeof h);
            h.rank = r;
            h.world = KILL_RANKS;
            h.step = step;
            h.blob_bytes = KILL_BLOB;
            ckpt_write_state(dir, &h, blob);
            char path[700];
            snprintf(path, sizeof path, "%s/%s", dir, files[r].name);
            if (!ckpt_file_hash(path, &files[r].bytes, &files[r].xxh3)) fatal("cannot hash %s", path);
        }
        ckpt_write_manifest(dir, KILL_RANKS, step, KILL_RANKS, files, 0, NULL, NULL, NULL, NULL, NULL);
    }
}

TEST(sigkill_while_checkpointing_never_leaves_a_bad_complete_checkpoint) {
    char out[512];
    make_dir("kill", out, sizeof out);
    srand(12345);
    int step = 1, bad = 0, found = 0;
    for (int round = 0; round < 12 && !bad; round++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int fd = open("/dev/null", O_WRONLY);
            dup2(fd, 2);
            checkpoint_forever(out, step);
        }
        /* let the child finish its first checkpoint (fsync makes that take from ms to a second), then kill it
           at a random moment of the following ones */
        char first[700];
        snprintf(first, sizeof first, "%s/ckpt_%d/manifest.json", out, step);
        struct timespec poll = {0, 10 * 1000000L};
        for (int i = 0; i < 1000 && !file_exists(first); i++) nanosleep(&poll, NULL);
        struct timespec ts = {0, (long)(rand() % 150 + 1) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        char dir[600];
        int latest = ckpt_find_latest(out, dir, sizeof dir);
        if (latest < 0) continue;
        found++;
        for (int r = 0; r < KILL_RANKS; r++) {
            char path[700];
            snprintf(path, sizeof path, "%s/state_rank%d.bin", dir, r);
            CkptState h;
            unsigned char *blob = ckpt_read_state(path, &h); /* fatal() (test exits non-zero) if damaged */
            if (h.step != latest || blob[KILL_BLOB - 1] != ((latest * 2 + r) & 255)) {
                CHECK(0, "%s: step %d byte %d, expected step %d", path, h.step, blob[KILL_BLOB - 1], latest);
                bad = 1;
            }
            free(blob);
        }
        step = latest + 1; /* a restarted run rewrites from the step after the last complete one */
    }
    CHECK(found > 0, "at least one kill left a complete checkpoint to check (found %d)", found);
}

int main(void) {
    snprintf(base, sizeof base, "build/test_drills.%d", (int)getpid());
    make_dirs(base);
    RUN_TEST(full_disk_while_writing_checkpoint_state_keeps_the_old_file);
    RUN_TEST(full_disk_while_writing_manifest_leaves_no_manifest);
    RUN_TEST(full_disk_while_writing_shard_keeps_the_old_shard);
    RUN_TEST(full_disk_while_saving_model_keeps_the_old_model);
    RUN_TEST(sigkill_while_checkpointing_never_leaves_a_bad_complete_checkpoint);
    if (!test_failures_) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", base);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base);
    }
    TEST_EXIT();
}

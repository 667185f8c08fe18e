/*
 * tokenizer/tok_staging.c - `tok shards` replaces the shard set of one --name whole: the new shards are written into
 * a temp folder inside --out and moved into place once all are complete, so --out holds the old set or the new one,
 * never a mixture; an error (fatal() on any thread) or SIGINT, SIGTERM or SIGHUP before that removes the temp folder.
 * Not for: the shard file format (dataloader/shard.c writes each file atomically), what goes into the shards
 * (tok_shards.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "dataloader/dataloader.h"
#include "tokenizer/tok.h"

/* The new shard set is written into a temp folder inside --out (OUT/.PREFIX.tok-shards.XXXXXX) and moved into place
 * only once every shard is complete (staging_commit), so the set in --out is the old one or the new one, never a
 * mixture of two corpora. Until then an error (fatal() on any thread) or SIGINT, SIGTERM or SIGHUP removes the temp
 * folder and leaves --out as it was. One staging per process (the fatal hook and the signal thread find it here). */
typedef struct {
    const char *out, *prefix;
    char tmp[4200];        /* the temp folder */
    int committed;         /* the new set is in place */
    int made_out;          /* --out did not exist before this run: an error or signal removes it again (if empty) */
    pthread_mutex_t mu;    /* recursive: held while a shard is written and during the commit */
} Staging;
static Staging staging;

/* The signals that stop a run: SIGINT, SIGTERM, SIGHUP. */
static void stop_signals(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
}

/* Blocks them in the calling thread (old: the mask before, or NULL); a blocked signal waits until unblocked. */
void block_stop_signals(sigset_t *old) {
    sigset_t set;
    stop_signals(&set);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

/* Removes the temp folder and what is in it (our shards and shard temp files only; no subfolders). */
static void staging_remove(void) {
    DIR *d = opendir(staging.tmp);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[4500];
            snprintf(p, sizeof p, "%s/%s", staging.tmp, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(staging.tmp);
    if (staging.made_out) rmdir(staging.out); /* a failed run leaves no empty --out of its own making */
}

/* fatal()'s hook: no temp shard outlives an error, whichever thread hit it. */
static void staging_abort(int status) {
    (void)status;
    pthread_mutex_lock(&staging.mu); /* waits for a shard being written; never unlocked: the process ends */
    if (!staging.committed) staging_remove();
}

/* The signal thread: SIGINT, SIGTERM and SIGHUP (blocked in every other thread) end the run here, between shard
 * writes, so the temp folder is removed whole and an old set is never half replaced. Exit status 128 + signal. */
static void *staging_signals(void *arg) {
    sigset_t *set = arg;
    int sig = 0;
    sigwait(set, &sig);
    pthread_mutex_lock(&staging.mu);
    if (!staging.committed) staging_remove();
    fprintf(stderr, "\ntok shards: stopped by signal %d (%s); %s\n", sig, strsignal(sig),
            staging.committed ? "the new shards were already in place"
                              : "the unfinished shards were removed and the shards in --out are as they were");
    _exit(128 + sig);
}

/* Creates out if needed and the temp folder inside it, sets the fatal hook and starts the signal thread. */
void staging_begin(const char *out, const char *prefix) {
    struct stat out_st;
    staging.made_out = stat(out, &out_st) != 0;
    make_dirs_for("--out", out);
    staging.out = out;
    staging.prefix = prefix;
    snprintf(staging.tmp, sizeof staging.tmp, "%s/.%s.tok-shards.XXXXXX", out, prefix);
    if (!mkdtemp(staging.tmp))
        fatal("cannot create a temp folder in --out %s: %s; check that it is a writable folder", out, strerror(errno));
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&staging.mu, &ma);
    set_fatal_hook(staging_abort);
    static sigset_t set;
    block_stop_signals(NULL); /* threads started after this inherit the mask */
    stop_signals(&set);
    pthread_t t;
    if (pthread_create(&t, NULL, staging_signals, &set) != 0) fatal("tok shards: cannot start the signal thread");
    pthread_detach(t);
}

static void shard_name(char *path, size_t cap, const char *dir, const char *split, int i) {
    snprintf(path, cap, "%s/%s_%s_%06d.bin", dir, staging.prefix, split, i);
}

void staging_write_shard(const char *split, int i, const int32_t *ids, size_t n, int token_bytes,
                         const char *tokenizer, uint64_t vocab_hash) {
    char path[4500];
    shard_name(path, sizeof path, staging.tmp, split, i);
    pthread_mutex_lock(&staging.mu);
    shard_write_tokenizer(path, ids, n, token_bytes, tokenizer, vocab_hash);
    pthread_mutex_unlock(&staging.mu);
}

/* Removes the shards of this prefix in --out numbered at or past the new set's count of their split (counts: train,
 * val), gaps and all: what is left of the old set once the new one is in place. */
static void remove_old_extra(const int counts[2]) {
    static const char *const splits[2] = {"_train_", "_val_"};
    DIR *d = opendir(staging.out);
    if (!d) return;
    size_t pl = strlen(staging.prefix);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, staging.prefix, pl)) continue;
        for (int k = 0; k < 2; k++) {
            size_t sl = strlen(splits[k]);
            const char *num = e->d_name + pl + sl; /* NNNNNN.bin */
            if (strncmp(e->d_name + pl, splits[k], sl) || strlen(num) != 10 || strspn(num, "0123456789") != 6 ||
                strcmp(num + 6, ".bin") || atoi(num) < counts[k])
                continue;
            char path[4500];
            snprintf(path, sizeof path, "%s/%s", staging.out, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

/* Moves the n_train + n_val new shards from the temp folder into --out, then removes the old set's shards of this
 * prefix the new one does not have (numbered from n on), then the temp folder. A destination that is a folder is
 * refused before anything moves. Signals wait until it is done, and so does another `tok shards` committing into the
 * same --out (an flock on the folder), so two runs at once leave one set or the other. */
void staging_commit(int n_train, int n_val) {
    const char *splits[2] = {"train", "val"};
    int counts[2] = {n_train, n_val};
    char from[4500], to[4500];
    pthread_mutex_lock(&staging.mu);
    int dfd = open(staging.out, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || flock(dfd, LOCK_EX) != 0)
        fatal("cannot lock --out %s to move the new shards into place: %s", staging.out, strerror(errno));
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < counts[k]; i++) {
            struct stat st;
            shard_name(to, sizeof to, staging.out, splits[k], i);
            if (lstat(to, &st) == 0 && S_ISDIR(st.st_mode))
                fatal("%s is a folder, where a shard goes; move it away and run tok shards again (nothing was "
                      "replaced)", to);
        }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < counts[k]; i++) {
            shard_name(from, sizeof from, staging.tmp, splits[k], i);
            shard_name(to, sizeof to, staging.out, splits[k], i);
            if (rename(from, to) != 0)
                fatal("cannot move %s into place: %s; --out now holds some new shards beside old ones: run tok shards "
                      "again", to, strerror(errno));
        }
    remove_old_extra(counts);
    staging_remove();
    fsync_parent_dir(to);
    staging.committed = 1;
    close(dfd); /* releases the lock */
    pthread_mutex_unlock(&staging.mu);
}

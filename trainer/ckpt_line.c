/* trainer/ckpt_line.c - see ckpt.h. The checkpoints of one --out as a line: their names and listing, the latest
 * that verifies, retention (prune, remove) and lineage (a roll-back moves the later ones aside, ckpt.h "Lineage").
 * Every folder is opened without following links. The files of one checkpoint are ckpt.c's. */
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
        ckpt_run_id(dir, ours, sizeof ours);
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
        ckpt_run_id(dir, id, sizeof id);
        if (ours[0] && id[0] && strcmp(id, ours) != 0) continue; /* another run's, copied in: not ours either */
        if (keep <= 0) continue;
        if (kept < keep) kept++;
        else if (steps[i] != verified_step) remove_ckpt_dir(out, steps[i]);
    }
    free(steps);
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
    char *m = ckpt_read_text(path, 4096);
    if (!m) return 0;
    char dest[256];
    const char *pre = ABANDONED "/";
    /* step -1: a run from step 0 (a new run, or --resume latest with no checkpoint) moving aside what it found */
    int ok = sscanf(m, "%d %255s", step, dest) == 2 && *step >= -1 && strncmp(dest, pre, strlen(pre)) == 0;
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
        ckpt_run_id(dir, ids[i], sizeof ids[i]);
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

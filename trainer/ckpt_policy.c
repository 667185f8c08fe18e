/*
 * trainer/ckpt_policy.c - see ckpt_policy.h. The loop's checkpoint policy, beside the formats (ckpt.c, ckpt_line.c):
 * which checkpoint a run resumes and which of its options it takes, the lineage change that choice makes, one
 * checkpoint of the run written whole (model file, every rank's state, manifest, retention), the restore, and
 * --verify-ckpt.
 */
#define _GNU_SOURCE
#include "trainer/ckpt_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/rng.h"
#include "common/util.h"
#include "comm/comm.h"
#include "trainer/train_rules.h"

/* The model spec, recorded in each state file for information (an --init file is identified by its content in the
 * manifest, the layout by param_table_hash). */
static void model_id(const TrainConfig *c, char *buf) { snprintf(buf, CKPT_ID_MAX, "%s", c->model); }

/* Options of a run (trainer/train_options.c) as its checkpoints record them and a resume treats them:
 *   not recorded: where and how this process runs (--out, --resume, --threads, --comm, --update, --comm-timeout,
 *                 --verify-ckpt) and --init (recorded by content as the manifest's init_xxh3);
 *   defining:     what the checkpoint's model and optimizer state are made for (below, and the options the
 *                 checkpoint's rule's row marks defining, train_option_defining); on resume a flag that differs is
 *                 refused naming both values (another rule's options are refused for being another rule's);
 *   the rest:     taken from the checkpoint unless given again, when the new value applies from the resumed step
 *                 on (steps, lr schedule, eval, sampling, data paths, density schedule, ...), with a note. */
static const char *const options_not_recorded[] = {"out", "resume", "threads", "comm", "update", "comm-timeout",
                                                   "verify-ckpt", "init", "eval-only", "eval-dump"};
static const char *const options_defining[] = {"model", "optimizer", "batch", "seq", "scape-exclude-norms",
                                                "scape-variant"};
static int in_list(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0) return 1;
    return 0;
}
#define IN_LIST(name, list) in_list(name, list, sizeof list / sizeof list[0])

/* An option's value as the manifest records it (args_format, whole: a string option at its full length); malloc'd. */
static char *option_text(const ArgSpec *s) {
    char buf[64];
    const char *v = buf;
    if (s->type == ARG_STRING) v = *(const char *const *)s->field;
    else args_format(s, buf, sizeof buf);
    char *t = strdup(v);
    if (!t) fatal("out of memory formatting --%s", s->name);
    return t;
}

/* A fresh 64-bit identity for a run, as 16 hex digits (the kernel's random bytes; time and pid if unavailable). */
static void new_run_id(char *hex) {
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = rng_mix((uint64_t)time(NULL), (uint64_t)getpid());
    if (fd >= 0) close(fd);
    snprintf(hex, 32, "%016llx", (unsigned long long)v);
}

/* This rank's part of the checkpoint in dir: state_rank<r>.bin (the CkptState header, then the update's blob),
 * read back after it was written: its size and XXH3 into mine[0] and mine[1]. fatal() naming the file when the
 * file system lost data. */
static void write_rank_state(Run *r, const char *dir, int step, int64_t mine[2]) {
    char path[4400];
    size_t bytes = r->u->state_bytes(r->u);
    void *blob = xmalloc(bytes, "optimizer state for the checkpoint");
    r->u->save(r->u, blob);
    CkptState h;
    memset(&h, 0, sizeof h);
    h.rank = r->rank;
    h.world = r->world;
    h.step = step;
    h.sample_rng = r->sample_rng.s;
    dataloader_get_pos(r->dl, &h.data);
    h.blob_bytes = bytes;
    h.table_hash = param_table_hash(&r->m->table);
    h.num_params = r->m->table.total;
    h.optimizer = (int32_t)train_optimizer_kind(r->c.optimizer);
    h.zero = r->c.zero;
    h.B = r->c.B;
    h.T = r->c.T;
    h.total_batch = r->tokens_per_step;
    model_id(&r->c, h.model_id);
    ckpt_write_state(dir, &h, blob);
    free(blob);
    /* every rank checksums its file as read back from the disk and reports size and checksum to rank 0 (no shared
     * file system needed for the manifest itself) */
    snprintf(path, sizeof path, "%s/state_rank%d.bin", dir, r->rank);
    uint64_t hash;
    if (!ckpt_file_hash(path, &mine[0], &hash))
        fatal("cannot read back %s: %s; check the disk under --out %s", path, strerror(errno), r->c.out);
    if (mine[0] != (int64_t)(sizeof h + bytes))
        fatal("%s has %lld bytes after writing %zu; the file system lost data, check the disk under --out %s", path,
              (long long)mine[0], sizeof h + bytes, r->c.out);
    mine[1] = (int64_t)hash;
}

/* Rank 0: the manifest of the checkpoint in dir, written last (model.bin checksummed as read back, every rank's
 * state file from all: world (size, XXH3) pairs, the recorded options), then retention (never this checkpoint), and
 * its line and "ckpt" event (t0: when the save began). */
static void finish_checkpoint(Run *r, const char *dir, int step, const int64_t *all, double t0) {
    char path[4400];
    CkptFile *files = xmalloc((size_t)(r->world + 1) * sizeof(CkptFile), "checkpoint files");
    char (*rank_names)[40] = xmalloc((size_t)r->world * 40, "checkpoint names");
    snprintf(path, sizeof path, "%s/model.bin", dir);
    files[0].name = "model.bin";
    if (!ckpt_file_hash(path, &files[0].bytes, &files[0].xxh3))
        fatal("cannot read back %s: %s; the model's save() did not write it, or the disk under --out %s failed",
              path, strerror(errno), r->c.out);
    for (int i = 0; i < r->world; i++) {
        snprintf(rank_names[i], 40, "state_rank%d.bin", i);
        files[i + 1] = (CkptFile){rank_names[i], all[2 * i], (uint64_t)all[2 * i + 1]};
    }
    const char *names[CKPT_MAX_OPTIONS];
    char *values[CKPT_MAX_OPTIONS];
    int n = 0;
    for (int i = 0; i < r->n_opts && n < CKPT_MAX_OPTIONS; i++) {
        if (IN_LIST(r->opts[i].name, options_not_recorded)) continue;
        values[n] = option_text(&r->opts[i]);
        names[n++] = r->opts[i].name;
    }
    ckpt_write_manifest(dir, r->world, step, r->world + 1, files, n, names, (const char *const *)values,
                        r->init_hash, r->run_id, r->ckpt_path);
    for (int i = 0; i < n; i++) free(values[i]);
    free(files);
    /* the checkpoint just written verified (its checksums are of its files read back): never pruned */
    ckpt_prune(r->c.out, r->c.keep_ckpts, step);
    double ms = 1e3 * (now_seconds() - t0);
    printf("step %6d | checkpoint %s (%.1f ms)\n", step, dir, ms);
    fflush(stdout);
    jlog_begin(r->log, "ckpt");
    jlog_int(r->log, "step", step);
    jlog_str(r->log, "dir", dir);
    jlog_num(r->log, "ms", ms);
    jlog_end(r->log);
    free(rank_names);
}

/* One checkpoint of step `step` under --out, written by every rank (collective: every rank calls it): rank 0
 * makes the folder (clearing an unfinished one of the same step, refusing a link there) and writes model.bin; each
 * rank writes its state_rank<r>.bin (CkptState header, then the update's blob) and checksums it as read back; rank
 * 0 writes the manifest from every rank's size and checksum, prunes to --keep-ckpts (never this one) and prints and
 * logs one "ckpt" line. fatal() naming the file when the disk loses data. */
void save_checkpoint(Run *r, int step) {
    double t0 = now_seconds();
    char dir[4096], path[4400];
    ckpt_dir(dir, sizeof dir, r->c.out, step);
    if (r->rank == 0) {
        /* the run writes only into folders of its own: never through a link planted (or left) at this name */
        if (is_symlink(dir))
            fatal("%s is a symbolic link; the run will not write its checkpoint through it: remove the link and "
                  "continue with --resume latest --out %s", dir, r->c.out);
        /* a folder of this step already there is an unfinished write of this line of checkpoints (a fresh run
         * and a resume move every other one aside, choose_checkpoint): cleared, so no stale file stays in it */
        if (file_exists(dir)) ckpt_remove(r->c.out, step);
        make_dirs(dir);
    }
    comm_barrier();
    if (r->rank == 0) {
        snprintf(path, sizeof path, "%s/model.bin", dir);
        run_synced_model(r, 1); /* the synchronized model; each rank's own parameters are in its state file */
        r->m->save(r->m, path);
        run_synced_model(r, 0);
    }
    int64_t mine[2];
    write_rank_state(r, dir, step, mine);
    int64_t *all = xmalloc((size_t)r->world * sizeof mine, "checkpoint checksums");
    comm_allgather(mine, all, sizeof mine);
    if (r->rank == 0) finish_checkpoint(r, dir, step, all, t0);
    free(all);
    comm_barrier(); /* nobody races ahead (and maybe dies) before the checkpoint is complete */
}

/* 1 if the checkpoint directory ckpt lies directly in out (its parent is out's folder, links followed). */
static int ckpt_in_out(const char *ckpt, const char *out) {
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", ckpt);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = '\0';
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = '\0';
    else *slash = '\0';
    return same_file(parent, out);
}

#define LINEAGE_KEEP (-2) /* Run.lineage_after when the run changes no lineage */

/* Moves the checkpoints after `step` aside (ckpt_abandon_after: the new branch is the directory's line), saying so. */
static void abandon_after(const char *out, int step, const char *from) {
    char dest[4400], why[1024];
    int moved = ckpt_abandon_after(out, step, dest, sizeof dest, why, sizeof why);
    if (moved < 0) fatal("--out %s: cannot move the checkpoints after step %d aside: %s", out, step, why);
    if (moved > 0)
        printf("note: continuing from %s: the %d later checkpoint%s of this --out (another branch) moved to %s, "
               "kept but no longer 'latest' nor pruned; delete %s when no longer needed\n", from, moved,
               moved == 1 ? "" : "s", dest, moved == 1 ? "it" : "them");
}

/* fatal() unless the checkpoints under out are one run's line: a ckpt_<step> copied or linked in from another
 * --out would be taken for this run's latest, and retention would then delete this run's own. */
static void check_one_run(const char *out) {
    char why[2048];
    if (ckpt_line_check(out, why, sizeof why) < 0)
        fatal("--out %s holds the checkpoints of two runs (%s), e.g. a ckpt_<step> folder copied in from another "
              "--out; nothing was changed: move the other run's folders out of it (and continue one of them with "
              "--resume DIR/ckpt_<step> into an --out of its own)", out, why);
}

/* --resume latest: the newest checkpoint of out's line (steps up to max_step) that verifies, into r->ckpt_path and
 * r->ckpt_step, the newer ones passed over noted on stderr; -1 when out holds no checkpoint at all. fatal() when it
 * holds some and none verifies, naming each and why. */
static int latest_checkpoint(Run *r, int max_step) {
    const char *out = r->c.out;
    int seen = 0, newest;
    size_t cap = 16384;
    char *all = xmalloc(cap, "checkpoint notes");
    int step = ckpt_find_latest_upto(out, max_step, r->ckpt_path, sizeof r->ckpt_path, &seen, all, cap);
    if (step < 0 && ckpt_recorded(out, &newest) > 0) {
        /* the notes as one line: "DIR/ckpt_8: why; DIR/ckpt_4: why" */
        const char *pre = "note: skipping checkpoint ";
        char *o = all;
        for (const char *p = all; *p;) {
            if (strncmp(p, pre, strlen(pre)) == 0) p += strlen(pre);
            const char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (o != all) { *o++ = ';'; *o++ = ' '; }
            memmove(o, p, len);
            o += len;
            p += len + (e ? 1 : 0);
        }
        *o = '\0';
        fatal("--resume latest: no checkpoint under %s verifies (%s); nothing was changed: name an older one "
              "with --resume, restore the damaged files, or pass another --out", out, all);
    }
    fputs(all, stderr); /* the newer ones passed over, one note each */
    free(all);
    if (step < 0) r->ckpt_path[0] = '\0';
    r->ckpt_step = step < 0 ? 0 : step;
    return step;
}

/* --resume PATH where PATH is no checkpoint folder but a slip for one: a file of a checkpoint (.../ckpt_40/model.bin)
 * or a run's --out folder (it holds ckpt_<step> folders, no manifest.json of its own). fatal() with one line saying
 * which and what to pass; returns for anything else (ckpt_verify then says what is wrong with it). */
static void refuse_resume_of_no_checkpoint_folder(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (S_ISREG(st.st_mode))
        fatal("--resume %s: is a file, not a checkpoint folder; pass the ckpt_<step> folder that holds it, or "
              "--resume latest --out <the run's folder>", path);
    char manifest[4200];
    int *steps = NULL;
    snprintf(manifest, sizeof manifest, "%s/manifest.json", path);
    int run_folder = S_ISDIR(st.st_mode) && !file_exists(manifest) && ckpt_list(path, &steps) > 0;
    free(steps);
    if (run_folder)
        fatal("--resume %s: is a run's --out folder (it holds ckpt_<step> folders), not one checkpoint; pass "
              "--resume latest --out %s, or --resume %s/ckpt_<step>", path, path, path);
}

/* Rank 0 decides which checkpoint to resume (so every rank uses the same one) and broadcasts its directory and
 * step. An --out holds one line of checkpoints (trainer/ckpt.h "Lineage"):
 *   a new run (no --resume) refuses an --out that holds another run's checkpoints;
 *   --resume latest takes the newest that verifies; with checkpoints there and none verifying it refuses (a new
 *     run there would overwrite them); with none at all it starts from step 0;
 *   --resume DIR/ckpt_<s> inside --out continues that line from s, moving later checkpoints aside (a roll-back);
 *     from another directory it needs an --out without checkpoints of its own;
 *   an --out whose checkpoints are two runs' is refused (a folder copied in from another --out).
 * This only decides: what moves (the roll-back; folders that never got their manifest) is in r->lineage_after,
 * done by commit_lineage once every check has passed. --eval-only changes nothing: it reads the checkpoint it is
 * given (any --out), or latest (which must exist) of the line a pending roll-back leaves. */
static void decide_checkpoint(Run *r) {
    const TrainConfig *c = &r->c;
    r->ckpt_path[0] = '\0';
    r->ckpt_step = 0;
    r->lineage_after = LINEAGE_KEEP;
    if (r->rank == 0) {
        char why[2048];
        int newest, upto = INT32_MAX;
        if (c->eval_only) {
            int pending = ckpt_rollback_pending(c->out, &upto, why, sizeof why);
            if (pending < 0) fatal("--out %s: %s", c->out, why);
            if (pending == 0) upto = INT32_MAX;
        } else if (ckpt_finish_rollback(c->out, why, sizeof why) < 0) { /* an earlier run's decision, finished */
            fatal("--out %s: an interrupted roll-back cannot be finished: %s", c->out, why);
        }
        if (!c->resume[0]) {
            if (!c->eval_only && ckpt_recorded(c->out, &newest) > 0)
                fatal("--out %s holds the checkpoints of an earlier run (newest %s/ckpt_%d); continue it with "
                      "--resume latest, or pass another --out (a new run would overwrite them)", c->out, c->out,
                      newest);
            if (!c->eval_only) r->lineage_after = -1; /* unfinished first saves only: removed */
        } else if (strcmp(c->resume, "latest") == 0) {
            check_one_run(c->out);
            int step = latest_checkpoint(r, upto);
            if (step < 0 && c->eval_only)
                fatal("--eval-only --resume latest: no checkpoint under %s to score; pass the --out of a run that has "
                      "checkpoints, or --resume DIR/ckpt_<step>", c->out);
            if (step < 0) printf("--resume latest: no complete checkpoint under %s, starting from step 0\n", c->out);
            if (!c->eval_only) r->lineage_after = step;
        } else {
            CkptInfo info;
            if (!file_exists(c->resume))
                fatal("--resume %s: no such checkpoint directory; pass <out>/ckpt_<step> or \"latest\"", c->resume);
            refuse_resume_of_no_checkpoint_folder(c->resume);
            if (!ckpt_verify(c->resume, &info, why, sizeof why))
                fatal("--resume %s: damaged or incomplete checkpoint (%s); use an older one, or --resume latest for "
                      "the newest that verifies", c->resume, why);
            if (c->eval_only) {
                /* read-only: any checkpoint, wherever --out is */
            } else if (ckpt_in_out(c->resume, c->out)) {
                check_one_run(c->out);
                r->lineage_after = info.step;
            } else {
                if (ckpt_recorded(c->out, &newest) > 0)
                    fatal("--out %s holds the checkpoints of another run (newest %s/ckpt_%d); continuing %s there "
                          "would mix two runs: pass an --out of its own", c->out, c->out, newest, c->resume);
                r->lineage_after = -1;
            }
            snprintf(r->ckpt_path, sizeof r->ckpt_path, "%s", c->resume);
            r->ckpt_step = info.step;
        }
        if (r->lineage_after != LINEAGE_KEEP && ckpt_abandon_check(c->out, r->lineage_after, why, sizeof why) < 0)
            fatal("--out %s: %s; nothing was changed", c->out, why);
        fflush(stdout);
    }
    comm_bcast(r->ckpt_path, sizeof r->ckpt_path, 0);
    comm_bcast(&r->ckpt_step, sizeof r->ckpt_step, 0);
}

/* Makes the lineage change decide_checkpoint decided (later checkpoints moved aside, unfinished saves removed), only
 * now that every check that can refuse the run has passed on every rank (options, memory, tokenizer, data, the
 * checkpoint's state files): a run refused before this leaves --out's checkpoints as they were. */
void commit_lineage(Run *r) {
    comm_barrier();
    if (r->rank == 0 && r->lineage_after != LINEAGE_KEEP) {
        abandon_after(r->c.out, r->lineage_after, r->ckpt_path[0] ? r->ckpt_path : "step 0");
        fflush(stdout);
    }
}

/* XXH3 of a model file as 16 hex digits into hex[32]; fatal() naming the flag if it cannot be read, or is no
 * regular file: the file is read twice (here, then its weights), which a FIFO would block and a pipe (`--init
 * <(zcat m.bin.gz)`) could not give twice. */
static void init_file_hash(const char *path, char *hex) {
    int64_t bytes;
    uint64_t h;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        fatal("--init %s: is not a regular file (a pipe, FIFO, folder or device); the model file is read twice (its "
              "checksum, then its weights): pass the file itself", path);
    if (!ckpt_file_hash(path, &bytes, &h)) fatal("--init %s: cannot read it: %s; pass a model file", path, strerror(errno));
    snprintf(hex, 32, "%016llx", (unsigned long long)h);
}

/* An option's recorded text (option_text, or the manifest's) as a user would type it: a float or double in the
 * fewest digits that read back the same (--lr 0.01, not 0.00999999978; --density 0.05, not 0.050000000000000003),
 * anything else as it is. Returns text or buf. */
static const char *option_shown(const ArgSpec *s, const char *text, char *buf, size_t cap) {
    if (s->type == ARG_FLOAT) format_float_shortest(buf, cap, strtof(text, NULL));
    else if (s->type == ARG_DOUBLE) format_double_shortest(buf, cap, strtod(text, NULL));
    else return text;
    return buf;
}

/* Appends one formatted line to r->resume_notes (log_start prints them once the run has passed every check). */
static void add_resume_note(Run *r, const char *fmt, ...) PRINTF_LIKE(2, 3);
static void add_resume_note(Run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    size_t have = r->resume_notes ? strlen(r->resume_notes) : 0;
    char *s = n < 0 ? NULL : realloc(r->resume_notes, have + (size_t)n + 1);
    if (!s) fatal("out of memory noting the options of %s", r->ckpt_path);
    va_start(ap, fmt);
    vsnprintf(s + have, (size_t)n + 1, fmt, ap);
    va_end(ap);
    r->resume_notes = s;
}

/* Resume from the checkpoint alone: every recorded option that this command line does not set is taken from the
 * checkpoint (see options_defining above for what may not change); --init, when given, must be the same file by
 * content. A version-1 checkpoint recorded no options: the flags of the command line apply, as before. */
static void apply_checkpoint_options(Run *r) {
    if (!r->ckpt_path[0]) return;
    CkptOptions o;
    if (!ckpt_read_options(r->ckpt_path, &o)) {
        if (r->rank == 0)
            printf("note: %s records no options (an older checkpoint): pass the run's --model, --optimizer and "
                   "--batch/--seq as it was started\n", r->ckpt_path);
        if (r->c.init[0]) init_file_hash(r->c.init, r->init_hash);
        return;
    }
    /* the model: a --model given again must describe the checkpoint's model.bin (compared by canonical spec, so
     * "d12" and "d12c768h12" agree, and a run started from --init records what its file holds) */
    char model_file[sizeof r->ckpt_path + 16];
    if ((size_t)snprintf(model_file, sizeof model_file, "%s/model.bin", r->ckpt_path) >= sizeof model_file)
        fatal("--resume %s: path too long", r->ckpt_path);
    ArgSpec *model_opt = args_find(r->opts, r->n_opts, "model");
    if (model_opt->given && r->fam->memory_bytes) {
        char want[256], have[256];
        size_t np;
        r->fam->memory_bytes(r->c.model, NULL, 1, 1, &np, want, sizeof want);
        r->fam->memory_bytes(NULL, model_file, 1, 1, &np, have, sizeof have);
        if (strcmp(want, have) != 0)
            fatal("--model %s (%s) contradicts the checkpoint %s, whose model.bin is %s; drop the flag (a resumed run "
                  "keeps its model) or start a new --out", r->c.model, want, r->ckpt_path, have);
    }
    const char *rule = r->c.optimizer; /* the checkpoint's rule, whose own options are compared */
    for (int i = 0; i < o.n; i++)
        if (!strcmp(o.names[i], "optimizer")) rule = o.values[i];
    for (int i = 0; i < o.n; i++) {
        const char *name = o.names[i], *saved = o.values[i];
        ArgSpec *s = args_find(r->opts, r->n_opts, name);
        if (!s || IN_LIST(name, options_not_recorded)) continue; /* an option this program no longer has */
        if (s == model_opt && r->fam->memory_bytes) {
            if (!s->given) { /* the checkpoint's record, for the next manifest */
                r->restored[r->n_restored] = strdup(saved);
                if (!r->restored[r->n_restored]) fatal("out of memory restoring the options of %s", r->ckpt_path);
                args_set(s, r->restored[r->n_restored++]);
            }
            continue; /* compared above, by what the spec describes */
        }
        char *now = option_text(s);
        if (!s->given) {
            r->restored[r->n_restored] = strdup(saved);
            if (!r->restored[r->n_restored]) fatal("out of memory restoring the options of %s", r->ckpt_path);
            args_set(s, r->restored[r->n_restored++]);
        } else if (train_option_of_other_rule(name, rule)) {
            /* another rule's option (--sparseloco-h on a DiLoCo checkpoint): the checkpoint's run never used it, so
             * it neither contradicts nor applies; train_rule_options_check refuses it naming the rule it needs */
        } else if (strcmp(now, saved) != 0) {
            if (IN_LIST(name, options_defining) || train_option_defining(name, rule))
                fatal("--%s %s contradicts the checkpoint %s, whose run has --%s %s; drop the flag (a resumed run "
                      "keeps its model, optimizer and batch shape) or start a new --out", name, now, r->ckpt_path,
                      name, saved);
            int data = !strcmp(name, "train") || !strcmp(name, "data");
            if (data) r->data_changed = 1;
            /* --eval-only trains no step: nothing applies "from" one. --total-batch is noted by restore_checkpoint,
             * in tokens per step: the manifest's 0 means B*T*ranks, so "the checkpoint's run had 0" would mislead */
            int noted_elsewhere = !strcmp(name, "total-batch");
            if (r->rank == 0 && !r->c.eval_only && !noted_elsewhere) {
                char now_shown[64], saved_shown[64];
                add_resume_note(r, "note: --%s %s applies from the resumed step on (the checkpoint's run had %s)\n",
                                name, option_shown(s, now, now_shown, sizeof now_shown),
                                saved[0] ? option_shown(s, saved, saved_shown, sizeof saved_shown) : "none");
            }
        }
        free(now);
    }
    if (r->c.init[0]) {
        char hex[32];
        init_file_hash(r->c.init, hex);
        if (!o.init_hash[0])
            fatal("--init %s: the run of checkpoint %s did not start from an --init file; drop --init (a resumed "
                  "model comes from the checkpoint's model.bin)", r->c.init, r->ckpt_path);
        if (strcmp(hex, o.init_hash) != 0)
            fatal("--init %s: its content (xxh3 %s) is not the file the run of checkpoint %s started from (xxh3 %s); "
                  "drop --init (a resumed model comes from the checkpoint's model.bin) or pass that file",
                  r->c.init, hex, r->ckpt_path, o.init_hash);
    }
    snprintf(r->init_hash, sizeof r->init_hash, "%s", o.init_hash);
    snprintf(r->run_id, sizeof r->run_id, "%s", o.run_id);
    ckpt_options_free(&o);
}

void choose_checkpoint(Run *r) {
    decide_checkpoint(r);
    apply_checkpoint_options(r);
    if (!r->ckpt_path[0] && r->c.init[0]) init_file_hash(r->c.init, r->init_hash);
    if (!r->run_id[0]) new_run_id(r->run_id); /* a fresh run, or a checkpoint from before run identities */
    comm_bcast(r->run_id, sizeof r->run_id, 0);
}

/* --verify-ckpt DIR: DIR is one checkpoint (it has a manifest.json) or an --out dir whose ckpt_<step> are all
 * checked, newest first. One line each; returns the exit status (0 all verified, 1 otherwise). */
int verify_checkpoints(const char *dir) {
    char path[4400], why[512];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    int *steps = NULL, n = 0, bad = 0;
    int single = file_exists(path);
    if (!single) {
        n = ckpt_list(dir, &steps);
        if (n == 0) {
            free(steps);
            fprintf(stderr, "error: --verify-ckpt %s: no checkpoint there (neither a manifest.json nor ckpt_<step> "
                    "dirs); pass <out>/ckpt_<step> or an --out dir\n", dir);
            return 1;
        }
    }
    for (int i = 0; i < (single ? 1 : n); i++) {
        char one[4200];
        if (single) snprintf(one, sizeof one, "%s", dir);
        else ckpt_dir(one, sizeof one, dir, steps[i]);
        CkptInfo info;
        if (ckpt_verify(one, &info, why, sizeof why)) {
            printf("%s: ok, step %d, %d rank%s, %d files, %lld bytes, %d checksum%s verified%s\n", one, info.step,
                   info.world, info.world == 1 ? "" : "s", info.n_files, (long long)info.bytes, info.n_hashed,
                   info.n_hashed == 1 ? "" : "s", info.n_hashed ? "" : " (an older checkpoint without checksums)");
        } else {
            printf("%s: BAD, %s\n", one, why);
            bad = 1;
        }
    }
    free(steps);
    fflush(stdout);
    return bad;
}

/* NULL if the checkpoint fits this run, else the one-line reason (in a static buffer). */
static const char *fingerprint_mismatch(const Run *r, const CkptState *h, const char *path) {
    static char msg[4096 + 1024];
    const char *saved_opt = train_optimizer_name(h->optimizer);
    if (h->table_hash != param_table_hash(&r->m->table) || h->num_params != r->m->table.total)
        snprintf(msg, sizeof msg, "%s: parameter layout differs from the model in model.bin (%llu vs %zu "
                 "parameters); the checkpoint is from another model or program version", path,
                 (unsigned long long)h->num_params, r->m->table.total);
    else if (h->optimizer != (int32_t)train_optimizer_kind(r->c.optimizer))
        snprintf(msg, sizeof msg, "%s: checkpoint was trained with --optimizer %s, this run asks for %s; pass "
                 "--optimizer %s", path, saved_opt, r->c.optimizer, saved_opt);
    else if ((int64_t)h->B * h->T != (int64_t)r->c.B * r->c.T)
        snprintf(msg, sizeof msg, "%s: checkpoint used B*T = %d*%d = %lld tokens per micro-batch, this run %d*%d = "
                 "%lld; pass --batch %d --seq %d", path, h->B, h->T, (long long)h->B * h->T, r->c.B, r->c.T,
                 (long long)r->c.B * r->c.T, h->B, h->T);
    else
        return NULL;
    return msg;
}

/* Restores optimizer, loader position, sampler RNG and step from the chosen checkpoint; returns the step. */
int restore_checkpoint(Run *r) {
    char path[4400];
    int step, old_world;
    char why[512];
    if (!ckpt_is_complete(r->ckpt_path, &step, &old_world, why, sizeof why))
        fatal("%s: checkpoint became incomplete (%s)", r->ckpt_path, why);
    int same_world = old_world == r->world;
    int n_blobs = same_world ? 1 : old_world; /* a new world size needs every saved rank's state */
    void **blobs = xcalloc((size_t)n_blobs, sizeof(void *), "checkpoint blobs");
    size_t *sizes = xcalloc((size_t)n_blobs, sizeof(size_t), "checkpoint sizes");
    CkptState mine;
    int mine_set = 0;
    for (int i = 0; i < n_blobs; i++) {
        int src = same_world ? r->rank : i;
        CkptState h;
        snprintf(path, sizeof path, "%s/state_rank%d.bin", r->ckpt_path, src);
        blobs[i] = ckpt_read_state(path, &h);
        sizes[i] = h.blob_bytes;
        char mixed[4096 + 512];
        const char *bad = fingerprint_mismatch(r, &h, path);
        if (h.step != step || h.world != old_world || h.rank != src) {
            snprintf(mixed, sizeof mixed, "%s: header says rank %d of %d at step %d, manifest says rank %d of %d at "
                     "step %d; the checkpoint mixes runs", path, h.rank, h.world, h.step, src, old_world, step);
            bad = mixed;
        }
        if (bad) { /* free first: a clean exit for leak checkers */
            for (int j = 0; j <= i; j++) free(blobs[j]);
            free(blobs);
            free(sizes);
            fatal("%s", bad);
        }
        /* after a world-size change every new rank continues the data order from the same global position */
        if (src == (r->rank < old_world ? r->rank : 0)) {
            mine = h;
            mine_set = 1;
        }
    }
    if (!mine_set) {
        snprintf(path, sizeof path, "%s/state_rank%d.bin", r->ckpt_path, r->rank);
        fatal("%s: internal error choosing the rank's state", path);
    }
    if (r->rank == 0 && old_world != r->world)
        printf("note: resuming a %d-rank checkpoint on %d rank%s: the optimizer states of all saved ranks are "
               "merged (distopt_load) and the data order continues from the same global position\n",
               old_world, r->world, r->world == 1 ? "" : "s");
    if (mine.total_batch != r->tokens_per_step && r->rank == 0)
        printf("note: --total-batch changed from %lld to %lld tokens on resume\n", (long long)mine.total_batch,
               (long long)r->tokens_per_step);
    r->u->load(r->u, (const void *const *)blobs, sizes, n_blobs);
    /* other training data (--train/--data changed): the saved position is kept when it fits them (the same data
     * under another path), else they are read from their first window in the order of the run's seed */
    if (r->data_changed && mine.data.num_windows != dataloader_num_windows(r->dl)) {
        if (r->rank == 0)
            printf("note: the training data changed (%llu windows, the checkpoint's run read %llu): reading them from "
                   "their first window\n", (unsigned long long)dataloader_num_windows(r->dl),
                   (unsigned long long)mine.data.num_windows);
    } else {
        dataloader_set_pos(r->dl, &mine.data);
    }
    r->sample_rng.s = mine.sample_rng;
    for (int i = 0; i < n_blobs; i++) free(blobs[i]);
    free(blobs);
    free(sizes);
    return step;
}

/* "the newest complete checkpoint is <out>/ckpt_<s>, kept" or "there is no complete checkpoint under <out>". */
void newest_complete(const char *out, char *buf, size_t cap) {
    int *steps;
    int n = ckpt_list(out, &steps), found = -1;
    for (int i = 0; i < n && found < 0; i++) {
        char dir[4200], why[512];
        int s, w;
        ckpt_dir(dir, sizeof dir, out, steps[i]);
        if (ckpt_is_complete(dir, &s, &w, why, sizeof why)) found = steps[i];
    }
    free(steps);
    if (found >= 0) snprintf(buf, cap, "the newest complete checkpoint, ckpt_%d, is kept", found);
    else snprintf(buf, cap, "there is no complete checkpoint under --out");
}

int checkpoint_at(Run *r, int t) {
    const TrainConfig *c = &r->c;
    int saved = t == c->steps || (c->ckpt_every > 0 && t % c->ckpt_every == 0);
    if (saved && r->bad_run && !r->inj.ckpt_skipped) { /* never a checkpoint of a state reached through skipped steps */
        if (r->rank == 0) {
            char newest[128];
            newest_complete(c->out, newest, sizeof newest);
            printf("step %d: no checkpoint of this step, the last %d step%s skipped; %s\n", t, r->bad_run,
                   r->bad_run == 1 ? " was" : "s were", newest);
        }
        saved = 0;
    }
    if (saved) save_checkpoint(r, t);
    return saved;
}

int checkpoint_and_stop(Run *r, int t, int saved) {
    const TrainConfig *c = &r->c;
    /* preempted: a checkpoint of this step (never of a state reached through skipped steps), then out */
    int ckpt = !r->bad_run;
    const char *sig = r->stop_at == SIGINT ? "SIGINT" : r->stop_at == SIGHUP ? "SIGHUP" : "SIGTERM";
    if (ckpt && !saved) save_checkpoint(r, t);
    if (r->rank == 0) {
        if (ckpt)
            fprintf(stderr, "stopped by %s after step %d of %d: checkpoint %s/ckpt_%d written; continue with "
                    "--resume latest --out %s\n", sig, t, c->steps, c->out, t, c->out);
        else
            fprintf(stderr, "stopped by %s after step %d of %d, a skipped step: no checkpoint of it; the newest "
                    "complete one under %s is intact, continue with --resume latest\n", sig, t, c->steps, c->out);
        fflush(stderr);
    }
    jlog_begin(r->log, "stop");
    jlog_int(r->log, "step", t);
    jlog_str(r->log, "reason", sig);
    jlog_end(r->log);
    return 128 + r->stop_at;
}

/*
 * trainer/train.c - the shared training loop (see train.h). Reads top to bottom: options, set-up (threads, data,
 * model, optimizer, resume), then the step loop with its periodic validation, sampling and checkpoints.
 * One step t = 1..steps: `accum` micro-steps of forward/backward over this rank's B x T windows (the last
 * backward hands finished gradient buckets to the communication thread), then the update's step(t, lr_t)
 * (trainer/updater.h: the host DistOptim of optim/dist.h, or the model's device-resident update).
 * Not for: model maths (train_gpt.c, ...), update formulas and communication (optim/), file formats (ckpt.c).
 */
#define _GNU_SOURCE
#include "trainer/train.h"

#include <cblas.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/log.h"
#include "common/rng.h"
#include "common/schedule.h"
#include "common/util.h"
#include "dataloader/dataloader.h"
#include "eval/evaluate.h"
#include "eval/tasks.h"
#include "comm/comm.h"
#include "optim/dist.h"
#include "tokenizer/tokenizer.h"
#include "trainer/ckpt.h"
#include "trainer/sampler.h"
#include "trainer/train_rules.h"
#include "trainer/updater.h"

/* ------------------------------------------------------------------------------------------------------------ */
/* set-up helpers */

/* Ranks sharing this node, from MPI (comm/comm.h comm_local_size: any launcher), for the threads default. */
static int local_ranks(void) { return comm_local_size(); }

static int set_threads(int requested) {
    int threads = requested;
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = (int)(cores / local_ranks());
        if (threads < 1) threads = 1;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    return threads;
}

/* 1 if spec names an existing file or directory or a glob that matches something. */
static int shards_exist(const char *spec) {
    if (file_exists(spec)) return 1;
    glob_t g;
    int rc = glob(spec, 0, NULL, &g);
    int found = rc == 0 && g.gl_pathc > 0;
    if (rc == 0) globfree(&g);
    return found;
}

/* The make target that prepares the default corpus for a tokenizer kind: `data` writes the GPT-2 (uint16) shards,
 * `data-llama` the Llama 2 and Llama 3 (uint32) ones (tokenizer/module.mk). Families without a tokenizer (the
 * tests' toy model) use `data`. */
static const char *data_target(const char *tokenizer_kind) {
    return tokenizer_kind && strncmp(tokenizer_kind, "llama", 5) == 0 ? "data-llama" : "data";
}

/* The default corpus is "prepared on first use": rank 0 runs `make -s <data_target>` once while the others
 * wait. */
static void ensure_data(const TrainConfig *c, const char *tokenizer_kind, const char *train, const char *val,
                        int defaults) {
    const char *target = data_target(tokenizer_kind);
    int missing = !shards_exist(train) || !shards_exist(val);
    if (missing && defaults) {
        if (comm_rank() == 0) {
            char cmd[4400];
            snprintf(cmd, sizeof cmd, "make -s %s DATA='%s'", target, c->data);
            printf("default corpus missing under %s/: preparing it once with `%s`\n", c->data, cmd);
            fflush(stdout);
            int rc = system(cmd);
            if (rc != 0)
                fatal("`%s` failed (status %d); run it from the repository root, or pass --train and --val", cmd,
                      rc);
        }
        comm_barrier();
    }
    if (!shards_exist(train))
        fatal("--train %s: no shard matches; run `make %s` for the default corpus, or point --train at "
              "token shards (file, dir or glob)", train, target);
    if (!shards_exist(val))
        fatal("--val %s: no shard matches; run `make %s` for the default corpus, or point --val at "
              "token shards (file, dir or glob)", val, target);
}

static CommBackend comm_backend(const char *name) {
    if (strcmp(name, "nccl") == 0) return COMM_BACKEND_NCCL;
    if (strcmp(name, "mpi") == 0) return COMM_BACKEND_MPI;
    return COMM_BACKEND_AUTO;
}

/* The model spec, recorded in each state file for information (an --init file is identified by its content in the
 * manifest, the layout by param_table_hash). */
static void model_id(const TrainConfig *c, char *buf) { snprintf(buf, CKPT_ID_MAX, "%s", c->model); }

/* Options of a run (trainer/train_options.c) as its checkpoints record them and a resume treats them:
 *   not recorded: where and how this process runs (--out, --resume, --threads, --comm, --update, --comm-timeout,
 *                 --verify-ckpt) and --init (recorded by content as the manifest's init_xxh3);
 *   defining:     what the checkpoint's model and optimizer state are made for; on resume a flag that differs is
 *                 refused naming both values;
 *   the rest:     taken from the checkpoint unless given again, when the new value applies from the resumed step
 *                 on (steps, lr schedule, eval, sampling, data paths, density schedule, ...), with a note. */
static const char *const options_not_recorded[] = {"out", "resume", "threads", "comm", "update", "comm-timeout",
                                                   "verify-ckpt", "init", "eval-only", "eval-dump"};
static const char *const options_defining[] = {"model", "optimizer", "batch", "seq", "scape-exclude-norms",
                                                "scape-variant", "powersgd-rank", "powersgd-min-compression",
                                                "demo-chunk", "demo-topk"};
static int in_list(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0) return 1;
    return 0;
}
#define IN_LIST(name, list) in_list(name, list, sizeof list / sizeof list[0])

/* Test-only fault injection for the non-finite-step drills (test/test_drills_nan.sh); deliberately not in --help.
 * SCAPE_TEST_INJECT_NAN=item[,item...], each item "N" or "loss:N" (N >= 1, a step number):
 *   N       rank 0's last backward of step N runs with loss scale NaN, so its whole local gradient is NaN and the
 *           all-reduce spreads it to every rank: the gradient-norm path (distopt_step skips);
 *   loss:N  rank 0's loss of step N is NaN before the loss all-reduce: the non-finite-loss path.
 * The variable's name says what it is for, so it is not set by accident; a malformed value is fatal.
 * SCAPE_TEST_CKPT_SKIPPED=1 lets the drill checkpoint a skipped step anyway (a run never does), so that it can show
 * by file comparison that the skipped step left params and optimizer state as they were. */
typedef struct {
    int *grad_steps, *loss_steps;
    int n_grad, n_loss;
    int ckpt_skipped;
} NanInjection;

static void nan_injection_parse(NanInjection *inj) {
    memset(inj, 0, sizeof *inj);
    const char *k = getenv("SCAPE_TEST_CKPT_SKIPPED");
    inj->ckpt_skipped = k && strcmp(k, "1") == 0;
    const char *v = getenv("SCAPE_TEST_INJECT_NAN");
    if (!v || !v[0]) return;
    size_t cap = strlen(v) / 2 + 1;
    inj->grad_steps = xmalloc(cap * sizeof(int), "NaN injection steps");
    inj->loss_steps = xmalloc(cap * sizeof(int), "NaN injection steps");
    const char *p = v;
    while (*p) {
        int is_loss = strncmp(p, "loss:", 5) == 0;
        if (is_loss) p += 5;
        char *end;
        long step = strtol(p, &end, 10);
        if (end == p || step < 1 || step > 2147483647L || (*end != ',' && *end != '\0'))
            fatal("SCAPE_TEST_INJECT_NAN=%s: expected step[,step...] with each item N or loss:N (N >= 1); unset it "
                  "outside the drill tests", v);
        if (is_loss) inj->loss_steps[inj->n_loss++] = (int)step;
        else inj->grad_steps[inj->n_grad++] = (int)step;
        p = *end == ',' ? end + 1 : end;
    }
}

static int nan_injection_at(const int *steps, int n, int t) {
    for (int i = 0; i < n; i++)
        if (steps[i] == t) return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* the run's state */

typedef struct {
    TrainConfig c;
    const ModelFamily *fam;
    int rank, world, accum, threads;
    Model *m;
    Updater *u; /* the parameter update: host (optim/dist.h) or the model's own (Model.create_updater) */
    DataLoader *dl;
    ValLoader *vl;
    Tokenizer *tok;
    JsonLog *log; /* rank 0 only */
    LrSchedule sched;
    Rng sample_rng;
    int *inputs, *targets; /* (B,T) */
    int64_t tokens_per_step;
    char ckpt_path[4096]; /* checkpoint being resumed, "" for a fresh run */
    ArgSpec *opts;        /* the option table, bound to c (its given flags say what this command line set) */
    int n_opts;
    char *restored[CKPT_MAX_OPTIONS]; /* option values taken from the checkpoint (string fields point here) */
    int n_restored;
    char init_hash[32];   /* XXH3 of the --init file (hex), carried forward from the checkpoint on resume; "" none */
    char run_id[32];      /* the run's identity (16 hex digits): made at step 0, carried by every resume */
    int ckpt_step;        /* the resumed checkpoint's step as its manifest says (whatever its folder is called) */
    int lineage_after;    /* rank 0: the line's checkpoints after this step move aside once every check has passed
                           * (commit_lineage); LINEAGE_KEEP: none does (--eval-only) */
    int data_changed;     /* resuming with another --train/--data: the saved data position does not apply */
    char model_canon[256];/* canonical spec of the model this run trains (ModelFamily.memory_bytes), "" unknown */
    Task *tasks;          /* --eval-task, read on every rank (each scores its share of the items) */
    int ntasks;
    OutFile *eval_dump;   /* --eval-dump, this rank's file (written whole at the end); NULL without, or dropped */
    char eval_dump_err[4600]; /* why the dump was dropped during training (the run ends with status 1); "" none */
    volatile sig_atomic_t *eval_stop; /* --eval-only: the stop signal, checked between forward passes */
} Run;

/* The files this run reads, which no output of it may replace (common/util.h out_guard_input): the task files, the
 * model file of --init, the resumed checkpoint's files, the shards of --train and --val. */
static void guard_run_inputs(const Run *r) {
    const TrainConfig *c = &r->c;
    for (int i = 0; i < r->ntasks; i++) {
        out_guard_input(r->tasks[i].path, "the --eval-task file");
        if (r->tasks[i].labels[0]) out_guard_input(r->tasks[i].labels, "the --eval-task labels file");
    }
    if (c->init[0]) out_guard_input(c->init, "the --init model file");
    if (r->ckpt_path[0]) {
        DIR *d = opendir(r->ckpt_path);
        for (struct dirent *e; d && (e = readdir(d));) {
            char f[4400];
            snprintf(f, sizeof f, "%s/%s", r->ckpt_path, e->d_name);
            if (e->d_name[0] != '.') out_guard_input(f, "a file of the resumed checkpoint");
        }
        if (d) closedir(d);
    }
    const char *pats[2] = {c->train, c->val};
    for (int k = 0; k < 2; k++) {
        glob_t g;
        if (pats[k][0] && glob(pats[k], 0, NULL, &g) == 0) {
            for (size_t i = 0; i < g.gl_pathc; i++) out_guard_input(g.gl_pathv[i], "a data shard");
            globfree(&g);
        }
    }
}

/* Returns when every rank opened its --eval-dump file. Otherwise every rank first drops its temp file (a rank that
 * fails alone would otherwise abort the job with the others' temps left beside their files), then the failing rank
 * ends the job with its line (err) and the others wait to be ended with it. */
static void dump_opened_everywhere(Run *r, const char *err) {
    int opened = r->eval_dump != NULL;
    double failed = !opened;
    if (r->world > 1) comm_allreduce_sum_f64(&failed, 1);
    if (failed == 0) return;
    out_discard(r->eval_dump);
    r->eval_dump = NULL;
    if (r->world > 1) comm_barrier(); /* every temp is gone before any rank aborts the job */
    if (!opened) fatal("%s", err);
    for (;;) comm_barrier(); /* a rank whose file opened: ended by the failing rank's abort */
}

/* --eval-task: every task file, read on every rank with the model's tokenizer already loaded, and every item
 * checked against --seq; fatal() naming the file and line of the first bad item (unless --eval-task-skip-bad),
 * before any training. */
static void load_eval_tasks(Run *r) {
    const TrainConfig *c = &r->c;
    char *list = xmalloc(strlen(c->eval_task) + 1, "the task list");
    strcpy(list, c->eval_task);
    for (char *save = NULL, *spec = strtok_r(list, ",", &save); spec; spec = strtok_r(NULL, ",", &save)) {
        r->tasks = xrealloc(r->tasks, (size_t)(r->ntasks + 1) * sizeof(Task), "the tasks");
        char err[1200];
        if (!task_load(&r->tasks[r->ntasks], spec, c->eval_task_skip_bad, err, sizeof err)) fatal("%s", err);
        Task *t = &r->tasks[r->ntasks++];
        if (r->rank == 0)
            printf("eval task %s: %d %s items from %s%s\n", t->name, t->n, t->format, t->path,
                   t->skipped ? " (bad items skipped: see its events)" : "");
    }
    free(list);
    guard_run_inputs(r);
    for (int i = 0; i < r->ntasks; i++) { /* every item fits --seq, checked before the first step */
        EvalOptions o = {.B = c->B, .T = c->T, .rank = r->rank, .world = r->world, .skip_bad = c->eval_task_skip_bad};
        char err[1200];
        int too_long;
        if (!eval_check_task(r->tok, &r->tasks[i], &o, &too_long, err, sizeof err)) fatal("%s", err);
    }
}

/* A resumed training run keeps what an earlier run of its line wrote to the same --eval-dump: the rows of the scoring
 * points up to the resumed step are copied into the new dump first (those after it are scored again), so a requeued
 * job's dump holds every scoring point once. path was checked by out_open (a regular file or absent); a row that is
 * not JSON with an integer "step" is dropped with one note. say: print what was kept (rank 0). */
static void keep_earlier_dump_rows(OutFile *dump, const char *path, int resumed_step, int say) {
    FILE *in = fopen(path, "r");
    if (!in) return; /* no earlier dump */
    char *line = NULL;
    size_t cap = 0;
    long kept = 0, dropped = 0, bad = 0;
    while (getline(&line, &cap, in) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        json_t *step = o ? json_object_get(o, "step") : NULL;
        if (!json_is_integer(step)) bad++;
        else if (json_integer_value(step) <= resumed_step) {
            fputs(line, out_stream(dump));
            kept++;
        } else dropped++;
        json_decref(o);
    }
    free(line);
    fclose(in);
    if (!say) return;
    printf("--eval-dump %s: kept its %ld rows of steps up to %d%s", path, kept, resumed_step,
           dropped ? "; the rows of later steps are scored again\n" : "\n");
    if (bad) printf("note: --eval-dump %s: dropped %ld lines that are not dump rows\n", path, bad);
}

/* --eval-dump's temp file on every rank (out_open: never an input, an output of the run, a link or a device), opened
 * once every check that can refuse the run has passed and the log is open: a check failing on one rank after it
 * would abort the job with the other ranks' temp files left behind. */
static void open_eval_dump(Run *r, int resumed_step) {
    const TrainConfig *c = &r->c;
    if (!c->eval_dump[0]) return;
    char path[4200], err[4600] = "";
    if (r->world > 1) snprintf(path, sizeof path, "%s.rank%d", c->eval_dump, r->rank);
    else snprintf(path, sizeof path, "%s", c->eval_dump);
    if (r->world > 1) comm_barrier(); /* every rank is past its checks (rank 0's log included) */
    r->eval_dump = out_open(path, "--eval-dump", err, sizeof err);
    if (r->eval_dump && resumed_step > 0) keep_earlier_dump_rows(r->eval_dump, path, resumed_step, r->rank == 0);
    dump_opened_everywhere(r, err);
}

/* Scores every --eval-task at `step` into sc (ntasks). Returns EVAL_OK, EVAL_STOPPED (the stop signal, --eval-only),
 * or EVAL_FAILED with err (the same on every rank, the failing rank's own reason on it). */
static int score_eval_tasks(Run *r, int step, TaskScore *sc, char *err, size_t cap) {
    EvalOptions o = {.B = r->c.B, .T = r->c.T, .rank = r->rank, .world = r->world, .reduce = comm_allreduce_sum_f64,
                     .skip_bad = r->c.eval_task_skip_bad, .progress = stderr,
                     .dump = r->eval_dump ? out_stream(r->eval_dump) : NULL, .step = step, .stop = r->eval_stop};
    for (int i = 0; i < r->ntasks; i++) {
        int st = eval_task(r->m, r->tok, &r->tasks[i], &o, &sc[i], err, cap);
        if (st != EVAL_OK) return st;
    }
    return EVAL_OK;
}

/* One line per task on stdout (rank 0) and an "eval_task" event each (step, task, format, acc, acc_norm or ppl,
 * items, skipped, nonfinite, ms, tokens) in log; with table, a table of all of them, printed and checked first. */
static void report_eval_tasks(const Run *r, int step, const TaskScore *sc, JsonLog *log, int table) {
    for (int i = 0; i < r->ntasks && r->rank == 0; i++) {
        const Task *t = &r->tasks[i];
        char nf[160] = "";
        if (sc[i].nonfinite)
            snprintf(nf, sizeof nf, " | the model produced non-finite log-likelihoods on %d items (counted wrong)",
                     sc[i].nonfinite);
        if (t->kind == TASK_LASTWORD)
            printf("step %6d | eval %s acc %.4f ppl %.3f over %d items%s | %.0f ms (%.0f tok/s)%s\n", step, t->name,
                   sc[i].acc, sc[i].ppl, sc[i].items, sc[i].skipped ? " (some skipped)" : "", sc[i].ms,
                   sc[i].tokens / (sc[i].ms / 1e3), nf);
        else
            printf("step %6d | eval %s acc %.4f acc_norm %.4f over %d items%s | %.0f ms (%.0f tok/s)%s\n", step,
                   t->name, sc[i].acc, sc[i].acc_norm, sc[i].items, sc[i].skipped ? " (some skipped)" : "",
                   sc[i].ms, sc[i].tokens / (sc[i].ms / 1e3), nf);
    }
    if (table && r->rank == 0) {
        printf("\n%-16s %-10s %8s %8s %8s %9s %9s %10s %9s\n", "task", "format", "items", "skipped", "acc", "acc_norm",
               "ppl", "ms", "nonfinite");
        for (int i = 0; i < r->ntasks; i++) {
            const Task *t = &r->tasks[i];
            char an[16] = "-", pp[16] = "-";
            if (t->kind == TASK_LASTWORD) snprintf(pp, sizeof pp, "%.3f", sc[i].ppl);
            else snprintf(an, sizeof an, "%.4f", sc[i].acc_norm);
            printf("%-16s %-10s %8d %8d %8.4f %9s %9s %10.0f %9d\n", t->name, t->format, sc[i].items, sc[i].skipped,
                   sc[i].acc, an, pp, sc[i].ms, sc[i].nonfinite);
        }
        for (int i = 0; i < r->ntasks; i++)
            if (sc[i].nonfinite)
                printf("note: the model produced non-finite log-likelihoods (NaN or inf) on %d of %d items of %s: "
                       "its scores say nothing about the model; check it (a diverged run?)\n", sc[i].nonfinite,
                       sc[i].items, r->tasks[i].name);
    }
    if (r->rank == 0) xflush_stdout(); /* a table nobody can read is an error, before any file is written */
    for (int i = 0; i < r->ntasks; i++) {
        const Task *t = &r->tasks[i];
        jlog_begin(log, "eval_task");
        jlog_int(log, "step", step);
        jlog_str(log, "task", t->name);
        jlog_str(log, "format", t->format);
        jlog_num(log, "acc", sc[i].acc);
        if (t->kind == TASK_LASTWORD) jlog_num(log, "ppl", sc[i].ppl);
        else jlog_num(log, "acc_norm", sc[i].acc_norm);
        jlog_int(log, "items", sc[i].items);
        jlog_int(log, "skipped", sc[i].skipped);
        jlog_int(log, "nonfinite", sc[i].nonfinite);
        if (sc[i].nonfinite) jlog_str(log, "note", "the model produced non-finite log-likelihoods");
        jlog_num(log, "ms", sc[i].ms);
        jlog_num(log, "tokens", sc[i].tokens);
        jlog_end(log);
    }
}

/* A scoring point during training: scores and reports every task. A failure never costs the run: it is one
 * "warning:" line and an "eval_task_error" event, and the run goes on (its checkpoint of this step is already
 * written). A dump that cannot be written is dropped whole (its temp removed) with a warning; the run ends with
 * status 1 for it (free_eval_tasks). */
static void eval_tasks_at(Run *r, int step) {
    TaskScore *sc = xcalloc((size_t)r->ntasks, sizeof(TaskScore), "task scores");
    char err[1200];
    if (score_eval_tasks(r, step, sc, err, sizeof err) == EVAL_OK) report_eval_tasks(r, step, sc, r->log, 0);
    else {
        fflush(stdout);
        fprintf(stderr, "warning: step %d: the tasks were not scored: %s; the run goes on\n", step, err);
        fflush(stderr);
        jlog_begin(r->log, "eval_task_error");
        jlog_int(r->log, "step", step);
        jlog_str(r->log, "error", err);
        jlog_end(r->log);
    }
    if (r->eval_dump && !out_ok(r->eval_dump, r->eval_dump_err, sizeof r->eval_dump_err)) {
        out_discard(r->eval_dump);
        r->eval_dump = NULL;
        fprintf(stderr, "warning: step %d: %s; the dump is dropped, the run goes on (and ends with status 1)\n", step,
                r->eval_dump_err);
        fflush(stderr);
    }
    free(sc);
}

/* --eval-only: scores the model once, prints the table, then writes the events into log and the dump whole. A
 * stop signal ends the process at once (128 + signal) with nothing written; any other failure is fatal. */
static void eval_only_scores(Run *r, int step, JsonLog *log) {
    TaskScore *sc = xcalloc((size_t)r->ntasks, sizeof(TaskScore), "task scores");
    char err[4600];
    int st = score_eval_tasks(r, step, sc, err, sizeof err);
    if (st == EVAL_STOPPED) {
        out_discard(r->eval_dump);
        fflush(stdout);
        fprintf(stderr, "stopped by %s during --eval-only: nothing written\n", *r->eval_stop == SIGINT ? "SIGINT" :
                "SIGTERM");
        fflush(stderr);
        _exit(128 + *r->eval_stop); /* no MPI_Finalize: a job's other ranks are ended by the launcher */
    }
    if (st != EVAL_OK) fatal("%s", err);
    report_eval_tasks(r, step, sc, log, 1);
    if (r->eval_dump && !out_commit(r->eval_dump, err, sizeof err)) fatal("%s", err);
    r->eval_dump = NULL;
    free(sc);
}

/* Frees the tasks and commits the dump of a training run. Returns 0 (with one "error:" line) when the dump could
 * not be written: the run's exit status is then 1. */
static int free_eval_tasks(Run *r) {
    for (int i = 0; i < r->ntasks; i++) task_free(&r->tasks[i]);
    free(r->tasks);
    if (r->eval_dump) out_commit(r->eval_dump, r->eval_dump_err, sizeof r->eval_dump_err); /* err only on failure */
    r->eval_dump = NULL;
    if (!r->eval_dump_err[0]) return 1;
    fflush(stdout);
    fprintf(stderr, "error: %s\n", r->eval_dump_err);
    fflush(stderr);
    return 0;
}

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

/* One run per --out: rank 0 holds an exclusive flock on <out>/.lock for the run's lifetime (the descriptor is never
 * closed; the kernel drops the lock when the process ends, however it ends, so a killed run never blocks the next).
 * A second run on the same directory stops here, before it reads or writes anything there, naming the holder's pid
 * (which the holder wrote into the file). fatal() also when the directory cannot be made or the file opened. */
/* Preemption: SIGTERM (a cluster's notice before it kills a job) or SIGINT (Ctrl-C) asks the run to stop after
 * the step in progress; a second signal ends the process at once. The flag is agreed on by all ranks through the
 * step's mean-loss all-reduce, so every rank stops after the same step and writes its part of one checkpoint. */
static volatile sig_atomic_t stop_signal = 0;
static void on_stop_signal(int sig) {
    if (stop_signal) _exit(128 + sig);
    stop_signal = sig;
}
static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

static int out_lock_fd = -1;
static void lock_out_dir(const Run *r, const char *out) {
    if (r->rank != 0) return;
    make_dirs(out);
    char path[4400];
    snprintf(path, sizeof path, "%s/.lock", out);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644); /* never through a planted link */
    if (fd < 0 && errno == ELOOP)
        fatal("%s is a symbolic link; the run locks only a file of its own: remove the link", path);
    if (fd < 0) fatal("cannot open %s: %s; check that --out %s is writable", path, strerror(errno), out);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        fatal("--out %s is in use by another run (pid %s holds %s); wait for it to finish or stop it, or pass "
              "another --out", out, pid[0] ? pid : "unknown", path);
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        fatal("cannot write %s: %s; check free space and permissions", path, strerror(errno));
    out_lock_fd = fd; /* kept open for the run's lifetime: closing it would release the lock */
    out_guard_input(path, "the --out lock file"); /* an output renamed onto it would free --out for a second run */
}

/* One "mask" event (optim/dist.h DistMaskStats) of step t, rank 0 only: per sparse tensor the Jaccard of
 * consecutive masks and the kept energy, first-moment (_m, SCAPE) and raw-gradient (_g), and their means. */
static void log_mask_stats(Run *r, int t) {
    const DistMaskStats *st = r->u->mask_stats(r->u);
    if (!r->log || !st || st->step != t) return;
    const char **names = xmalloc((size_t)(st->n ? st->n : 1) * sizeof(char *), "mask event");
    char *buf = xmalloc((size_t)(st->n ? st->n : 1) * (PARAM_NAME_MAX + 16), "mask event");
    for (int i = 0; i < st->n; i++) {
        const ParamSlice *s = &r->m->table.slices[st->slice[i]];
        char *b = buf + (size_t)i * (PARAM_NAME_MAX + 16);
        if (s->layer >= 0) snprintf(b, PARAM_NAME_MAX + 16, "h%d.%s", s->layer, s->name);
        else snprintf(b, PARAM_NAME_MAX + 16, "%s", s->name);
        names[i] = b;
    }
    jlog_begin(r->log, "mask");
    jlog_int(r->log, "step", t);
    jlog_strs(r->log, "tensors", names, st->n);
    if (st->jaccard_m) {
        jlog_nums(r->log, "jaccard_m", st->jaccard_m, st->n);
        jlog_nums(r->log, "energy_m", st->energy_m, st->n);
        jlog_num(r->log, "mean_jaccard_m", st->mean_jaccard_m);
        jlog_num(r->log, "mean_energy_m", st->mean_energy_m);
    }
    jlog_nums(r->log, "jaccard_g", st->jaccard_g, st->n);
    jlog_nums(r->log, "energy_g", st->energy_g, st->n);
    jlog_num(r->log, "mean_jaccard_g", st->mean_jaccard_g);
    jlog_num(r->log, "mean_energy_g", st->mean_energy_g);
    jlog_end(r->log);
    free(names);
    free(buf);
}

/* Mean validation loss over up to eval_batches batches per rank, averaged over all ranks' batches. */
static double validate(Run *r, int step) {
    double t0 = now_seconds();
    valloader_reset(r->vl);
    double acc[2] = {0.0, 0.0}; /* loss sum, batches */
    while (valloader_next(r->vl, r->inputs, r->targets)) {
        acc[0] += r->m->forward(r->m, r->inputs, r->targets, r->c.B, r->c.T);
        acc[1] += 1.0;
    }
    comm_allreduce_sum_f64(acc, 2);
    double loss = acc[1] > 0 ? acc[0] / acc[1] : NAN;
    double ms = 1e3 * (now_seconds() - t0);
    if (r->rank == 0) {
        /* per batch too: a validation batch is one forward, about a third of a training step's work */
        printf("step %6d | val loss %.6f over %.0f batches | %.1f ms (%.1f ms/batch)\n", step, loss, acc[1], ms,
               acc[1] > 0 ? ms / acc[1] : 0.0);
        fflush(stdout);
    }
    jlog_begin(r->log, "val");
    jlog_int(r->log, "step", step);
    jlog_num(r->log, "val_loss", loss);
    jlog_int(r->log, "batches", (int64_t)acc[1]);
    jlog_num(r->log, "ms", ms);
    jlog_end(r->log);
    return loss;
}

/* Every shard of spec that records its tokenizer (dataloader.h; `tok shards` writes it) must record the model's:
 * ids of another vocabulary may all lie below V (Llama 2's 32000 < GPT-2's 50257) and would train silently.
 * fatal() naming the shard, both tokenizers and the fix, before the first step, on every rank. */
static void check_data_tokenizer(const char *spec, const char *tok_kind, const Model *m) {
    if (!tok_kind) return; /* a model without a tokenizer of its own (the tests' toy) */
    int n;
    char **paths = shard_list(spec, &n);
    for (int i = 0; i < n; i++) {
        const char *t = shard_tokenizer(paths[i]);
        if (t && strcmp(t, tok_kind) != 0)
            fatal("%s was tokenized for %s, but this %s model (V %d) uses %s; pass shards made with `tok shards "
                  "--model %s` (make data, make data-llama)", paths[i], t, m->family, m->vocab_size, tok_kind, tok_kind);
    }
    shard_list_free(paths, n);
}

/* Rank 0 continues the prompt by sample_tokens tokens, feeding at most T tokens of context (a sliding window);
 * forward runs on (1, len) so short contexts cost little. A sample starts as a training document does
 * (`tok shards` puts tokenizer_bos() before each one): with that token alone when there is no prompt; before
 * the prompt too when the tokenizer has a BOS of its own (Llama: <s>, <|begin_of_text|>, as Meta's and Hugging
 * Face's encoders add it), unless the prompt spells it itself (--prompt '<|begin_of_text|>...'): one BOS either
 * way. GPT-2 has none (its "bos" is its end-of-text), so its prompt stands alone, as in llm.c. */
static void sample(Run *r, int step) {
    if (r->rank != 0) return;
    const TrainConfig *c = &r->c;
    int32_t *ids = NULL;
    size_t cap = 0, n = 0;
    int bos = r->tok ? tokenizer_bos(r->tok) : 0;
    int own_bos = r->tok && bos != tokenizer_eot(r->tok);
    int32_t *prompt = NULL;
    size_t n_prompt_text = 0;
    if (r->tok && c->prompt[0])
        n_prompt_text = tokenizer_encode(r->tok, c->prompt, strlen(c->prompt), 1, &prompt, &cap);
    /* the whole sequence: [bos] prompt (sample_context: one BOS whatever the prompt), then the sampled tokens */
    int lead;
    ids = xmalloc((1 + n_prompt_text + (size_t)c->sample_tokens) * sizeof(int32_t), "sample tokens");
    n = sample_context(prompt, n_prompt_text, bos, own_bos, ids, &lead);
    free(prompt);
    int *window = xmalloc((size_t)c->T * sizeof(int), "sample context");
    int V = r->m->vocab_size, Vp = r->m->padded_vocab_size;
    for (int i = 0; i < c->sample_tokens; i++) {
        int w = n < (size_t)c->T ? (int)n : c->T;
        for (int j = 0; j < w; j++) window[j] = ids[n - (size_t)w + (size_t)j];
        r->m->forward(r->m, window, NULL, 1, w);
        const float *logits = r->m->logits(r->m) + (size_t)(w - 1) * (size_t)Vp;
        ids[n++] = sample_token(logits, V, c->temperature, c->top_k, &r->sample_rng);
    }
    free(window);
    char *text;
    if (r->tok) {
        size_t len;
        /* the leading bos is a start marker, not part of the sample's text */
        size_t from = (size_t)lead;
        text = tokenizer_decode(r->tok, ids + from, n - from, &len);
    } else {
        size_t tcap = n * 12 + 1, len = 0;
        text = xmalloc(tcap, "sample text");
        text[0] = '\0';
        for (size_t j = 0; j < n; j++) len += (size_t)snprintf(text + len, tcap - len, "%s%d", j ? " " : "", ids[j]);
    }
    printf("step %6d | sample: %s\n", step, text);
    fflush(stdout);
    jlog_begin(r->log, "sample");
    jlog_int(r->log, "step", step);
    jlog_str(r->log, "text", text);
    jlog_end(r->log);
    free(text);
    free(ids);
}

static void save_checkpoint(Run *r, int step) {
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
        r->m->save(r->m, path);
    }
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
    int64_t mine[2];
    uint64_t hash;
    if (!ckpt_file_hash(path, &mine[0], &hash))
        fatal("cannot read back %s: %s; check the disk under --out %s", path, strerror(errno), r->c.out);
    if (mine[0] != (int64_t)(sizeof h + bytes))
        fatal("%s has %lld bytes after writing %zu; the file system lost data, check the disk under --out %s", path,
              (long long)mine[0], sizeof h + bytes, r->c.out);
    mine[1] = (int64_t)hash;
    int64_t *all = xmalloc((size_t)r->world * sizeof mine, "checkpoint checksums");
    comm_allgather(mine, all, sizeof mine);
    if (r->rank == 0) {
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
static void choose_checkpoint(Run *r) {
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

/* Makes the lineage change choose_checkpoint decided (later checkpoints moved aside, unfinished saves removed), only
 * now that every check that can refuse the run has passed on every rank (options, memory, tokenizer, data, the
 * checkpoint's state files): a run refused before this leaves --out's checkpoints as they were. */
static void commit_lineage(Run *r) {
    comm_barrier();
    if (r->rank == 0 && r->lineage_after != LINEAGE_KEEP) {
        abandon_after(r->c.out, r->lineage_after, r->ckpt_path[0] ? r->ckpt_path : "step 0");
        fflush(stdout);
    }
}

/* XXH3 of a model file as 16 hex digits into hex[32]; fatal() naming the flag if it cannot be read. */
static void init_file_hash(const char *path, char *hex) {
    int64_t bytes;
    uint64_t h;
    if (!ckpt_file_hash(path, &bytes, &h)) fatal("--init %s: cannot read it: %s; pass a model file", path, strerror(errno));
    snprintf(hex, 32, "%016llx", (unsigned long long)h);
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
        } else if (strcmp(now, saved) != 0) {
            if (IN_LIST(name, options_defining))
                fatal("--%s %s contradicts the checkpoint %s, whose run has --%s %s; drop the flag (a resumed run "
                      "keeps its model, optimizer and batch shape) or start a new --out", name, now, r->ckpt_path,
                      name, saved);
            int data = !strcmp(name, "train") || !strcmp(name, "data");
            if (data) r->data_changed = 1;
            if (r->rank == 0 && !r->c.eval_only) /* --eval-only trains no step: nothing applies "from" one */
                printf("note: --%s %s applies from the resumed step on (the checkpoint's run had %s)\n", name, now,
                       saved[0] ? saved : "none");
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

/* NULL if the options agree with each other, else the one-line reason (a static buffer). floor_given: --lr-floor
 * was on the command line (else a floor above a small --lr becomes lr/10). */
static const char *options_conflict(TrainConfig *c, int floor_given) {
    static char msg[512];
    if (c->lr_floor > c->lr && !floor_given) c->lr_floor = 0.1f * c->lr; /* a small --lr with the default floor */
    if (c->lr_floor > c->lr)
        snprintf(msg, sizeof msg, "--lr-floor %g is above --lr %g; the cosine decays from --lr down to --lr-floor",
                 c->lr_floor, c->lr);
    else if (c->density < 1.0 && strcmp(c->optimizer, "scape") != 0 && strcmp(c->optimizer, "topk-ef") != 0)
        snprintf(msg, sizeof msg, "--density %g applies only to --optimizer scape or topk-ef (got %s)", c->density,
                 c->optimizer);
    else if (c->eval_only && !c->eval_task[0])
        snprintf(msg, sizeof msg, "--eval-only scores --eval-task FORMAT=FILE[,...]; give the tasks");
    else if (c->eval_only && !c->init[0] && !c->resume[0])
        snprintf(msg, sizeof msg, "--eval-only scores a trained model: give --init MODEL_FILE or --resume CHECKPOINT_DIR");
    else if ((c->eval_task_every || c->eval_task_skip_bad || c->eval_dump[0]) && !c->eval_task[0])
        snprintf(msg, sizeof msg, "--eval-task-every, --eval-task-skip-bad and --eval-dump apply to --eval-task; give the "
                 "tasks");
    else
        return NULL;
    return msg;
}

/* --verify-ckpt DIR: DIR is one checkpoint (it has a manifest.json) or an --out dir whose ckpt_<step> are all
 * checked, newest first. One line each; returns the exit status (0 all verified, 1 otherwise). */
static int verify_checkpoints(const char *dir) {
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

/* Exits 2 with one line when a path option is given an empty value (`--resume "$CKPT"` with CKPT unset), which
 * would otherwise read as not given: a new training run with the defaults instead of the resume or check asked for,
 * the default corpus instead of `--train "$SHARDS"`, no scoring or dump instead of the tasks asked for. */
static void refuse_empty_values(ArgSpec *opts, int n_opts) {
    static const struct { const char *name, *fix; } paths[] = {
        {"resume", "pass <out>/ckpt_<step> or latest"}, {"verify-ckpt", "pass <out>/ckpt_<step> or an --out dir"},
        {"init", "pass a model file"}, {"out", "pass the output directory"},
        {"train", "pass training shards (file, dir or glob), or drop the flag for the default corpus"},
        {"val", "pass validation shards (file, dir or glob), or drop the flag for the default corpus"},
        {"data", "pass the data cache dir, or drop the flag for data"},
        {"tokenizer", "pass gpt2, bpe4k, llama2, llama3 or a learned vocabulary's folder, or drop the flag"},
        {"eval-task", "pass FORMAT=FILE[,...], or drop the flag"}, {"eval-dump", "pass a file, or drop the flag"}};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        ArgSpec *s = args_find(opts, n_opts, paths[i].name);
        if (s && s->given && !(*(const char *const *)s->field)[0]) {
            fprintf(stderr, "error: --%s was given an empty value (an unset shell variable?); %s\n", paths[i].name,
                    paths[i].fix);
            exit(2);
        }
    }
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
static int restore(Run *r) {
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

/* Refuses, before anything is allocated or initialised, a model that cannot fit in this node's memory: the model's
 * own bytes (ModelFamily.memory_bytes: parameters, gradients, activations for B x T) and the update's state, times
 * the ranks on this node, against what the machine can give (mem_available_bytes: MemAvailable, a cgroup limit, an
 * address-space limit). One line with both figures. Also keeps the model's canonical spec (r->model_canon). */
static void check_memory(Run *r, const char *init) {
    const TrainConfig *c = &r->c;
    if (!r->fam->memory_bytes) return;
    size_t np;
    double model = r->fam->memory_bytes(c->model, init, c->B, c->T, &np, r->model_canon, sizeof r->model_canon);
    double optim = train_optimizer_bytes_per_param(c, r->world) * (double)np;
    int local = local_ranks();
    char source[64];
    double avail = mem_available_bytes(source, sizeof source);
    double need = (model + optim) * local;
    if (avail > 0 && need > avail) {
        const double G = 1024.0 * 1024.0 * 1024.0;
        fatal("--model %s (%zu parameters) with --batch %d --seq %d needs %.1f GiB per rank (model, gradients and "
              "activations %.1f, %s state %.1f) x %d rank%s on this node = %.1f GiB, but %.1f GiB are available "
              "(%s); use a smaller --model, --batch or --seq, or fewer ranks per node", init ? init : c->model, np,
              c->B, c->T, (model + optim) / G, model / G, c->optimizer, optim / G, local, local == 1 ? "" : "s",
              need / G, avail / G, source);
    }
}

/* "the newest complete checkpoint is <out>/ckpt_<s>, kept" or "there is no complete checkpoint under <out>". */
static void newest_complete(const char *out, char *buf, size_t cap) {
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

/* ------------------------------------------------------------------------------------------------------------ */

static void log_start(Run *r, int start_step) {
    const TrainConfig *c = &r->c;
    if (r->rank == 0) {
        printf("%s %s: %zu parameters | %d rank%s x %d thread%s | B=%d T=%d accum=%d -> %lld tokens/step | "
               "optimizer %s | steps %d | lr %g -> %g (warm-up %d)\n",
               r->fam->family, r->m->desc, r->m->table.total, r->world, r->world == 1 ? "" : "s", r->threads,
               r->threads == 1 ? "" : "s", c->B, c->T, r->accum, (long long)r->tokens_per_step, c->optimizer,
               c->steps, c->lr, c->lr_floor, c->warmup);
        if (c->warmup >= c->steps)
            printf("note: --warmup %d >= --steps %d, so the learning rate never reaches --lr %g\n", c->warmup,
                   c->steps, c->lr);
        /* the density reaches --density at step W + 1 (optim/scape.h scape_density) */
        int sparse = !strcmp(c->optimizer, "scape") || !strcmp(c->optimizer, "topk-ef");
        if (sparse && c->density < c->density_start && c->density_dense + c->density_warmup >= c->steps)
            printf("note: %s--density-warmup %d >= --steps %d, so the density never reaches --density %g (it ends at "
                   "%.4g); shorten the warm-up or train longer\n", c->density_dense ? "--density-dense-steps + " : "",
                   c->density_dense + c->density_warmup, c->steps, c->density,
                   r->u->density(r->u, c->steps));
        /* settings that make a compressing rule its plain dense rule for the whole run */
        if (sparse && r->u->density(r->u, c->steps) >= 1.0)
            printf("note: the density is 1 at every step (--density %g, --density-start %g, --density-dense-steps %d, "
                   "--steps %d), so %s is dense %s for the whole run; lower --density\n", c->density,
                   c->density_start, c->density_dense, c->steps, c->optimizer,
                   !strcmp(c->optimizer, "scape") ? "AdamS (to float rounding)" : "AdamW");
        train_rule_notes(c);
        if (strncmp(r->u->desc, "host", 4) != 0) printf("update: %s\n", r->u->desc);
        if (r->ckpt_path[0]) printf("resuming from %s at step %d\n", r->ckpt_path, start_step);
        fflush(stdout);
    }
    jlog_begin(r->log, r->ckpt_path[0] ? "resume" : "start");
    jlog_int(r->log, "step", start_step);
    jlog_str(r->log, "family", r->fam->family);
    jlog_str(r->log, "model", r->m->desc);
    jlog_int(r->log, "params", (int64_t)r->m->table.total);
    jlog_int(r->log, "world", r->world);
    jlog_int(r->log, "threads", r->threads);
    jlog_int(r->log, "B", c->B);
    jlog_int(r->log, "T", c->T);
    jlog_int(r->log, "accum", r->accum);
    jlog_int(r->log, "total_batch", r->tokens_per_step);
    jlog_str(r->log, "optimizer", c->optimizer);
    jlog_str(r->log, "update", r->u->desc);
    jlog_int(r->log, "steps", c->steps);
    jlog_num(r->log, "lr", c->lr);
    jlog_num(r->log, "lr_floor", c->lr_floor);
    jlog_int(r->log, "warmup", c->warmup);
    jlog_num(r->log, "weight_decay", c->weight_decay);
    jlog_num(r->log, "density", c->density);
    jlog_int(r->log, "seed", (int64_t)c->seed);
    if (r->ckpt_path[0]) jlog_str(r->log, "checkpoint", r->ckpt_path);
    jlog_end(r->log);
}

int train_main(int argc, char **argv, const ModelFamily *fam) {
    Run run, *r = &run;
    memset(r, 0, sizeof *r);
    r->fam = fam;
    TrainConfig *c = &r->c;
    fp_flush_denormals(); /* before any OpenMP region, so every compute thread inherits it (util.h says why) */

    /* options first, before MPI, so --help and usage errors need no launcher */
    int n_opts;
    ArgSpec *opts = train_options(c, fam, &n_opts);
    char usage[256];
    snprintf(usage, sizeof usage, "usage: %s [options]   (multi-rank: mpirun -np N %s [options])", argv[0], argv[0]);
    args_parse(opts, n_opts, argc, argv, usage,
               "Pre-trains a model on token shards and writes <out>/log.jsonl and <out>/ckpt_<step>/.");
    r->opts = opts;
    r->n_opts = n_opts;
    int floor_given = args_find(opts, n_opts, "lr-floor")->given;
    refuse_empty_values(opts, n_opts);
    if (c->verify_ckpt[0]) {
        int status = verify_checkpoints(c->verify_ckpt);
        free(opts);
        return status;
    }
    /* options that contradict each other: a usage error now, before anything is set up; on resume only once the
     * checkpoint's options are in (a --density given to resume a SCAPE run is not checked against the default
     * optimizer) */
    const char *conflict = c->resume[0] ? NULL : options_conflict(c, floor_given);
    if (conflict) {
        fprintf(stderr, "error: %s\n", conflict);
        exit(2);
    }

    NanInjection inj; /* before anything is set up or written, as a usage error would be */
    nan_injection_parse(&inj);

    comm_init(&argc, &argv);
    install_stop_handlers();
    r->rank = comm_rank();
    r->world = comm_world();
    r->threads = set_threads(c->threads);
    comm_set_timeout(c->comm_timeout);
    if (!c->eval_only) lock_out_dir(r, c->out); /* --eval-only writes no checkpoint: --out need not be free */

    /* resuming: what defines the run comes from the checkpoint (apply_checkpoint_options) */
    choose_checkpoint(r);
    apply_checkpoint_options(r);
    if (!r->ckpt_path[0] && c->init[0]) init_file_hash(c->init, r->init_hash);
    if (!r->run_id[0]) new_run_id(r->run_id); /* a fresh run, or a checkpoint from before run identities */
    comm_bcast(r->run_id, sizeof r->run_id, 0);
    if ((conflict = options_conflict(c, floor_given))) fatal("%s", conflict);
    train_rule_options_check(opts, n_opts, c);

    int defaults_data = !c->train[0] && !c->val[0];

    /* batch arithmetic: total = B * T * world * accum */
    int64_t micro = (int64_t)c->B * c->T * r->world;
    r->tokens_per_step = c->total_batch ? c->total_batch : micro;
    if (r->tokens_per_step % micro != 0)
        fatal("--total-batch %lld is not a multiple of --batch %d x --seq %d x %d rank%s = %lld tokens; use a "
              "multiple such as %lld", (long long)r->tokens_per_step, c->B, c->T, r->world, r->world == 1 ? "" : "s",
              (long long)micro, (long long)(r->tokens_per_step / micro + 1) * micro);
    r->accum = (int)(r->tokens_per_step / micro);

    /* model: from the checkpoint's model.bin when resuming, else --init or --model */
    char model_file[sizeof r->ckpt_path + 16];
    const char *init = c->init[0] ? c->init : NULL;
    if (r->ckpt_path[0]) {
        if ((size_t)snprintf(model_file, sizeof model_file, "%s/model.bin", r->ckpt_path) >= sizeof model_file)
            fatal("--resume %s: path too long", r->ckpt_path);
        init = model_file;
    }
    check_memory(r, init);
    r->m = fam->create(c->model, init, c->seed, c->B, c->T);
    comm_print_placement(r->threads); /* after create: a CUDA model has chosen its GPU */
    /* a run started from --init records the model its file holds, not the unused --model default */
    if (!r->ckpt_path[0] && c->init[0] && r->model_canon[0]) c->model = r->model_canon;
    if (strcmp(c->comm, "nccl") == 0 && !r->m->create_updater)
        fatal("--comm nccl: this trainer communicates through MPI only (NCCL needs a CUDA trainer such as "
              "train_gptcu); use --comm mpi or auto");
    if (c->T > r->m->max_seq_len)
        fatal("--seq %d exceeds the model's maximum sequence length %d; use --seq %d or less", c->T,
              r->m->max_seq_len, r->m->max_seq_len);

    /* data paths, after the model because its vocabulary picks the tokenizer (a Llama with V 128256 reads
     * Llama 3 shards, the others Llama 2's); the default corpus is prepared on first use */
    const char *tok_kind = r->m->tokenizer ? r->m->tokenizer : fam->tokenizer;
    if (c->tokenizer[0]) tok_kind = c->tokenizer; /* a built-in name, or the folder of a learned vocabulary */
    int learned = tok_kind && tokenizer_is_dir(tok_kind);
    if (c->tokenizer[0] && !learned && strcmp(tok_kind, "gpt2") && strcmp(tok_kind, "bpe4k") &&
        strcmp(tok_kind, "llama2") && strcmp(tok_kind, "llama3"))
        fatal("--tokenizer %s: not a tokenizer; use gpt2, bpe4k, llama2, llama3 or the folder of a vocabulary learned "
              "by `tok train --out DIR` (holding encoder.json and vocab.bpe)", c->tokenizer);
    if (learned && defaults_data)
        fatal("--tokenizer %s: a learned vocabulary has no default corpus; pass --train and --val (shards made with "
              "`tok shards --model %s`)", tok_kind, tok_kind);
    if (c->tokenizer[0] && tok_kind) {
        Tokenizer *t = tokenizer_load(tok_kind, c->data);
        if (tokenizer_vocab_size(t) != r->m->vocab_size)
            fatal("--tokenizer %s has %d tokens but the model has V = %d; give the model v%d (e.g. --model ...v%d) or "
                  "the tokenizer it was made for", c->tokenizer, tokenizer_vocab_size(t), r->m->vocab_size,
                  tokenizer_vocab_size(t), tokenizer_vocab_size(t));
        tokenizer_free(t);
    }
    if (c->eval_task[0]) {
        if (!tok_kind) fatal("--eval-task: the %s family has no tokenizer to encode the task's text", fam->family);
        r->tok = tokenizer_load(tok_kind, c->data);
        if (tokenizer_vocab_size(r->tok) != r->m->vocab_size)
            fatal("--eval-task: tokenizer '%s' has %d tokens but the model %d; pass --tokenizer, the model's own",
                  tok_kind, tokenizer_vocab_size(r->tok), r->m->vocab_size);
        load_eval_tasks(r);
    }
    if (c->eval_only) { /* score the model of --init / --resume, no data, no optimizer, no checkpoint */
        int step = r->ckpt_path[0] ? r->ckpt_step : 0; /* its manifest's step, whatever its folder is called */
        JsonLog *log = NULL;
        if (r->rank == 0) {
            make_dirs(c->out);
            char path[4400];
            snprintf(path, sizeof path, "%s/eval.jsonl", c->out);
            log = jlog_open(path);
            printf("eval only: %s (%s), step %d, B %d, T %d, %d rank%s\n", r->ckpt_path[0] ? r->ckpt_path : c->init,
                   r->m->desc, step, c->B, c->T, r->world, r->world == 1 ? "" : "s");
            xflush_stdout();
        }
        open_eval_dump(r, 0); /* a dump of this evaluation alone */
        r->eval_stop = &stop_signal; /* a signal stops the scoring at once, with nothing written */
        eval_only_scores(r, step, log);
        jlog_close(log);
        free_eval_tasks(r);
        tokenizer_free(r->tok);
        r->m->free(r->m);
        comm_finalize();
        for (int i = 0; i < r->n_restored; i++) free(r->restored[i]);
        free(r->opts);
        return 0;
    }
    const char *shard_kind = learned ? "bpe" : tok_kind; /* what `tok shards` records for it */
    const char *tokdir = tok_kind ? tok_kind : fam->family;
    char train_spec[4200], val_spec[4200];
    if (c->train[0]) snprintf(train_spec, sizeof train_spec, "%s", c->train);
    else snprintf(train_spec, sizeof train_spec, "%s/sotu/%s/sotu_train_*.bin", c->data, tokdir);
    if (c->val[0]) snprintf(val_spec, sizeof val_spec, "%s", c->val);
    else snprintf(val_spec, sizeof val_spec, "%s/sotu/%s/sotu_val_*.bin", c->data, tokdir);
    ensure_data(c, tok_kind, train_spec, val_spec, defaults_data);

    if (c->sample_every > 0 && tok_kind && !r->tok) {
        r->tok = tokenizer_load(tok_kind, c->data);
        if (tokenizer_vocab_size(r->tok) > r->m->vocab_size)
            fatal("tokenizer '%s' has %d tokens but the model only %d; use a model built for this tokenizer",
                  tok_kind, tokenizer_vocab_size(r->tok), r->m->vocab_size);
    }

    check_data_tokenizer(train_spec, shard_kind, r->m);
    check_data_tokenizer(val_spec, shard_kind, r->m);
    uint64_t vocab_hash = tok_kind ? tokenizer_vocab_hash(tok_kind, c->data) : 0; /* 0: its files are not at hand */
    if (tok_kind) shard_check_vocab(train_spec, vocab_hash, tok_kind, r->rank == 0);
    if (tok_kind) shard_check_vocab(val_spec, vocab_hash, tok_kind, r->rank == 0);
    r->dl = dataloader_open(train_spec, c->B, c->T, r->rank, r->world, rng_mix(c->seed, 0x64617461ull), c->shuffle,
                            r->m->vocab_size);
    r->vl = valloader_open(val_spec, c->B, c->T, r->rank, r->world, r->m->vocab_size);
    valloader_set_max_batches(r->vl, (uint64_t)c->eval_batches);

    DistConfig dc;
    train_dist_config(c, &dc);
    UpdaterConfig uc;
    memset(&uc, 0, sizeof uc);
    uc.dist = dc;
    uc.comm = comm_backend(c->comm);
    uc.seed = c->seed;
    uc.scape_offload_residual = c->scape_offload_residual;
    /* the ablation and the variants are the host's */
    int want_host = strcmp(c->update, "host") == 0 || c->scape_double_residual || dc.variant != SCAPE_FAITHFUL;
    r->u = r->m->create_updater && !want_host ? r->m->create_updater(r->m, &uc) : NULL;
    if (!r->u) {
        if (strcmp(c->update, "device") == 0 && !r->m->create_updater)
            fatal("--update device: this trainer updates on the host only (the device update belongs to the CUDA "
                  "trainers, e.g. train_gptcu); use --update auto or host");
        if (strcmp(c->update, "device") == 0)
            fatal("--update device: this trainer has no device-resident update for --optimizer %s (only for adamw, "
                  "adams and scape); use --update auto or host", c->optimizer);
        if (c->scape_offload_residual)
            fatal("--scape-offload-residual: only the device SCAPE update of the CUDA trainers has a residual in GPU "
                  "memory to offload (this run updates on the host); drop the flag, or use --optimizer scape with a "
                  "CUDA trainer and --update auto");
        if (uc.comm == COMM_BACKEND_NCCL)
            fatal("--comm nccl: the host update moves %s's gradients through host memory (MPI); use --comm mpi or "
                  "auto%s", c->optimizer, want_host ? ", or --update auto" : "");
        r->u = updater_host_create(&r->m->table, r->m->params, r->m->grads, &dc);
    }

    rng_seed(&r->sample_rng, rng_mix(c->seed, 0x73616d70ull));
    int start = r->ckpt_path[0] ? restore(r) : 0;

    r->sched = (LrSchedule){c->lr, c->lr_floor, c->warmup, c->steps};
    r->inputs = xmalloc((size_t)c->B * c->T * sizeof(int), "inputs");
    r->targets = xmalloc((size_t)c->B * c->T * sizeof(int), "targets");
    if (r->rank == 0) {
        make_dirs(c->out);
        char path[4400];
        snprintf(path, sizeof path, "%s/log.jsonl", c->out);
        r->log = jlog_open(path);
    }
    open_eval_dump(r, start);
    commit_lineage(r); /* every check has passed: only now does the line of checkpoints change */
    log_start(r, start);
    if (start >= c->steps && r->rank == 0) printf("checkpoint is at step %d, --steps %d: nothing to do\n", start,
                                                   c->steps);
    if (start == 0 && c->eval_every > 0) validate(r, 0);
    CommStats cs;
    comm_stats_take(&cs); /* set-up traffic (parameter broadcast) is not a step's */
    int bad_run = 0, status = 0; /* consecutive skipped steps so far; exit status */
    int stop_at = 0;             /* the signal that asks this run to stop after the current step (any rank's) */

    for (int t = start + 1; t <= c->steps; t++) {
        double t0 = now_seconds();
        float lr = lr_at(&r->sched, t);
        double loss = 0.0;
        /* mask statistics on logged steps and the step before (their Jaccard compares with it) */
        int ms = c->mask_stats_every;
        r->u->mask_stats_enable(r->u, ms > 0 && (t % ms == 0 || (t + 1) % ms == 0));
        double mean_loss = 0.0;
        for (int a = 0; a < r->accum; a++) {
            int last_micro = a == r->accum - 1;
            dataloader_next(r->dl, r->inputs, r->targets);
            loss += r->m->forward(r->m, r->inputs, r->targets, c->B, c->T);
            float scale = 1.0f / (float)r->accum;
            if (last_micro) {
                /* the step's mean loss over all ranks, known before the last backward: when it is not finite,
                 * every rank back-propagates with a NaN scale, so the gradient norm is NaN on every rank and
                 * distopt_step skips the step the only way that leaves its state (moments, residuals, masks)
                 * untouched; buckets must still go on the wire, the other ranks wait for them */
                if (r->rank == 0 && nan_injection_at(inj.loss_steps, inj.n_loss, t)) loss = NAN;
                /* with the loss, whether any rank was asked to stop (a signal): all stop after this step */
                double sums[2] = {loss / r->accum, stop_signal ? (double)stop_signal : 0.0};
                comm_allreduce_sum_f64(sums, 2);
                mean_loss = sums[0] / r->world;
                int s = (int)sums[1]; /* another rank's signal, when only one rank got one */
                if (s > 0 && !stop_at) stop_at = stop_signal ? stop_signal : s == SIGINT || s == SIGTERM ? s : SIGTERM;
                if (!isfinite(mean_loss)) scale = NAN;
                if (r->rank == 0 && nan_injection_at(inj.grad_steps, inj.n_grad, t)) scale = NAN;
            }
            /* only the last micro-step's gradients are final, so only then may buckets go on the wire */
            r->m->backward(r->m, scale, last_micro ? r->u->bucket_ready : NULL, r->u);
        }
        float grad_norm = 0.0f;
        int skipped = r->u->step(r->u, t, lr, &grad_norm);
        /* skipped is the same on every rank (the norm is global), and so is mean_loss (all-reduced) */
        int bad = skipped || !isfinite(mean_loss);
        bad_run = bad ? bad_run + 1 : 0;
        double secs = now_seconds() - t0;
        comm_stats_take(&cs);
        double tok_s = (double)r->tokens_per_step / secs;
        float density = r->u->density(r->u, t);
        if (r->rank == 0) {
            char mfu[32] = "n/a";
            if (c->peak_flops > 0)
                snprintf(mfu, sizeof mfu, "%.1f%%",
                         100.0 * r->m->flops_per_token * tok_s / ((double)c->peak_flops * r->world));
            printf("step %6d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | MFU %s | comm %.2f MB",
                   t, c->steps, mean_loss, lr, grad_norm, 1e3 * secs, tok_s, mfu, cs.bytes_sent / 1e6);
            if (dc.opt.kind == OPT_SCAPE || dc.opt.kind == OPT_TOPK_EF) printf(" | d %.4f", density);
            printf("\n");
            if (bad) {
                if (c->max_bad_steps > 0)
                    printf("step %d: loss/grad norm is not finite; step skipped (%d of %d consecutive)\n", t, bad_run,
                           c->max_bad_steps);
                else
                    printf("step %d: loss/grad norm is not finite; step skipped (%d consecutive)\n", t, bad_run);
            }
            xflush_stdout(); /* output that cannot be written stops the run within the step */
        }
        jlog_begin(r->log, "train");
        jlog_int(r->log, "step", t);
        jlog_num(r->log, "train_loss", mean_loss);
        jlog_num(r->log, "lr", lr);
        jlog_num(r->log, "grad_norm", grad_norm);
        jlog_num(r->log, "ms", 1e3 * secs);
        jlog_num(r->log, "tok_per_s", tok_s);
        if (c->peak_flops > 0)
            jlog_num(r->log, "mfu", r->m->flops_per_token * tok_s / ((double)c->peak_flops * r->world));
        jlog_int(r->log, "comm_bytes_sent", (int64_t)cs.bytes_sent);
        jlog_int(r->log, "comm_bytes_recv", (int64_t)cs.bytes_recv);
        /* by collective: all-reduces (gradients, SCAPE's payload), reduce-scatters (ZeRO-1's gradients, SCAPE's
         * payload with ZeRO-1), all-gathers (SCAPE's masks, ZeRO-1's parameters, sharded SCAPE's m_t and p values,
         * topk-ef's pairs) and control (norms, flags, the loss); a coded SCAPE mask is counted when the next step
         * collects it */
        jlog_int(r->log, "comm_allreduce_bytes", (int64_t)cs.bytes_sent_kind[COMM_ALLREDUCE]);
        jlog_int(r->log, "comm_reduce_scatter_bytes", (int64_t)cs.bytes_sent_kind[COMM_REDUCE_SCATTER]);
        jlog_int(r->log, "comm_allgather_bytes", (int64_t)cs.bytes_sent_kind[COMM_ALLGATHER]);
        jlog_int(r->log, "comm_control_bytes", (int64_t)cs.bytes_sent_kind[COMM_CONTROL]);
        jlog_num(r->log, "comm_wait_ms", cs.wait_ms);
        jlog_num(r->log, "comm_busy_ms", cs.busy_ms); /* comm thread time in collectives (comm/comm.h) */
        jlog_num(r->log, "density", density);
        if (r->u->memory_bytes) jlog_int(r->log, "optim_state_bytes", (int64_t)r->u->memory_bytes(r->u));
        jlog_int(r->log, "skipped", bad);
        jlog_end(r->log);
        if (bad) {
            jlog_begin(r->log, "bad_step");
            jlog_int(r->log, "step", t);
            jlog_num(r->log, "train_loss", mean_loss);
            jlog_num(r->log, "grad_norm", grad_norm);
            jlog_int(r->log, "consecutive", bad_run);
            jlog_int(r->log, "max_bad_steps", c->max_bad_steps);
            jlog_end(r->log);
        }
        if (c->max_bad_steps > 0 && bad_run >= c->max_bad_steps) {
            /* params and optimizer state are still those of the last good step, but the checkpoints already on
             * disk are left exactly as they are: nothing is written or pruned on the way out */
            if (r->rank == 0) {
                fflush(stdout);
                fprintf(stderr, "error: step %d: %d consecutive steps with a non-finite loss or gradient norm "
                        "(--max-bad-steps %d); stopped without a checkpoint, the newest complete one under %s is "
                        "intact: lower --lr or check the data, then continue with --resume latest\n", t, bad_run,
                        c->max_bad_steps, c->out);
                fflush(stderr);
            }
            jlog_begin(r->log, "stop");
            jlog_int(r->log, "step", t);
            jlog_str(r->log, "reason", "non-finite steps");
            jlog_int(r->log, "consecutive", bad_run);
            jlog_end(r->log);
            status = 1;
            break;
        }
        if (c->mask_stats_every > 0 && t % c->mask_stats_every == 0) log_mask_stats(r, t);

        int last = t == c->steps;
        if (last || (c->eval_every > 0 && t % c->eval_every == 0)) validate(r, t);
        if (c->sample_every > 0 && (last || t % c->sample_every == 0)) sample(r, t);
        /* after sampling, so the saved sampler RNG is the one the next step would use */
        int saved = last || (c->ckpt_every > 0 && t % c->ckpt_every == 0);
        if (saved && bad_run && !inj.ckpt_skipped) { /* never a checkpoint of a state reached through skipped steps */
            if (r->rank == 0) {
                char newest[128];
                newest_complete(c->out, newest, sizeof newest);
                printf("step %d: no checkpoint of this step, the last %d step%s skipped; %s\n", t, bad_run,
                       bad_run == 1 ? " was" : "s were", newest);
            }
            saved = 0;
        }
        if (saved) save_checkpoint(r, t);
        /* the tasks after the checkpoint: a scoring point never costs the run (eval_tasks_at) */
        if (r->ntasks && (last || (c->eval_task_every > 0 && t % c->eval_task_every == 0))) eval_tasks_at(r, t);
        comm_stats_take(&cs); /* validation/checkpoint traffic is not the next step's */
        if (stop_at && !last) {
            /* preempted: a checkpoint of this step (never of a state reached through skipped steps), then out */
            int ckpt = !bad_run;
            const char *sig = stop_at == SIGINT ? "SIGINT" : "SIGTERM";
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
            status = 128 + stop_at;
            break;
        }
    }

    /* the run reached --steps but its last step was skipped: its end was not saved, so it did not do what it says */
    if (status == 0 && bad_run > 0 && start < c->steps) {
        if (r->rank == 0) {
            char newest[128];
            newest_complete(c->out, newest, sizeof newest);
            fflush(stdout);
            fprintf(stderr, "error: the run ended with %d skipped step%s (non-finite loss or gradient norm) and so "
                    "without a checkpoint of step %d; %s: lower --lr or check the data\n", bad_run,
                    bad_run == 1 ? "" : "s", c->steps, newest);
            fflush(stderr);
        }
        jlog_begin(r->log, "stop");
        jlog_int(r->log, "step", c->steps);
        jlog_str(r->log, "reason", "non-finite steps at the end");
        jlog_int(r->log, "consecutive", bad_run);
        jlog_end(r->log);
        status = 1;
    }

    jlog_close(r->log);
    free(inj.grad_steps);
    free(inj.loss_steps);
    free(r->inputs);
    free(r->targets);
    r->u->free(r->u);
    valloader_free(r->vl);
    dataloader_free(r->dl);
    if (!free_eval_tasks(r) && status == 0) status = 1; /* the dump could not be written: one "error:" line */
    if (r->tok) tokenizer_free(r->tok);
    r->m->free(r->m);
    comm_finalize();
    for (int i = 0; i < r->n_restored; i++) free(r->restored[i]);
    free(r->opts);
    return status;
}

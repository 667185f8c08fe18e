/*
 * trainer/eval_hooks.c - see eval_hooks.h. What the loop measures besides the training loss: the validation loss,
 * samples, and the downstream tasks (eval/tasks.h) at their scoring points, with the --eval-dump file and the
 * --eval-only run that only scores.
 */
#define _GNU_SOURCE
#include "trainer/eval_hooks.h"

#include <dirent.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "common/log.h"
#include "common/util.h"
#include "eval/evaluate.h"
#include "comm/comm.h"
#include "trainer/sampler.h"

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

/* --eval-task: the tokenizer tok_kind into r->tok (it must have the model's vocabulary), then every task file, read
 * on every rank, and every item checked against --seq; fatal() naming the file and line of the first bad item
 * (unless --eval-task-skip-bad), before any training. */
void load_eval_tasks(Run *r, const char *tok_kind) {
    const TrainConfig *c = &r->c;
    if (!tok_kind) fatal("--eval-task: the %s family has no tokenizer to encode the task's text", r->fam->family);
    r->tok = tokenizer_load(tok_kind, c->data);
    if (tokenizer_vocab_size(r->tok) != r->m->vocab_size)
        fatal("--eval-task: tokenizer '%s' has %d tokens but the model %d; pass --tokenizer, the model's own",
              tok_kind, tokenizer_vocab_size(r->tok), r->m->vocab_size);
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
void open_eval_dump(Run *r, int resumed_step) {
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
void eval_tasks_at(Run *r, int step) {
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
        int s = *r->eval_stop;
        fprintf(stderr, "stopped by %s during --eval-only: nothing written\n", s == SIGINT ? "SIGINT" :
                s == SIGHUP ? "SIGHUP" : "SIGTERM");
        fflush(stderr);
        _exit(128 + *r->eval_stop); /* no MPI_Finalize: a job's other ranks are ended by the launcher */
    }
    if (st != EVAL_OK) fatal("%s", err);
    report_eval_tasks(r, step, sc, log, 1);
    if (r->eval_dump && !out_commit(r->eval_dump, err, sizeof err)) fatal("%s", err);
    r->eval_dump = NULL;
    free(sc);
}

/* --eval-only: scores the model of --init / --resume at its step into <out>/eval.jsonl (rank 0) and the dump; no
 * data, optimizer or checkpoint. stop: the stop signal's flag. */
void eval_only(Run *r, volatile sig_atomic_t *stop) {
    const TrainConfig *c = &r->c;
    int step = r->ckpt_path[0] ? r->ckpt_step : 0; /* its manifest's step, whatever its folder is called */
    JsonLog *log = NULL;
    if (r->rank == 0) {
        make_dirs_for("--out", c->out);
        char path[4400];
        snprintf(path, sizeof path, "%s/eval.jsonl", c->out);
        log = jlog_open(path);
        printf("eval only: %s (%s), step %d, B %d, T %d, %d rank%s\n", r->ckpt_path[0] ? r->ckpt_path : c->init,
               r->m->desc, step, c->B, c->T, r->world, r->world == 1 ? "" : "s");
        xflush_stdout();
    }
    open_eval_dump(r, 0); /* a dump of this evaluation alone */
    r->eval_stop = stop; /* a signal stops the scoring at once, with nothing written */
    eval_only_scores(r, step, log);
    jlog_close(log);
    free_eval_tasks(r);
}

/* Frees the tasks and commits the dump of a training run. Returns 0 (with one "error:" line) when the dump could
 * not be written: the run's exit status is then 1. */
int free_eval_tasks(Run *r) {
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

/* Mean validation loss over up to eval_batches batches per rank, averaged over all ranks' batches. */
double validate(Run *r, int step) {
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

/* Rank 0 continues the prompt by sample_tokens tokens, feeding at most T tokens of context (a sliding window);
 * forward runs on (1, len) so short contexts cost little. A sample starts as a training document does
 * (`tok shards` puts tokenizer_bos() before each one): with that token alone when there is no prompt; before
 * the prompt too when the tokenizer has a BOS of its own (Llama: <s>, <|begin_of_text|>, as Meta's and Hugging
 * Face's encoders add it), unless the prompt spells it itself (--prompt '<|begin_of_text|>...'): one BOS either
 * way. GPT-2 has none (its "bos" is its end-of-text), so its prompt stands alone, as in llm.c. */
void sample(Run *r, int step) {
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

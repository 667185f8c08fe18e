/*
 * trainer/eval_hooks.h - what the training loop measures besides the training loss, each one call of train_main:
 * the validation loss (a "val" event), a sample (a "sample" event), the downstream tasks of --eval-task at their
 * scoring points ("eval_task" events, eval/evaluate.h scores them) with the per-choice --eval-dump file, and the
 * --eval-only run that scores a trained model and trains nothing. Every call is collective (every rank calls it).
 * Not for: the scoring itself (eval/), the training step (train.c).
 */
#ifndef TRAINER_EVAL_HOOKS_H
#define TRAINER_EVAL_HOOKS_H

#include <signal.h>

#include "trainer/run.h"

/* Loads the tokenizer tok_kind into r->tok and every --eval-task file into r->tasks, each item checked against
 * --seq; fatal() naming the file and line of the first bad item (unless --eval-task-skip-bad). */
void load_eval_tasks(Run *r, const char *tok_kind);
/* Opens this rank's --eval-dump temp file (nothing without --eval-dump), keeping the rows of the scoring points up to
 * resumed_step an earlier run of the line wrote; every rank's opens, or the job ends with one line. */
void open_eval_dump(Run *r, int resumed_step);
/* Mean validation loss at `step` over up to --eval-batches batches per rank, averaged over every rank's batches;
 * one line (rank 0) and a "val" event. NAN when there is no batch. */
double validate(Run *r, int step);
/* Rank 0 continues --prompt by --sample-tokens tokens (temperature, top-k; the run's sampler RNG) and prints and
 * logs it; the other ranks return at once. */
void sample(Run *r, int step);
/* A scoring point of the tasks during training: scores and reports every task; a failure is one warning and the
 * run goes on, a dump that cannot be written is dropped (and the run ends with status 1). */
void eval_tasks_at(Run *r, int step);
/* --eval-only: scores the model once into <out>/eval.jsonl and the dump, then frees the tasks; stop is the flag
 * the stop signal sets (a signal ends the process at once with nothing written). Any failure is fatal. */
void eval_only(Run *r, volatile sig_atomic_t *stop);
/* Frees the tasks and commits the dump. 0 (with one "error:" line) when the dump could not be written: the run's
 * exit status is then 1; else 1. */
int free_eval_tasks(Run *r);

#endif

/*
 * eval/evaluate.h - scores downstream tasks (eval/tasks.h) on a model's own forward pass, as evaluation harnesses
 * (lm-evaluation-harness, llm.c's HellaSwag) do:
 *
 *   tokens     context and continuation are encoded separately (no special tokens); whitespace that ends the
 *              context is moved to the front of the continuation first. The context starts with the tokenizer's
 *              BOS where it has one apart from its end-of-text (Llama 2 and 3: <s>, <|begin_of_text|>); for
 *              GPT-2-style vocabularies, which have none, an empty context becomes the end-of-text token.
 *   truncation whole = context + continuation; if it is longer than T + 1 tokens only its last T + 1 are kept
 *              (the context loses its start); the model reads whole[0 .. n-1) and the continuation's tokens are
 *              scored at their positions. A continuation of T tokens or more cannot be scored: an error naming the
 *              item (or a skipped item, counted, with skip_bad).
 *   loglik     sum over the continuation's tokens of log softmax(logits)[token], the softmax over the real
 *              vocabulary V (not the padded Vp), in double.
 *   acc        1 where the correct choice has the highest loglik (ties: the first such choice).
 *   non-finite an item any of whose log-likelihoods is NaN or infinite (a diverged model) is counted wrong for acc,
 *              acc_norm and the last word, and counted in TaskScore.nonfinite; its dump rows say "loglik": null.
 *   acc_norm   the same with loglik divided by the continuation's length in bytes (UTF-8, as given, its leading
 *              space included): lm-evaluation-harness's length-normalised accuracy.
 *   last word  (LAMBADA) acc: every token of the target is the argmax of its position's logits (greedy);
 *              ppl = exp(-(sum of the targets' logliks) / items).
 * Batched: one row of T tokens per (item, choice), B rows per forward. Items are spread over ranks (item i on
 * rank i % world) and the sums added by the caller's reduce, so every rank gets the same scores.
 * Not for: reading the files (eval/tasks.h), generation tasks.
 */
#ifndef EVAL_EVALUATE_H
#define EVAL_EVALUATE_H

#include <signal.h>
#include <stdio.h>

#include "eval/tasks.h"
#include "common/model.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    double acc;      /* choice tasks and last word: fraction of items right */
    double acc_norm; /* choice tasks: by loglik per byte; NaN for last-word tasks */
    double ppl;      /* last-word tasks: exp(-mean target loglik); NaN for choice tasks */
    int items;       /* items scored, all ranks */
    int skipped;     /* items too long to score, skipped (skip_bad), all ranks, plus those the reader skipped */
    double ms;       /* wall time of the scoring */
    double tokens;   /* tokens the forward passes read (rows x T), all ranks: the evaluator's cost */
    int nonfinite;   /* items with a non-finite log-likelihood (counted wrong), all ranks; > 0: the model diverged */
} TaskScore;

/* Sum-reduce of n doubles over ranks, in place (the trainer passes comm_allreduce_sum_f64); NULL: one process. */
typedef void (*EvalReduceFn)(double *x, size_t n);

/* How to score: the batch, the split over ranks, and where the results go. */
typedef struct {
    int B, T;            /* rows of T tokens per forward (the model is sized for them; T <= its max_seq_len) */
    int rank, world;     /* item i is scored on rank i % world */
    EvalReduceFn reduce; /* adds the ranks' partial sums; NULL with world 1 */
    int skip_bad;        /* an item too long for T is skipped and counted, not an error */
    FILE *progress;      /* a progress line every ~10 s for long files; NULL: silent */
    FILE *dump;          /* NULL, or one JSON line per (item, choice) this rank scored: {"step", "task", "line",
                          * "choice", "label", "loglik" (null if not finite), "tokens" (the continuation's),
                          * "greedy", "context", "continuation", "ids" (the tokens read, then the last target)} */
    int step;            /* the evaluated model's step, in every dump row */
    volatile sig_atomic_t *stop; /* non-NULL: checked between forward passes; set, the scoring stops at once */
} EvalOptions;

enum { EVAL_STOPPED = -1, EVAL_FAILED = 0, EVAL_OK = 1 };

/* Checks, before any scoring, that every item of this rank's share (o->rank, o->world) can be scored in o->T
 * positions (its continuations encode to fewer than T tokens). Returns 1 (items that cannot, with skip_bad, in
 * *too_long), or 0 with err: the file, the line, why and the fix. */
int eval_check_task(const Tokenizer *tok, const Task *t, const EvalOptions *o, int *too_long, char *err, size_t cap);

/* Scores task t on model m with tokenizer tok (its V must be the model's), as options o say. Every rank takes
 * part in the reduce even when its share fails, so all ranks return the same. Returns EVAL_OK; EVAL_FAILED with
 * err (one line: the file, line and why; on the other ranks, which rank failed) when an item cannot be scored and
 * skip_bad is 0; EVAL_STOPPED when *o->stop was set (err says so; nothing reduced: the caller ends the process). */
int eval_task(Model *m, const Tokenizer *tok, const Task *t, const EvalOptions *o, TaskScore *out, char *err,
              size_t cap);

#endif

/*
 * trainer/train_log.h - what the training loop prints and logs: rank 0's lines on stdout (stderr for the stops) and
 * the events of <out>/log.jsonl (common/log.h; r->log is NULL on the other ranks, where jlog_* do nothing). Event
 * fields are documented where they are written; the output text is what tests and plot scripts read, so it is
 * stable.
 * Not for: validation, samples and task scores (eval_hooks.c), checkpoint lines (ckpt_policy.c).
 */
#ifndef TRAINER_TRAIN_LOG_H
#define TRAINER_TRAIN_LOG_H

#include "trainer/run.h"

/* The run's opening line and notes (rank 0) and its "start" event, "resume" when it continues r->ckpt_path at
 * start_step. */
void log_start(Run *r, int start_step);
/* Step t's line (loss, lr, norm, ms, tok/s, MFU, comm MB, the density of a compressing rule; a second line when it
 * was skipped) and its "train" event, plus a "bad_step" event when it was skipped (r->bad_run counts it). */
void log_step(Run *r, int t, const StepResult *s);
/* One "mask" event of step t (optim/dist.h DistMaskStats), rank 0 only: per sparse tensor the Jaccard of consecutive
 * masks and the kept energy, first-moment (_m, SCAPE) and raw-gradient (_g), and their means. */
void log_mask_stats(Run *r, int t);
/* --max-bad-steps reached at step t: one "error:" line and a "stop" event; returns the exit status, 1. */
int log_stop_bad_steps(Run *r, int t);
/* The run reached --steps with its last r->bad_run steps skipped (so without a checkpoint of its end): one
 * "error:" line naming the newest complete checkpoint and a "stop" event; returns the exit status, 1. */
int log_end_skipped(Run *r);

#endif

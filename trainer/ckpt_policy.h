/*
 * trainer/ckpt_policy.h - the training loop's checkpoint policy, beside the formats (trainer/ckpt.h): which
 * checkpoint a run resumes and what it takes from it, the change to --out's line of checkpoints that choice makes,
 * one checkpoint of the run written whole, the restore, and --verify-ckpt. Each call is one step of train_main.
 * Not for: the files' formats and the line's bookkeeping (ckpt.c, ckpt_line.c), when the loop saves (train.c).
 */
#ifndef TRAINER_CKPT_POLICY_H
#define TRAINER_CKPT_POLICY_H

#include <stddef.h>

#include "trainer/run.h"

/* Chooses the checkpoint to resume on rank 0 (none, --resume latest, or --resume DIR; ckpt.h "Lineage" says what
 * each refuses) and broadcasts it into r->ckpt_path and r->ckpt_step; takes every recorded option this command line
 * does not set from its manifest (those that define the model and optimizer must agree), checks --init by content,
 * and sets the run's identity r->run_id (the checkpoint's, else a fresh one) on every rank. Changes nothing on
 * disk: what moves is decided in r->lineage_after, done by commit_lineage. fatal() with one line on refusal. */
void choose_checkpoint(Run *r);
/* Makes the lineage change choose_checkpoint decided (later checkpoints moved aside, unfinished saves removed);
 * called once every check that can refuse the run has passed on every rank. Collective. */
void commit_lineage(Run *r);
/* Restores the update's state, the loader position and the sampler RNG from r->ckpt_path on every rank (a
 * checkpoint of another world size merges every saved rank's state); returns its step. fatal() naming the file
 * when it does not fit this run (layout, optimizer, B*T) or its headers disagree. */
int restore_checkpoint(Run *r);
/* Writes the checkpoint <out>/ckpt_<step> of the run whole: model.bin, every rank's state file, the manifest with
 * every file's checksum and the run's options, then prunes to --keep-ckpts and logs a "ckpt" event. Collective. */
void save_checkpoint(Run *r, int step);
/* The loop's checkpoint after step t: at the last step and every --ckpt-every, unless the state was reached through
 * skipped steps (r->bad_run; one line says which checkpoint is kept instead). Called after validation and sampling,
 * so the saved sampler RNG is the one the next step would use. Returns 1 if it saved. Collective. */
int checkpoint_at(Run *r, int t);
/* A stop signal (r->stop_at) after step t: a checkpoint of it unless it was skipped or already saved (saved: what
 * checkpoint_at returned), one line on stderr and a "stop" event; returns the exit status, 128 + the signal. */
int checkpoint_and_stop(Run *r, int t, int saved);
/* --verify-ckpt DIR (one checkpoint, or an --out whose checkpoints are all checked): one line each; returns the
 * exit status (0 all verified, 1 otherwise). */
int verify_checkpoints(const char *dir);
/* One clause naming the newest complete checkpoint under out ("the newest complete checkpoint, ckpt_<s>, is kept")
 * or saying there is none, into buf (cap bytes). */
void newest_complete(const char *out, char *buf, size_t cap);

#endif

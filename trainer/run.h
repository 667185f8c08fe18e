/*
 * trainer/run.h - the state of one training run, shared by the loop's files (train.c, ckpt_policy.c, eval_hooks.c,
 * train_log.c); private to trainer/. Filled by train_main in order: options, checkpoint choice, model, data, update,
 * log.
 */
#ifndef TRAINER_RUN_H
#define TRAINER_RUN_H

#include <signal.h>
#include <stdint.h>

#include "common/args.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/schedule.h"
#include "common/util.h"
#include "dataloader/dataloader.h"
#include "eval/tasks.h"
#include "comm/comm.h"
#include "tokenizer/tokenizer.h"
#include "trainer/ckpt.h"
#include "trainer/drills.h"
#include "trainer/train.h"
#include "optim/updater.h"

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
    char *resume_notes;   /* rank 0: the "applies from the resumed step on" lines, printed by log_start once every
                           * check has passed (a refused resume prints only its refusal); NULL none */
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
    NanInjection inj;     /* the test drills' faults (trainer/drills.h); all zero outside the drills */
    int sparse_rule;      /* the rule compresses with a density (scape, topk-ef): the step line shows it */
    int bad_run;          /* consecutive skipped steps (non-finite loss or gradient norm) so far */
    int stop_at;          /* the signal that asks this run to stop after the current step (any rank's); 0 none */
} Run;

/* Local-update rules (DiLoCo): on = 1 puts the synchronized model, identical on every rank, into the model's
 * parameters for what reads them outside the steps (validation, samples, tasks, the checkpoint's model file); on = 0
 * puts this rank's own back. Nothing for the other rules. */
static inline void run_synced_model(Run *r, int on) {
    if (r->u && r->u->use_synced) r->u->use_synced(r->u, on);
}

/* What one training step did (train_step), for its line and "train" event (log_step). */
typedef struct {
    float lr;         /* the schedule's learning rate of the step */
    double loss;      /* mean training loss over every rank's micro-batches (the same on every rank) */
    float grad_norm;  /* global gradient norm before clipping */
    int bad;          /* skipped: the loss or the gradient norm is not finite (the same on every rank) */
    double secs;      /* wall time of the step */
    CommStats comm;   /* this rank's traffic during the step */
} StepResult;

#endif

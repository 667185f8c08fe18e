/*
 * trainer/train.h - the shared CPU training loop: one call runs a whole pre-training job for any ModelFamily
 * (train_gpt.c, train_llama.c, the toy model of the tests). It owns the command line, data, optimizer and
 * communication (optim/dist.h), validation, sampling, checkpoints/resume and logging.
 * Not for: model maths (the model files) or the update formulas (optim/).
 */
#ifndef TRAINER_TRAIN_H
#define TRAINER_TRAIN_H

#include <stdint.h>

#include "common/args.h"
#include "common/model.h"
#include "optim/dist.h"

/* Every option of the trainer; filled by args_parse from train_options(). */
typedef struct {
    const char *model, *init, *tokenizer, *train, *val, *out, *data, *resume, *optimizer, *prompt, *comm, *update, *scape_payload, *scape_mask_coding,
        *verify_ckpt;
    int B, T, total_batch, steps, warmup;
    float lr, lr_floor, weight_decay, clip, beta1, beta2, eps;
    int eval_every, eval_batches, sample_every, sample_tokens, top_k;
    float temperature;
    int ckpt_every, keep_ckpts;
    uint64_t seed;
    int threads, shuffle, zero;
    double density, density_start; /* double: k = floor(d n) must see the density as typed (0.01, not 0.01f) */
    int density_warmup, density_dense, scape_exclude_norms, scape_offload_residual, scape_double_residual;
    const char *scape_variant;      /* faithful|catchup|tensor-nu|residual-decay (optim/dist.h, issue 31) */
    float scape_variant_cap, scape_residual_decay;
    /* each rule's own options (--powersgd-rank, ...; optim/rule.h), one block per OptimizerKind: parsed before the
     * rule is known (a checkpoint may name it), then train_dist_config hands the chosen rule's block on */
    RuleParams rule_params[OPT_COUNT];
    int mask_stats_every; /* log a "mask" event every N steps (optim/dist.h DistMaskStats), 0 = off */
    float peak_flops;
    int max_bad_steps; /* stop after this many consecutive non-finite steps, 0 = never */
    int comm_timeout;  /* seconds a collective may wait before the watchdog ends the job, 0 = never */
    const char *eval_task, *eval_dump; /* downstream tasks "FORMAT=FILE,..." (eval/tasks.h); per-choice dump path */
    int eval_task_every, eval_task_skip_bad, eval_only;
} TrainConfig;

/* The option table bound to the fields of *c (defaults depend on fam: --model defaults to fam->default_model).
 * Returns a malloc'd array of *n specs (caller frees). Exposed so tests can check --help against it. */
ArgSpec *train_options(TrainConfig *c, const ModelFamily *fam, int *n);

/* Parses argv, trains, writes <out>/log.jsonl and checkpoints; returns the process exit status: 0, or 1 when the
 * run stopped after --max-bad-steps consecutive steps with a non-finite loss or gradient norm (each such step is
 * skipped: params and optimizer state unchanged; the stop writes no checkpoint, so --resume latest continues
 * from the newest one on disk), or 128 + the signal (143, 130, 129) when SIGTERM, SIGINT or SIGHUP stopped it: the
 * step in progress is finished on every rank, a checkpoint of it is written (unless it was skipped) and one line
 * says so; a second signal ends the process at once.
 * Usage errors exit 2 (common/args.h); runtime errors exit 1 with one line via fatal(). Calls comm_init and
 * comm_finalize itself, so a trainer's main is just `return train_main(argc, argv, &family);`. */
int train_main(int argc, char **argv, const ModelFamily *fam);

#endif

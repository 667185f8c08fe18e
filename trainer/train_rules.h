/*
 * trainer/train_rules.h - what the training loop knows of the update rules: their names, the options each owns,
 * the DistConfig (optim/dist.h) made from the command line, their state's size for the memory check, and the notes
 * a run's settings call for. The one place the loop looks at a rule by name.
 */
#ifndef TRAINER_TRAIN_RULES_H
#define TRAINER_TRAIN_RULES_H

#include "common/args.h"
#include "optim/dist.h"
#include "trainer/train.h"

/* The rule --optimizer NAME selects (adamw for an unknown name: args_parse has checked it against the choices),
 * and the name of a kind as checkpoints record it ("?" for one out of range). */
OptimizerKind train_optimizer_kind(const char *name);
const char *train_optimizer_name(int kind);

/* Refuses (usage error, exit 2) a rule's option given with another rule or variant, which would be ignored. Call
 * once the checkpoint's --optimizer and --scape-variant are in c. */
void train_rule_options_check(ArgSpec *opts, int n_opts, const TrainConfig *c);

/* dc from the options; resolves --onebit-freeze 0 to 15% of --steps in c (the checkpoints record the result). */
void train_dist_config(TrainConfig *c, DistConfig *dc);

/* Bytes per parameter of the host update's state for the memory check (a lower bound; see the definition). */
double train_optimizer_bytes_per_param(const TrainConfig *c, int world);

/* Rank 0's notes on settings that make a rule its plain dense rule for the whole run. */
void train_rule_notes(const TrainConfig *c);

#endif

/*
 * trainer/train_rules.h - what the training loop knows of the update rules, all of it from their rows (optim/rule.h):
 * their names, the options each owns (parsed with the trainer's own, refused with another rule), the DistConfig
 * (optim/dist.h) made from the command line, their state's size for the memory check, and the notes a run's
 * settings call for. The one place the loop looks at the rule table.
 */
#ifndef TRAINER_TRAIN_RULES_H
#define TRAINER_TRAIN_RULES_H

#include "common/args.h"
#include "optim/dist.h"
#include "trainer/train.h"

/* The rule --optimizer NAME selects (adamw for an unknown name: args_parse has checked it against the choices),
 * and the name of a kind as checkpoints record it ("?" for one out of range); the names as --optimizer's choices
 * ("adamw|adams|..."). */
OptimizerKind train_optimizer_kind(const char *name);
const char *train_optimizer_name(int kind);
const char *train_optimizer_choices(void);

/* Whether the density schedule (--density, ...) applies to the run's rule, and what that rule is at density 1
 * ("AdamW"; NULL for a rule without a density). */
int train_rule_sparse(const TrainConfig *c);
const char *train_rule_dense_as(const TrainConfig *c);

/* The trainer's option table t (nt rows) with every rule's own options, in rule-table order, in place of its row
 * whose name is NULL, bound to their rule's block in c->rule_params. Returns a malloc'd array of *n specs. */
ArgSpec *train_rule_options_insert(const ArgSpec *t, int nt, TrainConfig *c, int *n);

/* 1 if the row of the rule named `optimizer` marks its option `name` defining: its state is made for the value, so a
 * resume refuses another (trainer/ckpt_policy.c). Another rule's option is not defining for this one. */
int train_option_defining(const char *name, const char *optimizer);

/* 1 if `name` is an option of some rule's row but not of the rule named `optimizer` (--sparseloco-h for diloco): on
 * resume it is not compared with the checkpoint's record, train_rule_options_check refuses it for what it is. */
int train_option_of_other_rule(const char *name, const char *optimizer);

/* Refuses (usage error, exit 2) a rule's option given with another rule or variant, which would be ignored. Call
 * once the checkpoint's --optimizer and --scape-variant are in c. */
void train_rule_options_check(ArgSpec *opts, int n_opts, const TrainConfig *c);

/* dc from the options; first the chosen rule's configure hook resolves its options in c (--onebit-freeze 0 -> 15% of
 * --steps), which the checkpoints then record. */
void train_dist_config(TrainConfig *c, DistConfig *dc);

/* Bytes per parameter of the host update's state for the memory check (a lower bound; see the definition). */
double train_optimizer_bytes_per_param(const TrainConfig *c, int world);

/* Rank 0's notes on settings that make a rule its plain dense rule for the whole run (the rule's notes hook). */
void train_rule_notes(const TrainConfig *c);

#endif

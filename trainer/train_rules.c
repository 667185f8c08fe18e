/*
 * trainer/train_rules.c - the training loop's view of the update rules (see train_rules.h).
 */
#include "trainer/train_rules.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "optim/rule.h"

OptimizerKind train_optimizer_kind(const char *name) {
    const UpdateRule *r = update_rule_by_name(name);
    return r ? r->kind : OPT_ADAMW;
}

const char *train_optimizer_name(int kind) {
    const UpdateRule *r = update_rule(kind);
    return r ? r->name : "?";
}

/* Whether the rule row u owns a row for flag that fits this run's --optimizer and --scape-variant. */
static int owned_fits(const char *flag, const TrainConfig *c) {
    for (int k = 0; k < update_rule_count; k++) {
        const UpdateRule *u = update_rules[k];
        for (int j = 0; j < u->n_owned; j++)
            if (!strcmp(u->owned[j].flag, flag) && !strcmp(c->optimizer, u->name) &&
                (!u->owned[j].variant || !strcmp(c->scape_variant, u->owned[j].variant)))
                return 1;
    }
    return 0;
}

void train_rule_options_check(ArgSpec *opts, int n_opts, const TrainConfig *c) {
    /* a rule's parameters given without their rule would be silently ignored (checked once the checkpoint's
     * --optimizer and --scape-variant are in); the options each rule owns are in its row (optim/rule.h), and a
     * flag's first row names what it needs */
    for (int k = 0; k < update_rule_count; k++)
        for (int j = 0; j < update_rules[k]->n_owned; j++) {
            const RuleOption *o = &update_rules[k]->owned[j];
            if (!args_find(opts, n_opts, o->flag)->given || owned_fits(o->flag, c)) continue;
            fatal("--%s applies to %s only (this run has --optimizer %s, --scape-variant %s); name it or drop the flag",
                  o->flag, o->needs, c->optimizer, c->scape_variant);
        }
}

void train_dist_config(TrainConfig *c, DistConfig *dc) {
    memset(dc, 0, sizeof *dc);
    dc->opt.kind = train_optimizer_kind(c->optimizer);
    dc->opt.beta1 = c->beta1;
    dc->opt.beta2 = c->beta2;
    dc->opt.eps = c->eps;
    dc->opt.weight_decay = c->weight_decay;
    dc->clip = c->clip;
    dc->zero = c->zero;
    dc->density = c->density;
    dc->density_start = c->density_start;
    dc->density_warmup = c->density_warmup;
    dc->density_dense = c->density_dense;
    dc->powersgd_rank = c->powersgd_rank;
    dc->powersgd_start = c->powersgd_start;
    dc->powersgd_min_compression = c->powersgd_min_compression;
    dc->powersgd_eps = c->powersgd_eps;
    dc->demo_chunk = c->demo_chunk;
    dc->demo_topk = c->demo_topk;
    dc->demo_decay = c->demo_decay;
    /* 1-bit Adam's freeze step is fixed at the run's start: 0 becomes 15% of that run's --steps here, and the
     * checkpoints record the resolved step, so a resume with another --steps keeps it */
    if (!strcmp(c->optimizer, "onebit-adam") && c->onebit_freeze == 0)
        c->onebit_freeze = (int)fmax(1.0, floor(0.15 * c->steps + 0.5));
    dc->onebit_freeze = c->onebit_freeze;
    dc->double_residual = c->scape_double_residual;
    dc->variant = scape_variant_parse(c->scape_variant);
    if (dc->variant == SCAPE_CATCHUP || dc->variant == SCAPE_TENSOR_NU) dc->variant_cap = c->scape_variant_cap;
    if (dc->variant == SCAPE_RESIDUAL_DECAY) dc->residual_decay = c->scape_residual_decay;
    dc->exclude_norms = c->scape_exclude_norms;
    dc->payload_bf16 = strcmp(c->scape_payload, "bf16") == 0;
    dc->mask_coding = strcmp(c->scape_mask_coding, "auto") == 0;
}

/* Bytes per parameter of the host update's state, a lower bound (optim/dist.h distopt_state_memory): the gradient
 * staging buffer every rule packs buckets into (4), plus adamw m and v (8), adams m (4), SCAPE r (4) and m at the
 * starting density (4 d_start), topk-ef and powersgd e, m, v (12; powersgd's Q is small), onebit-adam e, m, v and
 * the server error (16), demo its momentum and per-coefficient sender counts (6); ZeRO-1 shards the moments over
 * the world. */
double train_optimizer_bytes_per_param(const TrainConfig *c, int world) {
    double moments = !strcmp(c->optimizer, "adamw") ? 8 : !strcmp(c->optimizer, "adams") ? 4
                     : !strcmp(c->optimizer, "scape") ? 4 + 4 * fmin(1.0, c->density_start)
                     : !strcmp(c->optimizer, "onebit-adam") ? 16 : !strcmp(c->optimizer, "demo") ? 6 : 12;
    if (c->zero && strcmp(c->optimizer, "topk-ef") != 0) moments /= world;
    return 4 + moments;
}

void train_rule_notes(const TrainConfig *c) {
    if (!strcmp(c->optimizer, "powersgd") && c->powersgd_start >= c->steps)
        printf("note: --powersgd-start %d >= --steps %d, so PowerSGD never compresses: the whole run is AdamW bit "
               "for bit; lower --powersgd-start\n", c->powersgd_start, c->steps);
    if (!strcmp(c->optimizer, "onebit-adam") && c->onebit_freeze >= c->steps)
        printf("note: --onebit-freeze %d >= --steps %d, so 1-bit Adam never freezes its variance nor compresses: "
               "the whole run is AdamW bit for bit; lower --onebit-freeze\n", c->onebit_freeze, c->steps);
}

/*
 * trainer/train_rules.c - the training loop's view of the update rules (see train_rules.h): everything it knows of
 * a rule comes from the rule's row (optim/rule.h); nothing here compares a rule's name.
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

const char *train_optimizer_choices(void) {
    static char buf[512];
    if (buf[0]) return buf;
    for (int k = 0; k < update_rule_count; k++) {
        size_t len = strlen(buf);
        snprintf(buf + len, sizeof buf - len, "%s%s", k ? "|" : "", update_rules[k]->name);
    }
    return buf;
}

/* the chosen rule's row (args_parse has checked --optimizer against the choices) */
static const UpdateRule *chosen_rule(const TrainConfig *c) { return update_rule(train_optimizer_kind(c->optimizer)); }

int train_rule_sparse(const TrainConfig *c) { return chosen_rule(c)->sparse; }

const char *train_rule_dense_as(const TrainConfig *c) { return chosen_rule(c)->dense_as; }

ArgSpec *train_rule_options_insert(const ArgSpec *t, int nt, TrainConfig *c, int *n) {
    int nr = 0;
    for (int k = 0; k < update_rule_count; k++)
        for (int j = 0; j < update_rules[k]->n_options; j++) nr += !update_rules[k]->options[j].shared;
    ArgSpec *out = xmalloc((size_t)(nt + nr) * sizeof *out, "option table");
    int m = 0;
    for (int i = 0; i < nt; i++) {
        if (t[i].name) {
            out[m++] = t[i];
            continue;
        }
        for (int k = 0; k < update_rule_count; k++) /* the place of the rules' own options */
            for (int j = 0; j < update_rules[k]->n_options; j++) {
                const RuleOption *o = &update_rules[k]->options[j];
                if (o->shared) continue;
                out[m] = o->spec;
                out[m++].field = c->rule_params[update_rules[k]->kind].bytes + o->offset;
            }
    }
    *n = m;
    return out;
}

int train_option_defining(const char *name, const char *optimizer) {
    for (int k = 0; k < update_rule_count; k++)
        if (!strcmp(update_rules[k]->name, optimizer))
            for (int j = 0; j < update_rules[k]->n_options; j++)
                if (update_rules[k]->options[j].defining && !strcmp(update_rules[k]->options[j].spec.name, name))
                    return 1;
    return 0;
}

int train_option_of_other_rule(const char *name, const char *optimizer) {
    int owned = 0;
    for (int k = 0; k < update_rule_count; k++)
        for (int j = 0; j < update_rules[k]->n_options; j++)
            if (!strcmp(update_rules[k]->options[j].spec.name, name)) {
                if (!strcmp(update_rules[k]->name, optimizer)) return 0;
                owned = 1;
            }
    return owned;
}

/* Whether a rule owns a row for flag that fits this run's --optimizer and --scape-variant. */
static int owned_fits(const char *flag, const TrainConfig *c) {
    for (int k = 0; k < update_rule_count; k++) {
        const UpdateRule *u = update_rules[k];
        for (int j = 0; j < u->n_options; j++)
            if (!strcmp(u->options[j].spec.name, flag) && !strcmp(c->optimizer, u->name) &&
                (!u->options[j].variant || !strcmp(c->scape_variant, u->options[j].variant)))
                return 1;
    }
    return 0;
}

void train_rule_options_check(ArgSpec *opts, int n_opts, const TrainConfig *c) {
    /* a rule's parameters given without their rule would be silently ignored (checked once the checkpoint's
     * --optimizer and --scape-variant are in); the options each rule owns are in its row (optim/rule.h), and a
     * flag's first row names what it needs */
    for (int k = 0; k < update_rule_count; k++)
        for (int j = 0; j < update_rules[k]->n_options; j++) {
            const RuleOption *o = &update_rules[k]->options[j];
            if (!args_find(opts, n_opts, o->spec.name)->given || owned_fits(o->spec.name, c)) continue;
            char needs[128];
            snprintf(needs, sizeof needs, "--optimizer %s", update_rules[k]->name);
            /* the variant is named only where the option needs one (a SCAPE variant's option on another variant) */
            fatal("--%s applies to %s only (this run has --optimizer %s%s%s); name it or drop the flag", o->spec.name,
                  o->needs ? o->needs : needs, c->optimizer, o->variant ? ", --scape-variant " : "",
                  o->variant ? c->scape_variant : "");
        }
}

/* dc from the options as they stand (the chosen rule's block as parsed) */
static void dist_config(const TrainConfig *c, DistConfig *dc) {
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
    dc->rule_params = c->rule_params[dc->opt.kind];
    dc->double_residual = c->scape_double_residual;
    dc->variant = scape_variant_parse(c->scape_variant);
    if (dc->variant == SCAPE_CATCHUP || dc->variant == SCAPE_TENSOR_NU) dc->variant_cap = c->scape_variant_cap;
    if (dc->variant == SCAPE_RESIDUAL_DECAY) dc->residual_decay = c->scape_residual_decay;
    dc->exclude_norms = c->scape_exclude_norms;
    dc->payload_bf16 = strcmp(c->scape_payload, "bf16") == 0;
    dc->mask_coding = strcmp(c->scape_mask_coding, "auto") == 0;
    dc->last_step = c->steps; /* a local-update rule (DiLoCo) synchronizes at the run's last step */
}

void train_dist_config(TrainConfig *c, DistConfig *dc) {
    const UpdateRule *u = chosen_rule(c);
    if (u->configure) u->configure(&c->rule_params[u->kind], c->steps);
    dist_config(c, dc);
}

/* Bytes per parameter of the host update's state, a lower bound (optim/dist.h distopt_state_memory): the gradient
 * staging buffer every rule packs buckets into (4), plus the rule's state (its row's bytes_per_param: adamw m and v
 * 8, adams m 4, SCAPE r and m at the starting density 4 + 4 d_start, topk-ef and powersgd e, m, v 12, onebit-adam
 * e, m, v and the server error 16, demo its momentum and per-coefficient sender counts 6, diloco theta_prev, the
 * outer momentum and the inner m, v 16 (12 with the inner AdamS), sparseloco the same with e_i for the momentum plus
 * its message, 16.04 with the defaults); ZeRO-1 shards it over the world. */
double train_optimizer_bytes_per_param(const TrainConfig *c, int world) {
    const UpdateRule *u = chosen_rule(c);
    DistConfig dc;
    dist_config(c, &dc);
    double state = u->bytes_per_param ? u->bytes_per_param(&dc) : 0;
    if (c->zero && u->zero_ok) state /= world;
    return 4 + state;
}

void train_rule_notes(const TrainConfig *c) {
    const UpdateRule *u = chosen_rule(c);
    if (u->notes) u->notes(&c->rule_params[u->kind], c->steps);
}

/*
 * optim/rules.c - the list of update rules (optim/rule.h): one registration line per rule, in OptimizerKind order,
 * since a checkpoint records its rule as that number; and the setting of a rule's own options outside the trainer
 * (optim/dist.h distopt_set_option).
 */
#include "optim/rule.h"

#include <string.h>

extern const UpdateRule rule_adamw, rule_adams, rule_scape, rule_topk_ef, rule_powersgd, rule_onebit_adam, rule_demo,
    rule_diloco, rule_sparseloco;

const UpdateRule *const update_rules[] = {
    &rule_adamw,       /* OPT_ADAMW (0), dist_dense.c */
    &rule_adams,       /* OPT_ADAMS (1), dist_dense.c */
    &rule_scape,       /* OPT_SCAPE (2), dist_scape.c */
    &rule_topk_ef,     /* OPT_TOPK_EF (3), dist_topk_ef.c */
    &rule_powersgd,    /* OPT_POWERSGD (4), dist_powersgd.c */
    &rule_onebit_adam, /* OPT_ONEBIT_ADAM (5), dist_onebit_adam.c */
    &rule_demo,        /* OPT_DEMO (6), dist_demo.c */
    &rule_diloco,      /* OPT_DILOCO (7), dist_diloco.c */
    &rule_sparseloco,  /* OPT_SPARSELOCO (8), dist_sparseloco.c */
};
const int update_rule_count = (int)(sizeof update_rules / sizeof update_rules[0]);
_Static_assert(sizeof update_rules / sizeof update_rules[0] == OPT_COUNT, "one row per OptimizerKind, in its order");

const UpdateRule *update_rule(int kind) {
    return kind >= 0 && kind < update_rule_count && update_rules[kind]->kind == (OptimizerKind)kind ? update_rules[kind]
                                                                                                    : NULL;
}

const UpdateRule *update_rule_by_name(const char *name) {
    for (int k = 0; k < update_rule_count; k++)
        if (strcmp(update_rules[k]->name, name) == 0) return update_rules[k];
    return NULL;
}

/* The rule's own option flag (not a shared one), or NULL. */
static const RuleOption *own_option(const UpdateRule *u, const char *flag) {
    for (int j = 0; u && j < u->n_options; j++)
        if (!u->options[j].shared && strcmp(u->options[j].spec.name, flag) == 0) return &u->options[j];
    return NULL;
}

/* args_set on a copy of o's spec pointed at its place in cfg's block */
static void set_own(DistConfig *cfg, const RuleOption *o, const char *text) {
    ArgSpec s = o->spec;
    s.field = cfg->rule_params.bytes + o->offset;
    args_set(&s, text);
}

int distopt_set_option(DistConfig *cfg, const char *flag, const char *text) {
    const RuleOption *o = own_option(update_rule(cfg->opt.kind), flag);
    if (!o) return -1;
    set_own(cfg, o, text);
    return 0;
}

void distopt_default_options(DistConfig *cfg) {
    const UpdateRule *u = update_rule(cfg->opt.kind);
    memset(&cfg->rule_params, 0, sizeof cfg->rule_params);
    for (int j = 0; u && j < u->n_options; j++) {
        const ArgSpec *s = &u->options[j].spec;
        if (!u->options[j].shared) set_own(cfg, &u->options[j], s->type == ARG_FLAG ? "0" : s->def ? s->def : "");
    }
}

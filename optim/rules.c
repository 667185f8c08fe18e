/*
 * optim/rules.c - the list of update rules (optim/rule.h): one registration line per rule, in OptimizerKind order,
 * since a checkpoint records its rule as that number.
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

const UpdateRule *update_rule(int kind) {
    return kind >= 0 && kind < update_rule_count && update_rules[kind]->kind == (OptimizerKind)kind ? update_rules[kind]
                                                                                                    : NULL;
}

const UpdateRule *update_rule_by_name(const char *name) {
    for (int k = 0; k < update_rule_count; k++)
        if (strcmp(update_rules[k]->name, name) == 0) return update_rules[k];
    return NULL;
}

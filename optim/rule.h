/*
 * optim/rule.h - one update rule as one constant table row, the way a Linux driver fills one struct
 * file_operations: each rule file (dist_dense.c, dist_scape.c, ...) defines its UpdateRule, and optim/rules.c lists
 * them once, in the order of OptimizerKind (optim/optim.h), the number checkpoints record. optim/dist.c does
 * nothing rule-specific except through these hooks, and neither does the trainer (trainer/train_rules.c): a rule's
 * row gives it the rule's own options (flag, default, range, help, where the value goes), which options conflict
 * with other rules, how the options resolve once --steps is known, the notes they call for and the state's bytes per
 * parameter for the memory check.
 * Adding a rule: one new file that fills an UpdateRule, its options in a params struct and its state in a struct both
 * private to the file, one line in optim/rules.c's list and its number in OptimizerKind; docs/layout.md says what
 * else a rule may want.
 * Not for: the training loop, which uses optim/dist.h and trainer/train_rules.h.
 */
#ifndef OPTIM_RULE_H
#define OPTIM_RULE_H

#include <stddef.h>
#include <stdint.h>

#include "common/args.h"
#include "optim/dist.h"

/* One rank's checkpoint blob starts with this header (optim/dist_state.c gives the layout after it, per rule). */
typedef struct {
    uint32_t magic, version;
    int32_t kind, world, rank, zero, last_t, have_cur, have_next;
    int32_t ext; /* extras after the state (0 before issue 31): bit 0, SCAPE catchup's age, P bytes padded to 8 */
    uint64_t P, lo, hi, K;
} BlobHeader;

/* An option a rule owns; the trainer refuses it with another rule (or, where variant is set, with another
 * --scape-variant), naming needs (NULL: "--optimizer <rule>"; read on the first row of a flag, later rows of the same
 * flag only add variants).
 * The rule's own options are whole rows: spec is the trainer's option-table row (common/args.h: flag without "--",
 * type, default, range, choices, help; its field left NULL) and the value goes offset bytes into the rule's
 * RuleParams block (optim/dist.h), where the rule file's params struct has a member of spec.type's C type (ARG_INT:
 * int, ARG_U64: uint64_t, ARG_FLOAT: float, ARG_DOUBLE: double, ARG_STRING: const char *, ARG_FLAG: int). A shared row claims an option
 * of the trainer's own table, a common field of DistConfig (SCAPE's --scape-variant-cap, read beside the variant):
 * only spec.name is read. */
typedef struct {
    ArgSpec spec;
    size_t offset;       /* the value's place in the RuleParams block */
    const char *variant; /* NULL: any variant of the rule; else the --scape-variant it belongs to */
    const char *needs;   /* what the refusal says the option applies to */
    int defining;        /* 1: the rule's state is made for this value: a resume refuses another (trainer/ckpt_policy.c) */
    int shared;          /* 1: the trainer's own option, only claimed here */
} RuleOption;

/* In a rule's row: its RuleOption array and their count. */
#define RULE_OPTIONS(array) .options = (array), .n_options = (int)(sizeof(array) / sizeof((array)[0]))

/* In a rule file, after its params struct: that it fits a RuleParams block. */
#define RULE_PARAMS_FIT(type) \
    _Static_assert(sizeof(type) <= sizeof(RuleParams) && _Alignof(type) <= _Alignof(RuleParams), \
                   #type " does not fit RuleParams (optim/dist.h): raise RULE_PARAMS_BYTES")

typedef struct UpdateRule {
    const char *name;   /* as --optimizer spells it */
    const RuleOption *options; /* the options only this rule takes, n_options of them (trainer/train_rules.c) */
    int n_options;
    OptimizerKind kind; /* its index in update_rules[] and the number a checkpoint records */
    int zero_ok;        /* 1: --zero 1 (ZeRO-1) is supported */
    int sparse;         /* 1: the density schedule (--density, ...) applies; else distopt_density is 1 */
    int index32;        /* 1: sends 32-bit indices, so the model must have fewer than 2^32 parameters */
    int stage;          /* 1: optim/dist.c allocates the (P) gradient staging buffer before init */
    int any_shard;      /* 1: the state loads from whichever saved shards cover this rank's range (dense), so the
                         * blobs of every saved rank are needed only when they do not */
    const char *dense_as; /* sparse rules: what the rule is at density 1, for the trainer's note ("AdamW") */
    /* The trainer's hooks, on the rule's own RuleParams block as the options left it (NULL: none, 0 bytes):
     * configure: resolves the options once the run's --steps is known (1-bit Adam's freeze 0 -> 15% of the steps),
     *   before the block goes into DistConfig; what it writes is what the checkpoints record;
     * notes: rank 0's notes (stdout, one "note: " line each) on settings that make the rule its plain dense rule for
     *   the whole run;
     * bytes_per_param: bytes per parameter of the state the rule holds, a lower bound for the memory check, without
     *   the staging buffer; the trainer divides it by the world with ZeRO-1 (zero_ok rules). */
    void (*configure)(RuleParams *p, int steps);
    void (*notes)(const RuleParams *p, int steps);
    double (*bytes_per_param)(const DistConfig *cfg);
    /* fatal() on the rule's own bad settings when it is the chosen rule, and on the settings it owns when another
     * rule is chosen (NULL: none); called for every rule before anything is allocated */
    void (*check)(const DistConfig *cfg, const struct UpdateRule *chosen);
    /* the rule's state; owned_total: elements of this rank's slices (the ZeRO-1 shard) */
    void (*init)(DistOptim *d, size_t owned_total);
    /* bucket b's gradients are final (the last micro-step's backward): start its communication */
    void (*bucket_ready)(DistOptim *d, int b);
    /* step t >= 1 at learning rate lr (distopt_step's contract); returns 1 if skipped */
    int (*step)(DistOptim *d, int t, float lr, float *grad_norm);
    /* the checkpoint blob: its whole size, header included; the blob itself; the bytes a blob with header h must
     * have after its header (fatal() naming rank i on a bad header); the rule's part of a load, after the common
     * checks and resets of distopt_load (h0: blob 0's header) */
    size_t (*state_bytes)(const DistOptim *d);
    void (*save)(const DistOptim *d, void *blob);
    size_t (*blob_payload)(const BlobHeader *h, int i);
    void (*load)(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs);
    /* frees the rule's own state (DistOptim's state pointer; NULL: the rule keeps none), from distopt_free after the
     * buckets' collectives (a collective of the rule's own still in flight, it waits for) */
    void (*free)(DistOptim *d);
    /* bytes of optimizer state this rank holds now (distopt_state_memory) */
    size_t (*state_memory)(const DistOptim *d);
    /* the shared state beside the parameters that SCAPE_CHECK_SYNC hashes (common/hash.h hash_fnv1a64 continued from h); NULL: none */
    uint64_t (*sync_hash)(DistOptim *d, uint64_t h);
    /* inspection (optim/dist.h): distopt_moment, distopt_residual and distopt_mask (NULL: the rule has none) */
    const float *(*moment)(const DistOptim *d);
    const float *(*residual)(const DistOptim *d);
    const uint8_t *(*mask)(DistOptim *d, int next);
    /* local-update rules (DiLoCo): 1 when each rank's parameters are its own between the rule's synchronizations;
     * synced then gives the synchronized model (P floats, identical on every rank), or NULL while the parameters
     * are it (right after a synchronization). The loop evaluates, samples, checks (SCAPE_CHECK_SYNC) and writes the
     * checkpoint's model file from it (distopt_use_synced); the rule's blob keeps every rank's own parameters. */
    int local_params;
    float *(*synced)(DistOptim *d);
} UpdateRule;

/* The rules in OptimizerKind order (optim/rules.c) and their count; update_rule returns kind's row, or NULL for a
 * kind no rule has. update_rule_by_name: the rule --optimizer NAME selects, NULL for none. */
extern const UpdateRule *const update_rules[];
extern const int update_rule_count;
const UpdateRule *update_rule(int kind);
const UpdateRule *update_rule_by_name(const char *name);

#endif

/*
 * optim/dist_scape_row.c - SCAPE's row of the rule table (optim/rule.h): the names of its variants, the check of
 * its settings, and its state size, sync hash and inspection hooks. The update itself is dist_scape.c (with
 * dist_scape_zero.c for --zero), its blob dist_state.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_impl.h"

extern const UpdateRule rule_scape;

static const char *const variant_names[] = {"faithful", "catchup", "tensor-nu", "residual-decay"};

const char *scape_variant_name(int variant) {
    return variant >= 0 && variant < (int)(sizeof variant_names / sizeof variant_names[0]) ? variant_names[variant] : "?";
}

int scape_variant_parse(const char *name) {
    for (int i = 0; i < (int)(sizeof variant_names / sizeof variant_names[0]); i++)
        if (strcmp(name, variant_names[i]) == 0) return i;
    return -1;
}

/* SCAPE's own settings (the defect reproduction, the variants, the bf16 payload): refused with another rule, or
 * where SCAPE does not support them, and their ranges. */
static void scape_check(const DistConfig *cfg, const UpdateRule *chosen) {
    int mine = chosen == &rule_scape;
    if (cfg->double_residual && (!mine || cfg->zero))
        fatal("--scape-double-residual-defect reproduces the authors' SCAPE reducer: it needs --optimizer scape "
              "without --zero");
    if (cfg->variant < SCAPE_FAITHFUL || cfg->variant > SCAPE_RESIDUAL_DECAY)
        fatal("distopt_create: SCAPE variant %d is not known; use faithful, catchup, tensor-nu or residual-decay", cfg->variant);
    if (cfg->variant != SCAPE_FAITHFUL && (!mine || cfg->zero || cfg->payload_bf16 || cfg->double_residual))
        fatal("--scape-variant %s changes SCAPE's update: it needs --optimizer scape with the fp32 payload, without --zero "
              "and --scape-double-residual-defect", scape_variant_name(cfg->variant));
    if (cfg->variant == SCAPE_FAITHFUL && (cfg->variant_cap != 0 || cfg->residual_decay != 0))
        fatal("--scape-variant-cap and --scape-residual-decay belong to --scape-variant catchup, tensor-nu and "
              "residual-decay; drop them or name the variant");
    if ((cfg->variant == SCAPE_CATCHUP || cfg->variant == SCAPE_TENSOR_NU) && !(cfg->variant_cap >= 1 && cfg->variant_cap <= 255))
        fatal("--scape-variant-cap %g is outside [1, 255]; 1 makes %s the faithful update", cfg->variant_cap,
              scape_variant_name(cfg->variant));
    if (cfg->variant == SCAPE_RESIDUAL_DECAY && !(cfg->residual_decay >= 0 && cfg->residual_decay <= 1))
        fatal("--scape-residual-decay %g is outside [0, 1]; 1 keeps the whole residual (faithful)", cfg->residual_decay);
    if (cfg->payload_bf16 && !mine)
        fatal("--scape-payload bf16 applies to --optimizer scape only; drop it or use --optimizer scape");
}

/* r (4P), both buffers of the compact m (and ez with ZeRO-1's bf16 payload), three masks */
static size_t scape_state_memory(const DistOptim *d) {
    const size_t F = sizeof(float);
    return d->P * F + (d->m_cap + d->m_new_cap + d->ez_cap) * F + 3 * mask_bytes(d->P);
}

/* m (not with ZeRO-1: each owner holds its own part) and the masks, which every rank shares */
static uint64_t scape_sync_hash(DistOptim *d, uint64_t h) {
    scape_collect_next(d);
    if (!d->cfg.zero) h = hash_fnv1a64(h, d->m, d->m_n * sizeof(float));
    if (d->have_m) h = hash_fnv1a64(h, d->mask_m, mask_bytes(d->P));
    if (d->have_cur) h = hash_fnv1a64(h, d->mask_cur, mask_bytes(d->P));
    if (d->have_next) h = hash_fnv1a64(h, d->mask_next, mask_bytes(d->P));
    return h;
}

/* SCAPE keeps m compact: a dense copy in a scratch buffer */
static const float *scape_moment(const DistOptim *d) {
    DistOptim *dm = (DistOptim *)d;
    if (!dm->m_dense) dm->m_dense = xmalloc(d->P * sizeof(float), "dense first moment");
    scape_m_expand(d, dm->m_dense);
    return dm->m_dense;
}

/* ZeRO-1 keeps beta1 m folded into r: the unfolded view in a scratch buffer */
static const float *scape_residual(const DistOptim *d) {
    if (!d->cfg.zero) return d->r;
    DistOptim *dm = (DistOptim *)d;
    if (!dm->r_plain) dm->r_plain = xmalloc(d->P * sizeof(float), "SCAPE residual view");
    scape_zero_r_unfold(d, dm->r_plain);
    return dm->r_plain;
}

static const uint8_t *scape_mask(DistOptim *d, int next) {
    if (!next) return d->have_cur ? d->mask_cur : NULL;
    scape_collect_next(d);
    return d->have_next ? d->mask_next : NULL;
}

/* the memory check's bytes per parameter: r (4) and m at the starting density (4 d_start) */
static double scape_bytes_per_param(const DistConfig *cfg) { return 4 + 4 * fmin(1.0, cfg->density_start); }

/* the variants' settings, options of the trainer's own table (DistConfig's variant_cap and residual_decay) */
static const RuleOption scape_options[] = {
    {.spec.name = "scape-variant-cap", .shared = 1, .variant = "catchup", .needs = "--scape-variant catchup or tensor-nu"},
    {.spec.name = "scape-variant-cap", .shared = 1, .variant = "tensor-nu"},
    {.spec.name = "scape-residual-decay", .shared = 1, .variant = "residual-decay", .needs = "--scape-variant residual-decay"},
};

const UpdateRule rule_scape = {
    .name = "scape", RULE_OPTIONS(scape_options), .kind = OPT_SCAPE, .zero_ok = 1, .sparse = 1,
    .dense_as = "AdamS (to float rounding)", .bytes_per_param = scape_bytes_per_param,
    .check = scape_check, .init = scape_init, .bucket_ready = scape_bucket_ready, .step = scape_step,
    .state_bytes = scape_state_bytes, .save = scape_save, .blob_payload = scape_blob_payload, .load = scape_load,
    .state_memory = scape_state_memory, .sync_hash = scape_sync_hash,
    .moment = scape_moment, .residual = scape_residual, .mask = scape_mask,
};

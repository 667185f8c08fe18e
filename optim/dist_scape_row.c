/*
 * optim/dist_scape_row.c - SCAPE's row of the rule table (optim/rule.h): the names of its variants, the check of
 * its settings and of its drill's variable (SCAPE_TEST_CORRUPT_MASK), its checkpoint blob (the layout of
 * dist_state.c's distopt_scape_blob_save, which the device update writes too), and its state size, sync hash and
 * inspection hooks. The update itself is dist_scape.c (with dist_scape_zero.c for --zero); its state is dist_scape.h's.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist_scape.h"

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

int distopt_test_corrupt_mask_rank(int world) {
    const char *v = getenv("SCAPE_TEST_CORRUPT_MASK");
    if (!v || !v[0]) return -1;
    char *end;
    long r = v[0] >= '0' && v[0] <= '9' ? strtol(v, &end, 10) : -1;
    if (r < 0 || *end || r >= world)
        fatal("SCAPE_TEST_CORRUPT_MASK=%s: expected a rank in 0..%d (a drill of test/test_scape_gpt2.sh); unset it "
              "outside that test", v, world - 1);
    return (int)r;
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
    const ScapeState *S = scape(d);
    const size_t F = sizeof(float);
    return d->P * F + (S->m_cap + S->m_new_cap + S->ez_cap) * F + 3 * mask_bytes(d->P);
}

/* m (not with ZeRO-1: each owner holds its own part) and the masks, which every rank shares */
static uint64_t scape_sync_hash(DistOptim *d, uint64_t h) {
    ScapeState *S = scape(d);
    scape_collect_next(d);
    if (!d->cfg.zero) h = hash_fnv1a64(h, S->m, S->m_n * sizeof(float));
    if (S->have_m) h = hash_fnv1a64(h, S->mask_m, mask_bytes(d->P));
    if (S->have_cur) h = hash_fnv1a64(h, S->mask_cur, mask_bytes(d->P));
    if (S->have_next) h = hash_fnv1a64(h, S->mask_next, mask_bytes(d->P));
    return h;
}

/* SCAPE keeps m compact: a dense copy in a scratch buffer */
static const float *scape_moment(const DistOptim *d) {
    ScapeState *S = scape(d);
    if (!S->m_dense) S->m_dense = xmalloc(d->P * sizeof(float), "dense first moment");
    scape_m_expand(d, S->m_dense);
    return S->m_dense;
}

/* ZeRO-1 keeps beta1 m folded into r: the unfolded view in a scratch buffer */
static const float *scape_residual(const DistOptim *d) {
    if (!d->cfg.zero) return scape(d)->r;
    ScapeState *S = scape(d);
    if (!S->r_plain) S->r_plain = xmalloc(d->P * sizeof(float), "SCAPE residual view");
    scape_zero_r_unfold(d, S->r_plain);
    return S->r_plain;
}

static const uint8_t *scape_mask(DistOptim *d, int next) {
    ScapeState *S = scape(d);
    if (!next) return S->have_cur ? S->mask_cur : NULL;
    scape_collect_next(d);
    return S->have_next ? S->mask_next : NULL;
}

/* K: the values of m on mask_cur the blob holds */
static size_t scape_m_count(const DistOptim *d) {
    return scape(d)->have_cur ? mask_count(scape(d)->mask_cur, 0, d->P) : 0;
}

/* scape: the layout of distopt_scape_blob_save, then catchup's age */
static size_t scape_state_bytes(const DistOptim *d) {
    const ScapeState *S = scape(d);
    scape_collect_next((DistOptim *)d); /* the pending mask all-gather must land before the state is complete */
    size_t n = sizeof(BlobHeader);
    n += d->P * sizeof(float);
    if (S->have_cur) n += dist_blob_mask_bytes(d->P);
    if (S->have_next) n += dist_blob_mask_bytes(d->P);
    n += scape_m_count(d) * sizeof(float);
    if (S->age) n += dist_blob_mask_bytes(8 * d->P);
    return n;
}
static void scape_save(const DistOptim *d, void *blob) {
    const ScapeState *S = scape(d);
    scape_collect_next((DistOptim *)d);
    /* the layout of distopt_scape_blob_save, from the compact m: after a step (taken or skipped) m is on
     * mask_cur, so its values in memory order are the blob's "m on mask_cur" */
    distopt_scape_blob_save(blob, d->world, d->rank, d->last_t, d->P, S->r, S->have_cur ? S->mask_cur : NULL,
                            S->have_next ? S->mask_next : NULL, NULL);
    if (S->have_cur) {
        size_t K = mask_count(S->mask_cur, 0, d->P);
        if (S->have_m && !d->cfg.zero && S->m_n != K)
            fatal("distopt_save: SCAPE's first moment has %zu values, its mask %zu (internal error)", S->m_n, K);
        float *out = (float *)((char *)blob + distopt_scape_blob_bytes(d->P, 1, S->have_next, K) - K * sizeof(float));
        if (S->have_m) scape_m_memory_order(d, out); /* ZeRO-1: gathered from the owners, a collective */
        else memset(out, 0, K * sizeof(float));
    }
    if (d->cfg.zero) /* ZeRO-1: r as the unsharded step holds it, without beta1 m folded in */
        scape_zero_r_unfold(d, (float *)((char *)blob + sizeof(BlobHeader)));
    if (S->age) { /* catchup's age after the rest, flagged in the header */
        size_t at = distopt_scape_blob_bytes(d->P, S->have_cur, S->have_next, scape_m_count(d));
        memset((char *)blob + at, 0, dist_blob_mask_bytes(8 * d->P));
        memcpy((char *)blob + at, S->age, d->P);
        BlobHeader hb;
        memcpy(&hb, blob, sizeof hb);
        hb.ext |= 1;
        memcpy(blob, &hb, sizeof hb);
    }
}
static size_t scape_blob_payload(const BlobHeader *h, int i) {
    size_t want = h->P * sizeof(float) + (h->have_cur ? dist_blob_mask_bytes(h->P) : 0) +
                  (h->have_next ? dist_blob_mask_bytes(h->P) : 0) + h->K * sizeof(float);
    if (h->ext & 1) want += dist_blob_mask_bytes(8 * h->P);
    if (h->ext & ~1) fatal("optimizer state of rank %d carries extras %#x this program does not know; resume with "
                           "the program version that wrote it", i, (unsigned)h->ext);
    return want;
}
static void scape_load(DistOptim *d, const BlobHeader *h0, const void *const *blobs, const size_t *sizes, int n_blobs) {
    ScapeState *S = scape(d);
    comm_wait(S->next_h); /* the mask all-gather in flight lands in buffers the load overwrites */
    S->next_h = 0;
    /* through a dense m, once: the host keeps it compact on mask_cur (dist_scape.h) */
    float *m = xmalloc(d->P * sizeof(float), "SCAPE first moment being loaded");
    distopt_scape_blob_load(d->P, d->world, d->rank, S->r, S->mask_cur, S->mask_next, &S->have_cur,
                            &S->have_next, m, blobs, sizes, n_blobs);
    scape_m_set_dense(d, m, S->mask_cur, S->have_cur);
    free(m);
    if (!(h0->ext & 1) != !S->age)
        fatal("optimizer state was written %s --scape-variant catchup, this run is %s it; resume with the variant "
              "the checkpoint was trained with", h0->ext & 1 ? "with" : "without", S->age ? "with" : "without");
    if (S->age) /* the same on every rank (the masks are): rank 0's */
        memcpy(S->age, (const char *)blobs[0] + sizes[0] - dist_blob_mask_bytes(8 * d->P), d->P);
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
    .moment = scape_moment, .residual = scape_residual, .mask = scape_mask, .free = scape_free,
};

/*
 * test/test_dist.c - the data-parallel update (optim/dist.h) and SCAPE (SCAPE.md section 9 invariants) on
 * 1..N ranks, with a synthetic differentiable model: per-coordinate weighted least squares over random samples,
 *   loss_s = 0.5 sum_j w_j (theta_j - x_{s,j})^2,  grad_j = mean over this rank's samples of w_j (theta_j - x_{s,j}),
 * laid out like a transformer (tensor-major slices, one bucket per layer, gains/biases dense-only). Sample s of
 * step t is drawn from rng_mix(t, s) and rank i takes samples i*B .. i*B+B-1, so N ranks x B samples see the
 * same data as 1 rank x N*B. References (sort-based top-k, explicit second reduction, optim.c updates on the full
 * batch) are computed here independently of dist.c. Built with -ffp-contract=off like dist.c.
 * With --save DIR / --resume DIR it writes / reads per-rank state for test/test_dist_resume.sh.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/hash.h"
#include "common/rng.h"
#include "common/util.h"
#include "optim/dist.h"
#include "optim/scape.h"
#include "test/test_comm_mpi.h"

static int R, N;
#define L 3
#define B 2
#define LR 0.01f

typedef struct {
    ParamTable tab;
    float *p, *g;
} Toy;

static void toy_build(Toy *m) {
    memset(m, 0, sizeof *m);
    size_t s2[2];
    /* tensor-major like GPT-2; bucket of layer l is L-1-l (backward order), embeddings/final norm last */
    s2[0] = 20; s2[1] = 6;
    param_table_add(&m->tab, "wte", -1, L, 1, 2, s2);
    for (int l = 0; l < L; l++) { s2[0] = 8; s2[1] = 12; param_table_add(&m->tab, "w1", l, L - 1 - l, 1, 2, s2); }
    for (int l = 0; l < L; l++) { s2[0] = 12; param_table_add(&m->tab, "b1", l, L - 1 - l, 0, 1, s2); }
    for (int l = 0; l < L; l++) { s2[0] = 12; s2[1] = 5; param_table_add(&m->tab, "w2", l, L - 1 - l, 1, 2, s2); }
    for (int l = 0; l < L; l++) { s2[0] = 5; param_table_add(&m->tab, "ln", l, L - 1 - l, 0, 1, s2); }
    s2[0] = 6;
    param_table_add(&m->tab, "lnf", -1, L, 0, 1, s2);
    m->p = xmalloc(m->tab.total * sizeof(float), "p");
    m->g = xcalloc(m->tab.total, sizeof(float), "g");
    Rng r;
    rng_seed(&r, 7);
    rng_normal(&r, m->p, m->tab.total, 0.0f, 1.0f);
}

static void toy_free(Toy *m) {
    free(m->p);
    free(m->g);
    param_table_free(&m->tab);
}

/* g = mean over samples [first, first + n) of step t of w_j (theta_j - x_{s,j}) */
static void toy_grad(const Toy *m, float *g, int t, int first, int n) {
    size_t P = m->tab.total;
    float *x = xmalloc(P * sizeof(float), "x");
    memset(g, 0, P * sizeof(float));
    for (int s = first; s < first + n; s++) {
        Rng r;
        rng_seed(&r, rng_mix((uint64_t)t, (uint64_t)s));
        rng_normal(&r, x, P, 0.5f, 2.0f);
        for (size_t j = 0; j < P; j++) g[j] += (1.0f + (float)(j % 7)) * (m->p[j] - x[j]) / (float)n;
    }
    free(x);
}

/* Sets one of the rule's own options as --flag text would (optim/dist.h distopt_set_option). */
static void set_option(DistConfig *c, const char *flag, const char *text) {
    if (distopt_set_option(c, flag, text) != 0) fatal("test_dist: --%s is no option of optimizer kind %d", flag, c->opt.kind);
}

static DistConfig config(OptimizerKind kind) {
    DistConfig c = {0};
    c.opt.kind = kind;
    distopt_default_options(&c);
    c.opt.beta1 = 0.9f;
    c.opt.beta2 = 0.95f;
    c.opt.eps = 1e-8f;
    c.opt.weight_decay = 0.1f;
    c.density = 1.0f;
    c.density_start = 1.0f;
    c.exclude_norms = 1;
    return c;
}

/* One training step as the loop does it: backward finishes buckets 0..nb-1 in order, then the update. */
static int train_step(DistOptim *d, Toy *m, int t) {
    toy_grad(m, m->g, t, R * B, B);
    for (int b = 0; b < m->tab.num_buckets; b++) distopt_bucket_ready(d, b);
    float gn;
    return distopt_step(d, t, LR, &gn);
}

/* FNV-1a 64 of n bytes (common/hash.h), from the seed the trainers' sync check uses */
static uint64_t fnv(const void *p, size_t n) { return hash_fnv1a64(1469598103934665603ull, p, n); }

/* 1 if the value is the same on every rank */
static int same_everywhere(uint64_t h) {
    uint64_t *all = xmalloc((size_t)N * sizeof(uint64_t), "hashes");
    comm_allgather(&h, all, sizeof h);
    int ok = 1;
    for (int r = 0; r < N; r++) ok &= all[r] == all[0];
    free(all);
    return ok;
}

static float max_rel_diff(const float *a, const float *b, size_t n) {
    float w = 0;
    for (size_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]) / (fabsf(b[i]) + 1e-3f);
        if (!(e <= w)) w = e;
    }
    return w;
}

/* ---- pieces ---- */

TEST(topk_matches_sort_reference_with_ties_to_lower_index) {
    Rng r;
    rng_seed(&r, 99);
    for (int trial = 0; trial < 200; trial++) {
        size_t n = 1 + rng_below(&r, 300), k = 1 + rng_below(&r, n);
        float *c = xmalloc(n * sizeof(float), "c");
        for (size_t j = 0; j < n; j++) {
            /* few distinct magnitudes, both signs, zeros: many ties */
            float v = (float)rng_below(&r, 6) * 0.25f;
            c[j] = rng_below(&r, 2) ? -v : v;
        }
        if (trial % 3 == 0) rng_normal(&r, c, n, 0, 1);
        uint8_t *bits = xcalloc(mask_bytes(n + 5), 1, "bits");
        uint32_t *tmp = xmalloc(n * sizeof(uint32_t), "tmp");
        scape_topk_mask(c, n, k, bits, 5, tmp);
        /* reference: sort indices by (|c| descending, index ascending), take the first k */
        size_t *idx = xmalloc(n * sizeof(size_t), "idx");
        for (size_t j = 0; j < n; j++) idx[j] = j;
        for (size_t a = 1; a < n; a++) { /* insertion sort, stable on index */
            size_t x = idx[a], b = a;
            while (b > 0 && fabsf(c[idx[b - 1]]) < fabsf(c[x])) { idx[b] = idx[b - 1]; b--; }
            idx[b] = x;
        }
        uint8_t *want = xcalloc(n, 1, "want");
        for (size_t q = 0; q < k; q++) want[idx[q]] = 1;
        size_t bad = 0;
        for (size_t j = 0; j < n; j++) bad += mask_get(bits, 5 + j) != want[j];
        for (size_t j = 0; j < 5; j++) bad += mask_get(bits, j);
        CHECK(bad == 0 && mask_count(bits, 0, n + 5) == k, "trial %d n=%zu k=%zu: %zu bits differ from the sort reference, %zu set",
              trial, n, k, bad, mask_count(bits, 0, n + 5));
        free(c); free(bits); free(tmp); free(idx); free(want);
        if (bad) break;
    }
}

TEST(mask_bits_merge_at_any_offset) {
    uint8_t src[5] = {0xA5, 0x3C, 0xFF, 0x01, 0x07};
    for (size_t off = 0; off < 17; off++) {
        uint8_t dst[12] = {0};
        mask_or_bits(dst, off, src, 37);
        size_t bad = 0;
        for (size_t j = 0; j < 96; j++) {
            int want = j >= off && j < off + 37 ? mask_get(src, j - off) : 0;
            bad += mask_get(dst, j) != want;
        }
        CHECK(bad == 0, "offset %zu: %zu bits wrong", off, bad);
    }
}

TEST(owner_table_is_contiguous_balanced_and_complete) {
    Toy m;
    toy_build(&m);
    for (int w = 1; w <= 6; w++) {
        OwnerTable o;
        owner_table_build(&o, &m.tab, w);
        CHECK(o.lo[0] == 0 && o.hi[w - 1] == m.tab.total, "world %d: owners cover [%zu, %zu) not [0, %zu)", w, o.lo[0], o.hi[w - 1], m.tab.total);
        for (int r = 1; r < w; r++) {
            CHECK(o.lo[r] == o.hi[r - 1] && o.first[r] >= o.first[r - 1], "world %d: rank %d does not start where rank %d ends", w, r, r - 1);
            /* boundary is the slice start nearest to r P / w */
            double target = (double)m.tab.total * r / w, best = 1e30;
            for (int s = 0; s <= m.tab.n; s++) {
                double off = s < m.tab.n ? (double)m.tab.slices[s].offset : (double)m.tab.total;
                if (fabs(off - target) < best) best = fabs(off - target);
            }
            CHECK(fabs((double)o.lo[r] - target) == best, "world %d rank %d: boundary %zu, nearest slice start is %g from %g", w, r, o.lo[r], best, target);
        }
        owner_table_free(&o);
    }
    toy_free(&m);
}

/* SCAPE.md section 5 as the authors' reducer runs it: (t - 1) / W, so step 1 runs at d_start and step W + 1 is the
 * first at d; k in double as their int(d * numel). */
TEST(density_schedule_is_geometric_warmup) {
    CHECK(scape_density(0.01, 1.0, 100, 1) == 1.0, "d(1) expected d_start 1, got %g", scape_density(0.01, 1.0, 100, 1));
    CHECK(scape_density(0.01, 0.5, 100, 1) == 0.5, "d(1) expected d_start 0.5, got %g", scape_density(0.01, 0.5, 100, 1));
    double mid = scape_density(0.01, 1.0, 100, 51);
    CHECK(fabs(mid - 0.1) < 1e-12, "d(W/2 + 1) expected sqrt(d) 0.1, got %.17g", mid);
    CHECK(scape_density(0.01, 1.0, 100, 100) > 0.01, "d(W) is already d: the schedule runs one step ahead");
    CHECK(scape_density(0.01, 1.0, 100, 101) == 0.01 && scape_density(0.01, 1.0, 100, 5000) == 0.01, "d(t > W) is not d");
    CHECK(scape_density(0.01, 1.0, 0, 1) == 0.01, "no warm-up: d(1) expected d");
    /* a dense phase of S steps (the authors' --topk-adams-start-iter 2000, then 8000 warm-up steps, Llama-500M d 0.1):
     * d_start through step S + 1, the warm-up's midpoint at S + W/2 + 1, d from S + W + 1 on */
    DistConfig dc = {.density = 0.1, .density_start = 1.0, .density_warmup = 8000, .density_dense = 2000};
    CHECK(dist_density(&dc, 1) == 1.0 && dist_density(&dc, 2000) == 1.0 && dist_density(&dc, 2001) == 1.0,
          "dense phase: d(1), d(S), d(S+1) = %g %g %g, expected 1", dist_density(&dc, 1), dist_density(&dc, 2000),
          dist_density(&dc, 2001));
    CHECK(dist_density(&dc, 2002) < 1.0 && fabs(dist_density(&dc, 2002) - pow(0.1, 1.0 / 8000)) < 1e-15,
          "d(S+2) = %.17g, expected 0.1^(1/8000)", dist_density(&dc, 2002));
    CHECK(fabs(dist_density(&dc, 6001) - sqrt(0.1)) < 1e-12, "d(S + W/2 + 1) = %.17g, expected sqrt(0.1)",
          dist_density(&dc, 6001));
    CHECK(dist_density(&dc, 10000) > 0.1 && dist_density(&dc, 10001) == 0.1 && dist_density(&dc, 100000) == 0.1,
          "d(S+W) must still be above d, d(S+W+1) and later exactly d: %.17g %.17g", dist_density(&dc, 10000),
          dist_density(&dc, 10001));
    dc.density_dense = 0;
    for (int t = 1; t < 12000; t += 997)
        CHECK(dist_density(&dc, t) == scape_density(0.1, 1.0, 8000, t), "S = 0 differs from scape_density at t %d", t);
    CHECK(scape_k(0.7, 10) == 7 && scape_k(0.01, 50) == 1 && scape_k(1.0, 9) == 9, "k: expected 7 1 9, got %zu %zu %zu",
          scape_k(0.7, 10), scape_k(0.01, 50), scape_k(1.0, 9));
    CHECK(scape_k(0.01, 32000u * 1536u) == 491520, "k(0.01, 32000 x 1536) expected 491520, got %zu (a float density "
          "gives 491519)", scape_k(0.01, 32000u * 1536u));
    CHECK(scape_k(0.29, 100) == 28, "k(0.29, 100) expected 28 as Python's int(0.29 * 100), got %zu", scape_k(0.29, 100));
}

/* ---- invariants ---- */

/* SCAPE.md 9.1: density 1 is dense AdamS (same N), and r stays exactly 0 */
TEST(inv1_density_one_equals_dense_adams_and_residual_stays_zero) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    DistConfig cs = config(OPT_SCAPE), ca = config(OPT_ADAMS);
    DistOptim *ds = distopt_create(&a.tab, a.p, a.g, &cs), *da = distopt_create(&b.tab, b.p, b.g, &ca);
    for (int t = 1; t <= 6; t++) {
        train_step(ds, &a, t);
        train_step(da, &b, t);
        const float *r = distopt_residual(ds);
        size_t nz = 0;
        for (size_t j = 0; j < a.tab.total; j++) nz += r[j] != 0.0f;
        CHECK(nz == 0, "step %d: %zu residual entries are non-zero", t, nz);
        CHECK(distopt_payload_count(ds) == a.tab.total, "step %d: K_t expected P=%zu, got %zu", t, a.tab.total, distopt_payload_count(ds));
    }
    float e = max_rel_diff(a.p, b.p, a.tab.total), em = max_rel_diff(distopt_moment(ds), distopt_moment(da), a.tab.total);
    CHECK(e < 1e-5f && em < 1e-4f, "after 6 steps params differ by rel %g, m by %g (want < 1e-5, 1e-4)", e, em);
    distopt_free(ds);
    distopt_free(da);
    toy_free(&a);
    toy_free(&b);
}

static DistConfig sparse_config(void) {
    DistConfig c = config(OPT_SCAPE);
    c.density = 0.1f;
    c.density_start = 1.0f;
    c.density_warmup = 4;
    c.clip = 5.0f;
    return c;
}

/* The dense updates' fused variants (adamw_update_and_zero, adams_update_and_zero: the clip factor applied and the
 * gradient cleared inside the update, which dense_step uses) equal scaling the gradient, the plain update and
 * clearing it, bit for bit, with and without a clip factor, over two steps. */
TEST(fused_dense_updates_equal_scale_update_clear) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    size_t P = a.tab.total;
    OptimConfig oc = {OPT_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int kind = 0; kind < 2; kind++) {
        float *ma = xcalloc(P, 4, "m"), *va = xcalloc(P, 4, "v"), *mb = xcalloc(P, 4, "m"), *vb = xcalloc(P, 4, "v");
        for (int t = 1; t <= 2; t++) {
            float sc = t == 1 ? 0.37f : 1.0f;
            toy_grad(&a, a.g, t, 0, 2);
            memcpy(b.g, a.g, P * 4);
            for (size_t j = 0; j < P; j++) a.g[j] *= sc;
            if (kind == 0) {
                adamw_update(&a.tab, a.p, a.g, ma, va, 0, P, t, LR, &oc);
                adamw_update_and_zero(&b.tab, b.p, b.g, mb, vb, 0, P, t, LR, &oc, sc);
            } else {
                adams_update(&a.tab, a.p, a.g, ma, 0, P, t, LR, &oc);
                adams_update_and_zero(&b.tab, b.p, b.g, mb, 0, P, t, LR, &oc, sc);
            }
            size_t nonzero = 0;
            for (size_t j = 0; j < P; j++) nonzero += b.g[j] != 0.0f;
            CHECK(nonzero == 0, "%s step %d: %zu gradients left uncleared", kind ? "adams" : "adamw", t, nonzero);
            CHECK(memcmp(a.p, b.p, P * 4) == 0 && memcmp(ma, mb, P * 4) == 0 && (kind || memcmp(va, vb, P * 4) == 0),
                  "%s step %d (clip factor %g): params or moments differ from scale + update", kind ? "adams" : "adamw",
                  t, sc);
        }
        free(ma); free(va); free(mb); free(vb);
    }
    toy_free(&a);
    toy_free(&b);
}

/* Issue 17, part 1: SCAPE holds its first moment compact on its mask. Through a density warm-up from 1 to 0.1 (so the
 * buffers grow, then shrink), the state held is r (4P), the three masks and the moment's two buffers, which never
 * hold much more than the mask's count each: at d 0.1, far below the 8P of a dense m beside r; and the dense copy
 * distopt_moment gives is zero off the current mask. */
TEST(scape_first_moment_is_held_compact) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = sparse_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    size_t first = 0, last = 0, K = 0;
    for (int t = 1; t <= 8; t++) {
        CHECK(train_step(d, &m, t) == 0, "step %d skipped", t);
        const uint8_t *M = distopt_mask(d, 0);
        K = mask_count(M, 0, P);
        const float *mt = distopt_moment(d);
        size_t off = 0;
        for (size_t j = 0; j < P; j++) off += !mask_get(M, j) && mt[j] != 0.0f;
        CHECK(off == 0, "step %d: %zu nonzero moments off the mask", t, off);
        last = distopt_state_memory(d);
        if (t == 1) first = last;
    }
    size_t masks = 3 * mask_bytes(P), most = 4 * P + masks + 2 * 4 * (K + K / 2);
    CHECK(first >= 4 * P + 4 * P + masks, "step 1 (density 1): %zu bytes, expected at least r and a full m", first);
    CHECK(last >= 4 * P + 4 * K + masks && last <= most, "at density 0.1 (K %zu of %zu): %zu bytes, expected "
          "between %zu and %zu", K, P, last, 4 * P + 4 * K + masks, most);
    CHECK(last < 4 * P + 4 * P, "compact state %zu bytes is not below a dense m beside r (%zu)", last, 8 * P);
    distopt_free(d);
    toy_free(&m);
}

/* SCAPE.md 9.2, 9.3, 9.5, 9.7 on one run: conservation bit for bit, identical shared state on every rank,
 * the mask in use at t is the one made at t-1, g_hat equals an explicit second reduction. */
/* The authors'-residual ablation (cfg.double_residual, issue 29): off the mask the residual is written twice,
 * r = c + (c - r_old) = r_old + 2 (beta1 m_{t-1} + (1 - beta1) g), bit for bit against that hand computation from
 * the captured c and the previous r; on the mask it is 0 as in SCAPE; c itself is SCAPE's formula. */
TEST(double_residual_defect_writes_the_residual_twice_off_the_mask) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = sparse_config();
    cfg.double_residual = 1;
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    float *c = xmalloc(P * 4, "c"), *s = xmalloc(P * 4, "s"), *gh = xmalloc(P * 4, "gh");
    float *mprev = xmalloc(P * 4, "mprev"), *rprev = xmalloc(P * 4, "rprev"), *g = xmalloc(P * 4, "g");
    distopt_debug_capture(d, c, s, gh);
    const float b1 = cfg.opt.beta1, omb1 = 1.0f - b1;
    size_t off_total = 0, grown = 0;
    for (int t = 1; t <= 6; t++) {
        memcpy(mprev, distopt_moment(d), P * 4);
        memcpy(rprev, distopt_residual(d), P * 4);
        toy_grad(&m, m.g, t, R * B, B);
        memcpy(g, m.g, P * 4);
        for (int b = 0; b < m.tab.num_buckets; b++) distopt_bucket_ready(d, b);
        float gn;
        CHECK(distopt_step(d, t, LR, &gn) == 0, "step %d skipped", t);
        const float *r = distopt_residual(d);
        const uint8_t *M = distopt_mask(d, 0);
        size_t badc = 0, badr = 0;
        for (size_t j = 0; j < P; j++) {
            float cj = b1 * mprev[j] + omb1 * g[j] + rprev[j];
            if (memcmp(&cj, &c[j], 4)) badc++;
            float want = mask_get(M, j) ? 0.0f : c[j] + (c[j] - rprev[j]);
            if (memcmp(&want, &r[j], 4)) badr++;
            if (!mask_get(M, j)) {
                off_total++;
                grown += fabsf(r[j]) > fabsf(c[j]);
            }
        }
        CHECK(badc == 0, "step %d: %zu coordinates of c differ from beta1 m + (1-beta1) g + r", t, badc);
        CHECK(badr == 0, "step %d: %zu coordinates of r differ from 0 on the mask, c + (c - r_old) off it", t, badr);
    }
    CHECK(off_total > 0 && grown > off_total / 2, "the doubled residual should exceed |c| at most coordinates off the "
          "mask: %zu of %zu", grown, off_total);
    distopt_free(d);
    free(c), free(s), free(gh), free(mprev), free(rprev), free(g);
    toy_free(&m);
}

TEST(inv2_3_5_7_conservation_identical_state_mask_lag_and_ghat) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = sparse_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    float *c = xmalloc(P * 4, "c"), *s = xmalloc(P * 4, "s"), *gh = xmalloc(P * 4, "gh");
    float *mprev = xmalloc(P * 4, "mprev"), *rprev = xmalloc(P * 4, "rprev"), *g = xmalloc(P * 4, "g");
    float *v = xmalloc(P * 4, "v");
    uint8_t *made = xcalloc(mask_bytes(P), 1, "made");
    distopt_debug_capture(d, c, s, gh);
    const float b1 = cfg.opt.beta1, omb1 = 1.0f - b1;
    for (int t = 1; t <= 7; t++) {
        memcpy(mprev, distopt_moment(d), P * 4);
        memcpy(rprev, distopt_residual(d), P * 4);
        toy_grad(&m, m.g, t, R * B, B);
        memcpy(g, m.g, P * 4);
        for (int b = 0; b < m.tab.num_buckets; b++) distopt_bucket_ready(d, b);
        float gn;
        CHECK(distopt_step(d, t, LR, &gn) == 0, "step %d skipped", t);
        const float *r = distopt_residual(d);
        const uint8_t *M = distopt_mask(d, 0);
        size_t badc = 0, bads = 0, badg = 0;
        for (size_t j = 0; j < P; j++) {
            float cj = b1 * mprev[j] + omb1 * g[j] + rprev[j];
            if (memcmp(&cj, &c[j], 4)) badc++;
            float back = s[j] + r[j];
            if (memcmp(&back, &c[j], 4) || (mask_get(M, j) ? r[j] != 0 : s[j] != 0)) bads++;
        }
        CHECK(badc == 0, "step %d: %zu coordinates of c differ from beta1 m + (1-beta1) g + r", t, badc);
        CHECK(bads == 0, "step %d: scatter(s)+r != c at %zu coordinates", t, bads);
        /* 9.7: explicit second reduction of (1-beta1) g_i + r_i */
        for (size_t j = 0; j < P; j++) v[j] = omb1 * g[j] + rprev[j];
        comm_wait(comm_iallreduce_avg_f32(v, P));
        for (size_t j = 0; j < P; j++) {
            if (!mask_get(M, j)) { badg += gh[j] != 0; continue; }
            float want = v[j] / omb1, tol = 3e-6f * (fabsf(b1 * mprev[j]) + fabsf(v[j])) / omb1 + 1e-7f;
            if (!(fabsf(gh[j] - want) <= tol)) {
                if (!badg) CHECK(0, "step %d: g_hat[%zu] %.9g, explicit reduction %.9g (tol %g)", t, j, gh[j], want, tol);
                badg++;
            }
        }
        CHECK(badg == 0, "step %d: g_hat differs from the explicit reduction at %zu coordinates", t, badg);
        /* 9.5: the mask in use now is the one made at the previous step */
        if (t > 1) CHECK(memcmp(M, made, mask_bytes(P)) == 0, "step %d: mask in use is not the one made at step %d", t, t - 1);
        const uint8_t *Mn = distopt_mask(d, 1);
        memcpy(made, Mn, mask_bytes(P));
        /* 9.3 */
        CHECK(same_everywhere(fnv(m.p, P * 4)), "step %d: params differ across ranks", t);
        CHECK(same_everywhere(fnv(distopt_moment(d), P * 4)), "step %d: m differs across ranks", t);
        CHECK(same_everywhere(fnv(M, mask_bytes(P))) && same_everywhere(fnv(Mn, mask_bytes(P))), "step %d: masks differ across ranks", t);
    }
    distopt_free(d);
    free(c); free(s); free(gh); free(mprev); free(rprev); free(g); free(v); free(made);
    toy_free(&m);
}

/* SCAPE.md 9.4: each owned slice's next mask has exactly k_s bits, equal to a sort-based top-k of |c|;
 * excluded slices are all ones. Checked by every rank for the slices it owns, on the gathered mask. */
TEST(inv4_owned_masks_are_exact_topk_and_norms_dense) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = sparse_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    float *c = xmalloc(P * 4, "c");
    distopt_debug_capture(d, c, NULL, NULL);
    size_t lo, hi;
    distopt_owner_range(d, R, &lo, &hi);
    for (int t = 1; t <= 6; t++) {
        train_step(d, &m, t);
        const uint8_t *Mn = distopt_mask(d, 1);
        double dens = dist_density(&cfg, t + 1);
        for (int i = 0; i < m.tab.n; i++) {
            const ParamSlice *sl = &m.tab.slices[i];
            size_t n = sl->numel, cnt = mask_count(Mn, sl->offset, sl->offset + n);
            if (sl->dense_only) {
                CHECK(cnt == n, "step %d %s/%d: excluded slice has %zu of %zu bits", t, sl->name, sl->layer, cnt, n);
                continue;
            }
            size_t k = scape_k(dens, n);
            CHECK(cnt == k, "step %d %s/%d: %zu bits set, k_s = %zu", t, sl->name, sl->layer, cnt, k);
            if (sl->offset < lo || sl->offset >= hi) continue;
            /* sort-based reference: rank of each element = how many beat it (larger |c|, or equal and lower index) */
            size_t bad = 0;
            for (size_t a = 0; a < n; a++) {
                float ca = fabsf(c[sl->offset + a]);
                size_t beats = 0;
                for (size_t b2 = 0; b2 < n; b2++) {
                    float cb = fabsf(c[sl->offset + b2]);
                    beats += cb > ca || (cb == ca && b2 < a);
                }
                bad += (beats < k) != mask_get(Mn, sl->offset + a);
            }
            CHECK(bad == 0, "step %d %s/%d: %zu bits differ from the sort-based top-%zu", t, sl->name, sl->layer, bad, k);
        }
    }
    distopt_free(d);
    free(c);
    toy_free(&m);
}

/* SCAPE.md 9.6: one payload all-reduce per bucket carrying K_t values in all, one mask all-gather per step, and
 * the byte counters equal the section 6 formulas; step 1 adds the bootstrap's blocking all-gather. */
TEST(inv6_one_payload_allreduce_and_one_mask_allgather_per_step_with_formula_bytes) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = sparse_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    uint64_t seg = 0;
    for (int r = 0; r < N; r++) {
        size_t lo, hi;
        distopt_owner_range(d, r, &lo, &hi);
        seg += mask_bytes(hi - lo);
    }
    CHECK(seg >= P / 8 && seg <= P / 8 + (uint64_t)N, "mask message %llu bytes, expected P/8 = %zu (+ at most N)", (unsigned long long)seg, P / 8);
    CommStats k[COMM_NKINDS];
    comm_stats_take_kind(k);
    for (int t = 1; t <= 5; t++) {
        train_step(d, &m, t);
        comm_stats_take_kind(k);
        uint64_t K = mask_count(distopt_mask(d, 0), 0, P);
        CHECK(distopt_payload_count(d) == K, "step %d: payload count %zu, mask has %llu", t, distopt_payload_count(d), (unsigned long long)K);
        /* step 1 gathers its own mask first when it starts below density 1 (here d(1) = d_start = 1: it does not) */
        uint64_t ngather = t == 1 && dist_density(&cfg, 1) < 1.0 ? 2 : 1;
        uint64_t ar = 2ull * 4 * K * (uint64_t)(N - 1) / (uint64_t)N, ag = ngather * seg * (uint64_t)(N - 1) / (uint64_t)N;
        CHECK(k[COMM_ALLREDUCE].calls == (uint64_t)m.tab.num_buckets, "step %d: %llu payload all-reduces, expected one per bucket (%d)", t,
              (unsigned long long)k[COMM_ALLREDUCE].calls, m.tab.num_buckets);
        CHECK(k[COMM_ALLREDUCE].bytes_sent == ar && k[COMM_ALLREDUCE].bytes_recv == ar, "step %d: payload bytes %llu, formula 2*4*K*(N-1)/N = %llu",
              t, (unsigned long long)k[COMM_ALLREDUCE].bytes_sent, (unsigned long long)ar);
        CHECK(k[COMM_ALLGATHER].calls == ngather && k[COMM_ALLGATHER].bytes_recv == ag, "step %d: %llu mask all-gathers of %llu bytes, expected %llu of %llu",
              t, (unsigned long long)k[COMM_ALLGATHER].calls, (unsigned long long)k[COMM_ALLGATHER].bytes_recv, (unsigned long long)ngather, (unsigned long long)ag);
        CHECK(k[COMM_REDUCE_SCATTER].calls == 0 && k[COMM_BCAST].calls == 0, "step %d: unexpected reduce-scatter/bcast", t);
        if (t > 1) CHECK(K < P, "step %d: density %g but K = P", t, distopt_density(d, t));
    }
    distopt_free(d);
    toy_free(&m);
}

/* ---- SCAPE with the bf16 payload (dist.h, distopt_create's comment; SCAPE.md section 7) ---- */

static DistConfig bf16_config(void) {
    DistConfig c = sparse_config();
    c.payload_bf16 = 1;
    c.clip = 0; /* so m_t is b itself, and the conservation below is exact up to fp32 rounding */
    return c;
}

/* Per step: what is sent is bf16(c_i) on M_t; m_t = b is bf16-valued and 0 off M_t; off M_t r_i = c_i bit for
 * bit; on M_t nothing is lost, mean_i r_i + m_t == mean_i c_i (checked in double against a tolerance of fp32
 * rounding, three orders below what dropping either rounding error would cost); shared state identical on every
 * rank; the payload all-reduce moves 2 * 2 K (N-1)/N bytes. */
/* zero: with ZeRO-1, whose reduce-scatter moves the bf16 payload to the owners (half the fp32 reduce-scatter's bytes) */
static void bf16_conservation_case(const char *test_name_, int zero) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = bf16_config();
    cfg.zero = zero;
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    float *c = xmalloc(P * 4, "c"), *s = xmalloc(P * 4, "s");
    double *sum = xmalloc(2 * P * sizeof(double), "sums");
    distopt_debug_capture(d, c, s, NULL);
    CommStats k[COMM_NKINDS];
    comm_stats_take_kind(k);
    for (int t = 1; t <= 7; t++) {
        CHECK(train_step(d, &m, t) == 0, "step %d skipped", t);
        comm_stats_take_kind(k);
        const float *r = distopt_residual(d), *mt = distopt_moment(d);
        const uint8_t *M = distopt_mask(d, 0);
        size_t K = mask_count(M, 0, P), bad_s = 0, bad_off = 0, bad_m = 0, bad_cons = 0;
        for (size_t j = 0; j < P; j++) {
            sum[j] = (double)r[j] + 0.0;
            sum[P + j] = (double)c[j];
        }
        comm_allreduce_sum_f64(sum, 2 * P);
        double worst = 0;
        for (size_t j = 0; j < P; j++) {
            if (!mask_get(M, j)) {
                bad_off += memcmp(&r[j], &c[j], 4) != 0 || s[j] != 0 || mt[j] != 0;
                continue;
            }
            bad_s += s[j] != bf16_to_f32(bf16_from_f32(c[j]));
            bad_m += mt[j] != bf16_to_f32(bf16_from_f32(mt[j]));
            double mean_r = sum[j] / N, mean_c = sum[P + j] / N;
            double err = fabs(mean_r + (double)mt[j] - mean_c), tol = 1e-6 * (fabs(mean_c) + fabs((double)mt[j])) + 1e-30;
            if (err / tol > worst) worst = err / tol;
            bad_cons += !(err <= tol);
        }
        CHECK(bad_s == 0, "step %d: %zu payload values are not bf16(c)", t, bad_s);
        CHECK(bad_off == 0, "step %d: %zu coordinates off the mask have r != c, s != 0 or m != 0", t, bad_off);
        CHECK(bad_m == 0, "step %d: %zu values of m_t are not bf16 values", t, bad_m);
        CHECK(bad_cons == 0, "step %d: mean r + m_t != mean c at %zu of %zu masked coordinates (worst err/tol %g)", t,
              bad_cons, K, worst);
        uint64_t ar = (zero ? 1ull : 2ull) * 2 * K * (uint64_t)(N - 1) / (uint64_t)N;
        const CommStats *pk = &k[zero ? COMM_REDUCE_SCATTER : COMM_ALLREDUCE];
        CHECK(pk->bytes_sent + (uint64_t)m.tab.num_buckets >= ar && pk->bytes_sent <= ar + (uint64_t)m.tab.num_buckets,
              "step %d: payload bytes %llu, formula %s*2*K*(N-1)/N = %llu", t, (unsigned long long)pk->bytes_sent,
              zero ? "1" : "2", (unsigned long long)ar);
        CHECK(same_everywhere(fnv(m.p, P * 4)) && same_everywhere(fnv(mt, P * 4)), "step %d: params or m differ across ranks", t);
        CHECK(same_everywhere(fnv(M, mask_bytes(P))), "step %d: masks differ across ranks", t);
    }
    distopt_free(d);
    free(c); free(s); free(sum);
    toy_free(&m);
}
TEST(scape_bf16_payload_loses_nothing_into_the_residual_and_halves_the_bytes) { bf16_conservation_case(test_name_, 0); }
TEST(scape_zero1_bf16_payload_loses_nothing_into_the_residual_and_halves_the_bytes) { bf16_conservation_case(test_name_, 1); }

/* Density 1 with the bf16 payload stays within bf16 rounding of dense AdamS (the feedback keeps the rounding
 * errors from adding up), and far from equal to it: the payload really is rounded. */
TEST(scape_bf16_payload_at_density_one_tracks_dense_adams) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    DistConfig cs = config(OPT_SCAPE), ca = config(OPT_ADAMS);
    cs.payload_bf16 = 1;
    DistOptim *ds = distopt_create(&a.tab, a.p, a.g, &cs), *da = distopt_create(&b.tab, b.p, b.g, &ca);
    for (int t = 1; t <= 8; t++) {
        train_step(ds, &a, t);
        train_step(da, &b, t);
    }
    size_t P = a.tab.total;
    double dp = 0, np = 0;
    for (size_t j = 0; j < P; j++) {
        dp += ((double)a.p[j] - b.p[j]) * ((double)a.p[j] - b.p[j]);
        np += (double)b.p[j] * b.p[j];
    }
    double rel = sqrt(dp / np);
    CHECK(rel < 2e-3 && rel > 0, "after 8 steps params differ from dense AdamS by relative L2 %g (want in (0, 2e-3))", rel);
    distopt_free(ds);
    distopt_free(da);
    toy_free(&a);
    toy_free(&b);
}


/* ---- topk-ef: top-k of raw gradients with error feedback into AdamW (dist.h, distopt_create) ---- */

static DistConfig topk_config(void) {
    DistConfig c = config(OPT_TOPK_EF);
    c.density = 0.1f;
    c.density_start = 1.0f;
    c.density_warmup = 4;
    c.clip = 5.0f;
    return c;
}

/* density 1: every coordinate selected, e stays 0, and the run equals dense AdamW (bit for bit for N <= 2, where
 * the MPI sum of two values cannot depend on order; within rounding beyond) */
TEST(topk_ef_density_one_equals_dense_adamw_and_feedback_stays_zero) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    size_t P = a.tab.total;
    DistConfig ct = config(OPT_TOPK_EF), ca = config(OPT_ADAMW);
    ct.clip = ca.clip = 5.0f;
    DistOptim *dt = distopt_create(&a.tab, a.p, a.g, &ct), *da = distopt_create(&b.tab, b.p, b.g, &ca);
    for (int t = 1; t <= 6; t++) {
        train_step(dt, &a, t);
        train_step(da, &b, t);
        size_t nz = 0;
        for (size_t j = 0; j < P; j++) nz += distopt_residual(dt)[j] != 0.0f;
        CHECK(nz == 0, "step %d: %zu error-feedback entries are non-zero at density 1", t, nz);
        CHECK(distopt_payload_count(dt) == P, "step %d: K expected P=%zu, got %zu", t, P, distopt_payload_count(dt));
    }
    if (N <= 2) {
        CHECK(memcmp(a.p, b.p, P * 4) == 0, "params differ from dense AdamW (max rel %g)", max_rel_diff(a.p, b.p, P));
        CHECK(memcmp(distopt_moment(dt), distopt_moment(da), P * 4) == 0, "m differs from dense AdamW");
    } else {
        float e = max_rel_diff(a.p, b.p, P);
        CHECK(e < 1e-5f, "params differ from dense AdamW by rel %g (want < 1e-5)", e);
    }
    distopt_free(dt);
    distopt_free(da);
    toy_free(&a);
    toy_free(&b);
}

/* conservation bit for bit (selected + e_i == acc_i, acc_i == e_{i,prev} + g_i), exact per-slice k_s, the averaged
 * gradient equal to an explicit gather of every rank's acc and selection, fill-in, identical shared state, and the
 * byte counters equal to 8 K (N-1) with one all-gather per bucket and nothing else */
TEST(topk_ef_conservation_average_fill_in_identical_state_and_formula_bytes) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = topk_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    float *c = xmalloc(P * 4, "c"), *s = xmalloc(P * 4, "s"), *gh = xmalloc(P * 4, "gh"), *eprev = xmalloc(P * 4, "e");
    float *g = xmalloc(P * 4, "g"), *allc = xmalloc((size_t)N * P * 4, "allc");
    uint8_t *allm = xmalloc((size_t)N * mask_bytes(P), "allm");
    distopt_debug_capture(d, c, s, gh);
    CommStats k[COMM_NKINDS];
    comm_stats_take_kind(k);
    for (int t = 1; t <= 7; t++) {
        memcpy(eprev, distopt_residual(d), P * 4);
        toy_grad(&m, m.g, t, R * B, B);
        memcpy(g, m.g, P * 4);
        for (int b = 0; b < m.tab.num_buckets; b++) distopt_bucket_ready(d, b);
        float gn;
        CHECK(distopt_step(d, t, LR, &gn) == 0, "step %d skipped", t);
        comm_stats_take_kind(k);
        const float *e = distopt_residual(d);
        const uint8_t *S = distopt_mask(d, 0);
        size_t bada = 0, badc = 0;
        for (size_t j = 0; j < P; j++) {
            float acc = eprev[j] + g[j];
            if (memcmp(&acc, &c[j], 4)) bada++;
            const float *kept = mask_get(S, j) ? &s[j] : &e[j], *zero = mask_get(S, j) ? &e[j] : &s[j];
            if (memcmp(kept, &c[j], 4) || *zero != 0.0f) badc++;
        }
        CHECK(bada == 0, "step %d: %zu coordinates of acc differ from e + g", t, bada);
        CHECK(badc == 0, "step %d: selected + e != acc at %zu coordinates", t, badc);
        double dens = dist_density(&cfg, t);
        uint64_t K = 0;
        for (int i = 0; i < m.tab.n; i++) {
            const ParamSlice *sl = &m.tab.slices[i];
            size_t want = sl->dense_only ? sl->numel : scape_k(dens, sl->numel);
            size_t got = mask_count(S, sl->offset, sl->offset + sl->numel);
            CHECK(got == want, "step %d: slice %d (%s) selected %zu, expected k_s = %zu", t, i, sl->name, got, want);
            K += want;
        }
        CHECK(distopt_payload_count(d) == K, "step %d: payload count %zu, expected %llu", t, distopt_payload_count(d), (unsigned long long)K);
        uint64_t ag = 8ull * K * (uint64_t)(N - 1);
        CHECK(k[COMM_ALLGATHER].calls == (uint64_t)m.tab.num_buckets && k[COMM_ALLGATHER].bytes_sent == ag &&
                  k[COMM_ALLGATHER].bytes_recv == ag,
              "step %d: %llu all-gathers of %llu bytes, expected %d of 8*K*(N-1) = %llu", t, (unsigned long long)k[COMM_ALLGATHER].calls,
              (unsigned long long)k[COMM_ALLGATHER].bytes_recv, m.tab.num_buckets, (unsigned long long)ag);
        CHECK(k[COMM_ALLREDUCE].calls == 0 && k[COMM_REDUCE_SCATTER].calls == 0 && k[COMM_BCAST].calls == 0,
              "step %d: unexpected all-reduce/reduce-scatter/bcast", t);
        /* the average from an explicit gather of every rank's acc and selection, summed in rank order */
        comm_allgather(c, allc, P * 4);
        comm_allgather(S, allm, mask_bytes(P));
        size_t badg = 0, support = 0;
        for (size_t j = 0; j < P; j++) {
            float want = 0.0f;
            int any = 0;
            for (int r = 0; r < N; r++)
                if (mask_get(allm + (size_t)r * mask_bytes(P), j)) {
                    want = any ? want + allc[(size_t)r * P + j] : allc[(size_t)r * P + j];
                    any = 1;
                }
            if (N > 1) want /= (float)N;
            support += any;
            if (memcmp(&want, &gh[j], 4) && !(want == 0 && gh[j] == 0)) badg++;
        }
        CHECK(badg == 0, "step %d: averaged gradient differs from the explicit gather at %zu coordinates", t, badg);
        CHECK(support >= K && (N == 1 || t == 1 || support > K), "step %d: union support %zu, K %llu: no fill-in with %d ranks", t,
              support, (unsigned long long)K, N);
        CHECK(same_everywhere(fnv(m.p, P * 4)), "step %d: params differ across ranks", t);
        CHECK(same_everywhere(fnv(distopt_moment(d), P * 4)), "step %d: m differs across ranks", t);
    }
    distopt_free(d);
    free(c); free(s); free(gh); free(eprev); free(g); free(allc); free(allm);
    toy_free(&m);
}

/* --scape-mask-coding auto: the coded mask all-gather changes no bit of the training (params, m, r and both masks
 * after every step equal those of the 1-bit all-gather, on any number of ranks), and its bytes are counted once,
 * when the next step collects the mask: the coded segments' lengths plus 8 bytes a rank, never more than the
 * bitmask plus those headers. Density 0.01 with a warm-up, so raw, Rice and XOR segments all occur. */
TEST(coded_masks_change_no_bit_and_count_their_bytes) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    size_t P = a.tab.total;
    DistConfig plain = sparse_config(), coded = sparse_config();
    plain.density = coded.density = 0.01f;
    coded.mask_coding = 1;
    DistOptim *da = distopt_create(&a.tab, a.p, a.g, &plain), *db = distopt_create(&b.tab, b.p, b.g, &coded);
    CommStats k[COMM_NKINDS];
    comm_stats_take_kind(k);
    for (int t = 1; t <= 9; t++) {
        /* each step's next mask is collected right away (distopt_mask(., 1)), so its bytes fall in the same step */
        train_step(da, &a, t);
        const uint8_t *na = distopt_mask(da, 1);
        comm_stats_take_kind(k);
        uint64_t plain_gather = k[COMM_ALLGATHER].bytes_sent;
        train_step(db, &b, t);
        const uint8_t *nb = distopt_mask(db, 1);
        comm_stats_take_kind(k);
        uint64_t coded_gather = k[COMM_ALLGATHER].bytes_sent;
        CHECK(memcmp(a.p, b.p, P * 4) == 0, "step %d: params differ (max rel %g)", t, max_rel_diff(a.p, b.p, P));
        CHECK(memcmp(distopt_moment(da), distopt_moment(db), P * 4) == 0, "step %d: m differs", t);
        CHECK(memcmp(distopt_residual(da), distopt_residual(db), P * 4) == 0, "step %d: r differs", t);
        CHECK(memcmp(distopt_mask(da, 0), distopt_mask(db, 0), mask_bytes(P)) == 0, "step %d: current mask differs", t);
        CHECK(na && nb && memcmp(na, nb, mask_bytes(P)) == 0, "step %d: next mask differs", t);
        uint64_t bound = (mask_bytes(P) + (uint64_t)N * 9) * (uint64_t)(N - 1) / (uint64_t)N;
        /* step 1 makes M_1 and M_2 (both collected within it): allow twice */
        CHECK(coded_gather <= (t == 1 ? 2 : 1) * bound, "step %d: coded mask all-gather %llu bytes, bound %llu (1-bit: %llu)", t,
              (unsigned long long)coded_gather, (unsigned long long)bound, (unsigned long long)plain_gather);
        CHECK(N == 1 || coded_gather > 0, "step %d: the coded all-gather was not counted", t);
    }
    distopt_free(da);
    distopt_free(db);
    toy_free(&a);
    toy_free(&b);
}

static DistConfig coded_config(void) {
    DistConfig c = sparse_config();
    c.density = 0.01f;
    c.mask_coding = 1;
    return c;
}

/* SCAPE.md 9.8 at the dist level: save after step 3, resume into a fresh optimizer, continue == uninterrupted */
static void save_resume_case(const char *test_name_, DistConfig cfg) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    size_t P = a.tab.total;
    DistOptim *d = distopt_create(&a.tab, a.p, a.g, &cfg);
    for (int t = 1; t <= 3; t++) train_step(d, &a, t);
    size_t nbytes = distopt_state_bytes(d);
    void *blob = xmalloc(nbytes, "blob");
    distopt_save(d, blob);
    memcpy(b.p, a.p, P * 4);
    for (int t = 4; t <= 7; t++) train_step(d, &a, t);
    DistOptim *e = distopt_create(&b.tab, b.p, b.g, &cfg);
    const void *blobs[1] = {blob};
    distopt_load(e, blobs, &nbytes, 1);
    for (int t = 4; t <= 7; t++) train_step(e, &b, t);
    CHECK(memcmp(a.p, b.p, P * 4) == 0, "params after resume differ (max rel %g)", max_rel_diff(a.p, b.p, P));
    if (cfg.opt.kind == OPT_TOPK_EF || cfg.opt.kind == OPT_POWERSGD || cfg.opt.kind == OPT_ONEBIT_ADAM ||
        cfg.opt.kind == OPT_DEMO)
        CHECK(memcmp(distopt_residual(d), distopt_residual(e), P * 4) == 0, "error feedback after resume differs");
    if (cfg.opt.kind == OPT_ONEBIT_ADAM)
        CHECK(memcmp(distopt_onebit_server_error(d), distopt_onebit_server_error(e), P * 4) == 0,
              "1-bit Adam's server error after resume differs");
    if (cfg.opt.kind == OPT_POWERSGD) {
        size_t n1, n2;
        const float *q1 = distopt_powersgd_q(d, &n1), *q2 = distopt_powersgd_q(e, &n2);
        CHECK(n1 == n2 && memcmp(q1, q2, n1 * 4) == 0, "PowerSGD's Q after resume differs");
    }
    if (cfg.opt.kind == OPT_SCAPE) {
        CHECK(memcmp(distopt_residual(d), distopt_residual(e), P * 4) == 0, "residual after resume differs");
        CHECK(memcmp(distopt_mask(d, 1), distopt_mask(e, 1), mask_bytes(P)) == 0, "next mask after resume differs");
    }
    if (!cfg.zero && cfg.opt.kind != OPT_DEMO) /* DeMo's only moment is each rank's delta, the residual above */
        CHECK(memcmp(distopt_moment(d), distopt_moment(e), P * 4) == 0, "m after resume differs");
    distopt_free(d);
    distopt_free(e);
    free(blob);
    toy_free(&a);
    toy_free(&b);
}

TEST(inv8_scape_save_resume_continues_bit_identically) { save_resume_case(test_name_, sparse_config()); }
TEST(scape_bf16_payload_save_resume_continues_bit_identically) { save_resume_case(test_name_, bf16_config()); }
TEST(scape_coded_masks_save_resume_continues_bit_identically) { save_resume_case(test_name_, coded_config()); }
TEST(topk_ef_save_resume_continues_bit_identically) { save_resume_case(test_name_, topk_config()); }
TEST(dense_adamw_zero1_save_resume_continues_bit_identically) {
    DistConfig c = config(OPT_ADAMW);
    c.zero = 1;
    save_resume_case(test_name_, c);
}

/* SCAPE.md 9.9: N ranks x B == 1 rank x N*B. The reference is computed on this rank alone with optim.c on the
 * full batch's gradient, no communication. */
static void dense_vs_full_batch(const char *test_name_, OptimizerKind kind, int zero) {
    Toy a, ref;
    toy_build(&a);
    toy_build(&ref);
    size_t P = a.tab.total;
    DistConfig cfg = config(kind);
    cfg.zero = zero;
    cfg.clip = 1e9f;
    DistOptim *d = distopt_create(&a.tab, a.p, a.g, &cfg);
    float *m = xcalloc(P, 4, "m"), *v = xcalloc(P, 4, "v");
    for (int t = 1; t <= 5; t++) {
        train_step(d, &a, t);
        toy_grad(&ref, ref.g, t, 0, N * B);
        if (kind == OPT_ADAMW) adamw_update(&ref.tab, ref.p, ref.g, m, v, 0, P, t, LR, &cfg.opt);
        else adams_update(&ref.tab, ref.p, ref.g, m, 0, P, t, LR, &cfg.opt);
    }
    float e = max_rel_diff(a.p, ref.p, P);
    CHECK(e < 2e-5f, "params differ from the 1-rank full-batch reference by rel %g (want < 2e-5)", e);
    CHECK(same_everywhere(fnv(a.p, P * 4)), "params differ across ranks");
    distopt_free(d);
    free(m); free(v);
    toy_free(&a);
    toy_free(&ref);
}

TEST(inv9_dense_adamw_n_ranks_equals_one_rank_full_batch) { dense_vs_full_batch(test_name_, OPT_ADAMW, 0); }
TEST(inv9_dense_adams_n_ranks_equals_one_rank_full_batch) { dense_vs_full_batch(test_name_, OPT_ADAMS, 0); }
TEST(zero1_adamw_equals_one_rank_full_batch_and_no_zero) {
    dense_vs_full_batch(test_name_, OPT_ADAMW, 1);
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    DistConfig c0 = config(OPT_ADAMW), c1 = config(OPT_ADAMW);
    c1.zero = 1;
    DistOptim *d0 = distopt_create(&a.tab, a.p, a.g, &c0), *d1 = distopt_create(&b.tab, b.p, b.g, &c1);
    CommStats k[COMM_NKINDS];
    for (int t = 1; t <= 4; t++) {
        train_step(d0, &a, t);
        comm_stats_take_kind(k);
        train_step(d1, &b, t);
        comm_stats_take_kind(k);
        CHECK(k[COMM_REDUCE_SCATTER].calls == (uint64_t)b.tab.num_buckets && k[COMM_ALLGATHER].calls == 1 && k[COMM_ALLREDUCE].calls == 0,
              "ZeRO step %d: %llu reduce-scatters, %llu all-gathers, %llu all-reduces; expected one per bucket, 1, 0", t,
              (unsigned long long)k[COMM_REDUCE_SCATTER].calls, (unsigned long long)k[COMM_ALLGATHER].calls, (unsigned long long)k[COMM_ALLREDUCE].calls);
    }
    float e = max_rel_diff(a.p, b.p, a.tab.total);
    CHECK(e < 1e-6f, "ZeRO-1 params differ from no-ZeRO by rel %g", e);
    distopt_free(d0);
    distopt_free(d1);
    toy_free(&a);
    toy_free(&b);
}

/* A non-finite gradient skips the step and leaves params and every piece of optimizer state unchanged. */
static void skip_case(const char *test_name_, DistConfig cfg) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    for (int t = 1; t <= 2; t++) train_step(d, &m, t);
    size_t nb = distopt_state_bytes(d);
    void *s0 = xmalloc(nb, "s0"), *s1 = xmalloc(nb, "s1");
    float *p0 = xmalloc(P * 4, "p0");
    distopt_save(d, s0);
    memcpy(p0, m.p, P * 4);
    toy_grad(&m, m.g, 3, R * B, B);
    m.g[P / 2] = NAN; /* on every rank: the reduced value is NaN everywhere */
    for (int b = 0; b < m.tab.num_buckets; b++) distopt_bucket_ready(d, b);
    float gn;
    int skipped = distopt_step(d, 3, LR, &gn);
    CHECK(skipped == 1 && !isfinite(gn), "expected a skip with a non-finite norm, got %d, %g", skipped, gn);
    CHECK(distopt_state_bytes(d) == nb, "state size changed on skip");
    distopt_save(d, s1);
    CHECK(memcmp(s0, s1, nb) == 0 && memcmp(p0, m.p, P * 4) == 0, "params or optimizer state changed by a skipped step");
    CHECK(train_step(d, &m, 3) == 0, "the step after a skip did not run");
    distopt_free(d);
    free(s0); free(s1); free(p0);
    toy_free(&m);
}

TEST(nonfinite_gradient_skips_scape_step_unchanged) { skip_case(test_name_, sparse_config()); }
TEST(nonfinite_gradient_skips_adamw_step_unchanged) { skip_case(test_name_, config(OPT_ADAMW)); }
TEST(nonfinite_gradient_skips_topk_ef_step_unchanged) { skip_case(test_name_, topk_config()); }
TEST(nonfinite_gradient_skips_scape_bf16_step_unchanged) { skip_case(test_name_, bf16_config()); }

/* ---- SCAPE with ZeRO-1 (optim/dist_scape_zero.c) against the unsharded step ---- */

static DistConfig zero_config(void) {
    DistConfig c = sparse_config();
    c.zero = 1;
    return c;
}

/* Equal, bit for bit on 1 and 2 ranks (two summands add the same either way); on more ranks the reduce-scatter
 * may add a coordinate's N payload values in another order than the all-reduce does: within 1e-6 relative. */
static int zero_equal(const float *a, const float *b, size_t n) {
    return N <= 2 ? memcmp(a, b, n * sizeof(float)) == 0 : max_rel_diff(a, b, n) < 1e-6f;
}

/* 8 steps through the density warm-up, the clip active: the sharded step gives the unsharded step's params, m,
 * residual and masks, identical on every rank, with one reduce-scatter per bucket of the K payload values, the
 * mask all-gather and two all-gathers of K values (m_t, p), no all-reduce and no dense parameter all-gather; each
 * rank holds m for its own slices only. */
TEST(scape_zero1_equals_unsharded_with_sharded_m_and_formula_bytes) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    size_t P = a.tab.total;
    DistConfig c0 = sparse_config(), c1 = zero_config();
    DistOptim *d0 = distopt_create(&a.tab, a.p, a.g, &c0), *d1 = distopt_create(&b.tab, b.p, b.g, &c1);
    uint64_t seg = 0;
    for (int r = 0; r < N; r++) {
        size_t lo, hi;
        distopt_owner_range(d1, r, &lo, &hi);
        seg += mask_bytes(hi - lo);
    }
    CommStats k[COMM_NKINDS];
    for (int t = 1; t <= 8; t++) {
        train_step(d0, &a, t);
        comm_stats_take_kind(k);
        train_step(d1, &b, t);
        comm_stats_take_kind(k);
        uint64_t K = mask_count(distopt_mask(d1, 0), 0, P), n1 = (uint64_t)(N - 1), nn = (uint64_t)N;
        uint64_t rs = 4 * K * n1 / nn, ag = seg * n1 / nn + 2 * (4 * K * n1 / nn);
        CHECK(k[COMM_REDUCE_SCATTER].calls == (uint64_t)a.tab.num_buckets && k[COMM_ALLREDUCE].calls == 0,
              "step %d: %llu reduce-scatters, %llu all-reduces; expected one per bucket (%d), 0", t,
              (unsigned long long)k[COMM_REDUCE_SCATTER].calls, (unsigned long long)k[COMM_ALLREDUCE].calls, a.tab.num_buckets);
        /* each call's count is rounded: within a byte per call of the formula */
        CHECK(k[COMM_REDUCE_SCATTER].bytes_sent <= rs + (uint64_t)a.tab.num_buckets && k[COMM_REDUCE_SCATTER].bytes_sent + (uint64_t)a.tab.num_buckets >= rs,
              "step %d: payload reduce-scatter sent %llu bytes, formula 4 K (N-1)/N = %llu", t,
              (unsigned long long)k[COMM_REDUCE_SCATTER].bytes_sent, (unsigned long long)rs);
        CHECK(k[COMM_ALLGATHER].calls == 3 && k[COMM_ALLGATHER].bytes_recv <= ag + 3 && k[COMM_ALLGATHER].bytes_recv + 3 >= ag,
              "step %d: %llu all-gathers of %llu bytes; expected 3 (mask, m_t, p) of %llu", t,
              (unsigned long long)k[COMM_ALLGATHER].calls, (unsigned long long)k[COMM_ALLGATHER].bytes_recv, (unsigned long long)ag);
        CHECK(memcmp(distopt_mask(d0, 0), distopt_mask(d1, 0), mask_bytes(P)) == 0, "step %d: M_t differs", t);
        CHECK(memcmp(distopt_mask(d0, 1), distopt_mask(d1, 1), mask_bytes(P)) == 0, "step %d: M_{t+1} differs", t);
        CHECK(zero_equal(b.p, a.p, P), "step %d: params differ from unsharded (max rel %g)", t, max_rel_diff(b.p, a.p, P));
        CHECK(zero_equal(distopt_moment(d1), distopt_moment(d0), P), "step %d: m differs from unsharded", t);
        CHECK(zero_equal(distopt_residual(d1), distopt_residual(d0), P), "step %d: residual differs from unsharded", t);
        CHECK(same_everywhere(fnv(b.p, P * 4)), "step %d: params differ across ranks", t);
        if (t > 4) CHECK(K < P, "step %d: K = P after the warm-up", t);
    }
    size_t m0 = distopt_state_memory(d0), m1 = distopt_state_memory(d1);
    CHECK(N == 1 ? m1 == m0 : m1 < m0, "state memory %zu with ZeRO-1, %zu without: the sharded m should be smaller", m1, m0);
    distopt_free(d0);
    distopt_free(d1);
    toy_free(&a);
    toy_free(&b);
}

/* Checkpoints keep the unsharded layout: saved with or without ZeRO-1 after step 3, loaded into the other, the run
 * continues as the uninterrupted unsharded one. */
static void zero_cross_resume(const char *test_name_, int save_zero) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    size_t P = a.tab.total;
    DistConfig cs = save_zero ? zero_config() : sparse_config(), cl = save_zero ? sparse_config() : zero_config();
    DistConfig cref = sparse_config();
    DistOptim *d = distopt_create(&a.tab, a.p, a.g, &cs);
    for (int t = 1; t <= 3; t++) train_step(d, &a, t);
    size_t nbytes = distopt_state_bytes(d);
    void *blob = xmalloc(nbytes, "blob");
    distopt_save(d, blob);
    memcpy(b.p, a.p, P * 4);
    distopt_free(d);
    /* the reference continues unsharded from the same state */
    Toy c;
    toy_build(&c);
    memcpy(c.p, a.p, P * 4);
    const void *blobs[1] = {blob};
    DistOptim *ref = distopt_create(&c.tab, c.p, c.g, &cref), *e = distopt_create(&b.tab, b.p, b.g, &cl);
    distopt_load(ref, blobs, &nbytes, 1);
    distopt_load(e, blobs, &nbytes, 1);
    for (int t = 4; t <= 8; t++) {
        train_step(ref, &c, t);
        train_step(e, &b, t);
    }
    CHECK(zero_equal(b.p, c.p, P), "params after the cross-layout resume differ (max rel %g)", max_rel_diff(b.p, c.p, P));
    CHECK(zero_equal(distopt_residual(e), distopt_residual(ref), P), "residual after the cross-layout resume differs");
    CHECK(zero_equal(distopt_moment(e), distopt_moment(ref), P), "m after the cross-layout resume differs");
    CHECK(memcmp(distopt_mask(e, 1), distopt_mask(ref, 1), mask_bytes(P)) == 0, "next mask after the cross-layout resume differs");
    distopt_free(ref);
    distopt_free(e);
    free(blob);
    toy_free(&a);
    toy_free(&b);
    toy_free(&c);
}

TEST(scape_zero1_save_resume_continues_bit_identically) { save_resume_case(test_name_, zero_config()); }

static DistConfig zero_bf16_config(void) {
    DistConfig c = bf16_config();
    c.zero = 1;
    return c;
}

/* With the bf16 payload the owners round the mean as the all-reduce does, but the rounding error goes to the owner
 * rather than to the all-reduce part's rank: on one rank the runs are identical, on more the mean residual is (the
 * conservation test above) and the parameters stay within bf16 rounding of the unsharded run's. */
TEST(scape_zero1_bf16_payload_tracks_unsharded) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    size_t P = a.tab.total;
    DistConfig c0 = bf16_config(), c1 = zero_bf16_config();
    DistOptim *d0 = distopt_create(&a.tab, a.p, a.g, &c0), *d1 = distopt_create(&b.tab, b.p, b.g, &c1);
    for (int t = 1; t <= 8; t++) {
        train_step(d0, &a, t);
        train_step(d1, &b, t);
        if (N == 1) {
            CHECK(memcmp(a.p, b.p, P * 4) == 0, "step %d: params differ on one rank", t);
            CHECK(memcmp(distopt_residual(d0), distopt_residual(d1), P * 4) == 0, "step %d: residual differs on one rank", t);
        }
        CHECK(same_everywhere(fnv(b.p, P * 4)), "step %d: params differ across ranks", t);
    }
    double dp = 0, np = 0;
    for (size_t j = 0; j < P; j++) {
        dp += ((double)a.p[j] - b.p[j]) * ((double)a.p[j] - b.p[j]);
        np += (double)a.p[j] * a.p[j];
    }
    CHECK(sqrt(dp / np) < 2e-3, "after 8 steps params differ from unsharded bf16 by relative L2 %g (want < 2e-3)", sqrt(dp / np));
    distopt_free(d0);
    distopt_free(d1);
    toy_free(&a);
    toy_free(&b);
}
TEST(scape_zero1_bf16_save_resume_continues_bit_identically) { save_resume_case(test_name_, zero_bf16_config()); }
TEST(nonfinite_gradient_skips_scape_zero1_bf16_step_unchanged) { skip_case(test_name_, zero_bf16_config()); }
TEST(scape_zero1_checkpoint_resumes_unsharded) { zero_cross_resume(test_name_, 1); }
TEST(scape_unsharded_checkpoint_resumes_with_zero1) { zero_cross_resume(test_name_, 0); }
TEST(nonfinite_gradient_skips_scape_zero1_step_unchanged) { skip_case(test_name_, zero_config()); }

/* ---- mask-stability statistics (dist.h, DistMaskStats) against a direct recomputation here ---- */

static double ref_jaccard(const uint8_t *a, const uint8_t *b, size_t lo, size_t hi) {
    size_t in = 0, un = 0;
    for (size_t j = lo; j < hi; j++) {
        in += mask_get(a, j) && mask_get(b, j);
        un += mask_get(a, j) || mask_get(b, j);
    }
    return un ? (double)in / (double)un : 1.0;
}

static double ref_energy(const uint8_t *M, const float *x, size_t lo, size_t hi) {
    double k = 0, a = 0;
    for (size_t j = lo; j < hi; j++) {
        a += (double)x[j] * x[j];
        if (mask_get(M, j)) k += (double)x[j] * x[j];
    }
    return a > 0 ? k / a : 1.0;
}

static int close_or_both_nan(double a, double b) { return (isnan(a) && isnan(b)) || fabs(a - b) <= 1e-12; }

static void mask_stats_case(const char *test_name_, DistConfig cfg) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total, MB = mask_bytes(P);
    int scape = cfg.opt.kind == OPT_SCAPE;
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    float *c = xmalloc(P * 4, "c"), *g = xmalloc(P * 4, "g");
    uint8_t *mprev = xcalloc(MB, 1, "mprev"), *gprev = xcalloc(MB, 1, "gprev"), *gcur = xcalloc(MB, 1, "gcur");
    uint32_t *tmp = xmalloc(P * 4, "tmp");
    distopt_debug_capture(d, c, NULL, NULL);
    for (int t = 1; t <= 6; t++) {
        int on = t != 3; /* step 3 off: step 4's Jaccard of the raw masks has no previous mask */
        distopt_mask_stats_enable(d, on);
        toy_grad(&m, m.g, t, R * B, B);
        memcpy(g, m.g, P * 4);
        for (int b = 0; b < m.tab.num_buckets; b++) distopt_bucket_ready(d, b);
        float gn;
        CHECK(distopt_step(d, t, LR, &gn) == 0, "step %d skipped", t);
        const DistMaskStats *st = distopt_mask_stats(d);
        const uint8_t *M = distopt_mask(d, 0);
        if (R != 0 || !on) {
            CHECK(st == NULL, "step %d: statistics on rank %d or while off", t, R);
        } else {
            CHECK(st != NULL && st->step == t, "step %d: no statistics on rank 0", t);
            double dens = dist_density(&cfg, t);
            /* the raw-gradient mask: SCAPE's hypothetical top-k of |g|, topk-ef's selection of |acc| */
            memset(gcur, 0, MB);
            int n = 0;
            double w = 0, mj = 0;
            for (int i = 0; i < m.tab.n; i++) {
                const ParamSlice *sl = &m.tab.slices[i];
                if (sl->dense_only) continue;
                size_t lo = sl->offset, hi = lo + sl->numel;
                if (scape) scape_topk_mask(g + lo, sl->numel, scape_k(dens, sl->numel), gcur, lo, tmp);
                else memcpy(gcur, M, MB);
                const uint8_t *G = scape ? gcur : M;
                const float *x = scape ? g : c;
                double jg = t > 1 && t != 4 ? ref_jaccard(G, gprev, lo, hi) : NAN;
                CHECK(n < st->n && st->slice[n] == i, "step %d: slice list differs at %d", t, n);
                CHECK(close_or_both_nan(st->jaccard_g[n], jg) && close_or_both_nan(st->energy_g[n], ref_energy(G, x, lo, hi)),
                      "step %d slice %s: jaccard_g %g energy_g %g, recomputed %g %g", t, sl->name, st->jaccard_g[n], st->energy_g[n], jg,
                      ref_energy(G, x, lo, hi));
                if (scape) {
                    double jm = t > 1 ? ref_jaccard(M, mprev, lo, hi) : NAN;
                    CHECK(close_or_both_nan(st->jaccard_m[n], jm) && close_or_both_nan(st->energy_m[n], ref_energy(M, c, lo, hi)),
                          "step %d slice %s: jaccard_m %g energy_m %g, recomputed %g %g", t, sl->name, st->jaccard_m[n], st->energy_m[n],
                          jm, ref_energy(M, c, lo, hi));
                    mj += (double)sl->numel * jm;
                }
                w += (double)sl->numel;
                n++;
            }
            CHECK(st->n == n, "step %d: %d slices reported, %d sparse", t, st->n, n);
            if (scape) CHECK(close_or_both_nan(st->mean_jaccard_m, mj / w), "step %d: mean jaccard_m %g, recomputed %g", t, st->mean_jaccard_m, mj / w);
            else CHECK(st->jaccard_m == NULL && isnan(st->mean_jaccard_m), "step %d: topk-ef reports first-moment masks", t);
            if (t > 1 && scape) CHECK(st->mean_jaccard_m > 0 && st->mean_jaccard_m <= 1, "step %d: mean Jaccard %g outside (0, 1]", t, st->mean_jaccard_m);
        }
        memcpy(mprev, M, MB);
        memcpy(gprev, scape ? gcur : M, MB);
    }
    distopt_free(d);
    free(c); free(g); free(mprev); free(gprev); free(gcur); free(tmp);
    toy_free(&m);
}

TEST(mask_stats_scape_equal_direct_recomputation) { mask_stats_case(test_name_, sparse_config()); }
TEST(mask_stats_topk_ef_equal_direct_recomputation) { mask_stats_case(test_name_, topk_config()); }
TEST(mask_stats_scape_zero1_equal_direct_recomputation) { mask_stats_case(test_name_, zero_config()); }

/* ---- SCAPE's same-bytes variants (issue 31; optim/dist_scape.c's header) ---- */

static DistConfig variant_config(int v) {
    DistConfig c = sparse_config();
    c.variant = v;
    if (v == SCAPE_CATCHUP || v == SCAPE_TENSOR_NU) c.variant_cap = 4.0f;
    if (v == SCAPE_RESIDUAL_DECAY) c.residual_decay = 0.8f;
    return c;
}

/* Each variant beside faithful SCAPE on the same data, 7 steps: c is SCAPE's formula bit for bit; the payload and
 * residual account for c (on the mask r = 0 and s = c; off it s = 0 and r = c, or c - (1 - rho) r_old with the
 * decay, bit for bit); params, m and both masks are the same on every rank; the collectives and their bytes are
 * faithful SCAPE's, step by step; and the variant changes the trajectory. */
TEST(variants_keep_conservation_identical_state_and_bytes) {
    for (int v = SCAPE_CATCHUP; v <= SCAPE_RESIDUAL_DECAY; v++) {
        Toy a, m;
        toy_build(&a);
        toy_build(&m);
        size_t P = m.tab.total;
        DistConfig cf = sparse_config(), cfg = variant_config(v);
        DistOptim *f = distopt_create(&a.tab, a.p, a.g, &cf), *d = distopt_create(&m.tab, m.p, m.g, &cfg);
        float *c = xmalloc(P * 4, "c"), *s = xmalloc(P * 4, "s"), *gh = xmalloc(P * 4, "gh");
        float *mprev = xmalloc(P * 4, "mprev"), *rprev = xmalloc(P * 4, "rprev"), *g = xmalloc(P * 4, "g");
        distopt_debug_capture(d, c, s, gh);
        const float b1 = cfg.opt.beta1, omb1 = 1.0f - b1, omr = 1.0f - cfg.residual_decay;
        CommStats kf[COMM_NKINDS], kv[COMM_NKINDS];
        comm_stats_take_kind(kf);
        size_t offmask = 0;
        for (int t = 1; t <= 7; t++) {
            comm_stats_take_kind(kf); /* drops the checks' own collectives of the last step */
            CHECK(train_step(f, &a, t) == 0, "%s: faithful step %d skipped", scape_variant_name(v), t);
            comm_stats_take_kind(kf);
            memcpy(mprev, distopt_moment(d), P * 4);
            memcpy(rprev, distopt_residual(d), P * 4);
            toy_grad(&m, m.g, t, R * B, B);
            memcpy(g, m.g, P * 4);
            for (int b = 0; b < m.tab.num_buckets; b++) distopt_bucket_ready(d, b);
            float gn;
            CHECK(distopt_step(d, t, LR, &gn) == 0, "%s: step %d skipped", scape_variant_name(v), t);
            comm_stats_take_kind(kv);
            const float *r = distopt_residual(d);
            const uint8_t *M = distopt_mask(d, 0);
            size_t badc = 0, bads = 0;
            for (size_t j = 0; j < P; j++) {
                float cj = b1 * mprev[j] + omb1 * g[j] + rprev[j];
                if (memcmp(&cj, &c[j], 4)) badc++;
                float want_r = mask_get(M, j) ? 0.0f : v == SCAPE_RESIDUAL_DECAY ? c[j] - omr * rprev[j] : c[j];
                float want_s = mask_get(M, j) ? c[j] : 0.0f;
                if (memcmp(&want_r, &r[j], 4) || memcmp(&want_s, &s[j], 4)) bads++;
                offmask += !mask_get(M, j);
            }
            CHECK(badc == 0, "%s step %d: %zu coordinates of c differ from beta1 m + (1-beta1) g + r", scape_variant_name(v), t, badc);
            CHECK(bads == 0, "%s step %d: payload or residual does not account for c at %zu coordinates", scape_variant_name(v), t, bads);
            CHECK(same_everywhere(fnv(m.p, P * 4)) && same_everywhere(fnv(distopt_moment(d), P * 4)),
                  "%s step %d: params or m differ across ranks", scape_variant_name(v), t);
            CHECK(same_everywhere(fnv(M, mask_bytes(P))) && same_everywhere(fnv(distopt_mask(d, 1), mask_bytes(P))),
                  "%s step %d: masks differ across ranks", scape_variant_name(v), t);
            for (int k = 0; k < COMM_NKINDS; k++)
                CHECK(kf[k].calls == kv[k].calls && kf[k].bytes_sent == kv[k].bytes_sent && kf[k].bytes_recv == kv[k].bytes_recv,
                      "%s step %d: collective kind %d: %llu calls, %llu bytes sent; faithful SCAPE %llu, %llu",
                      scape_variant_name(v), t, k, (unsigned long long)kv[k].calls, (unsigned long long)kv[k].bytes_sent,
                      (unsigned long long)kf[k].calls, (unsigned long long)kf[k].bytes_sent);
        }
        CHECK(offmask > 0, "%s: no coordinate was ever off the mask: the test checks nothing", scape_variant_name(v));
        CHECK(memcmp(a.p, m.p, P * 4) != 0, "%s: params equal faithful SCAPE's after 7 steps: the variant changes nothing",
              scape_variant_name(v));
        distopt_free(f);
        distopt_free(d);
        free(c); free(s); free(gh); free(mprev); free(rprev); free(g);
        toy_free(&a);
        toy_free(&m);
    }
}

/* SCAPE.md 9.1 for the variants: at density 1 no coordinate enters the mask and none is off it, so each variant is
 * faithful SCAPE bit for bit (and so dense AdamS, inv1) */
TEST(variants_at_density_one_are_faithful_scape_bit_for_bit) {
    for (int v = SCAPE_CATCHUP; v <= SCAPE_RESIDUAL_DECAY; v++) {
        Toy a, b;
        toy_build(&a);
        toy_build(&b);
        DistConfig cf = config(OPT_SCAPE), cv = cf;
        cv.variant = v;
        cv.variant_cap = v == SCAPE_RESIDUAL_DECAY ? 0.0f : 4.0f;
        cv.residual_decay = v == SCAPE_RESIDUAL_DECAY ? 0.5f : 0.0f;
        cf.clip = cv.clip = 5.0f;
        DistOptim *df = distopt_create(&a.tab, a.p, a.g, &cf), *dv = distopt_create(&b.tab, b.p, b.g, &cv);
        for (int t = 1; t <= 6; t++) {
            train_step(df, &a, t);
            train_step(dv, &b, t);
        }
        CHECK(memcmp(a.p, b.p, a.tab.total * 4) == 0 && memcmp(distopt_moment(df), distopt_moment(dv), a.tab.total * 4) == 0,
              "%s at density 1: params (max rel %g) or m differ from faithful SCAPE's", scape_variant_name(v),
              max_rel_diff(b.p, a.p, a.tab.total));
        distopt_free(df);
        distopt_free(dv);
        toy_free(&a);
        toy_free(&b);
    }
}

TEST(variant_catchup_save_resume_continues_bit_identically) { save_resume_case(test_name_, variant_config(SCAPE_CATCHUP)); }
TEST(variant_tensor_nu_save_resume_continues_bit_identically) { save_resume_case(test_name_, variant_config(SCAPE_TENSOR_NU)); }
TEST(variant_residual_decay_save_resume_continues_bit_identically) {
    save_resume_case(test_name_, variant_config(SCAPE_RESIDUAL_DECAY));
}

/* ---- PowerSGD (issue 33; optim/dist_powersgd.c) ---- */

enum { PSGD_START = 2 }; /* psgd_config's --powersgd-start */
static DistConfig psgd_config(void) {
    DistConfig c = config(OPT_POWERSGD);
    set_option(&c, "powersgd-rank", "2");
    set_option(&c, "powersgd-start", "2");
    set_option(&c, "powersgd-min-compression", "2");
    c.clip = 5.0f;
    return c;
}

/* Ranks in sync (params, AdamW's m and v, Q) and the collectives of the formula in dist_powersgd.c's header: in the
 * dense phase one all-reduce per bucket of the whole gradient; then also one of every Q, with K_P + K_Q values. */
TEST(powersgd_ranks_identical_and_formula_bytes) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = psgd_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    size_t kp = 0, kq = 0, ncomp = 0;
    for (int i = 0; i < m.tab.n; i++) {
        const ParamSlice *s = &m.tab.slices[i];
        size_t n = s->shape[0], mm = s->numel / n, r = 2;
        int comp = s->ndim == 2 && (double)n * (double)mm >= 2.0 * (double)r * (double)(n + mm);
        kp += comp ? n * r : s->numel;
        kq += comp ? mm * r : 0;
        ncomp += comp;
    }
    CHECK(ncomp > 0 && ncomp < (size_t)m.tab.n, "the toy compresses %zu of %d slices: the test needs both kinds", ncomp, m.tab.n);
    size_t nq;
    CHECK(distopt_powersgd_q(d, &nq) && nq == kq, "Q holds %zu values, the formula %zu", nq, kq);
    CommStats k[COMM_NKINDS];
    for (int t = 1; t <= 6; t++) {
        comm_stats_take_kind(k);
        CHECK(train_step(d, &m, t) == 0, "step %d skipped", t);
        comm_stats_take_kind(k);
        int comp = t > PSGD_START;
        uint64_t K = comp ? kp + kq : P, calls = (uint64_t)m.tab.num_buckets + (comp && kq ? 1 : 0);
        uint64_t want = 2ull * 4 * K * (uint64_t)(N - 1) / (uint64_t)N;
        CHECK(k[COMM_ALLREDUCE].calls == calls && k[COMM_ALLREDUCE].bytes_sent == want,
              "step %d: %llu all-reduces of %llu bytes, expected %llu of %llu", t, (unsigned long long)k[COMM_ALLREDUCE].calls,
              (unsigned long long)k[COMM_ALLREDUCE].bytes_sent, (unsigned long long)calls, (unsigned long long)want);
        CHECK(k[COMM_ALLGATHER].calls == 0 && k[COMM_REDUCE_SCATTER].calls == 0, "step %d: unexpected collectives", t);
        const float *q = distopt_powersgd_q(d, &nq);
        CHECK(same_everywhere(fnv(m.p, P * 4)) && same_everywhere(fnv(distopt_moment(d), P * 4)) &&
              same_everywhere(fnv(q, nq * 4)), "step %d: params, m or Q differ across ranks", t);
        if (comp) {
            size_t nz = 0;
            const float *e = distopt_residual(d);
            for (size_t j = 0; j < P; j++) nz += e[j] != 0.0f;
            CHECK(nz > 0, "step %d: the error feedback is all zero: nothing was compressed", t);
        }
    }
    distopt_free(d);
    toy_free(&m);
}

/* At full rank (r >= min(n, m), every matrix compressed) P Q^T = P P^T mean_i M_i = mean_i M_i, so PowerSGD is AdamW
 * on the mean gradient up to float rounding, and the error feedback's mean over the ranks stays at rounding size. */
TEST(powersgd_full_rank_is_adamw) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    DistConfig cp = psgd_config(), ca = config(OPT_ADAMW);
    set_option(&cp, "powersgd-rank", "20");
    set_option(&cp, "powersgd-min-compression", "0");
    set_option(&cp, "powersgd-start", "0");
    cp.clip = ca.clip = 5.0f;
    DistOptim *dp = distopt_create(&a.tab, a.p, a.g, &cp), *da = distopt_create(&b.tab, b.p, b.g, &ca);
    for (int t = 1; t <= 6; t++) {
        train_step(dp, &a, t);
        train_step(da, &b, t);
    }
    float e = max_rel_diff(a.p, b.p, a.tab.total);
    /* e_i = M_i - mean_i M_i: each rank's own deviation, whose mean over the ranks is rounding-sized */
    float *r = xmalloc(a.tab.total * 4, "e");
    memcpy(r, distopt_residual(dp), a.tab.total * 4);
    comm_wait(comm_iallreduce_avg_f32(r, a.tab.total));
    float emax = 0;
    for (size_t j = 0; j < a.tab.total; j++) emax = fmaxf(emax, fabsf(r[j]));
    free(r);
    CHECK(e < 1e-4f, "full-rank PowerSGD's params differ from AdamW's by rel %g after 6 steps (want < 1e-4)", e);
    CHECK(emax < 1e-3f, "full-rank PowerSGD's error feedback averages to %g over the ranks (want rounding size, < 1e-3)", emax);
    distopt_free(dp);
    distopt_free(da);
    toy_free(&a);
    toy_free(&b);
}

TEST(powersgd_save_resume_continues_bit_identically) { save_resume_case(test_name_, psgd_config()); }
TEST(nonfinite_gradient_skips_powersgd_step_unchanged) { skip_case(test_name_, psgd_config()); }

/* ---- 1-bit Adam (issue 33; optim/dist_onebit_adam.c) ---- */

enum { ONEBIT_FREEZE = 2 }; /* onebit_config's --onebit-freeze */
static DistConfig onebit_config(void) {
    DistConfig c = config(OPT_ONEBIT_ADAM);
    set_option(&c, "onebit-freeze", "2");
    c.clip = 5.0f;
    return c;
}

/* Ranks in sync (params, m) and the collectives of the header's formula: in the warm-up one averaging all-reduce per
 * bucket of the whole gradient; then one all-to-all (counted as a reduce-scatter) and one all-gather of N blocks of
 * Bk = 4 S + sum_s ceil(n_s / 8N) bytes each, Bk (N-1) bytes sent by each, and no all-reduce; the worker error is
 * nonzero once compression runs, and the server error lives on this rank's chunks only. */
TEST(onebit_ranks_identical_and_formula_bytes) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = onebit_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    size_t bk = 4 * (size_t)m.tab.n;
    for (int i = 0; i < m.tab.n; i++) bk += (m.tab.slices[i].numel + 8 * (size_t)N - 1) / (8 * (size_t)N);
    CHECK(distopt_onebit_block_bytes(d) == bk, "block of %zu bytes, the formula %zu", distopt_onebit_block_bytes(d), bk);
    CommStats k[COMM_NKINDS];
    for (int t = 1; t <= 6; t++) {
        comm_stats_take_kind(k);
        CHECK(train_step(d, &m, t) == 0, "step %d skipped", t);
        comm_stats_take_kind(k);
        int comp = t > ONEBIT_FREEZE;
        uint64_t ar_calls = comp ? 0 : (uint64_t)m.tab.num_buckets, ar = comp ? 0 : 2ull * 4 * P * (uint64_t)(N - 1) / (uint64_t)N;
        uint64_t one = comp ? (uint64_t)bk * (uint64_t)(N - 1) : 0;
        CHECK(k[COMM_ALLREDUCE].calls == ar_calls && k[COMM_ALLREDUCE].bytes_sent == ar,
              "step %d: %llu all-reduces of %llu bytes, expected %llu of %llu", t, (unsigned long long)k[COMM_ALLREDUCE].calls,
              (unsigned long long)k[COMM_ALLREDUCE].bytes_sent, (unsigned long long)ar_calls, (unsigned long long)ar);
        CHECK(k[COMM_REDUCE_SCATTER].calls == (uint64_t)comp && k[COMM_REDUCE_SCATTER].bytes_sent == one &&
              k[COMM_ALLGATHER].calls == (uint64_t)comp && k[COMM_ALLGATHER].bytes_sent == one,
              "step %d: all-to-all %llu calls %llu bytes, all-gather %llu calls %llu bytes, expected %d of %llu each", t,
              (unsigned long long)k[COMM_REDUCE_SCATTER].calls, (unsigned long long)k[COMM_REDUCE_SCATTER].bytes_sent,
              (unsigned long long)k[COMM_ALLGATHER].calls, (unsigned long long)k[COMM_ALLGATHER].bytes_sent, comp,
              (unsigned long long)one);
        CHECK(same_everywhere(fnv(m.p, P * 4)) && same_everywhere(fnv(distopt_moment(d), P * 4)),
              "step %d: params or m differ across ranks", t);
        size_t nz = 0, off_chunks = 0;
        const float *e = distopt_residual(d), *es = distopt_onebit_server_error(d);
        for (size_t j = 0; j < P; j++) nz += e[j] != 0.0f;
        for (int i = 0; i < m.tab.n; i++) {
            const ParamSlice *s = &m.tab.slices[i];
            size_t chunk = (s->numel + 8 * (size_t)N - 1) / (8 * (size_t)N) * 8;
            for (size_t j = 0; j < s->numel; j++) off_chunks += j / chunk != (size_t)R && es[s->offset + j] != 0.0f;
        }
        CHECK(comp ? nz > 0 : nz == 0, "step %d: %zu nonzero worker errors (compression %s)", t, nz, comp ? "on" : "off");
        CHECK(off_chunks == 0, "step %d: %zu server errors off this rank's chunks", t, off_chunks);
    }
    distopt_free(d);
    toy_free(&m);
}

/* Until the freeze 1-bit Adam is AdamW, bit for bit (the same all-reduces, clip and adamw_update). */
TEST(onebit_warmup_is_adamw_bitwise) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    DistConfig co = onebit_config(), ca = config(OPT_ADAMW);
    set_option(&co, "onebit-freeze", "100");
    ca.clip = co.clip;
    DistOptim *dd = distopt_create(&a.tab, a.p, a.g, &co), *da = distopt_create(&b.tab, b.p, b.g, &ca);
    for (int t = 1; t <= 6; t++) {
        train_step(dd, &a, t);
        train_step(da, &b, t);
    }
    CHECK(memcmp(a.p, b.p, a.tab.total * 4) == 0 && memcmp(distopt_moment(dd), distopt_moment(da), a.tab.total * 4) == 0,
          "1-bit Adam's warm-up differs from AdamW (max rel %g)", max_rel_diff(a.p, b.p, a.tab.total));
    distopt_free(dd);
    distopt_free(da);
    toy_free(&a);
    toy_free(&b);
}

TEST(onebit_save_resume_continues_bit_identically) { save_resume_case(test_name_, onebit_config()); }
TEST(nonfinite_gradient_skips_onebit_step_unchanged) { skip_case(test_name_, onebit_config()); }
TEST(nonfinite_gradient_skips_onebit_warmup_step_unchanged) {
    DistConfig c = onebit_config();
    set_option(&c, "onebit-freeze", "5");
    skip_case(test_name_, c);
}

/* ---- DeMo (issue 33; optim/dist_demo.c) ---- */

static DistConfig demo_config(void) {
    DistConfig c = config(OPT_DEMO);
    set_option(&c, "demo-chunk", "8");
    set_option(&c, "demo-topk", "3");
    set_option(&c, "demo-decay", "0.999");
    c.clip = 5.0f;
    return c;
}

/* the block side of the header: the largest divisor of n not above s */
static size_t demo_side(size_t n, size_t s) {
    size_t b = n <= s ? n : s;
    while (n % b) b--;
    return b;
}

/* Ranks in sync (params), every rank's own momentum, and one all-gather per step of N K pairs of 8 bytes, K = sum over
 * blocks of min(k, |B|) with the header's blocks; the step moves parameters by lr (sign) plus weight decay only. */
TEST(demo_ranks_identical_and_formula_bytes) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = demo_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    size_t K = 0;
    for (int i = 0; i < m.tab.n; i++) {
        const ParamSlice *s = &m.tab.slices[i];
        size_t rows = s->ndim >= 2 ? s->shape[0] : s->numel, cols = s->ndim >= 2 ? s->numel / s->shape[0] : 1;
        size_t br = demo_side(rows, 8), bc = demo_side(cols, 8), n = br * bc;
        K += rows / br * (cols / bc) * (n < 3 ? n : 3);
    }
    CHECK(distopt_demo_count(d) == K, "%zu pairs per rank, the formula %zu", distopt_demo_count(d), K);
    CommStats k[COMM_NKINDS];
    float *before = xmalloc(P * 4, "params before");
    for (int t = 1; t <= 5; t++) {
        memcpy(before, m.p, P * 4);
        comm_stats_take_kind(k);
        CHECK(train_step(d, &m, t) == 0, "step %d skipped", t);
        comm_stats_take_kind(k);
        uint64_t want = 8ull * K * (uint64_t)(N - 1);
        CHECK(k[COMM_ALLGATHER].calls == 1 && k[COMM_ALLGATHER].bytes_sent == want && k[COMM_ALLREDUCE].calls == 0 &&
              k[COMM_REDUCE_SCATTER].calls == 0, "step %d: all-gather %llu calls %llu bytes (want 1, %llu), all-reduce %llu",
              t, (unsigned long long)k[COMM_ALLGATHER].calls, (unsigned long long)k[COMM_ALLGATHER].bytes_sent,
              (unsigned long long)want, (unsigned long long)k[COMM_ALLREDUCE].calls);
        CHECK(same_everywhere(fnv(m.p, P * 4)), "step %d: params differ across ranks", t);
        size_t moved = 0, bad = 0;
        for (int i = 0; i < m.tab.n; i++) {
            const ParamSlice *s = &m.tab.slices[i];
            float f = 1.0f - LR * (s->decay ? cfg.opt.weight_decay : 0.0f);
            for (size_t j = s->offset; j < s->offset + s->numel; j++) {
                float step = before[j] * f - m.p[j];
                moved += step != 0.0f;
                bad += step != 0.0f && fabsf(fabsf(step) - LR) > 1e-6f;
            }
        }
        CHECK(moved > 0 && bad == 0, "step %d: %zu parameters moved, %zu by other than lr", t, moved, bad);
    }
    free(before);
    distopt_free(d);
    toy_free(&m);
}

TEST(demo_save_resume_continues_bit_identically) { save_resume_case(test_name_, demo_config()); }
TEST(nonfinite_gradient_skips_demo_step_unchanged) { skip_case(test_name_, demo_config()); }

/* ---- resume on another world size (driven by test/test_dist_resume.sh) ---- */

static const char *resume_dir;
static int resume_world;

static void path_of(char *buf, size_t n, const char *dir, int rank) { snprintf(buf, n, "%s/state_%d.bin", dir, rank); }

/* The configuration the cross-world save/resume runs: SCAPE, or the variant SCAPE_TEST_VARIANT names (issue 31). */
static DistConfig resume_config(void) {
    const char *v = getenv("SCAPE_TEST_VARIANT");
    if (!v || !v[0]) return sparse_config();
    if (strcmp(v, "powersgd") == 0) return psgd_config();
    if (strcmp(v, "onebit-adam") == 0) return onebit_config();
    if (strcmp(v, "demo") == 0) return demo_config();
    int k = scape_variant_parse(v);
    if (k < 0) fatal("SCAPE_TEST_VARIANT=%s: not a variant name", v);
    return variant_config(k);
}

static int save_mode(const char *dir) {
    Toy m;
    toy_build(&m);
    DistConfig cfg = resume_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    for (int t = 1; t <= 3; t++) train_step(d, &m, t);
    size_t nb = distopt_state_bytes(d);
    void *blob = xmalloc(nb, "blob");
    distopt_save(d, blob);
    char path[512];
    path_of(path, sizeof path, dir, R);
    FILE *f = xfopen(path, "wb", NULL);
    xfwrite(blob, nb, f, path, "state");
    fclose(f);
    if (R == 0) {
        snprintf(path, sizeof path, "%s/params.bin", dir);
        f = xfopen(path, "wb", NULL);
        xfwrite(m.p, m.tab.total * 4, f, path, "params");
        fclose(f);
    }
    comm_barrier();
    if (R == 0) printf("ok saved_state_of_%d_ranks\n", N);
    distopt_free(d);
    free(blob);
    toy_free(&m);
    return 0;
}

TEST(resume_on_other_world_starts_from_mean_residual) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    char path[512];
    snprintf(path, sizeof path, "%s/params.bin", resume_dir);
    FILE *f = xfopen(path, "rb", NULL);
    xfread(m.p, P * 4, f, path, "params");
    fclose(f);
    const void **blobs = xmalloc((size_t)resume_world * sizeof(void *), "blobs");
    size_t *sizes = xmalloc((size_t)resume_world * sizeof(size_t), "sizes");
    float *mean = xcalloc(P, 4, "mean");
    for (int i = 0; i < resume_world; i++) {
        path_of(path, sizeof path, resume_dir, i);
        int64_t n = file_size(path);
        if (n < 0) fatal("%s missing; run with --save first", path);
        sizes[i] = (size_t)n;
        void *b = xmalloc(sizes[i], "blob");
        f = xfopen(path, "rb", NULL);
        xfread(b, sizes[i], f, path, "state");
        fclose(f);
        blobs[i] = b;
    }
    DistConfig cfg = resume_config();
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    distopt_load(d, blobs, sizes, resume_world);
    /* the residual follows the 72-byte header in each blob (optim/dist.c) */
    for (int i = 0; i < resume_world; i++) {
        const float *ri = (const float *)((const char *)blobs[i] + 72);
        for (size_t j = 0; j < P; j++) mean[j] += ri[j];
    }
    for (size_t j = 0; j < P; j++) mean[j] /= (float)resume_world;
    CHECK(memcmp(mean, distopt_residual(d), P * 4) == 0, "residual after resume on %d ranks is not mean_i(r_i) of the %d saved", N, resume_world);
    size_t nz = 0;
    for (size_t j = 0; j < P; j++) nz += mean[j] != 0;
    CHECK(nz > 0, "saved residuals are all zero: the test checks nothing");
    if (cfg.opt.kind == OPT_ONEBIT_ADAM) {
        /* the server error: each coordinate's, from whichever saved rank reduced it, now on the rank that reduces it
         * (the sum over the new ranks equals the sum over the saved ones, bit for bit: each coordinate has one
         * nonzero term on either side) */
        float *saved = xcalloc(P, 4, "saved server error"), *now = xmalloc(P * 4, "server error now");
        for (int i = 0; i < resume_world; i++) {
            const float *es = (const float *)((const char *)blobs[i] + 72) + 3 * P;
            for (size_t j = 0; j < P; j++) saved[j] += es[j];
        }
        memcpy(now, distopt_onebit_server_error(d), P * 4);
        float *all = xmalloc((size_t)N * P * 4, "server errors of every rank");
        comm_allgather(now, all, P * 4);
        for (size_t j = 0; j < P; j++) {
            now[j] = 0.0f;
            for (int r = 0; r < N; r++) now[j] += all[(size_t)r * P + j];
        }
        free(all);
        size_t nzs = 0;
        for (size_t j = 0; j < P; j++) nzs += saved[j] != 0;
        CHECK(nzs > 0 && memcmp(saved, now, P * 4) == 0, "server error after resume on %d ranks: %zu saved nonzero, "
              "sum over the new ranks %s the saved", N, nzs, memcmp(saved, now, P * 4) ? "differs from" : "equals");
        free(saved);
        free(now);
    }
    for (int t = 4; t <= 6; t++) CHECK(train_step(d, &m, t) == 0, "step %d skipped after resume", t);
    const uint8_t *next = distopt_mask(d, 1); /* PowerSGD has none */
    CHECK(same_everywhere(fnv(m.p, P * 4)) && (!next || same_everywhere(fnv(next, mask_bytes(P)))), "state differs across ranks after resume");
    distopt_free(d);
    for (int i = 0; i < resume_world; i++) free((void *)blobs[i]);
    free(blobs); free(sizes); free(mean);
    toy_free(&m);
}

/* The parallel passes of a SCAPE step (norm, update, top-k, corrected momentum) give the same bits on 1 and 3
 * threads: a table with slices large enough to be cut into many chunks and top-k blocks, at odd offsets. */
static void run_big_scape(int threads, int variant, float **p_out, float **m_out, float **r_out, uint8_t **mask_out,
                          size_t *P_out) {
    ParamTable tab = {0};
    size_t s1[1];
    s1[0] = 300007; param_table_add(&tab, "wte", -1, 1, 1, 1, s1);
    s1[0] = 77;     param_table_add(&tab, "b", 0, 0, 0, 1, s1);
    s1[0] = 150001; param_table_add(&tab, "w", 0, 0, 1, 1, s1);
    for (int i = 0; i < tab.n; i++) tab.slices[i].dense_only = !tab.slices[i].decay;
    tab.num_buckets = 2;
    size_t P = tab.total;
    float *p = xmalloc(P * sizeof(float), "p"), *g = xcalloc(P, sizeof(float), "g");
    Rng r;
    rng_seed(&r, 5);
    rng_normal(&r, p, P, 0.0f, 0.02f);
    DistConfig cfg = variant ? variant_config(variant) : sparse_config();
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    DistOptim *d = distopt_create(&tab, p, g, &cfg);
    for (int t = 1; t <= 5; t++) {
        rng_seed(&r, 100 + (uint64_t)t * 7 + (uint64_t)R);
        rng_normal(&r, g, P, 0.0f, 1.0f);
        for (size_t j = 0; j < P; j += 97) g[j] = 0.5f; /* ties for the top-k */
        for (int b = 1; b >= 0; b--) distopt_bucket_ready(d, b);
        float norm;
        distopt_step(d, t, 1e-2f, &norm);
    }
    *p_out = p;
    *m_out = xmalloc(P * sizeof(float), "m");
    memcpy(*m_out, distopt_moment(d), P * sizeof(float));
    *r_out = xmalloc(P * sizeof(float), "r");
    memcpy(*r_out, distopt_residual(d), P * sizeof(float));
    *mask_out = xmalloc(mask_bytes(P), "mask");
    memcpy(*mask_out, distopt_mask(d, 1), mask_bytes(P));
    *P_out = P;
    distopt_free(d);
    omp_set_num_threads(saved);
    free(g);
    param_table_free(&tab);
}

static void threads_case(const char *test_name_, int variant) {
    float *p1, *m1, *r1, *p3, *m3, *r3;
    uint8_t *k1, *k3;
    size_t P;
    run_big_scape(1, variant, &p1, &m1, &r1, &k1, &P);
    run_big_scape(3, variant, &p3, &m3, &r3, &k3, &P);
    CHECK(memcmp(p1, p3, P * 4) == 0, "params differ between 1 and 3 threads (max rel %g)", max_rel_diff(p1, p3, P));
    CHECK(memcmp(m1, m3, P * 4) == 0, "m differs between 1 and 3 threads");
    CHECK(memcmp(r1, r3, P * 4) == 0, "residual differs between 1 and 3 threads");
    CHECK(memcmp(k1, k3, mask_bytes(P)) == 0, "next mask differs between 1 and 3 threads");
    free(p1); free(m1); free(r1); free(k1); free(p3); free(m3); free(r3); free(k3);
}

TEST(scape_step_is_bit_identical_on_1_and_3_threads) { threads_case(test_name_, SCAPE_FAITHFUL); }
TEST(variant_steps_are_bit_identical_on_1_and_3_threads) {
    for (int v = SCAPE_CATCHUP; v <= SCAPE_RESIDUAL_DECAY; v++) threads_case(test_name_, v);
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    R = comm_rank();
    N = comm_world();
    if (argc == 3 && strcmp(argv[1], "--save") == 0) {
        save_mode(argv[2]);
        comm_finalize();
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "--resume") == 0) {
        resume_dir = argv[2];
        resume_world = atoi(argv[3]);
        MPI_RUN_TEST(resume_on_other_world_starts_from_mean_residual);
        comm_finalize();
        TEST_EXIT();
    }
    MPI_RUN_TEST(topk_matches_sort_reference_with_ties_to_lower_index);
    MPI_RUN_TEST(mask_bits_merge_at_any_offset);
    MPI_RUN_TEST(owner_table_is_contiguous_balanced_and_complete);
    MPI_RUN_TEST(density_schedule_is_geometric_warmup);
    MPI_RUN_TEST(inv1_density_one_equals_dense_adams_and_residual_stays_zero);
    MPI_RUN_TEST(inv2_3_5_7_conservation_identical_state_mask_lag_and_ghat);
    MPI_RUN_TEST(double_residual_defect_writes_the_residual_twice_off_the_mask);
    MPI_RUN_TEST(variants_keep_conservation_identical_state_and_bytes);
    MPI_RUN_TEST(variants_at_density_one_are_faithful_scape_bit_for_bit);
    MPI_RUN_TEST(variant_catchup_save_resume_continues_bit_identically);
    MPI_RUN_TEST(variant_tensor_nu_save_resume_continues_bit_identically);
    MPI_RUN_TEST(variant_residual_decay_save_resume_continues_bit_identically);
    MPI_RUN_TEST(variant_steps_are_bit_identical_on_1_and_3_threads);
    MPI_RUN_TEST(powersgd_ranks_identical_and_formula_bytes);
    MPI_RUN_TEST(powersgd_full_rank_is_adamw);
    MPI_RUN_TEST(powersgd_save_resume_continues_bit_identically);
    MPI_RUN_TEST(nonfinite_gradient_skips_powersgd_step_unchanged);
    MPI_RUN_TEST(onebit_ranks_identical_and_formula_bytes);
    MPI_RUN_TEST(onebit_warmup_is_adamw_bitwise);
    MPI_RUN_TEST(onebit_save_resume_continues_bit_identically);
    MPI_RUN_TEST(nonfinite_gradient_skips_onebit_step_unchanged);
    MPI_RUN_TEST(nonfinite_gradient_skips_onebit_warmup_step_unchanged);
    MPI_RUN_TEST(demo_ranks_identical_and_formula_bytes);
    MPI_RUN_TEST(demo_save_resume_continues_bit_identically);
    MPI_RUN_TEST(nonfinite_gradient_skips_demo_step_unchanged);
    MPI_RUN_TEST(scape_first_moment_is_held_compact);
    MPI_RUN_TEST(fused_dense_updates_equal_scale_update_clear);
    MPI_RUN_TEST(inv4_owned_masks_are_exact_topk_and_norms_dense);
    MPI_RUN_TEST(scape_step_is_bit_identical_on_1_and_3_threads);
    MPI_RUN_TEST(inv6_one_payload_allreduce_and_one_mask_allgather_per_step_with_formula_bytes);
    MPI_RUN_TEST(inv8_scape_save_resume_continues_bit_identically);
    MPI_RUN_TEST(scape_bf16_payload_loses_nothing_into_the_residual_and_halves_the_bytes);
    MPI_RUN_TEST(scape_bf16_payload_at_density_one_tracks_dense_adams);
    MPI_RUN_TEST(scape_bf16_payload_save_resume_continues_bit_identically);
    MPI_RUN_TEST(coded_masks_change_no_bit_and_count_their_bytes);
    MPI_RUN_TEST(scape_coded_masks_save_resume_continues_bit_identically);
    MPI_RUN_TEST(nonfinite_gradient_skips_scape_bf16_step_unchanged);
    MPI_RUN_TEST(dense_adamw_zero1_save_resume_continues_bit_identically);
    MPI_RUN_TEST(inv9_dense_adamw_n_ranks_equals_one_rank_full_batch);
    MPI_RUN_TEST(inv9_dense_adams_n_ranks_equals_one_rank_full_batch);
    MPI_RUN_TEST(zero1_adamw_equals_one_rank_full_batch_and_no_zero);
    MPI_RUN_TEST(scape_zero1_equals_unsharded_with_sharded_m_and_formula_bytes);
    MPI_RUN_TEST(scape_zero1_save_resume_continues_bit_identically);
    MPI_RUN_TEST(scape_zero1_checkpoint_resumes_unsharded);
    MPI_RUN_TEST(scape_unsharded_checkpoint_resumes_with_zero1);
    MPI_RUN_TEST(nonfinite_gradient_skips_scape_zero1_step_unchanged);
    MPI_RUN_TEST(mask_stats_scape_zero1_equal_direct_recomputation);
    MPI_RUN_TEST(scape_zero1_bf16_payload_loses_nothing_into_the_residual_and_halves_the_bytes);
    MPI_RUN_TEST(scape_zero1_bf16_payload_tracks_unsharded);
    MPI_RUN_TEST(scape_zero1_bf16_save_resume_continues_bit_identically);
    MPI_RUN_TEST(nonfinite_gradient_skips_scape_zero1_bf16_step_unchanged);
    MPI_RUN_TEST(nonfinite_gradient_skips_scape_step_unchanged);
    MPI_RUN_TEST(nonfinite_gradient_skips_adamw_step_unchanged);
    MPI_RUN_TEST(topk_ef_density_one_equals_dense_adamw_and_feedback_stays_zero);
    MPI_RUN_TEST(topk_ef_conservation_average_fill_in_identical_state_and_formula_bytes);
    MPI_RUN_TEST(topk_ef_save_resume_continues_bit_identically);
    MPI_RUN_TEST(nonfinite_gradient_skips_topk_ef_step_unchanged);
    MPI_RUN_TEST(mask_stats_scape_equal_direct_recomputation);
    MPI_RUN_TEST(mask_stats_topk_ef_equal_direct_recomputation);
    comm_finalize();
    TEST_EXIT();
}

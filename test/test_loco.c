/*
 * test/test_loco.c - the local-update rules DiLoCo and SparseLoCo (optim/dist_diloco.c, dist_sparseloco.c, issue 45)
 * on 1..N ranks, on test_dist.c's
 * synthetic least-squares model (rank i takes samples i*B .. i*B+B-1 of each step, so the ranks' gradients differ):
 * bytes per step against the header's formula (0 in every payload kind at inner steps, one all-reduce of P floats at
 * outer steps), the synchronized model identical on every rank at every step while the ranks' own parameters differ
 * between outer steps and agree after them (for SparseLoCo: one all-gather of its messages at outer steps), the swap of distopt_use_synced, a save between outer steps resuming bit
 * for bit, and a non-finite gradient on one rank skipping the step on every rank with the state unchanged. The
 * arithmetic itself is checked against float64 references by test/test_scape_ref.sh (test/diloco_ref.py,
 * test/sparseloco_ref.py); the whole
 * loop by test/test_loco.sh. Built with -ffp-contract=off like optim/.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/rng.h"
#include "common/util.h"
#include "optim/dist.h"
#include "test/test_comm_mpi.h"

static int R, N;
#define B 2
#define LR 0.01f
#define H 4

typedef struct {
    ParamTable tab;
    float *p, *g;
} Toy;

static void toy_build(Toy *m) {
    memset(m, 0, sizeof *m);
    size_t s2[2];
    s2[0] = 20; s2[1] = 6; param_table_add(&m->tab, "wte", -1, 2, 1, 2, s2);
    for (int l = 0; l < 2; l++) { s2[0] = 8; s2[1] = 12; param_table_add(&m->tab, "w1", l, 1 - l, 1, 2, s2); }
    for (int l = 0; l < 2; l++) { s2[0] = 12; param_table_add(&m->tab, "b1", l, 1 - l, 0, 1, s2); }
    s2[0] = 6; param_table_add(&m->tab, "lnf", -1, 2, 0, 1, s2);
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

/* g = mean over this rank's samples of step t of w_j (theta_j - x_{s,j}) */
static void toy_grad(const Toy *m, int t) {
    size_t P = m->tab.total;
    float *x = xmalloc(P * sizeof(float), "x");
    memset(m->g, 0, P * sizeof(float));
    for (int s = R * B; s < R * B + B; s++) {
        Rng r;
        rng_seed(&r, rng_mix((uint64_t)t, (uint64_t)s));
        rng_normal(&r, x, P, 0.5f, 2.0f);
        for (size_t j = 0; j < P; j++) m->g[j] += (1.0f + (float)(j % 7)) * (m->p[j] - x[j]) / (float)B;
    }
    free(x);
}

/* SparseLoCo's chunks and top-k here: the toy's tensors (120, 96, 12, 6 elements) cut into chunks of 16 */
#define CHUNK 16
#define TOPK 3

/* DiLoCo (sparse 0), SparseLoCo (1; 2: with the shared mask) with H 4, the inner AdamW (or AdamS), clip 5, the run ending at last_step */
static DistConfig loco_config(int sparse, const char *inner, int last_step) {
    DistConfig c = {0};
    c.opt.kind = sparse ? OPT_SPARSELOCO : OPT_DILOCO;
    c.opt.beta1 = 0.9f;
    c.opt.beta2 = 0.95f;
    c.opt.eps = 1e-8f;
    c.opt.weight_decay = 0.1f;
    c.clip = 5.0f;
    c.density = 1.0;
    c.density_start = 1.0;
    c.exclude_norms = 1;
    c.last_step = last_step;
    distopt_default_options(&c); /* the rows' defaults, then this test's (strings: literals, which outlive c) */
    const char *pre = sparse ? "sparseloco" : "diloco";
    char flag[40], num[16];
    snprintf(flag, sizeof flag, "%s-h", pre);
    snprintf(num, sizeof num, "%d", H);
    distopt_set_option(&c, flag, num);
    snprintf(flag, sizeof flag, "%s-inner", pre);
    distopt_set_option(&c, flag, inner);
    if (sparse) {
        snprintf(num, sizeof num, "%d", CHUNK);
        distopt_set_option(&c, "sparseloco-chunk", num);
        snprintf(num, sizeof num, "%d", TOPK);
        distopt_set_option(&c, "sparseloco-topk", num);
        distopt_set_option(&c, "sparseloco-mask", sparse == 2 ? "shared" : "own");
    }
    return c;
}

static int train_step(DistOptim *d, Toy *m, int t) {
    toy_grad(m, t);
    for (int b = 0; b < m->tab.num_buckets; b++) distopt_bucket_ready(d, b);
    float gn;
    return distopt_step(d, t, LR, &gn);
}

static uint64_t fnv(const void *p, size_t n) { return hash_fnv1a64(1469598103934665603ull, p, n); }

static int same_everywhere(uint64_t h) {
    uint64_t *all = xmalloc((size_t)N * sizeof(uint64_t), "hashes");
    comm_allgather(&h, all, sizeof h);
    int ok = 1;
    for (int r = 0; r < N; r++) ok &= all[r] == all[0];
    free(all);
    return ok;
}

/* SparseLoCo's message of one rank: per chunk of each tensor a 4-byte scale, k_c 2-byte offsets and k_c 2-bit codes */
static uint64_t sparseloco_message(const ParamTable *tab) {
    uint64_t n = 0;
    for (int i = 0; i < tab->n; i++)
        for (size_t a = 0; a < tab->slices[i].numel; a += CHUNK) {
            size_t len = tab->slices[i].numel - a < CHUNK ? tab->slices[i].numel - a : CHUNK, k = len < TOPK ? len : TOPK;
            n += 4 + 2 * k + (2 * k + 7) / 8;
        }
    return n;
}

/* 10 steps, the last one the run's end: inner steps move 0 bytes in every payload kind; outer steps (4, 8, 10) DiLoCo
 * one all-reduce of P floats, 2 * 4P (N-1)/N, SparseLoCo one all-gather of every rank's message, (N-1) times its
 * bytes; theta_prev the same everywhere at every step, the ranks' own parameters different after an inner step
 * (N > 1) and the same after an outer one, where they are theta_prev. */
static void formula_bytes(const char *test_name_, int sparse) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = loco_config(sparse, "adamw", 10);
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    CommStats k[COMM_NKINDS];
    for (int t = 1; t <= 10; t++) {
        comm_stats_take_kind(k);
        CHECK(train_step(d, &m, t) == 0, "step %d skipped", t);
        comm_stats_take_kind(k);
        int outer = t % H == 0 || t == 10;
        /* the shared mask: an all-reduce of the K selected values and an all-gather of the owners' mask segments
         * (twice at the first outer step, which chooses its own mask too) */
        uint64_t K = 0, seg = 0;
        for (int i = 0; i < m.tab.n; i++)
            for (size_t a = 0; a < m.tab.slices[i].numel; a += CHUNK)
                K += m.tab.slices[i].numel - a < TOPK ? m.tab.slices[i].numel - a : TOPK;
        for (int r = 0; r < N; r++) {
            size_t lo, hi;
            distopt_owner_range(d, r, &lo, &hi);
            seg += (hi - lo + 7) / 8;
        }
        uint64_t n_ar = outer && sparse != 1, n_ag = !outer || !sparse ? 0 : sparse == 1 || t > H ? 1 : 2;
        uint64_t ar = !n_ar ? 0 : sparse ? 8ull * K * (uint64_t)(N - 1) / (uint64_t)N
                                         : 8ull * P * (uint64_t)(N - 1) / (uint64_t)N;
        uint64_t ag = sparse == 1 ? n_ag * sparseloco_message(&m.tab) * (uint64_t)(N - 1)
                                  : n_ag * seg * (uint64_t)(N - 1) / (uint64_t)N;
        CHECK(k[COMM_ALLREDUCE].calls == n_ar && k[COMM_ALLREDUCE].bytes_sent == ar &&
              k[COMM_ALLGATHER].calls == n_ag && k[COMM_ALLGATHER].bytes_sent == ag &&
              k[COMM_REDUCE_SCATTER].bytes_sent == 0 && k[COMM_BCAST].bytes_sent == 0,
              "step %d: all-reduce %llu calls %llu bytes (want %llu), all-gather %llu calls %llu bytes (want %llu), "
              "reduce-scatter %llu", t, (unsigned long long)k[COMM_ALLREDUCE].calls,
              (unsigned long long)k[COMM_ALLREDUCE].bytes_sent, (unsigned long long)ar,
              (unsigned long long)k[COMM_ALLGATHER].calls, (unsigned long long)k[COMM_ALLGATHER].bytes_sent,
              (unsigned long long)ag, (unsigned long long)k[COMM_REDUCE_SCATTER].bytes_sent);
        if (sparse == 1 && t == 1)
            CHECK(distopt_sparseloco_message_bytes(d) == sparseloco_message(&m.tab), "message of %zu bytes, the "
                  "formula %llu", distopt_sparseloco_message_bytes(d), (unsigned long long)sparseloco_message(&m.tab));
        const float *s = distopt_synced(d);
        CHECK(same_everywhere(fnv(s, P * 4)), "step %d: the synchronized model differs across ranks", t);
        if (sparse == 2 && t >= H) /* chosen from the first outer step on */
            CHECK(distopt_mask(d, 1) && same_everywhere(fnv(distopt_mask(d, 1), (P + 7) / 8)),
                  "step %d: the shared mask is missing or differs across ranks", t);
        if (!sparse) /* SparseLoCo's error feedback is each rank's own */
            CHECK(same_everywhere(fnv(distopt_residual(d), P * 4)), "step %d: the outer momentum differs across ranks", t);
        int same = same_everywhere(fnv(m.p, P * 4));
        if (outer) CHECK(same && s == m.p, "step %d: after an outer step the ranks' parameters are not theta_prev", t);
        else if (N > 1) CHECK(!same, "step %d: an inner step left every rank with the same parameters", t);
    }
    distopt_free(d);
    toy_free(&m);
}
TEST(diloco_formula_bytes_and_synchronized_model) { formula_bytes(test_name_, 0); }
TEST(sparseloco_formula_bytes_and_synchronized_model) { formula_bytes(test_name_, 1); }
TEST(sparseloco_shared_mask_formula_bytes_and_synchronized_model) { formula_bytes(test_name_, 2); }

/* Between outer steps distopt_use_synced(1) puts theta_prev (the same everywhere) into params and (0) this rank's own
 * parameters back, bit for bit; at an outer step it has nothing to do. */
TEST(diloco_use_synced_swaps_in_the_synchronized_model_and_back) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = loco_config(0, "adams", 0);
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    for (int t = 1; t <= 6; t++) train_step(d, &m, t);
    float *own = xmalloc(P * 4, "own"), *prev = xmalloc(P * 4, "prev");
    memcpy(own, m.p, P * 4);
    memcpy(prev, distopt_synced(d), P * 4);
    CHECK(N == 1 || memcmp(own, prev, P * 4) != 0, "between outer steps the parameters are theta_prev: nothing to test");
    distopt_use_synced(d, 1);
    CHECK(memcmp(m.p, prev, P * 4) == 0 && same_everywhere(fnv(m.p, P * 4)), "swapped in: params are not theta_prev");
    distopt_use_synced(d, 1); /* idempotent */
    distopt_use_synced(d, 0);
    CHECK(memcmp(m.p, own, P * 4) == 0 && memcmp(distopt_synced(d), prev, P * 4) == 0, "swapped back: not as before");
    for (int t = 7; t <= 8; t++) train_step(d, &m, t); /* 8: an outer step */
    memcpy(own, m.p, P * 4);
    distopt_use_synced(d, 1);
    CHECK(memcmp(m.p, own, P * 4) == 0 && distopt_synced(d) == m.p, "at an outer step the swap changed the parameters");
    distopt_use_synced(d, 0);
    free(own); free(prev);
    distopt_free(d);
    toy_free(&m);
}

/* Saved at step 5 (between outer steps) and resumed: steps 6..10 give the same parameters, inner moments, theta_prev
 * and outer momentum, bit for bit, as the run that went on. */
static void save_resume(const char *test_name_, int sparse, const char *inner) {
    Toy a, b;
    toy_build(&a);
    toy_build(&b);
    size_t P = a.tab.total;
    DistConfig cfg = loco_config(sparse, inner, 10);
    DistOptim *d = distopt_create(&a.tab, a.p, a.g, &cfg);
    for (int t = 1; t <= 5; t++) train_step(d, &a, t);
    size_t nbytes = distopt_state_bytes(d);
    void *blob = xmalloc(nbytes, "blob");
    distopt_save(d, blob);
    memcpy(b.p, distopt_synced(d), P * 4); /* what the checkpoint's model file holds */
    for (int t = 6; t <= 10; t++) train_step(d, &a, t);
    DistOptim *e = distopt_create(&b.tab, b.p, b.g, &cfg);
    const void *blobs[1] = {blob};
    distopt_load(e, blobs, &nbytes, 1);
    for (int t = 6; t <= 10; t++) train_step(e, &b, t);
    CHECK(memcmp(a.p, b.p, P * 4) == 0, "params after resume differ");
    CHECK(memcmp(distopt_moment(d), distopt_moment(e), P * 4) == 0, "inner m after resume differs");
    CHECK(!distopt_loco_inner_v(d) == !strcmp(inner, "adams") &&
          (!distopt_loco_inner_v(d) || memcmp(distopt_loco_inner_v(d), distopt_loco_inner_v(e), P * 4) == 0),
          "inner v after resume differs");
    CHECK(memcmp(distopt_residual(d), distopt_residual(e), P * 4) == 0, "outer state after resume differs");
    CHECK(memcmp(distopt_synced(d), distopt_synced(e), P * 4) == 0, "theta_prev after resume differs");
    const uint8_t *ma = distopt_mask(d, 1), *mb = distopt_mask(e, 1);
    CHECK(!ma == (sparse != 2) && !ma == !mb && (!ma || memcmp(ma, mb, (P + 7) / 8) == 0),
          "the shared mask after resume differs (or is missing)");
    distopt_free(d);
    distopt_free(e);
    free(blob);
    toy_free(&a);
    toy_free(&b);
}
TEST(diloco_adamw_save_between_outer_steps_resumes_bit_identically) { save_resume(test_name_, 0, "adamw"); }
TEST(diloco_adams_save_between_outer_steps_resumes_bit_identically) { save_resume(test_name_, 0, "adams"); }
TEST(sparseloco_adamw_save_between_outer_steps_resumes_bit_identically) { save_resume(test_name_, 1, "adamw"); }
TEST(sparseloco_shared_mask_save_between_outer_steps_resumes_bit_identically) { save_resume(test_name_, 2, "adams"); }

/* A non-finite gradient on the last rank alone (at an outer step, 4): every rank skips, the state and parameters as
 * before; the next step runs. */
static void skip_case(const char *test_name_, int sparse) {
    Toy m;
    toy_build(&m);
    size_t P = m.tab.total;
    DistConfig cfg = loco_config(sparse, "adamw", 0);
    DistOptim *d = distopt_create(&m.tab, m.p, m.g, &cfg);
    for (int t = 1; t <= 3; t++) train_step(d, &m, t);
    size_t nb = distopt_state_bytes(d);
    void *s0 = xmalloc(nb, "s0"), *s1 = xmalloc(nb, "s1");
    distopt_save(d, s0);
    toy_grad(&m, 4);
    if (R == N - 1) m.g[P / 2] = INFINITY;
    for (int b = 0; b < m.tab.num_buckets; b++) distopt_bucket_ready(d, b);
    float gn;
    int skipped = distopt_step(d, 4, LR, &gn);
    CHECK(skipped == 1 && !isfinite(gn), "expected a skip with a non-finite norm, got %d, %g", skipped, gn);
    distopt_save(d, s1);
    CHECK(memcmp(s0, s1, nb) == 0, "params or optimizer state changed by a skipped step");
    CHECK(train_step(d, &m, 4) == 0, "the step after a skip did not run");
    distopt_free(d);
    free(s0); free(s1);
    toy_free(&m);
}
TEST(nonfinite_gradient_on_one_rank_skips_diloco_step_everywhere) { skip_case(test_name_, 0); }
TEST(nonfinite_gradient_on_one_rank_skips_sparseloco_step_everywhere) { skip_case(test_name_, 1); }
TEST(nonfinite_gradient_on_one_rank_skips_sparseloco_shared_mask_step_everywhere) { skip_case(test_name_, 2); }

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    R = comm_rank();
    N = comm_world();
    MPI_RUN_TEST(diloco_formula_bytes_and_synchronized_model);
    MPI_RUN_TEST(diloco_use_synced_swaps_in_the_synchronized_model_and_back);
    MPI_RUN_TEST(diloco_adamw_save_between_outer_steps_resumes_bit_identically);
    MPI_RUN_TEST(diloco_adams_save_between_outer_steps_resumes_bit_identically);
    MPI_RUN_TEST(nonfinite_gradient_on_one_rank_skips_diloco_step_everywhere);
    MPI_RUN_TEST(sparseloco_formula_bytes_and_synchronized_model);
    MPI_RUN_TEST(sparseloco_adamw_save_between_outer_steps_resumes_bit_identically);
    MPI_RUN_TEST(nonfinite_gradient_on_one_rank_skips_sparseloco_step_everywhere);
    MPI_RUN_TEST(sparseloco_shared_mask_formula_bytes_and_synchronized_model);
    MPI_RUN_TEST(sparseloco_shared_mask_save_between_outer_steps_resumes_bit_identically);
    MPI_RUN_TEST(nonfinite_gradient_on_one_rank_skips_sparseloco_shared_mask_step_everywhere);
    comm_finalize();
    TEST_EXIT();
}

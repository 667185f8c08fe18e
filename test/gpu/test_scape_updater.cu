/*
 * test/gpu/test_scape_updater.cu - SCAPE on the device (cuda/dist_scape.cuh, behind device_updater_create) against
 * the host DistOptim's SCAPE (optim/dist.c, what the CPU trainers run) on test_updater.cu's synthetic ParamTable
 * (an embedding of 77357 elements, 3 layers of (w, b, g) in llm.c's tensor-major order so a bucket's slices are not
 * contiguous, a gain in the last bucket; b, g and gain are dense-only). Each step's gradient arrives as the model
 * delivers it: two floatX micro-steps added into the fp32 accumulator, the second bucket by bucket with
 * bucket_ready after each. fp32 and bf16 builds (the bf16 build's floatX copy is not compared with the host).
 *
 * Cases ("bitwise": every float/byte equal; each prints its worst difference):
 *   d = 0.1 with warm-up from 1 over 4 steps, 10 steps, clipping on odd steps: master weights bitwise, the
 *     checkpoint blob (r, both masks, compact m, header) byte-identical to distopt_save's after every step, the
 *     gradient norm equal, the same collectives counted (calls and bytes per kind); SCAPE.md 9.5 (the mask used
 *     at t is the one made at t-1) on the device's own blobs;
 *   d = 1 (step-1 bootstrap by all ones) and d = 0.1 without warm-up (step-1 bootstrap by a synchronous top-k);
 *   a NaN gradient at step 5: both skip, device master and state unchanged, and the runs stay bitwise equal;
 *   SCAPE.md 9.1: device SCAPE at d = 1 vs the device dense AdamS: r stays exactly 0, K = P, master within 1e-5
 *     (|a - b| / (|b| + 1e-3), test_dist.c's measure; g_hat = ((b1 m + (1-b1) g) - b1 m) / (1-b1) rounds differently
 *     from g, so not bitwise; asserted with one rank, printed with several);
 *   SCAPE.md 9.2 (one rank, no clipping): after each step m + r == c bit for bit and m * r == 0, c recomputed on
 *     the CPU from the previous device state and the gradient;
 *   residual offload (r in pinned host memory, staged per slice): the d = 0.1 case and a NaN step against the host;
 *   --scape-payload bf16 (d = 0.1 with and without warm-up, resident and offloaded r, a NaN step) against the host;
 *   mask statistics (DistMaskStats, --mask-stats-every): the device's against distopt_mask_stats over 10 steps
 *     with a gap (step 4 off), a skipped step and a bootstrap with the residual offloaded: present on the same
 *     steps, Jaccards (and NAN where the previous mask is missing) bitwise, energies within 2 * numel *
 *     DBL_EPSILON relative; and enabling them leaves master, floatX copy and blob bitwise unchanged;
 *   --zero 1 (cuda/dist_scape_zero.cuh) against the host's sharded SCAPE: the d = 0.1 case, both bootstraps and a
 *     NaN step as above (the collectives per kind included: reduce-scatters, control all-reduce, the sync's
 *     all-gathers), also with the bf16 payload; save/resume bitwise (fp32 and bf16); and against the unsharded
 *     device SCAPE: master, floatX copy and blob bitwise after every step, the state (m compact) smaller after the
 *     warm-up,
 *     the state smaller with 2 ranks, and a checkpoint of either layout at step 5 resumed by the other bitwise;
 *   save at step 5, a new update + load, steps 6-10: master and blob bitwise equal to the uninterrupted run, also
 *     with the resumed run offloading its residual (offload on == off); and the host's blob of step 5 loaded by
 *     the device continues bitwise like the host (checkpoints interchange).
 * Runs as 1 rank, or under mpirun -np 2 (two ranks sharing one GPU: --comm mpi, host-staged), where both the
 * host and the device update average the ranks' different gradients; with the argument `nccl`, 2 ranks with a GPU
 * each (or the emulator's EMU_DEVICES=2) run every case through the NCCL collectives (a FAIL, not a skip, where
 * that is not possible).
 * Timings (1 rank, GPU only, "time" lines): one step of device AdamS, device SCAPE at d = 0.01 and with the
 * residual offloaded on GPT-2 124M's table, and the device memory each update holds.
 * Usage: build/cuda/test_scape_updater   (or mpirun -np 2 build/cuda/test_scape_updater [nccl])
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/dist.h"
#include "cuda/optimizer.cuh"
#include "test/test.h"
#include "test/gpu/updater_fixture.cuh"


static int offload_ = 0; /* UpdaterConfig.scape_offload_residual of the following cases */
static int bf16_payload_ = 0; /* DistConfig.payload_bf16 (--scape-payload bf16) of the following cases */
static int zero_ = 0; /* DistConfig.zero (--zero 1) of the following cases */
static CommBackend comm_ = COMM_BACKEND_MPI; /* COMM_BACKEND_NCCL with the argument `nccl` */

static UpdaterConfig config(float density, int warmup, float clip) {
    UpdaterConfig c;
    memset(&c, 0, sizeof c);
    c.dist.opt.kind = OPT_SCAPE;
    c.dist.opt.beta1 = 0.9f;
    c.dist.opt.beta2 = 0.95f;
    c.dist.opt.eps = 1e-8f;
    c.dist.opt.weight_decay = 0.1f;
    c.dist.clip = clip;
    c.dist.density = density;
    c.dist.density_start = 1.0f;
    c.dist.density_warmup = warmup;
    c.dist.exclude_norms = 1;
    c.comm = comm_; /* MPI: several ranks may share one GPU in this test; NCCL with the argument `nccl` */
    c.seed = SEED;
    c.scape_offload_residual = offload_;
    c.dist.payload_bf16 = bf16_payload_;
    c.dist.zero = zero_;
    return c;
}

static float *initial_params(void) {
    float *p = (float *)xmalloc(P * sizeof(float), "init");
    rng_state = 0x2545F4914F6CDD1Dull; /* the same on every rank (the updates broadcast rank 0's anyway) */
    for (size_t i = 0; i < P; i++) p[i] = uni(0.5f);
    return p;
}
static float lr_at(int t) { return 1e-3f * (float)t / (float)STEPS + 1e-4f; }

/* ---- the SCAPE blob (optim/dist.c's layout): header fields and section views ---- */
#define BLOB_HEADER 72
typedef struct {
    int last_t, have_cur, have_next;
    unsigned long long K;
    const float *r, *m;           /* r (P), compact m (K) */
    const uint8_t *cur, *next;    /* mask_bytes(P) each, NULL if absent */
} BlobView;
static size_t blob_mask_bytes_(void) { return (mask_bytes(P) + 7) / 8 * 8; }
static BlobView blob_view(const void *blob) {
    BlobView v;
    memset(&v, 0, sizeof v);
    const char *b = (const char *)blob;
    int32_t h[10];
    memcpy(h, b, sizeof h);
    v.last_t = h[6];
    v.have_cur = h[7];
    v.have_next = h[8];
    memcpy(&v.K, b + 64, 8);
    const char *p = b + BLOB_HEADER;
    v.r = (const float *)p;
    p += P * sizeof(float);
    if (v.have_cur) { v.cur = (const uint8_t *)p; p += blob_mask_bytes_(); }
    if (v.have_next) { v.next = (const uint8_t *)p; p += blob_mask_bytes_(); }
    v.m = (const float *)p;
    return v;
}
/* dense m (P) from a blob view */
static void blob_dense_m(const BlobView *v, float *m) {
    memset(m, 0, P * sizeof(float));
    if (!v->cur) return;
    size_t q = 0;
    for (size_t j = 0; j < P; j++)
        if (mask_get(v->cur, j)) m[j] = v->m[q++];
}
static size_t first_diff_byte(const void *a, const void *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)a)[i] != ((const unsigned char *)b)[i]) return i;
    return n;
}
/* which blob section a byte offset lies in, for failure messages */
static const char *blob_section(const void *blob, size_t off) {
    BlobView v = blob_view(blob);
    const char *b = (const char *)blob, *o = b + off;
    if (off < BLOB_HEADER) return "header";
    if (o < (const char *)v.r + P * sizeof(float)) return "r";
    if (v.cur && o < (const char *)v.cur + blob_mask_bytes_()) return "mask_cur";
    if (v.next && o < (const char *)v.next + blob_mask_bytes_()) return "mask_next";
    return "m";
}

/* device vs host SCAPE for STEPS steps; nan_step > 0 injects a NaN gradient on rank 0 at that step */
static void vs_host(const char *test_name_, float density, int warmup, int nan_step) {
    UpdaterConfig cfg = config(density, warmup, 1.0f);
    float *init = initial_params();
    float *hp = (float *)xmalloc(P * sizeof(float), "host params"), *hg = (float *)xcalloc(P, sizeof(float), "grads");
    memcpy(hp, init, P * sizeof(float));
    DistOptim *d = distopt_create(&tab, hp, hg, &cfg.dist);
    Dev x;
    dev_init(&x, init, &cfg);
    float *g1 = (float *)xmalloc(P * sizeof(float), "g"), *g2 = (float *)xmalloc(P * sizeof(float), "g");
    int clipped = 0, unclipped = 0, lag_checked = 0;
    size_t bad_master_total = 0;
    double worst_master = 0, worst_norm_rel = 0;
    uint8_t *prev_next = NULL; /* the device's M_{t} as made at step t-1 */
    for (int t = 1; t <= STEPS; t++) {
        gen(g1, t, 0, nan_step);
        gen(g2, t, 1, nan_step);
        float *before = NULL;
        void *blob_before = NULL;
        size_t nb_before = 0;
        if (t == nan_step) {
            before = download_master(&x);
            blob_before = save_blob(x.u, &nb_before);
        }
        float nh = 0, nd = 0;
        CommStats kh[COMM_NKINDS], kd[COMM_NKINDS];
        comm_stats_take_kind(kh); /* reset */
        int sh = host_step(d, hg, g1, g2, t, lr_at(t), &nh);
        comm_stats_take_kind(kh);
        int sd = dev_step(&x, g1, g2, t, lr_at(t), &nd);
        comm_stats_take_kind(kd);
        for (int k = 0; k < COMM_NKINDS; k++)
            CHECK(kh[k].calls == kd[k].calls && kh[k].bytes_sent == kd[k].bytes_sent &&
                  kh[k].bytes_recv == kd[k].bytes_recv, "step %d, collective kind %d: host %llu calls %llu/%llu bytes, "
                  "device %llu calls %llu/%llu bytes", t, k, (unsigned long long)kh[k].calls,
                  (unsigned long long)kh[k].bytes_sent, (unsigned long long)kh[k].bytes_recv,
                  (unsigned long long)kd[k].calls, (unsigned long long)kd[k].bytes_sent,
                  (unsigned long long)kd[k].bytes_recv);
        CHECK(sh == sd, "step %d: host skipped=%d, device skipped=%d", t, sh, sd);
        double nrel = fabs((double)nh - (double)nd) / (fabs((double)nh) + 1e-30);
        if (nh == nh && nrel > worst_norm_rel) worst_norm_rel = nrel;
        CHECK(memcmp(&nh, &nd, 4) == 0 || (nh != nh && nd != nd),
              "step %d: g_hat norm host %.9g device %.9g (rel %.3g; summed in another order: a last-bit difference is "
              "possible, it matters only when the clip bites)", t, nh, nd, nrel);
        if (t == nan_step) {
            CHECK(sd == 1, "step %d: a NaN gradient did not skip the step (norm %g)", t, nd);
            float *after = download_master(&x);
            size_t nb_after;
            void *blob_after = save_blob(x.u, &nb_after);
            double w;
            size_t first = 0, bad = diff_floats(before, after, P, &w, &first);
            CHECK(bad == 0, "skipped step %d changed %zu master weights (first [%zu])", t, bad, first);
            CHECK(nb_before == nb_after && memcmp(blob_before, blob_after, nb_after) == 0,
                  "skipped step %d changed the optimizer state (%zu vs %zu bytes)", t, nb_before, nb_after);
            free(after); free(blob_after); free(before); free(blob_before);
        } else {
            if (nd > cfg.dist.clip) clipped++;
            else unclipped++;
        }
        float *dm = download_master(&x);
        double w;
        size_t first = 0, bad = diff_floats(hp, dm, P, &w, &first);
        if (w > worst_master) worst_master = w;
        bad_master_total += bad;
        CHECK(bad == 0, "step %d: %zu of %zu master weights differ from the host SCAPE, worst |diff| %.3g, first [%zu] "
              "host %.9g device %.9g", t, bad, P, w, first, hp[bad ? first : 0], dm[bad ? first : 0]);
        size_t nbh = distopt_state_bytes(d), nbd;
        void *bh = xmalloc(nbh, "blob");
        distopt_save(d, bh);
        void *bd = save_blob(x.u, &nbd);
        size_t fb = nbh == nbd ? first_diff_byte(bh, bd, nbh) : 0;
        CHECK(nbh == nbd && fb == nbh, "step %d: checkpoint blob differs from distopt_save's (%zu vs %zu bytes, first "
              "differing byte %zu, in %s)", t, nbh, nbd, fb, blob_section(bh, fb));
        /* SCAPE.md 9.5: the mask in use at step t (mask_cur after it) is the one made at t-1 (mask_next before) */
        BlobView v = blob_view(bd);
        if (!sd && prev_next && v.cur) {
            CHECK(memcmp(prev_next, v.cur, mask_bytes(P)) == 0, "step %d: the mask used is not the one made at step %d",
                  t, t - 1);
            lag_checked++;
        }
        if (!sd && v.next) {
            free(prev_next);
            prev_next = (uint8_t *)xmalloc(mask_bytes(P), "mask");
            memcpy(prev_next, v.next, mask_bytes(P));
        }
        if (rank_ == 0 && (t <= 2 || t == STEPS || t == nan_step))
            printf("  %s step %2d: norm %.9g (host %.9g), K %llu of %zu%s\n", test_name_, t, nd, nh, v.K, P,
                   sd ? " skipped" : "");
        free(bh); free(bd); free(dm);
    }
    CHECK(clipped > 0 && unclipped > 0, "clipping: %d clipped steps, %d unclipped; both kinds wanted", clipped,
          unclipped);
    if (density < 1.0f) CHECK(lag_checked >= STEPS - 2, "the mask lag was checked on %d steps only", lag_checked);
    if (rank_ == 0)
        printf("  %s: %d ranks, %d steps (%d clipped), %zu master weights differ in all, worst |diff| %.3g, worst "
               "norm rel diff %.3g, mask lag checked on %d steps\n", test_name_, world_, STEPS, clipped,
               bad_master_total, worst_master, worst_norm_rel, lag_checked);
    free(prev_next);
    dev_free(&x);
    distopt_free(d);
    free(init); free(hp); free(hg); free(g1); free(g2);
}

TEST(scape_d01_warmup_matches_host_bitwise) { vs_host(test_name_, 0.1f, 4, 0); }
TEST(scape_d1_matches_host_bitwise) { vs_host(test_name_, 1.0f, 0, 0); }
TEST(scape_d01_no_warmup_bootstrap_matches_host_bitwise) { vs_host(test_name_, 0.1f, 0, 0); }
TEST(scape_nonfinite_gradient_skips_like_host) { vs_host(test_name_, 0.1f, 4, 5); }
TEST(scape_offload_residual_matches_host_bitwise) {
    offload_ = 1;
    vs_host(test_name_, 0.1f, 4, 0);
    offload_ = 0;
}
TEST(scape_offload_residual_nonfinite_skips_like_host) {
    offload_ = 1;
    vs_host(test_name_, 0.1f, 0, 3);
    offload_ = 0;
}

/* --scape-payload bf16: the rounded payload, its exact mean and the errors fed back into r (host: dist.c with
 * comm_iallreduce_avg_bf16), with the residual resident and offloaded, and a NaN step */
TEST(scape_bf16_payload_matches_host_bitwise) {
    bf16_payload_ = 1;
    vs_host(test_name_, 0.1f, 4, 0);
    bf16_payload_ = 0;
}
TEST(scape_bf16_payload_offload_matches_host_bitwise) {
    bf16_payload_ = offload_ = 1;
    vs_host(test_name_, 0.1f, 0, 0);
    bf16_payload_ = offload_ = 0;
}
TEST(scape_bf16_payload_nonfinite_skips_like_host) {
    bf16_payload_ = 1;
    vs_host(test_name_, 0.1f, 4, 3);
    bf16_payload_ = 0;
}

/* --zero 1 (cuda/dist_scape_zero.cuh) against the host's sharded SCAPE (optim/dist_scape_zero.c): master, blob
 * (the unsharded layout: m gathered, r unfolded), norm and the collectives per kind (reduce-scatters, the control
 * all-reduce of the chunk sums, the sync's two all-gathers) as in vs_host; with warm-up and clipping, the step-1
 * bootstraps, and a NaN step */
TEST(scape_zero_matches_host_zero_bitwise) {
    zero_ = 1;
    vs_host(test_name_, 0.1f, 4, 0);
    zero_ = 0;
}
TEST(scape_zero_bootstraps_match_host_zero_bitwise) {
    zero_ = 1;
    vs_host(test_name_, 0.1f, 0, 0);
    vs_host(test_name_, 1.0f, 0, 0);
    zero_ = 0;
}
TEST(scape_zero_nonfinite_gradient_skips_like_host) {
    zero_ = 1;
    vs_host(test_name_, 0.1f, 4, 5);
    zero_ = 0;
}
/* --zero 1 with the bf16 payload: the owners' bf16 means (send/recv to the owner under NCCL), the mean's error in
 * the owner's residual, the rounding losses kept apart (ez) so that the fold and the blob stay exact */
TEST(scape_zero_bf16_payload_matches_host_zero_bitwise) {
    zero_ = bf16_payload_ = 1;
    vs_host(test_name_, 0.1f, 4, 0);
    vs_host(test_name_, 0.1f, 0, 3);
    zero_ = bf16_payload_ = 0;
}

/* ---- mask statistics (DistMaskStats) on the device against the host's distopt_mask_stats ---- */

/* equal doubles: the same bits, or both NaN */
static int same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); }
/* |a - b| / |b| (0 when equal, also for two NaNs or zeros; inf when only one is NaN) */
static double rel_double(double a, double b) {
    if (same_double(a, b)) return 0;
    if (a != a || b != b) return INFINITY;
    return fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1e-300);
}

/* Device SCAPE with statistics vs the host DistOptim with statistics vs device SCAPE without them, STEPS steps,
 * statistics enabled on the steps stats_on(t) says (the enable called before the step's gradients, as
 * trainer/train.c does). Per step, both or neither report (rank 0 only; NULL when off or skipped); then:
 *   slices, step: equal; jaccard_m, jaccard_g and their means: bitwise (integer popcounts divided alike; NaN where
 *   the previous step's mask is missing); energy_m, energy_g: relative difference <= 2 * numel * DBL_EPSILON, the
 *   a priori bound for two sums of numel positive doubles (kept / all) added in different orders (the terms
 *   x_j^2 of floats are exact in double); their means: <= 2 * P * DBL_EPSILON. The run with statistics and the
 *   run without have bitwise equal master weights, floatX copies and checkpoint blobs after every step. */
static int stats_skip_4(int t) { return t != 4; }
static int stats_always(int t) { return 1; }
static void mask_stats_vs_host(const char *test_name_, int warmup, int nan_step, int (*stats_on)(int)) {
    UpdaterConfig cfg = config(0.1f, warmup, 1.0f);
    float *init = initial_params();
    float *hp = (float *)xmalloc(P * sizeof(float), "host params"), *hg = (float *)xcalloc(P, sizeof(float), "grads");
    memcpy(hp, init, P * sizeof(float));
    DistOptim *d = distopt_create(&tab, hp, hg, &cfg.dist);
    Dev x, y; /* x: with statistics, y: without */
    dev_init(&x, init, &cfg);
    dev_init(&y, init, &cfg);
    float *g1 = (float *)xmalloc(P * sizeof(float), "g"), *g2 = (float *)xmalloc(P * sizeof(float), "g");
    int compared = 0, nan_jm = 0, nan_jg = 0, fin_jm = 0, fin_jg = 0, state_bad = 0;
    double worst_e = 0, worst_e_over_tol = 0, worst_mean_e = 0;
    for (int t = 1; t <= STEPS; t++) {
        gen(g1, t, 0, nan_step);
        gen(g2, t, 1, nan_step);
        const int on = stats_on(t);
        distopt_mask_stats_enable(d, on);
        x.u->mask_stats_enable(x.u, on);
        float nh, nx, ny;
        int sh = host_step(d, hg, g1, g2, t, lr_at(t), &nh);
        int sx = dev_step(&x, g1, g2, t, lr_at(t), &nx);
        int sy = dev_step(&y, g1, g2, t, lr_at(t), &ny);
        CHECK(sh == sx && sx == sy, "step %d: skipped host %d, device with statistics %d, without %d", t, sh, sx, sy);
        const DistMaskStats *a = distopt_mask_stats(d), *b = x.u->mask_stats(x.u);
        CHECK(y.u->mask_stats(y.u) == NULL, "step %d: statistics reported by the update that never enabled them", t);
        CHECK((a == NULL) == (b == NULL), "step %d (stats %s, skipped %d): host statistics %s, device %s", t,
              on ? "on" : "off", sh, a ? "present" : "NULL", b ? "present" : "NULL");
        const int want = on && !sh && rank_ == 0;
        CHECK((b != NULL) == want, "step %d (stats %s, skipped %d, rank %d): device statistics %s", t, on ? "on" : "off",
              sh, rank_, b ? "present" : "NULL");
        if (a && b) {
            compared++;
            CHECK(a->step == t && b->step == t, "step %d: statistics of step host %d, device %d", t, a->step, b->step);
            CHECK(a->n == b->n && a->n > 0, "step %d: %d sparse slices on the host, %d on the device", t, a->n, b->n);
            CHECK(b->jaccard_m && b->energy_m && b->jaccard_g && b->energy_g, "step %d: a device array is NULL", t);
            for (int k = 0; k < a->n && k < b->n && b->jaccard_m; k++) {
                const size_t numel = tab.slices[a->slice[k]].numel;
                const double tol = 2.0 * (double)numel * DBL_EPSILON;
                CHECK(a->slice[k] == b->slice[k], "step %d: reported slice %d is %d on the host, %d on the device", t,
                      k, a->slice[k], b->slice[k]);
                CHECK(same_double(a->jaccard_m[k], b->jaccard_m[k]), "step %d slice %d: jaccard_m host %.17g device "
                      "%.17g", t, a->slice[k], a->jaccard_m[k], b->jaccard_m[k]);
                CHECK(same_double(a->jaccard_g[k], b->jaccard_g[k]), "step %d slice %d: jaccard_g host %.17g device "
                      "%.17g", t, a->slice[k], a->jaccard_g[k], b->jaccard_g[k]);
                const double em = rel_double(b->energy_m[k], a->energy_m[k]), eg = rel_double(b->energy_g[k], a->energy_g[k]);
                CHECK(em <= tol && eg <= tol, "step %d slice %d (%zu elements): energy_m host %.17g device %.17g (rel "
                      "%.3g), energy_g host %.17g device %.17g (rel %.3g); tolerance %.3g", t, a->slice[k], numel,
                      a->energy_m[k], b->energy_m[k], em, a->energy_g[k], b->energy_g[k], eg, tol);
                const double e = em > eg ? em : eg;
                if (!(e <= worst_e)) worst_e = e;
                if (!(e / tol <= worst_e_over_tol)) worst_e_over_tol = e / tol;
                nan_jm += a->jaccard_m[k] != a->jaccard_m[k];
                nan_jg += a->jaccard_g[k] != a->jaccard_g[k];
                fin_jm += a->jaccard_m[k] == a->jaccard_m[k];
                fin_jg += a->jaccard_g[k] == a->jaccard_g[k];
            }
            CHECK(same_double(a->mean_jaccard_m, b->mean_jaccard_m) && same_double(a->mean_jaccard_g, b->mean_jaccard_g),
                  "step %d: mean jaccard_m host %.17g device %.17g, mean jaccard_g host %.17g device %.17g", t,
                  a->mean_jaccard_m, b->mean_jaccard_m, a->mean_jaccard_g, b->mean_jaccard_g);
            const double tol = 2.0 * (double)P * DBL_EPSILON;
            const double mm = rel_double(b->mean_energy_m, a->mean_energy_m), mg = rel_double(b->mean_energy_g, a->mean_energy_g);
            CHECK(mm <= tol && mg <= tol, "step %d: mean energy_m host %.17g device %.17g (rel %.3g), mean energy_g "
                  "host %.17g device %.17g (rel %.3g); tolerance %.3g", t, a->mean_energy_m, b->mean_energy_m, mm,
                  a->mean_energy_g, b->mean_energy_g, mg, tol);
            if (!(mm <= worst_mean_e)) worst_mean_e = mm;
            if (!(mg <= worst_mean_e)) worst_mean_e = mg;
            if (t <= 3 || t == STEPS)
                printf("  %s step %2d: mean jaccard_m %.6f jaccard_g %.6f energy_m %.6f energy_g %.6f (host %.6f %.6f "
                       "%.6f %.6f)\n", test_name_, t, b->mean_jaccard_m, b->mean_jaccard_g, b->mean_energy_m,
                       b->mean_energy_g, a->mean_jaccard_m, a->mean_jaccard_g, a->mean_energy_m, a->mean_energy_g);
        }
        /* the statistics change nothing: x and y hold the same state */
        float *mx = download_master(&x), *my = download_master(&y);
        void *cx = download_copy(&x), *cy = download_copy(&y);
        size_t nbx, nby;
        void *bx = save_blob(x.u, &nbx), *by = save_blob(y.u, &nby);
        double w;
        size_t first = 0, bad = diff_floats(mx, my, P, &w, &first);
        size_t fb = nbx == nby ? first_diff_byte(bx, by, nbx) : 0;
        const int same = bad == 0 && memcmp(cx, cy, P * sizeof(floatX)) == 0 && nbx == nby && fb == nbx;
        CHECK(same, "step %d: with statistics the state differs from without: %zu master weights (first [%zu]), "
              "copies %s, blobs %zu vs %zu bytes, first differing byte %zu in %s", t, bad, first,
              memcmp(cx, cy, P * sizeof(floatX)) ? "differ" : "equal", nbx, nby, fb, blob_section(bx, fb));
        state_bad += !same;
        size_t bad_host = diff_floats(hp, mx, P, &w, &first);
        CHECK(bad_host == 0, "step %d: with statistics %zu master weights differ from the host's, first [%zu]", t,
              bad_host, first);
        free(mx); free(my); free(cx); free(cy); free(bx); free(by);
    }
    if (rank_ == 0) {
        /* the case covered what it claims: Jaccards with and without a previous mask (step 1 has neither) */
        CHECK(compared > 0 && fin_jm > 0 && fin_jg > 0, "%d steps compared, %d finite jaccard_m, %d finite jaccard_g",
              compared, fin_jm, fin_jg);
        CHECK(nan_jm > 0 && nan_jg > 0, "no step without M_{t-1} (%d NAN jaccard_m) or G_{t-1} (%d NAN jaccard_g) "
              "was compared", nan_jm, nan_jg);
        printf("  %s: %d steps compared, jaccard bitwise (%d/%d slice values NAN m/g), worst energy rel diff %.3g "
               "(%.3g of the tolerance), worst mean energy rel diff %.3g; with vs without statistics: %d steps "
               "differ\n", test_name_, compared, nan_jm, nan_jg, worst_e, worst_e_over_tol, worst_mean_e, state_bad);
    }
    dev_free(&x);
    dev_free(&y);
    distopt_free(d);
    free(init); free(hp); free(hg); free(g1); free(g2);
}
/* warm-up (k changes every step), statistics off at step 4 (step 5's jaccard_g is NAN, jaccard_m is not), a NaN
 * gradient at step 7 (skipped: no statistics; step 8's jaccard_g is NAN) */
TEST(mask_stats_match_host_warmup_gap_and_skip) { mask_stats_vs_host(test_name_, 4, 7, stats_skip_4); }
/* step-1 bootstrap by top-k (step 1's jaccard_m is NAN), residual offloaded */
TEST(mask_stats_match_host_bootstrap_offload) {
    offload_ = 1;
    mask_stats_vs_host(test_name_, 0, 0, stats_always);
    offload_ = 0;
}

/* runs steps [from, to] of the device update */
static void dev_run(Dev *x, int from, int to) {
    float *g1 = (float *)xmalloc(P * sizeof(float), "g"), *g2 = (float *)xmalloc(P * sizeof(float), "g");
    for (int t = from; t <= to; t++) {
        gen(g1, t, 0, 0);
        gen(g2, t, 1, 0);
        float n;
        dev_step(x, g1, g2, t, lr_at(t), &n);
    }
    free(g1); free(g2);
}

/* SCAPE.md 9.1 on the device: d = 1 is dense AdamS (the device's own), r stays exactly 0 */
TEST(inv1_density_one_equals_device_adams_residual_zero) {
    float *init = initial_params();
    UpdaterConfig cs = config(1.0f, 0, 1.0f), ca = cs;
    ca.dist.opt.kind = OPT_ADAMS;
    Dev xs, xa;
    dev_init(&xs, init, &cs);
    dev_init(&xa, init, &ca);
    float *g1 = (float *)xmalloc(P * sizeof(float), "g"), *g2 = (float *)xmalloc(P * sizeof(float), "g");
    double worst = 0;
    for (int t = 1; t <= STEPS; t++) {
        gen(g1, t, 0, 0);
        gen(g2, t, 1, 0);
        float ns, na;
        dev_step(&xs, g1, g2, t, lr_at(t), &ns);
        dev_step(&xa, g1, g2, t, lr_at(t), &na);
        size_t n;
        void *b = save_blob(xs.u, &n);
        BlobView v = blob_view(b);
        size_t nz = 0;
        for (size_t j = 0; j < P; j++) nz += v.r[j] != 0.0f;
        CHECK(nz == 0, "step %d: %zu residual entries are non-zero at density 1", t, nz);
        CHECK(v.K == P, "step %d: K = %llu, expected P = %zu at density 1", t, v.K, P);
        free(b);
    }
    float *ms = download_master(&xs), *ma = download_master(&xa);
    for (size_t j = 0; j < P; j++) {
        /* test_dist.c's max_rel_diff: |a - b| / (|b| + 1e-3) */
        double r = fabs((double)ms[j] - (double)ma[j]) / (fabs((double)ma[j]) + 1e-3);
        if (!(r <= worst)) worst = r;
    }
    /* one rank only: with several ranks the averaged gradient of a coordinate can nearly cancel, and then g_hat's
     * different rounding flips AdamS's sign-like first step there (the difference then is about 2 lr, printed) */
    if (world_ == 1)
        CHECK(worst < 1e-5, "after %d steps SCAPE(d=1) and AdamS masters differ by rel %.3g (want < 1e-5)", STEPS, worst);
    if (rank_ == 0)
        printf("  d=1 vs device AdamS after %d steps: worst rel diff %.3g%s, r == 0 throughout\n", STEPS, worst,
               world_ == 1 ? "" : " (not asserted with several ranks)");
    free(ms); free(ma); free(g1); free(g2); free(init);
    dev_free(&xs);
    dev_free(&xa);
}

/* SCAPE.md 9.2 on the device, one rank, no clipping: the averaged payload is c itself on M_t, so after the step
 * m = c on M_t and r = c off it: m + r == c bit for bit and m * r == 0. c = b1 m + (1 - b1) g + r recomputed here
 * from the previous blob (this file is compiled without FMA contraction). */
TEST(inv2_conservation_on_device) {
    float *init = initial_params();
    UpdaterConfig cfg = config(0.1f, 4, 0.0f);
    Dev x;
    dev_init(&x, init, &cfg);
    float *g1 = (float *)xmalloc(P * sizeof(float), "g"), *g2 = (float *)xmalloc(P * sizeof(float), "g");
    float *m_prev = (float *)xcalloc(P, sizeof(float), "m"), *r_prev = (float *)xcalloc(P, sizeof(float), "r");
    float *m_new = (float *)xmalloc(P * sizeof(float), "m");
    const float b1 = cfg.dist.opt.beta1, omb1 = 1.0f - b1;
    size_t bad_total = 0, overlap_total = 0;
    for (int t = 1; t <= STEPS; t++) {
        gen(g1, t, 0, 0);
        gen(g2, t, 1, 0);
        float n;
        dev_step(&x, g1, g2, t, lr_at(t), &n);
        size_t nb;
        void *b = save_blob(x.u, &nb);
        BlobView v = blob_view(b);
        blob_dense_m(&v, m_new);
        size_t bad = 0, overlap = 0, first = 0;
        float want_first = 0, got_first = 0;
        for (size_t j = 0; j < P; j++) {
            volatile float g = 0.0f + g1[j];
            g = g + g2[j];
            volatile float c1 = b1 * m_prev[j];
            volatile float c2 = omb1 * g;
            volatile float c12 = c1 + c2;
            float c = c12 + r_prev[j];
            float sum = m_new[j] + v.r[j];
            if (memcmp(&sum, &c, 4) != 0) {
                if (!bad) { first = j; want_first = c; got_first = sum; }
                bad++;
            }
            overlap += m_new[j] != 0.0f && v.r[j] != 0.0f;
        }
        CHECK(bad == 0, "step %d: m + r != c at %zu of %zu coordinates, first [%zu] c %.9g, m + r %.9g", t, bad, P,
              first, want_first, got_first);
        CHECK(overlap == 0, "step %d: m and r both non-zero at %zu coordinates", t, overlap);
        bad_total += bad;
        overlap_total += overlap;
        memcpy(m_prev, m_new, P * sizeof(float));
        memcpy(r_prev, v.r, P * sizeof(float));
        free(b);
    }
    printf("  conservation over %d steps: %zu coordinates off, %zu overlaps\n", STEPS, bad_total, overlap_total);
    free(g1); free(g2); free(m_prev); free(r_prev); free(m_new); free(init);
    dev_free(&x);
}

/* resumed_offload: the resumed run offloads its residual (the uninterrupted one does not): offload on and off
 * then give the same results, and a blob written without offload loads into an offloading update */
static void save_load_continue(const char *test_name_, int resumed_offload) {
    float *init = initial_params();
    UpdaterConfig cfg = config(0.1f, 4, 1.0f), cfg_resumed = cfg;
    cfg_resumed.scape_offload_residual = resumed_offload;
    Dev full, resumed;
    dev_init(&full, init, &cfg);
    dev_run(&full, 1, 5);
    size_t n5;
    void *blob5 = save_blob(full.u, &n5);
    float *master5 = download_master(&full);
    dev_run(&full, 6, STEPS);
    dev_init(&resumed, master5, &cfg_resumed);
    const void *blobs[1] = {blob5};
    resumed.u->load(resumed.u, blobs, &n5, 1);
    dev_run(&resumed, 6, STEPS);
    float *ma = download_master(&full), *mb = download_master(&resumed);
    void *ca = download_copy(&full), *cb = download_copy(&resumed);
    size_t na, nb;
    void *ba = save_blob(full.u, &na), *bb = save_blob(resumed.u, &nb);
    double w;
    size_t first = 0, bad = diff_floats(ma, mb, P, &w, &first);
    CHECK(bad == 0, "after resume at 5: %zu master weights differ at step %d, worst %.3g, first [%zu]", bad, STEPS, w,
          first);
    CHECK(memcmp(ca, cb, P * sizeof(floatX)) == 0, "after resume at 5: the floatX copies differ at step %d", STEPS);
    size_t fb = na == nb ? first_diff_byte(ba, bb, na) : 0;
    CHECK(na == nb && fb == na, "after resume at 5: the optimizer states differ at step %d (%zu vs %zu bytes, first "
          "byte %zu in %s)", STEPS, na, nb, fb, blob_section(ba, fb));
    if (rank_ == 0)
        printf("  resume at 5%s, continue to %d: %zu master weights differ\n",
               resumed_offload ? " with the residual offloaded" : "", STEPS, bad);
    free(ma); free(mb); free(ca); free(cb); free(ba); free(bb); free(blob5); free(master5); free(init);
    dev_free(&full);
    dev_free(&resumed);
}
TEST(save_load_continue_is_bitwise) { save_load_continue(test_name_, 0); }

/* --zero 1 on the device against the unsharded device SCAPE over 10 steps, and checkpoints across the layouts:
 * the sharded run equals the unsharded one bit for bit (master, floatX copy, blob after every step; the payload's
 * sums are added in the same order by the MPI reduce-scatter and all-reduce, and by NCCL's reduce and all-reduce
 * here), its state is smaller (m compact on this rank's part of the mask, against m dense over P), and a
 * checkpoint of either at step 5 resumed by the other continues bitwise like the uninterrupted unsharded run */
TEST(scape_zero_equals_unsharded_device_and_resumes_across_layouts) {
    float *init = initial_params();
    UpdaterConfig cu = config(0.1f, 4, 1.0f), cz = cu;
    cz.dist.zero = 1;
    Dev xu, xz;
    dev_init(&xu, init, &cu);
    dev_init(&xz, init, &cz);
    void *blob_u5 = NULL, *blob_z5 = NULL;
    size_t nu5 = 0, nz5 = 0, bad_total = 0;
    float *master5 = NULL;
    for (int t = 1; t <= STEPS; t++) {
        dev_run(&xu, t, t);
        dev_run(&xz, t, t);
        float *mu = download_master(&xu), *mz = download_master(&xz);
        void *cpu_ = download_copy(&xu), *cpz = download_copy(&xz);
        double w;
        size_t first = 0, bad = diff_floats(mu, mz, P, &w, &first);
        bad_total += bad;
        CHECK(bad == 0, "step %d: %zu master weights differ between sharded and unsharded, worst %.3g, first [%zu]", t,
              bad, w, first);
        CHECK(memcmp(cpu_, cpz, P * sizeof(floatX)) == 0, "step %d: the floatX copies differ", t);
        size_t nu, nz;
        void *bu = save_blob(xu.u, &nu), *bz = save_blob(xz.u, &nz);
        size_t fb = nu == nz ? first_diff_byte(bu, bz, nu) : 0;
        CHECK(nu == nz && fb == nu, "step %d: sharded and unsharded blobs differ (%zu vs %zu bytes, first byte %zu in "
              "%s)", t, nu, nz, fb, blob_section(bu, fb));
        if (t == 5) {
            blob_u5 = bu;
            blob_z5 = bz;
            nu5 = nu;
            nz5 = nz;
            master5 = mu;
        } else {
            free(bu); free(bz); free(mu);
        }
        free(mz); free(cpu_); free(cpz);
    }
    /* after the warm-up: m compact on this rank's part of the mask (d = 0.1) against m dense over P */
    const size_t mem_u = xu.u->memory_bytes(xu.u), mem_z = xz.u->memory_bytes(xz.u);
    CHECK(mem_z < mem_u, "sharded state %zu bytes at step %d, not below the unsharded %zu", mem_z, STEPS, mem_u);
    /* unsharded checkpoint -> sharded run, and sharded checkpoint -> unsharded run, steps 6..10 */
    for (int dir = 0; dir < 2; dir++) {
        Dev y;
        dev_init(&y, master5, dir == 0 ? &cz : &cu);
        const void *blobs[1] = {dir == 0 ? blob_u5 : blob_z5};
        size_t n = dir == 0 ? nu5 : nz5;
        y.u->load(y.u, blobs, &n, 1);
        dev_run(&y, 6, STEPS);
        float *ma = download_master(&xu), *mb = download_master(&y);
        double w;
        size_t first = 0, bad = diff_floats(ma, mb, P, &w, &first);
        CHECK(bad == 0, "%s checkpoint at 5 resumed %s: %zu master weights differ at step %d, worst %.3g, first [%zu]",
              dir == 0 ? "an unsharded" : "a sharded", dir == 0 ? "sharded" : "unsharded", bad, STEPS, w, first);
        size_t na, nb;
        void *ba = save_blob(xu.u, &na), *bb = save_blob(y.u, &nb);
        size_t fb = na == nb ? first_diff_byte(ba, bb, na) : 0;
        CHECK(na == nb && fb == na, "%s checkpoint resumed: blobs differ at step %d (first byte %zu in %s)",
              dir == 0 ? "unsharded" : "sharded", STEPS, fb, blob_section(ba, fb));
        free(ma); free(mb); free(ba); free(bb);
        dev_free(&y);
    }
    if (rank_ == 0)
        printf("  zero vs unsharded, %d ranks, %d steps: %zu master weights differ; state %zu vs %zu bytes; both "
               "checkpoint directions resumed\n", world_, STEPS, bad_total, mem_z, mem_u);
    free(blob_u5); free(blob_z5); free(master5); free(init);
    dev_free(&xu);
    dev_free(&xz);
}
TEST(offload_resume_equals_no_offload_bitwise) { save_load_continue(test_name_, 1); }
/* the same save at 5, load, steps 6-10 with --zero 1, fp32 and bf16 payloads (the sharded blob: m gathered, r
 * unfolded, folded again at the load) */
TEST(scape_zero_save_load_continue_is_bitwise) {
    zero_ = 1;
    save_load_continue(test_name_, 0);
    bf16_payload_ = 1;
    save_load_continue(test_name_, 0);
    zero_ = bf16_payload_ = 0;
}

/* a CPU checkpoint resumed on the GPU: the host DistOptim's blob and params at step 5 loaded into a new device
 * update, steps 6-10 on both: bitwise equal (and the device blob equals distopt_save's) */
TEST(host_checkpoint_resumed_on_device_is_bitwise) {
    float *init = initial_params();
    UpdaterConfig cfg = config(0.1f, 4, 1.0f);
    float *hp = (float *)xmalloc(P * sizeof(float), "host params"), *hg = (float *)xcalloc(P, sizeof(float), "grads");
    memcpy(hp, init, P * sizeof(float));
    DistOptim *d = distopt_create(&tab, hp, hg, &cfg.dist);
    float *g1 = (float *)xmalloc(P * sizeof(float), "g"), *g2 = (float *)xmalloc(P * sizeof(float), "g");
    float n;
    for (int t = 1; t <= 5; t++) {
        gen(g1, t, 0, 0);
        gen(g2, t, 1, 0);
        host_step(d, hg, g1, g2, t, lr_at(t), &n);
    }
    size_t n5 = distopt_state_bytes(d);
    void *blob5 = xmalloc(n5, "blob");
    distopt_save(d, blob5);
    Dev x;
    dev_init(&x, hp, &cfg);
    const void *blobs[1] = {blob5};
    x.u->load(x.u, blobs, &n5, 1);
    for (int t = 6; t <= STEPS; t++) {
        gen(g1, t, 0, 0);
        gen(g2, t, 1, 0);
        host_step(d, hg, g1, g2, t, lr_at(t), &n);
        dev_step(&x, g1, g2, t, lr_at(t), &n);
    }
    float *dm = download_master(&x);
    double w;
    size_t first = 0, bad = diff_floats(hp, dm, P, &w, &first);
    CHECK(bad == 0, "host checkpoint at 5 resumed on the device: %zu master weights differ at step %d, worst %.3g, "
          "first [%zu]", bad, STEPS, w, first);
    size_t nh = distopt_state_bytes(d), nd;
    void *bh = xmalloc(nh, "blob");
    distopt_save(d, bh);
    void *bd = save_blob(x.u, &nd);
    size_t fb = nh == nd ? first_diff_byte(bh, bd, nh) : 0;
    CHECK(nh == nd && fb == nh, "host checkpoint resumed on the device: blobs differ at step %d (%zu vs %zu bytes, "
          "first byte %zu in %s)", STEPS, nh, nd, fb, blob_section(bh, fb));
    if (rank_ == 0) printf("  host blob at 5 -> device, continue to %d: %zu master weights differ\n", STEPS, bad);
    free(dm); free(bh); free(bd); free(blob5); free(g1); free(g2); free(init); free(hp); free(hg);
    dev_free(&x);
    distopt_free(d);
}

#ifndef CUDA_EMU
/* ---- timings on GPT-2 124M's table (GPU only; "time" lines, nothing asserted) ---- */

/* g[i] = uniform(-1e-3, 1e-3) from a hash of (i, t): a fresh gradient per step, generated on the device */
__global__ static void fill_grads_kernel(float *g, long n, uint32_t t) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = 1e-3f * (2.0f * (float)(hash_u32((uint32_t)i, t * 0x9E3779B9u) >> 8) / 16777216.0f - 1.0f);
}

/* ms per step (steps 3..reps+2: after the bootstrap) of the update described by cfg, the gradient handed over
 * bucket by bucket, until the gradients are zeroed again (dm.grads_free: SCAPE's top-k and zeroing run on its
 * communication stream, after the compute stream's update); *mem_mib: about the device memory the update holds
 * (cudaMemGetInfo before / after dev_init, less the model's buffers) */
static double time_update(const UpdaterConfig *cfg, int reps, double *mem_mib) {
    float *init = (float *)xcalloc(P, sizeof(float), "params");
    size_t free0 = 0, free1 = 0, total = 0;
    cudaCheck(cudaMemGetInfo(&free0, &total));
    Dev x;
    dev_init(&x, init, cfg);
    cudaCheck(cudaMemGetInfo(&free1, &total));
    /* less the model's own buffers dev_init allocates (master, gradients, floatX copy) */
    double model = (double)P * (2 * sizeof(float) + (sizeof(floatX) == sizeof(float) ? 0 : sizeof(floatX)));
    *mem_mib = ((double)free0 - (double)free1 - model) / 1048576.0;
    double ms = 0;
    for (int t = 1; t <= reps + 2; t++) {
        cudaCheck(cudaStreamWaitEvent(x.dm.stream, x.dm.grads_free, 0)); /* the last step's zeroing (device_model.h) */
        fill_grads_kernel<<<ceil_div((long)P, 256), 256, 0, x.dm.stream>>>(x.dm.grads, (long)P, (uint32_t)t);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaStreamSynchronize(x.dm.stream));
        double t0 = now_seconds();
        for (int b = 0; b < tab.num_buckets; b++) x.u->bucket_ready(x.u, b);
        float n;
        x.u->step(x.u, t, 1e-4f, &n);
        cudaCheck(cudaStreamSynchronize(x.dm.stream));
        cudaCheck(cudaEventSynchronize(x.dm.grads_free));
        if (t > 2) ms += 1e3 * (now_seconds() - t0);
    }
    dev_free(&x);
    free(init);
    return ms / reps;
}

static void time_gpt2_124m(void) {
    ParamTable small = tab;
    size_t small_P = P;
    memset(&tab, 0, sizeof tab);
    const int L = 12;
    const size_t C = 768;
    size_t wte[2] = {50304, C}, wpe[2] = {1024, C}, c1[1] = {C}, c3[1] = {3 * C}, c4[1] = {4 * C};
    size_t qkvw[2] = {3 * C, C}, attprojw[2] = {C, C}, fcw[2] = {4 * C, C}, fcprojw[2] = {C, 4 * C};
    param_table_add(&tab, "wte", -1, L, 1, 2, wte);
    param_table_add(&tab, "wpe", -1, L, 1, 2, wpe);
    struct { const char *name; int decay, ndim; size_t *shape; } per[] = {
        {"ln1w", 0, 1, c1}, {"ln1b", 0, 1, c1}, {"qkvw", 1, 2, qkvw}, {"qkvb", 0, 1, c3}, {"attprojw", 1, 2, attprojw},
        {"attprojb", 0, 1, c1}, {"ln2w", 0, 1, c1}, {"ln2b", 0, 1, c1}, {"fcw", 1, 2, fcw}, {"fcb", 0, 1, c4},
        {"fcprojw", 1, 2, fcprojw}, {"fcprojb", 0, 1, c1}};
    for (size_t k = 0; k < sizeof per / sizeof per[0]; k++)
        for (int l = 0; l < L; l++) param_table_add(&tab, per[k].name, l, L - 1 - l, per[k].decay, per[k].ndim, per[k].shape);
    param_table_add(&tab, "lnfw", -1, L, 0, 1, c1);
    param_table_add(&tab, "lnfb", -1, L, 0, 1, c1);
    P = tab.total;
    const int reps = 5;
    UpdaterConfig adams = config(1.0f, 0, 1.0f), sc = config(0.01f, 0, 1.0f), off = sc;
    adams.dist.opt.kind = OPT_ADAMS;
    off.scape_offload_residual = 1;
    double mem_a, mem_s, mem_o;
    double ta = time_update(&adams, reps, &mem_a), ts = time_update(&sc, reps, &mem_s), to = time_update(&off, reps, &mem_o);
    printf("time device_adams_gpt2_124m: %.3f ms per step (P=%zu), update state %.1f MiB\n", ta, P, mem_a);
    printf("time device_scape_d0.01_gpt2_124m: %.3f ms per step (%+.1f%% vs AdamS; one rank: no communication), "
           "update state %.1f MiB\n", ts, 100.0 * (ts - ta) / ta, mem_s);
    printf("time device_scape_d0.01_offload_gpt2_124m: %.3f ms per step, update state %.1f MiB (%.1f MiB less than "
           "without offload)\n", to, mem_o, mem_s - mem_o);
    param_table_free(&tab);
    tab = small;
    P = small_P;
}
#endif

int main(int argc, char **argv) {
    cuda_require_device("test_scape_updater");
    comm_init(&argc, &argv);
    rank_ = comm_rank();
    world_ = comm_world();
    int ndev = 0;
    cudaCheck(cudaGetDeviceCount(&ndev));
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    cudaCheck(cudaSetDevice(lr ? atoi(lr) % ndev : 0));
    if (argc > 1 && !strcmp(argv[1], "nccl")) {
        const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        const int local = ls ? atoi(ls) : world_;
        if (world_ != 2 || local > ndev || !device_updater_has_nccl()) {
            if (rank_ == 0)
                printf("FAIL scape_nccl_cases: asked for NCCL, which needs 2 ranks with a GPU each and NCCL in the "
                       "build; here %d rank%s, %d on this node, %d GPU%s, NCCL %s\n", world_, world_ == 1 ? "" : "s",
                       local, ndev, ndev == 1 ? "" : "s", device_updater_has_nccl() ? "built in" : "not built in");
            comm_finalize();
            return 1;
        }
        comm_ = COMM_BACKEND_NCCL;
    }
    build_table();
    /* the NCCL bf16 reduce-scatter of --zero in rounds of 4096 values (scape_zero_comm_bucket_bf16), so that the
     * embedding's part takes several */
    setenv("SCAPE_TEST_ZERO_CHUNK", "4096", 1);
    if (rank_ == 0)
        printf("  %d slices, %d buckets, P=%zu, %d rank%s, " PRECISION_NAME "%s\n", tab.n, tab.num_buckets, P, world_,
               world_ == 1 ? "" : "s", comm_ == COMM_BACKEND_NCCL ? ", NCCL" : "");
    RUN_TEST(scape_d01_warmup_matches_host_bitwise);
    RUN_TEST(scape_d1_matches_host_bitwise);
    RUN_TEST(scape_d01_no_warmup_bootstrap_matches_host_bitwise);
    RUN_TEST(scape_nonfinite_gradient_skips_like_host);
    RUN_TEST(scape_offload_residual_matches_host_bitwise);
    RUN_TEST(scape_offload_residual_nonfinite_skips_like_host);
    RUN_TEST(scape_bf16_payload_matches_host_bitwise);
    RUN_TEST(scape_bf16_payload_offload_matches_host_bitwise);
    RUN_TEST(scape_bf16_payload_nonfinite_skips_like_host);
    RUN_TEST(scape_zero_matches_host_zero_bitwise);
    RUN_TEST(scape_zero_bootstraps_match_host_zero_bitwise);
    RUN_TEST(scape_zero_nonfinite_gradient_skips_like_host);
    RUN_TEST(scape_zero_bf16_payload_matches_host_zero_bitwise);
    RUN_TEST(mask_stats_match_host_warmup_gap_and_skip);
    RUN_TEST(mask_stats_match_host_bootstrap_offload);
    RUN_TEST(inv1_density_one_equals_device_adams_residual_zero);
    if (world_ == 1) RUN_TEST(inv2_conservation_on_device);
    RUN_TEST(save_load_continue_is_bitwise);
    RUN_TEST(offload_resume_equals_no_offload_bitwise);
    RUN_TEST(scape_zero_save_load_continue_is_bitwise);
    RUN_TEST(scape_zero_equals_unsharded_device_and_resumes_across_layouts);
    RUN_TEST(host_checkpoint_resumed_on_device_is_bitwise);
#ifdef CUDA_EMU
    if (world_ == 1) printf("emu: not checked: time device_scape_*_gpt2_124m (GPU timing)\n");
#else
    if (world_ == 1) time_gpt2_124m();
#endif
    param_table_free(&tab);
    comm_finalize();
    TEST_EXIT();
}

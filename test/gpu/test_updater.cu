/*
 * test/gpu/test_updater.cu - the device-resident update (cuda/dist.h) against the host DistOptim
 * (optim/dist.h, what the CPU trainers run) on a synthetic ParamTable: 3 layers of (w, b, g) in llm.c's
 * tensor-major order (a bucket's slices are not contiguous) plus an embedding of more than 65536 elements and a
 * gain in the last bucket. Each step's gradient arrives as the model delivers it: two floatX micro-steps added into
 * the fp32 accumulator (grad_accumulate), the second bucket by bucket with bucket_ready after each.
 *
 * Cases (each prints its worst difference; "bitwise" means every float/byte equal):
 *   adamw / adams 10 steps: master weights vs host params bitwise, gradient norm bits equal, checkpoint blob
 *     (moments, header, last step) byte-identical to distopt_save's, every step; clipping active on some steps
 *     and not on others (asserted); every step's collectives counted alike (calls and bytes per kind);
 *   a non-finite gradient at step 5: both skip, device master, floatX copy and blob unchanged;
 *   ZeRO-1 == no ZeRO (device), and ZeRO-1 device == ZeRO-1 host;
 *   save at step 5, new update + load, steps 6-10: master, floatX copy and blob bitwise equal to the
 *     uninterrupted run (the copy is rebuilt from the seeds of the saved step);
 *   stochastic rounding: a sample of the floatX copy equals a CPU re-computation (bf16 builds; fp32: the copy is
 *     the master).
 * Runs as 1 rank, or under mpirun (e.g. -np 2 on ONE GPU: --comm mpi is used, host-staged through
 * comm/comm.h), where each rank gets its own gradients and both updates average them. With exactly 2 ranks on
 * 2 GPUs and NCCL in the build, two more cases run the NCCL path (plain and ZeRO-1) against the host update.
 * Timing ("time" line, 1 rank, GPU only; the emulator prints "emu: not checked"): one AdamW step on GPT-2 124M's
 * table and its norm pass.
 * Usage: build/cuda/test_updater   (or mpirun -np 2 build/cuda/test_updater)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/dist.h"
#include "cuda/optimizer.cuh"
#include "test/test.h"
#include "test/gpu/updater_fixture.cuh"

static CommBackend comm_for_tests = COMM_BACKEND_MPI; /* several ranks may share one GPU in this test */

static UpdaterConfig config(OptimizerKind kind, int zero) {
    UpdaterConfig c;
    memset(&c, 0, sizeof c);
    c.dist.opt.kind = kind;
    c.dist.opt.beta1 = 0.9f;
    c.dist.opt.beta2 = 0.95f;
    c.dist.opt.eps = 1e-8f;
    c.dist.opt.weight_decay = 0.1f;
    c.dist.clip = 1.0f;
    c.dist.zero = zero;
    c.dist.density = 1.0f;
    c.dist.density_start = 1.0f;
    c.dist.exclude_norms = 1;
    c.comm = comm_for_tests;
    c.seed = SEED;
    return c;
}

static float *initial_params(void) {
    float *p = (float *)xmalloc(P * sizeof(float), "init");
    rng_state = 0x2545F4914F6CDD1Dull; /* the same on every rank (the updates broadcast rank 0's anyway) */
    for (size_t i = 0; i < P; i++) p[i] = uni(0.5f);
    return p;
}
static float lr_at(int t) { return 1e-3f * (float)t / (float)STEPS + 1e-4f; }

/* device vs host for STEPS steps; nan_step > 0 injects a NaN gradient at that step */
static void vs_host(const char *test_name_, OptimizerKind kind, int zero, int nan_step) {
    UpdaterConfig cfg = config(kind, zero);
    float *init = initial_params();
    float *hp = (float *)xmalloc(P * sizeof(float), "host params"), *hg = (float *)xcalloc(P, sizeof(float), "grads");
    memcpy(hp, init, P * sizeof(float));
    DistOptim *d = distopt_create(&tab, hp, hg, &cfg.dist);
    Dev x;
    dev_init(&x, init, &cfg);
    float *g1 = (float *)xmalloc(P * sizeof(float), "g"), *g2 = (float *)xmalloc(P * sizeof(float), "g");
    int clipped = 0, unclipped = 0;
    double worst_master = 0;
    size_t bad_master_total = 0;
    for (int t = 1; t <= STEPS; t++) {
        gen(g1, t, 0, nan_step);
        gen(g2, t, 1, nan_step);
        float *before = NULL;
        void *copy_before = NULL, *blob_before = NULL;
        size_t nb_before = 0;
        if (t == nan_step) {
            before = download_master(&x);
            copy_before = download_copy(&x);
            blob_before = save_blob(x.u, &nb_before);
        }
        float nh = 0, nd = 0;
        CommStats kh[COMM_NKINDS], kd[COMM_NKINDS];
        comm_stats_take_kind(kh); /* reset */
        int sh = host_step(d, hg, g1, g2, t, lr_at(t), &nh);
        comm_stats_take_kind(kh);
        int sd = dev_step(&x, g1, g2, t, lr_at(t), &nd);
        comm_stats_take_kind(kd);
        /* the same collectives counted alike (calls, ring-model bytes), whichever backend moved them */
        for (int k = 0; k < COMM_NKINDS; k++)
            CHECK(kh[k].calls == kd[k].calls && kh[k].bytes_sent == kd[k].bytes_sent &&
                  kh[k].bytes_recv == kd[k].bytes_recv, "step %d, collective kind %d: host %llu calls %llu/%llu bytes, "
                  "device %llu calls %llu/%llu bytes", t, k, (unsigned long long)kh[k].calls,
                  (unsigned long long)kh[k].bytes_sent, (unsigned long long)kh[k].bytes_recv,
                  (unsigned long long)kd[k].calls, (unsigned long long)kd[k].bytes_sent,
                  (unsigned long long)kd[k].bytes_recv);
        CHECK(sh == sd, "step %d: host skipped=%d, device skipped=%d", t, sh, sd);
        CHECK(memcmp(&nh, &nd, 4) == 0 || (nh != nh && nd != nd), "step %d: norm host %.9g device %.9g", t, nh, nd);
        if (t == nan_step) {
            CHECK(sd == 1, "step %d: a NaN gradient did not skip the step (norm %g)", t, nd);
            float *after = download_master(&x);
            void *copy_after = download_copy(&x);
            size_t nb_after;
            void *blob_after = save_blob(x.u, &nb_after);
            double w;
            size_t first = 0, bad = diff_floats(before, after, P, &w, &first);
            CHECK(bad == 0, "skipped step %d changed %zu master weights (first [%zu])", t, bad, first);
            CHECK(memcmp(copy_before, copy_after, P * sizeof(floatX)) == 0, "skipped step %d changed the floatX copy", t);
            CHECK(nb_before == nb_after && memcmp(blob_before, blob_after, nb_after) == 0,
                  "skipped step %d changed the optimizer state", t);
            free(after); free(copy_after); free(blob_after);
            free(before); free(copy_before); free(blob_before);
        } else {
            if (nd > cfg.dist.clip) clipped++;
            else unclipped++;
        }
        float *dm = download_master(&x);
        double w;
        size_t first = 0, bad = diff_floats(hp, dm, P, &w, &first);
        if (w > worst_master) worst_master = w;
        bad_master_total += bad;
        CHECK(bad == 0, "step %d: %zu of %zu master weights differ from the host update, worst |diff| %.3g, first [%zu] "
              "host %.9g device %.9g", t, bad, P, w, first, hp[first], dm[first]);
        size_t nbh = distopt_state_bytes(d), nbd;
        void *bh = xmalloc(nbh, "blob");
        distopt_save(d, bh);
        void *bd = save_blob(x.u, &nbd);
        size_t firstb = 0;
        int same = nbh == nbd;
        if (same)
            for (size_t i = 0; i < nbh; i++)
                if (((unsigned char *)bh)[i] != ((unsigned char *)bd)[i]) { firstb = i; same = 0; break; }
        CHECK(same, "step %d: checkpoint blob differs from distopt_save's (%zu vs %zu bytes, first differing byte %zu)",
              t, nbh, nbd, firstb);
        free(bh); free(bd); free(dm);
        if (rank_ == 0 && (t == 1 || t == STEPS || t == nan_step))
            printf("  %s step %2d: norm %.7g (host %.7g)%s\n", test_name_, t, nd, nh, sd ? " skipped" : "");
    }
    if (!nan_step) CHECK(clipped > 0 && unclipped > 0, "clipping: %d clipped steps, %d unclipped; both kinds wanted",
                         clipped, unclipped);
    if (rank_ == 0)
        printf("  %s: %d ranks, %d steps (%d clipped), %zu master weights differ in all, worst |diff| %.3g\n",
               test_name_, world_, STEPS, clipped, bad_master_total, worst_master);
    dev_free(&x);
    distopt_free(d);
    free(init); free(hp); free(hg); free(g1); free(g2);
}

TEST(adamw_matches_host_bitwise) { vs_host(test_name_, OPT_ADAMW, 0, 0); }
/* NCCL (2 ranks with a GPU each): NCCL's sum of two values then / 2 is MPI's, so still bitwise */
TEST(adamw_nccl_matches_host_bitwise) {
    comm_for_tests = COMM_BACKEND_NCCL;
    vs_host(test_name_, OPT_ADAMW, 0, 0);
    comm_for_tests = COMM_BACKEND_MPI;
}
TEST(adams_zero1_nccl_matches_host_zero1_bitwise) {
    comm_for_tests = COMM_BACKEND_NCCL;
    vs_host(test_name_, OPT_ADAMS, 1, 0);
    comm_for_tests = COMM_BACKEND_MPI;
}
TEST(adams_matches_host_bitwise) { vs_host(test_name_, OPT_ADAMS, 0, 0); }
TEST(adamw_zero1_matches_host_zero1_bitwise) { vs_host(test_name_, OPT_ADAMW, 1, 0); }
TEST(nonfinite_gradient_skips_with_state_unchanged) { vs_host(test_name_, OPT_ADAMW, 0, 5); }

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

TEST(zero1_equals_no_zero_on_device) {
    float *init = initial_params();
    UpdaterConfig a = config(OPT_ADAMS, 0), b = config(OPT_ADAMS, 1);
    Dev xa, xb;
    dev_init(&xa, init, &a);
    dev_init(&xb, init, &b);
    dev_run(&xa, 1, STEPS);
    dev_run(&xb, 1, STEPS);
    float *ma = download_master(&xa), *mb = download_master(&xb);
    void *ca = download_copy(&xa), *cb = download_copy(&xb);
    double w;
    size_t first = 0, bad = diff_floats(ma, mb, P, &w, &first);
    CHECK(bad == 0, "%zu master weights differ between ZeRO-1 and no ZeRO, worst %.3g, first [%zu]", bad, w, first);
    CHECK(memcmp(ca, cb, P * sizeof(floatX)) == 0, "the floatX copies differ between ZeRO-1 and no ZeRO");
    if (rank_ == 0) printf("  zero1 vs no zero: %zu of %zu master weights differ, worst %.3g\n", bad, P, w);
    free(ma); free(mb); free(ca); free(cb); free(init);
    dev_free(&xa);
    dev_free(&xb);
}

TEST(save_load_continue_is_bitwise) {
    float *init = initial_params();
    UpdaterConfig cfg = config(OPT_ADAMW, 0);
    Dev full, resumed;
    dev_init(&full, init, &cfg);
    dev_run(&full, 1, 5);
    size_t n5;
    void *blob5 = save_blob(full.u, &n5);
    float *master5 = download_master(&full);
    dev_run(&full, 6, STEPS);
    /* a new update whose model starts from the saved master (as the trainer's model.bin), then the saved state */
    dev_init(&resumed, master5, &cfg);
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
    CHECK(na == nb && memcmp(ba, bb, na) == 0, "after resume at 5: the optimizer states differ at step %d", STEPS);
    if (rank_ == 0) printf("  resume at 5, continue to %d: %zu master weights differ\n", STEPS, bad);
    free(ma); free(mb); free(ca); free(cb); free(ba); free(bb); free(blob5); free(master5); free(init);
    dev_free(&full);
    dev_free(&resumed);
}

#ifndef ENABLE_FP32
/* the CPU's own stochastic rounding fp32 -> bf16: add 16 random bits below bf16's mantissa, truncate; Inf/NaN
 * round to nearest (written here from the definition, not taken from cuda/common.cuh) */
static uint16_t cpu_sr_bf16(float x, uint32_t rnd) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if ((bits & 0x7F800000u) == 0x7F800000u) return (uint16_t)(bits >> 16); /* not reached: masters are finite */
    bits += rnd & 0xFFFFu;
    return (uint16_t)(bits >> 16);
}
#endif

TEST(stochastic_rounding_matches_cpu_recomputation) {
    float *init = initial_params();
    UpdaterConfig cfg = config(OPT_ADAMW, 1);
    Dev x;
    dev_init(&x, init, &cfg);
    dev_run(&x, 1, 3);
    float *m = download_master(&x);
#ifdef ENABLE_FP32
    float *c = (float *)download_copy(&x);
    double w;
    size_t first = 0, bad = diff_floats(m, c, P, &w, &first);
    CHECK(bad == 0, "fp32 build: %zu copy values differ from the master", bad);
    free(c);
#else
    uint16_t *c = (uint16_t *)download_copy(&x);
    size_t checked = 0, bad = 0, first = 0, up = 0;
    for (int k = 0; k < tab.n; k++) {
        const ParamSlice *s = &tab.slices[k];
        uint32_t seed = sr_seed(SEED, 3, k);
        for (size_t i = 0; i < s->numel; i += (i < 3 || i + 4 > s->numel) ? 1 : 37) {
            size_t j = s->offset + i;
            uint16_t want = cpu_sr_bf16(m[j], hash_u32((uint32_t)i, seed));
            uint32_t tb;
            memcpy(&tb, &m[j], 4);
            if (((uint32_t)want << 16) != (tb & 0xFFFF0000u)) up++;
            if (c[j] != want) {
                if (!bad) first = j;
                bad++;
            }
            checked++;
        }
    }
    CHECK(bad == 0, "%zu of %zu sampled bf16 values differ from the CPU re-computation; first [%zu]: master %.9g, "
          "device 0x%04x", bad, checked, first, m[first], c[first]);
    CHECK(up > 0 && up < checked, "rounding went up in %zu of %zu samples: not stochastic", up, checked);
    if (rank_ == 0) printf("  stochastic rounding: %zu samples, %zu rounded up, %zu differ\n", checked, up, bad);
    free(c);
#endif
    free(m); free(init);
    dev_free(&x);
}

#ifndef CUDA_EMU
/* Timing, printed as "time" lines and never asserted: one device step (every bucket, then step) of AdamW on GPT-2
 * 124M's table (L=12, C=768, Vp=50304, maxT=1024), and its norm pass alone. One rank only, GPU only. */
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
    UpdaterConfig cfg = config(OPT_ADAMW, 0);
    float *init = (float *)xcalloc(P, sizeof(float), "params");
    Dev x;
    dev_init(&x, init, &cfg);
    const int reps = 5;
    double ms_step = 0, ms_norm = 0;
    for (int t = 1; t <= reps + 1; t++) {
        cudaCheck(cudaStreamSynchronize(x.dm.stream));
        double t0 = now_seconds();
        for (int b = 0; b < tab.num_buckets; b++) x.u->bucket_ready(x.u, b);
        float n;
        x.u->step(x.u, t, 1e-4f, &n);
        cudaCheck(cudaStreamSynchronize(x.dm.stream));
        double t1 = now_seconds();
        if (t > 1) ms_step += 1e3 * (t1 - t0);
    }
    /* the norm pass alone, on the (zeroed) gradients */
    cudaCheck(cudaStreamWaitEvent(x.dm.stream, x.dm.grads_free, 0)); /* zeroed (cuda/device_model.h) */
    double *part;
    cudaCheck(cudaMalloc(&part, (size_t)sumsq_chunks((long)P) * sizeof(double)));
    for (int r = 0; r <= reps; r++) {
        cudaCheck(cudaStreamSynchronize(x.dm.stream));
        double t0 = now_seconds();
        sumsq_partials(part, x.dm.grads, (long)P, x.dm.stream);
        cudaCheck(cudaStreamSynchronize(x.dm.stream));
        if (r > 0) ms_norm += 1e3 * (now_seconds() - t0);
    }
    cudaCheck(cudaFree(part));
    printf("time device_update_adamw_gpt2_124m: %.3f ms per step (P=%zu, %d slices), norm pass %.3f ms\n",
           ms_step / reps, P, tab.n, ms_norm / reps);
    dev_free(&x);
    free(init);
    param_table_free(&tab);
    tab = small;
    P = small_P;
}
#endif

int main(int argc, char **argv) {
    cuda_require_device("test_updater");
    comm_init(&argc, &argv);
    rank_ = comm_rank();
    world_ = comm_world();
    /* one GPU per local rank where there are enough (as train_gpt.cu picks), else ranks share them */
    int ndev = 0;
    cudaCheck(cudaGetDeviceCount(&ndev));
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK"), *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    cudaCheck(cudaSetDevice(lr ? atoi(lr) % ndev : 0));
    int local = ls && atoi(ls) > 0 ? atoi(ls) : world_;
    int nccl_cases = world_ == 2 && local <= ndev && device_updater_has_nccl();
    build_table();
    if (rank_ == 0)
        printf("  %d slices, %d buckets, P=%zu, %d rank%s, " PRECISION_NAME "\n", tab.n, tab.num_buckets, P, world_,
               world_ == 1 ? "" : "s");
    RUN_TEST(adamw_matches_host_bitwise);
    RUN_TEST(adams_matches_host_bitwise);
    if (nccl_cases) {
        RUN_TEST(adamw_nccl_matches_host_bitwise);
        RUN_TEST(adams_zero1_nccl_matches_host_zero1_bitwise);
    } else if (rank_ == 0) {
        printf("  note: NCCL cases not run (they need exactly 2 ranks with a GPU each and a build with NCCL; here %d "
               "rank%s, %d on this node, %d GPU%s, NCCL %s)\n", world_, world_ == 1 ? "" : "s", local, ndev,
               ndev == 1 ? "" : "s", device_updater_has_nccl() ? "built in" : "not built in");
    }
    RUN_TEST(adamw_zero1_matches_host_zero1_bitwise);
    RUN_TEST(nonfinite_gradient_skips_with_state_unchanged);
    RUN_TEST(zero1_equals_no_zero_on_device);
    RUN_TEST(save_load_continue_is_bitwise);
    RUN_TEST(stochastic_rounding_matches_cpu_recomputation);
#ifdef CUDA_EMU
    /* emulated, the timing would only measure the CPU (minutes for 124M parameters under ASan) */
    if (world_ == 1) printf("emu: not checked: time device_update_adamw_gpt2_124m (GPU timing)\n");
#else
    if (world_ == 1) time_gpt2_124m();
#endif
    param_table_free(&tab);
    comm_finalize();
    TEST_EXIT();
}

/*
 * test/gpu/test_llamacu_update.cu - the CUDA Llama (train_llama.cu) trained through its device-resident update
 * (Model.create_updater -> cuda/dist.h) against the same model trained through the loop's host update
 * (optim/dist.h on the host buffers, what train_llamacu does for scape/topk-ef and with --update host): same spec,
 * seed and tokens, 4 steps of 2 micro-steps each with clipping at 1.0 (clipping is active: the printed norms exceed
 * it), as trainer/train.c drives them, with AdamW, with AdamS and with SCAPE at density 0.05 (also with --zero 1).
 *   fp32 build: every micro-step's loss, every gradient norm and the final master weights bitwise equal (the
 *     forward reads the same fp32 weights, gradients are summed alike, the update is bit-identical), and so are the
 *     logits of a forward without targets afterwards (what the sampler reads);
 *   bf16 build: the floatX copy differs (stochastic vs nearest rounding), so losses within 2e-2 relative, norms
 *     within 5e-2, and the final weights' difference small against how far they moved (relative L2 < 0.5;
 *     printed); the logits after training within relative L2 5e-2.
 * Both: buckets handed over in backward's order 0..L exactly once, on the last micro-step only; save() writes the
 * device master weights (the model file read back equals them bitwise) and a model created from that file and
 * given a device update starts from exactly those weights (resume); topk-ef gets no device update (host path kept).
 * Usage: build/cuda/test_llamacu_update [SPEC]   (default l2c64h4kv2f176v512t64: GQA, B=2, T=32)
 */
#define TESTING
#define TESTING_DEVICE_UPDATE
#include <unistd.h>
#include "train_llama.cu"
#include "test/test.h"
extern "C" {
#include "comm/comm.h"
#include "optim/dist.h"
}

static const char *spec = "l2c64h4kv2f176v512t64";
enum { B = 2, T = 32, ACCUM = 2, STEPS = 4 };

/* BucketReadyFn shim: records the order, then hands the bucket to the update in ctx */
static int order[256], norder;
static void record_bucket(void *ctx, int b) {
    if (norder < 256) order[norder] = b;
    norder++;
    Updater *u = (Updater *)ctx;
    u->bucket_ready(u, b);
}

static int zero_ = 0; /* DistConfig.zero (--zero 1) of the following cases */

static UpdaterConfig config(OptimizerKind kind) {
    UpdaterConfig c;
    memset(&c, 0, sizeof c);
    c.dist.opt.kind = kind;
    c.dist.opt.beta1 = 0.9f;
    c.dist.opt.beta2 = 0.95f;
    c.dist.opt.eps = 1e-8f;
    c.dist.opt.weight_decay = 0.1f;
    c.dist.clip = 1.0f;
    c.dist.density = 1.0f;
    c.dist.density_start = 1.0f;
    c.dist.exclude_norms = 1;
    c.comm = COMM_BACKEND_MPI;
    c.seed = 1337;
    c.dist.zero = zero_;
    return c;
}

/* the device master weights (P floats) of a LlamaCU, downloaded */
static float *download_master(Model *model) {
    LlamaCU *m = (LlamaCU *)model;
    size_t P = model->table.total;
    float *h = (float *)xmalloc(P * sizeof(float), "master");
    cudaCheck(cudaStreamSynchronize(m->s));
    cudaCheck(cudaMemcpy(h, m->dp.master, P * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

static void device_update_matches_host_update(const char *test_name_, OptimizerKind kind, double density,
                                              const char *what) {
    Model *a = llamacu_create(spec, NULL, 1337, B, T), *h = llamacu_create(spec, NULL, 1337, B, T);
    size_t P = a->table.total;
    int L = a->num_layers, V = a->vocab_size, Vp = a->padded_vocab_size;
    float *init = (float *)xmalloc(P * sizeof(float), "init");
    memcpy(init, h->params, P * sizeof(float));
    UpdaterConfig c = config(kind);
    c.dist.density = c.dist.density_start = (float)density;
    Updater *ua = llamacu_create_updater(a, &c);
    CHECK(ua != NULL, "%s: llamacu_create_updater returned NULL", what);
    if (!ua) { a->free(a); h->free(h); free(init); return; }
    CHECK(((LlamaCU *)a)->dp.device_update == 1 && ((LlamaCU *)a)->dp.grad32 != NULL,
          "%s: the model did not switch to the device update (device_update %d)", what, ((LlamaCU *)a)->dp.device_update);
    Updater *uh = updater_host_create(&h->table, h->params, h->grads, &c.dist);
    int *in = (int *)xmalloc((size_t)B * T * sizeof(int), "inputs"), *tg = (int *)xmalloc((size_t)B * T * sizeof(int), "targets");
    uint64_t x = 0x2545F4914F6CDD1Dull;
    double worst_loss = 0, worst_norm = 0;
    int loss_bad = 0;
    for (int t = 1; t <= STEPS; t++) {
        float lr = 1e-3f;
        for (int k = 0; k < ACCUM; k++) {
            for (int i = 0; i < B * T; i++) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                in[i] = (int)(x % (uint64_t)V);
                tg[i] = (int)((x >> 24) % (uint64_t)V);
            }
            float la = a->forward(a, in, tg, B, T), lh = h->forward(h, in, tg, B, T);
            double rel = fabs((double)la - lh) / fabs((double)lh);
            if (rel > worst_loss || rel != rel) worst_loss = rel;
#ifdef ENABLE_FP32
            if (memcmp(&la, &lh, 4) != 0) loss_bad++;
#else
            if (!(rel <= 2e-2)) loss_bad++;
#endif
            int last = k == ACCUM - 1;
            norder = 0;
            a->backward(a, 1.0f / ACCUM, last ? record_bucket : NULL, ua);
            h->backward(h, 1.0f / ACCUM, last ? uh->bucket_ready : NULL, uh);
            if (last) {
                int ok = norder == L + 1;
                for (int i = 0; ok && i <= L; i++) ok = order[i] == i;
                CHECK(ok, "%s step %d: %d buckets handed over (want %d, in order 0..%d); first ones %d %d", what, t,
                      norder, L + 1, L, norder > 0 ? order[0] : -1, norder > 1 ? order[1] : -1);
            } else {
                CHECK(norder == 0, "%s step %d micro-step %d: %d buckets handed over before the last micro-step", what,
                      t, k, norder);
            }
            printf("  %s step %d micro %d: loss device %.7f host %.7f (rel %.2e)\n", what, t, k, la, lh, rel);
        }
        float na = 0, nh = 0;
        int sa = ua->step(ua, t, lr, &na), sh = uh->step(uh, t, lr, &nh);
        CHECK(sa == 0 && sh == 0, "%s step %d skipped: device %d host %d", what, t, sa, sh);
        double rn = fabs((double)na - nh) / fabs((double)nh);
        if (rn > worst_norm || rn != rn) worst_norm = rn;
#ifdef ENABLE_FP32
        CHECK(memcmp(&na, &nh, 4) == 0, "%s step %d: gradient norm device %.9g host %.9g", what, t, na, nh);
#else
        CHECK(rn <= 5e-2, "%s step %d: gradient norm device %.7g host %.7g (rel %.2e > 5e-2)", what, t, na, nh, rn);
#endif
        printf("  %s step %d: norm device %.9g host %.9g (clip at 1.0)\n", what, t, na, nh);
    }
    CHECK(loss_bad == 0, "%s: %d micro-step losses differ (worst rel %.2e; fp32: bitwise wanted, bf16: <= 2e-2)", what,
          loss_bad, worst_loss);
    float *ma = download_master(a);
    size_t bad = 0, first = 0;
    double dd = 0, dm = 0;
    for (size_t i = 0; i < P; i++) {
        if (memcmp(&ma[i], &h->params[i], 4) != 0) { if (!bad) first = i; bad++; }
        double d = (double)ma[i] - h->params[i], mv = (double)h->params[i] - init[i];
        dd += d * d;
        dm += mv * mv;
    }
    double rel_l2 = dm > 0 ? sqrt(dd / dm) : (dd > 0 ? INFINITY : 0);
    printf("  %s after %d steps: %zu of %zu master weights differ from the host update's (first [%zu]); |device - "
           "host| / |host - init| = %.3e; worst loss rel %.2e, worst norm rel %.2e\n", what, STEPS, bad, P,
           bad ? first : 0, rel_l2, worst_loss, worst_norm);
    CHECK(dm > 0, "%s: the host update did not move the weights", what);
#ifdef ENABLE_FP32
    CHECK(bad == 0, "%s: %zu master weights differ from the host update's; first [%zu] device %.9g host %.9g", what, bad,
          first, ma[first], h->params[first]);
#else
    CHECK(rel_l2 < 0.5, "%s: device and host updates diverged: |device - host| / |host - init| = %.3e >= 0.5", what,
          rel_l2);
#endif

    /* sampling: a forward without targets reads the device weights as they are (no upload from the host) */
    a->forward(a, in, NULL, B, T);
    h->forward(h, in, NULL, B, T);
    size_t nl = (size_t)B * T * Vp;
    float *lga = (float *)xmalloc(nl * sizeof(float), "logits");
    memcpy(lga, a->logits(a), nl * sizeof(float));
    const float *lgh = h->logits(h);
    size_t lbad = 0, lfirst = 0;
    double le = 0, lr2 = 0;
    for (size_t i = 0; i < nl; i++) {
        if (i % (size_t)Vp >= (size_t)V) continue; /* padding columns */
        if (memcmp(&lga[i], &lgh[i], 4) != 0) { if (!lbad) lfirst = i; lbad++; }
        double d = (double)lga[i] - lgh[i];
        le += d * d;
        lr2 += (double)lgh[i] * lgh[i];
    }
    double lrel = lr2 > 0 ? sqrt(le / lr2) : sqrt(le);
    printf("  %s logits after training: %zu of %zu differ (first [%zu]), rel L2 %.3e\n", what, lbad, nl, lbad ? lfirst : 0,
           lrel);
#ifdef ENABLE_FP32
    CHECK(lbad == 0, "%s: %zu logits after training differ; first [%zu] device %.9g host %.9g", what, lbad, lfirst,
          lga[lfirst], lgh[lfirst]);
#else
    CHECK(lrel <= 5e-2, "%s: logits after training: rel L2 %.3e > 5e-2", what, lrel);
#endif
    free(lga);

    /* save() writes the device master weights; a model created from that file starts from them (resume) */
    char path[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/test_llamacu_update_%d.bin", tmp && tmp[0] ? tmp : "/tmp", (int)getpid());
    a->save(a, path);
    Model *back = llama_host_create(spec, path, 1, 1, 1);
    size_t bad_file = 0;
    for (size_t i = 0; i < P && back->table.total == P; i++) bad_file += memcmp(&back->params[i], &ma[i], 4) != 0;
    CHECK(back->table.total == P && bad_file == 0, "%s: model file %s: %zu of %zu weights differ from the device master",
          what, path, bad_file, P);
    back->free(back);
    Model *r = llamacu_create(spec, path, 1, B, T);
    Updater *ur = llamacu_create_updater(r, &c);
    CHECK(ur != NULL, "%s: no device update for the model read back", what);
    if (ur) {
        float *mr = download_master(r);
        size_t bad_r = 0;
        for (size_t i = 0; i < P; i++) bad_r += memcmp(&mr[i], &ma[i], 4) != 0;
        CHECK(bad_r == 0, "%s: a model created from the file starts with %zu of %zu device master weights different",
              what, bad_r, P);
        free(mr);
        ur->free(ur);
    }
    r->free(r);
    unlink(path);

    free(ma); free(init); free(in); free(tg);
    ua->free(ua);
    uh->free(uh);
    a->free(a);
    h->free(h);
}

TEST(adamw_device_update_matches_host_update) { device_update_matches_host_update(test_name_, OPT_ADAMW, 1.0, "adamw"); }
TEST(adams_device_update_matches_host_update) { device_update_matches_host_update(test_name_, OPT_ADAMS, 1.0, "adams"); }
/* SCAPE at density 0.05 from step 1: its top-k and the zeroing of the gradients run on the update's communication
 * stream, so the trainer's first gradient write of each step must wait for DeviceModel.grads_free */
TEST(scape_device_update_matches_host_update) { device_update_matches_host_update(test_name_, OPT_SCAPE, 0.05, "scape"); }
/* SCAPE with --zero 1 on both sides (cuda/dist_scape_zero.cuh against optim/dist_scape_zero.c): the fold of beta1 m
 * into r, the owners' update and the sparse sync through the model's buffers (one rank owns every tensor here;
 * test_scape_updater runs it on two ranks) */
TEST(scape_zero_device_update_matches_host_update) {
    zero_ = 1;
    device_update_matches_host_update(test_name_, OPT_SCAPE, 0.05, "scape zero");
    zero_ = 0;
}

/* topk-ef (no device implementation; SCAPE has one) keeps the host path: create_updater declines, allocates nothing,
 * and the model keeps uploading the host weights each forward */
TEST(topk_ef_keeps_the_host_update) {
    Model *a = llamacu_create(spec, NULL, 1337, B, T);
    UpdaterConfig c = config(OPT_TOPK_EF);
    c.dist.density = 0.1f;
    c.dist.density_start = 0.1f;
    Updater *u = llamacu_create_updater(a, &c);
    LlamaCU *m = (LlamaCU *)a;
    CHECK(u == NULL && m->dp.device_update == 0 && m->dp.grad32 == NULL,
          "topk-ef: create_updater returned %p, device_update %d, d_grad32 %p (want NULL, 0, NULL)", (void *)u,
          m->dp.device_update, (void *)m->dp.grad32);
    if (u) u->free(u);
    a->free(a);
}

int main(int argc, char **argv) {
    cuda_require_device("test_llamacu_update");
    comm_init(&argc, &argv);
    if (argc > 1) spec = argv[1];
    printf("  spec %s, B=%d T=%d, %d micro-steps x %d steps, " PRECISION_NAME "\n", spec, B, T, ACCUM, STEPS);
    RUN_TEST(adamw_device_update_matches_host_update);
    RUN_TEST(adams_device_update_matches_host_update);
    RUN_TEST(scape_device_update_matches_host_update);
    RUN_TEST(scape_zero_device_update_matches_host_update);
    RUN_TEST(topk_ef_keeps_the_host_update);
    comm_finalize();
    TEST_EXIT();
}

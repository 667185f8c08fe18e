/*
 * test/gpu/test_gpt2cu_update.cu - the CUDA GPT-2 (train_gpt.cu) trained through its device-resident update
 * (Model.create_updater -> cuda/dist.h) against the same model trained through the loop's host update
 * (optim/dist.h on the host buffers, what train_gptcu did before and still does for scape/topk-ef): same spec,
 * seed and tokens, 4 AdamW steps of 2 micro-steps each with clipping at 1.0, as trainer/train.c drives them.
 *   fp32 build: every micro-step's loss, every gradient norm and the final master weights bitwise equal (the
 *     forward reads the same fp32 weights, gradients are summed alike, the update is bit-identical);
 *   bf16 build: the floatX copy differs (stochastic vs nearest rounding), so losses within 2e-2 relative and the
 *     final weights' difference small against how far they moved (relative L2 < 0.5; printed).
 * Both: buckets handed over in backward's order 0..L exactly once, on the last micro-step only; save() writes the
 * device master weights (the model file read back equals them bitwise).
 * Usage: build/cuda/test_gpt2cu_update [SPEC]   (default d2c64h4t64, B=2, T=32)
 */
#define TESTING
#define TESTING_DEVICE_UPDATE
#include <unistd.h>
#include "train_gpt.cu"
#include "test/test.h"
extern "C" {
#include "comm/comm.h"
#include "optim/dist.h"
}

static const char *spec = "d2c64h4t64";
enum { B = 2, T = 32, ACCUM = 2, STEPS = 4 };

/* BucketReadyFn shim: records the order, then hands the bucket to the update in ctx */
static int order[256], norder;
static void record_bucket(void *ctx, int b) {
    if (norder < 256) order[norder] = b;
    norder++;
    Updater *u = (Updater *)ctx;
    u->bucket_ready(u, b);
}

static UpdaterConfig config(void) {
    UpdaterConfig c;
    memset(&c, 0, sizeof c);
    c.dist.opt.kind = OPT_ADAMW;
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
    return c;
}

TEST(device_update_matches_host_update) {
    Model *a = gpt2cu_create(spec, NULL, 1337, B, T), *h = gpt2cu_create(spec, NULL, 1337, B, T);
    size_t P = a->table.total;
    int L = a->num_layers, V = a->vocab_size;
    float *init = (float *)xmalloc(P * sizeof(float), "init");
    memcpy(init, h->params, P * sizeof(float));
    UpdaterConfig c = config();
    Updater *ua = gpt2cu_create_updater(a, &c);
    CHECK(ua != NULL, "gpt2cu_create_updater returned NULL for adamw");
    if (!ua) { a->free(a); h->free(h); free(init); return; }
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
            if (rel > worst_loss) worst_loss = rel;
#ifdef ENABLE_FP32
            if (memcmp(&la, &lh, 4) != 0) loss_bad++;
#else
            if (rel > 2e-2) loss_bad++;
#endif
            int last = k == ACCUM - 1;
            norder = 0;
            a->backward(a, 1.0f / ACCUM, last ? record_bucket : NULL, ua);
            h->backward(h, 1.0f / ACCUM, last ? uh->bucket_ready : NULL, uh);
            if (last) {
                int ok = norder == L + 1;
                for (int i = 0; ok && i <= L; i++) ok = order[i] == i;
                CHECK(ok, "step %d: %d buckets handed over (want %d, in order 0..%d); first ones %d %d", t, norder, L + 1,
                      L, norder > 0 ? order[0] : -1, norder > 1 ? order[1] : -1);
            } else {
                CHECK(norder == 0, "step %d micro-step %d: %d buckets handed over before the last micro-step", t, k,
                      norder);
            }
            printf("  step %d micro %d: loss device %.7f host %.7f (rel %.2e)\n", t, k, la, lh, rel);
        }
        float na = 0, nh = 0;
        int sa = ua->step(ua, t, lr, &na), sh = uh->step(uh, t, lr, &nh);
        CHECK(sa == 0 && sh == 0, "step %d skipped: device %d host %d", t, sa, sh);
        double rn = fabs((double)na - nh) / fabs((double)nh);
        if (rn > worst_norm) worst_norm = rn;
#ifdef ENABLE_FP32
        CHECK(memcmp(&na, &nh, 4) == 0, "step %d: gradient norm device %.9g host %.9g", t, na, nh);
#else
        CHECK(rn <= 5e-2, "step %d: gradient norm device %.7g host %.7g (rel %.2e > 5e-2)", t, na, nh, rn);
#endif
        printf("  step %d: norm device %.7g host %.7g\n", t, na, nh);
    }
    CHECK(loss_bad == 0, "%d micro-step losses differ (worst rel %.2e; fp32: bitwise wanted, bf16: <= 2e-2)", loss_bad,
          worst_loss);
    GPT2CU *ga = (GPT2CU *)a;
    float *ma = (float *)xmalloc(P * sizeof(float), "master");
    cudaCheck(cudaStreamSynchronize(ga->s));
    cudaCheck(cudaMemcpy(ma, ga->dp.master, P * sizeof(float), cudaMemcpyDeviceToHost));
    size_t bad = 0, first = 0;
    double dd = 0, dm = 0;
    for (size_t i = 0; i < P; i++) {
        if (memcmp(&ma[i], &h->params[i], 4) != 0) { if (!bad) first = i; bad++; }
        double d = (double)ma[i] - h->params[i], mv = (double)h->params[i] - init[i];
        dd += d * d;
        dm += mv * mv;
    }
    double rel_l2 = dm > 0 ? sqrt(dd / dm) : (dd > 0 ? INFINITY : 0);
    printf("  after %d steps: %zu of %zu master weights differ from the host update's (first [%zu]); |device - host| "
           "/ |host - init| = %.3e; worst loss rel %.2e, worst norm rel %.2e\n", STEPS, bad, P, bad ? first : 0, rel_l2,
           worst_loss, worst_norm);
    CHECK(dm > 0, "the host update did not move the weights");
#ifdef ENABLE_FP32
    CHECK(bad == 0, "%zu master weights differ from the host update's; first [%zu] device %.9g host %.9g", bad, first,
          ma[first], h->params[first]);
#else
    CHECK(rel_l2 < 0.5, "device and host updates diverged: |device - host| / |host - init| = %.3e >= 0.5", rel_l2);
#endif

    /* save() writes the device master weights */
    char path[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/test_gpt2cu_update_%d.bin", tmp && tmp[0] ? tmp : "/tmp", (int)getpid());
    a->save(a, path);
    Model *back = gpt2_host_create(spec, path, 1, 1, 1);
    size_t bad_file = 0;
    for (size_t i = 0; i < P; i++) bad_file += memcmp(&back->params[i], &ma[i], 4) != 0;
    CHECK(back->table.total == P && bad_file == 0, "model file %s: %zu of %zu weights differ from the device master",
          path, bad_file, P);
    back->free(back);
    unlink(path);

    free(ma); free(init); free(in); free(tg);
    ua->free(ua);
    uh->free(uh);
    a->free(a);
    h->free(h);
}

int main(int argc, char **argv) {
    cuda_require_device("test_gpt2cu_update");
    comm_init(&argc, &argv);
    if (argc > 1) spec = argv[1];
    printf("  spec %s, B=%d T=%d, %d micro-steps x %d steps, " PRECISION_NAME "\n", spec, B, T, ACCUM, STEPS);
    RUN_TEST(device_update_matches_host_update);
    comm_finalize();
    TEST_EXIT();
}

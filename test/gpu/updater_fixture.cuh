/*
 * test/gpu/updater_fixture.cuh - what the device-update tests (test_updater.cu, test_scape_updater.cu) share: a
 * synthetic ParamTable with several slices and buckets, seeded parameters and gradients, a host DistOptim and a
 * device Updater over the same state, stepping both, and bitwise comparisons with the worst difference.
 * Included once per test program after test/test.h.
 */
#ifndef TEST_GPU_UPDATER_FIXTURE_CUH
#define TEST_GPU_UPDATER_FIXTURE_CUH
extern "C" {
#include "common/util.h"
#include "comm/comm.h"
#include "optim/dist.h"
#include "optim/scape.h"
}

#define STEPS 10
#define SEED 1337ull

static ParamTable tab;
static size_t P;
static int rank_, world_;

static void build_table(void) {
    memset(&tab, 0, sizeof tab);
    const int L = 3;
    size_t emb[2] = {301, 257}, w[2] = {37, 29}, v[1] = {29}, gain[1] = {257};
    param_table_add(&tab, "emb", -1, L, 1, 2, emb); /* 77357 elements: two norm chunks */
    for (int l = 0; l < L; l++) param_table_add(&tab, "w", l, L - 1 - l, 1, 2, w);
    for (int l = 0; l < L; l++) param_table_add(&tab, "b", l, L - 1 - l, 0, 1, v);
    for (int l = 0; l < L; l++) param_table_add(&tab, "g", l, L - 1 - l, 0, 1, v);
    param_table_add(&tab, "gain", -1, L, 0, 1, gain);
    P = tab.total;
}

/* deterministic uniform numbers per (step, micro-step, rank) */
static uint64_t rng_state;
static float uni(float a) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return a * (2.0f * (float)((rng_state >> 40) / 16777216.0) - 1.0f);
}
static float to_floatx_value(float x) {
#ifdef ENABLE_FP32
    return x;
#else
    return __bfloat162float(__float2bfloat16_rn(x));
#endif
}
/* micro-step gradient (floatX values) of step t, micro-step a, this rank; scale alternates so that the clip at 1
 * bites on odd steps (norm ~ 0.01 * sqrt(P / 3) ~ 1.6 per micro-step) and not on even ones */
static void gen(float *g, int t, int a, int nan_step) {
    rng_state = 0x9E3779B97F4A7C15ull ^ ((uint64_t)t << 32) ^ ((uint64_t)a << 16) ^ (uint64_t)(rank_ + 1);
    float s = t % 2 ? 0.01f : 0.002f;
    for (size_t i = 0; i < P; i++) g[i] = to_floatx_value(uni(s));
    if (t == nan_step && a == 1 && rank_ == 0) g[P / 3] = NAN;
}

/* one device update with its own buffers */
typedef struct {
    DeviceModel dm;
    float *h_params;
    floatX *g1, *g2; /* the two micro-steps' floatX gradients (device) */
    Updater *u;
} Dev;

/* h (P floats) rounded to floatX into device d, on stream s (the pageable source is staged at the call) */
static void upload_floatx(floatX *d, const float *h, cudaStream_t s) {
    floatX *tmp = (floatX *)xmalloc(P * sizeof(floatX), "staging");
    for (size_t i = 0; i < P; i++) {
#ifdef ENABLE_FP32
        tmp[i] = h[i];
#else
        tmp[i] = __float2bfloat16_rn(h[i]);
#endif
    }
    cudaCheck(cudaMemcpyAsync(d, tmp, P * sizeof(floatX), cudaMemcpyHostToDevice, s));
    free(tmp);
}

static void dev_init(Dev *x, const float *init, const UpdaterConfig *cfg) {
    memset(x, 0, sizeof *x);
    x->h_params = (float *)xmalloc(P * sizeof(float), "params");
    memcpy(x->h_params, init, P * sizeof(float));
    cudaCheck(cudaMalloc(&x->dm.master, P * sizeof(float)));
    cudaCheck(cudaMalloc(&x->dm.grads, P * sizeof(float)));
#ifdef ENABLE_FP32
    x->dm.params = x->dm.master;
#else
    cudaCheck(cudaMalloc(&x->dm.params, P * sizeof(floatX)));
#endif
    cudaCheck(cudaMalloc(&x->g1, P * sizeof(floatX)));
    cudaCheck(cudaMalloc(&x->g2, P * sizeof(floatX)));
    cudaCheck(cudaStreamCreate(&x->dm.stream));
    cudaCheck(cudaEventCreateWithFlags(&x->dm.grads_free, cudaEventDisableTiming));
    x->dm.table = &tab;
    x->dm.host_params = x->h_params;
    x->u = device_updater_create(&x->dm, cfg);
    if (!x->u) fatal("device_updater_create returned NULL");
}

static void dev_free(Dev *x) {
    x->u->free(x->u);
    cudaCheck(cudaFree(x->dm.master));
    cudaCheck(cudaFree(x->dm.grads));
    cudaCheck(cudaFree(x->g1));
    cudaCheck(cudaFree(x->g2));
#ifndef ENABLE_FP32
    cudaCheck(cudaFree(x->dm.params));
#endif
    cudaCheck(cudaEventDestroy(x->dm.grads_free));
    cudaCheck(cudaStreamDestroy(x->dm.stream));
    free(x->h_params);
}

/* The model's protocol for one step: wait for the last step's zeroed gradients (grads_free), micro-step 1 whole,
 * micro-step 2 bucket by bucket with bucket_ready; then the compute stream synchronised (as a trainer's loss
 * read-back does) and nothing device-wide (no cudaFree), so the update's other streams run on unsynchronised and
 * a missing wait shows in the emulator. */
static int dev_step(Dev *x, const float *g1, const float *g2, int t, float lr, float *norm) {
    floatX *d1 = x->g1, *d2 = x->g2;
    upload_floatx(d1, g1, x->dm.stream);
    upload_floatx(d2, g2, x->dm.stream);
    cudaCheck(cudaStreamWaitEvent(x->dm.stream, x->dm.grads_free, 0));
    grad_accumulate(x->dm.grads, d1, (long)P, x->dm.stream);
    for (int b = 0; b < tab.num_buckets; b++) {
        for (int k = 0; k < tab.n; k++)
            if (tab.slices[k].bucket == b)
                grad_accumulate(x->dm.grads + tab.slices[k].offset, d2 + tab.slices[k].offset,
                                (long)tab.slices[k].numel, x->dm.stream);
        x->u->bucket_ready(x->u, b);
    }
    int skipped = x->u->step(x->u, t, lr, norm);
    cudaCheck(cudaStreamSynchronize(x->dm.stream));
    return skipped;
}
static int host_step(DistOptim *d, float *hgrads, const float *g1, const float *g2, int t, float lr, float *norm) {
    for (size_t i = 0; i < P; i++) hgrads[i] += g1[i]; /* train_gpt.cu's host path: hg += (float)floatX */
    for (size_t i = 0; i < P; i++) hgrads[i] += g2[i];
    for (int b = 0; b < tab.num_buckets; b++) distopt_bucket_ready(d, b);
    return distopt_step(d, t, lr, norm);
}

static float *download_master(const Dev *x) {
    float *h = (float *)xmalloc(P * sizeof(float), "master");
    cudaCheck(cudaStreamSynchronize(x->dm.stream));
    cudaCheck(cudaMemcpy(h, x->dm.master, P * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
static void *download_copy(const Dev *x) {
    void *h = xmalloc(P * sizeof(floatX), "copy");
    cudaCheck(cudaStreamSynchronize(x->dm.stream));
    cudaCheck(cudaMemcpy(h, x->dm.params, P * sizeof(floatX), cudaMemcpyDeviceToHost));
    return h;
}
static void *save_blob(const Updater *u, size_t *n) {
    *n = u->state_bytes(u);
    void *b = xmalloc(*n, "blob");
    u->save(u, b);
    return b;
}

/* number of differing floats and the largest |a - b| */
static size_t diff_floats(const float *a, const float *b, size_t n, double *worst, size_t *first) {
    size_t bad = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], 4) != 0) {
            if (!bad) *first = i;
            bad++;
        }
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > *worst || d != d) *worst = d;
    }
    return bad;
}

#endif

/*
 * test/gpu/test_gpt2cu.cu - the whole CUDA GPT-2 (train_gpt.cu) against the CPU reference train_gpt.c (itself
 * checked against PyTorch by test/test_gpt2.c), same spec, seed and tokens: loss, logits, every parameter
 * gradient, bucket order, gradient accumulation over micro-steps, bitwise repeatability, a shorter T.
 *
 * Also 10 AdamW and 10 AdamS steps (host optimizer, optim/optim.c) on the PyTorch reference's batch and model
 * (test/ref/gpt2_ref.bin, written by dev/ref/gpt2_ref.py; read as test/test_gpt2.c documents it): every step's
 * loss within 1e-4 (fp32) / 2e-2 (bf16) relative of PyTorch's float64 losses.
 *
 * Usage: build/cuda/test_gpt2cu [SPEC]   (default d4c256: L=4, C=256, NH=4; B=4, T=64); run from the repo root
 * Tolerances, per tensor, relative to the CPU tensor: fp32 build (train_gpt.cu with ENABLE_FP32) relative L2
 * error 1e-4 and max error 1e-3 x max|ref|; bf16 build relative L2 5e-2 and max error 0.25 x max|ref| (bf16 keeps
 * 8 bits; errors compound through 4 layers). Loss: 1e-5 relative (fp32), 1e-2 (bf16).
 */
#define TESTING
#include "train_gpt.cu"
#include "test/test.h"
extern "C" {
#include "optim/optim.h"
}

#ifdef ENABLE_FP32
#define TOL_L2 1e-4
#define TOL_MAX 1e-3
#define TOL_LOSS 1e-5
#else
#define TOL_L2 5e-2
#define TOL_MAX 0.25
#define TOL_LOSS 1e-2
#endif

static const char *spec = "d4c256";
static const int B = 4, T = 64;
static Model *cpu, *gpu;
static int *inputs, *targets;

/* relative L2 error and max error / max|ref| of n values; CHECKs both against the build's tolerances */
#define CHECK_TENSOR(what, got, ref, n)                                                                          \
    do {                                                                                                         \
        const float *got_ = (got), *ref_ = (ref); /* each argument evaluated once */\
        double e2 = 0, r2 = 0, emax = 0, rmax = 0;                                                               \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++) {                                                            \
            double d = (double)got_[i_] - (double)ref_[i_];                                                   \
            e2 += d * d; r2 += (double)ref_[i_] * ref_[i_];                                                     \
            if (fabs(d) > emax || d != d) emax = fabs(d);                                                        \
            if (fabs(ref_[i_]) > rmax) rmax = fabs(ref_[i_]);                                                  \
        }                                                                                                        \
        double l2 = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);                                                           \
        printf("  %-10s rel L2 %.3g, max err %.3g x max|ref| %.3g\n", what, l2, rmax > 0 ? emax / rmax : emax, rmax); \
        CHECK(l2 <= TOL_L2 && emax <= TOL_MAX * rmax + 1e-30, "%s: rel L2 %.3g (tol %.1g), max err %.3g (tol %.3g)", \
              what, l2, TOL_L2, emax, TOL_MAX * rmax);                                                           \
    } while (0)

TEST(forward_matches_cpu) {
    float lc = cpu->forward(cpu, inputs, targets, B, T);
    float lg = gpu->forward(gpu, inputs, targets, B, T);
    printf("  loss cpu %.7f gpu %.7f\n", lc, lg);
    CHECK(fabs(lg - lc) <= TOL_LOSS * fabs(lc), "loss %.7f vs cpu %.7f", lg, lc);
    size_t n = (size_t)B * T * cpu->padded_vocab_size;
    const float *a = cpu->logits(cpu), *b = gpu->logits(gpu);
    CHECK_TENSOR("logits", b, a, n);
}

static int buckets_seen[64], nbuckets;
static void on_bucket(void *ctx, int b) { if (nbuckets < 64) buckets_seen[nbuckets++] = b; }

TEST(gradients_match_cpu) {
    memset(cpu->grads, 0, cpu->table.total * 4);
    memset(gpu->grads, 0, gpu->table.total * 4);
    cpu->forward(cpu, inputs, targets, B, T);
    gpu->forward(gpu, inputs, targets, B, T);
    cpu->backward(cpu, 1.0f, NULL, NULL);
    nbuckets = 0;
    gpu->backward(gpu, 1.0f, on_bucket, NULL);
    CHECK(nbuckets == gpu->table.num_buckets, "%d buckets reported, table has %d", nbuckets, gpu->table.num_buckets);
    for (int b = 0; b < nbuckets; b++) CHECK(buckets_seen[b] == b, "bucket %d reported as %d", b, buckets_seen[b]);
    /* per tensor kind, all layers together */
    static const char *names[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    for (int k = 0; k < 16; k++) {
        int layer = (k >= 2 && k < 14) ? 0 : -1, nl = layer == 0 ? gpu->num_layers : 1;
        int idx = param_table_find(&gpu->table, names[k], layer);
        CHECK(idx >= 0, "tensor %s missing", names[k]);
        if (idx < 0) continue;
        const ParamSlice *s = &gpu->table.slices[idx];
        CHECK_TENSOR(names[k], gpu->grads + s->offset, cpu->grads + s->offset, s->numel * nl);
    }
}

TEST(micro_steps_accumulate_bitwise_repeatably) {
    size_t P = gpu->table.total;
    memset(gpu->grads, 0, P * 4);
    float l1 = gpu->forward(gpu, inputs, targets, B, T);
    gpu->backward(gpu, 0.5f, NULL, NULL);
    float *g1 = (float *)malloc(P * 4);
    memcpy(g1, gpu->grads, P * 4);
    float l2 = gpu->forward(gpu, inputs, targets, B, T);
    gpu->backward(gpu, 0.5f, NULL, NULL);
    CHECK(memcmp(&l1, &l2, 4) == 0, "two forwards gave losses %.9g and %.9g", l1, l2);
    size_t bad = 0;
    for (size_t i = 0; i < P; i++) if (gpu->grads[i] != 2.0f * g1[i]) bad++;
    CHECK(bad == 0, "%zu of %zu gradients after two identical micro-steps are not exactly twice one", bad, P);
    free(g1);
}

TEST(shorter_sequence_matches_cpu) {
    int Ts = T / 2;
    float lc = cpu->forward(cpu, inputs, targets, B, Ts);
    float lg = gpu->forward(gpu, inputs, targets, B, Ts);
    printf("  T=%d: loss cpu %.7f gpu %.7f\n", Ts, lc, lg);
    CHECK(fabs(lg - lc) <= TOL_LOSS * fabs(lc), "T=%d: loss %.7f vs cpu %.7f", Ts, lg, lc);
    float z = gpu->forward(gpu, inputs, NULL, B, T);
    CHECK(z == 0.0f, "forward without targets returned %g, expected 0", z);
    cpu->forward(cpu, inputs, NULL, B, T);
    const float *a = cpu->logits(cpu);
    /* CHECK_TENSOR reads its arguments once per element: download the logits once, outside it */
    const float *g_logits = gpu->logits(gpu);
    CHECK_TENSOR("logits", g_logits, a, (size_t)B * T * cpu->padded_vocab_size);
}

/* test/ref/gpt2_ref.bin (format: dev/ref/gpt2_ref.py, reader: test/test_gpt2.c): header, tokens, and the
 * per-step losses of 10 AdamW then 10 AdamS steps from the seed-1337 d2c32h4t32 initialisation */
#define REF_PATH "test/ref/gpt2_ref.bin"
#ifdef ENABLE_FP32
#define TOL_STEPS 1e-4
#else
#define TOL_STEPS 2e-2
#endif
static void ten_steps(const char *test_name_, int opt) {
    FILE *f = xfopen(REF_PATH, "rb", "regenerate it with `make gpt2-ref`");
    int64_t size = file_size(REF_PATH);
    unsigned char *buf = (unsigned char *)xmalloc((size_t)size, REF_PATH);
    xfread(buf, (size_t)size, f, REF_PATH, "the reference");
    fclose(f);
    int32_t h[32];
    double hp[8];
    memcpy(h, buf, sizeof h);
    memcpy(hp, buf + sizeof h, sizeof hp);
    CHECK(h[0] == 20240330 && h[1] == 1, "%s: magic %d version %d, expected 20240330 version 1", REF_PATH, h[0], h[1]);
    if (h[0] != 20240330) { free(buf); return; }
    int Bref = h[8], Tref = h[9], steps = h[10], K = h[11], C = h[3], BT = Bref * Tref;
    Model *m = gpt2cu_create("d2c32h4t32", NULL, 1337, Bref, Tref);
    size_t P = m->table.total, Vp = m->padded_vocab_size;
    /* one tensor set in the file: wte's K kept rows + 2 sums, then every other tensor whole */
    size_t set = (P - Vp * C + (size_t)K * C + 2) * 4;
    size_t off = sizeof h + sizeof hp;
    const int32_t *tokens = (const int32_t *)(buf + off);
    off += (size_t)(BT + 1) * 4 + (size_t)K * 4 + 4 + (size_t)BT * K * 4 + set; /* tokens rows loss logits grads */
    if (opt) off += (size_t)steps * 4 + set;
    CHECK(off + (size_t)steps * 4 <= (size_t)size, "%s is shorter than its header implies", REF_PATH);
    if (off + (size_t)steps * 4 > (size_t)size) { m->free(m); free(buf); return; }
    const float *ref_losses = (const float *)(buf + off);
    int *in = (int *)malloc(BT * 4), *tg = (int *)malloc(BT * 4);
    for (int i = 0; i < BT; i++) { in[i] = tokens[i]; tg[i] = tokens[i + 1]; }
    float *mom = (float *)xcalloc(P, 4, "m"), *var = (float *)xcalloc(P, 4, "v");
    OptimConfig cfg = {opt ? OPT_ADAMS : OPT_ADAMW, (float)hp[1], (float)hp[2], (float)hp[3], (float)hp[4]};
    double worst = 0;
    for (int t = 1; t <= steps; t++) {
        memset(m->grads, 0, P * 4);
        float loss = m->forward(m, in, tg, Bref, Tref);
        m->backward(m, 1.0f, NULL, NULL);
        if (opt == 0) adamw_update(&m->table, m->params, m->grads, mom, var, 0, P, t, (float)hp[0], &cfg);
        else adams_update(&m->table, m->params, m->grads, mom, 0, P, t, (float)hp[0], &cfg);
        double rel = fabs(loss - ref_losses[t - 1]) / fabs(ref_losses[t - 1]);
        if (rel > worst) worst = rel;
        printf("  %s step %2d: loss %.6f pytorch %.6f (rel %.2e)\n", opt ? "adams" : "adamw", t, loss,
               ref_losses[t - 1], rel);
        CHECK(rel <= TOL_STEPS, "step %d loss %.7f vs PyTorch %.7f (rel %.2e > %.0e)", t, loss, ref_losses[t - 1], rel,
              TOL_STEPS);
    }
    printf("  worst relative loss difference %.2e\n", worst);
    free(mom); free(var); free(in); free(tg); free(buf);
    m->free(m);
}
TEST(adamw_10_steps_match_pytorch) { ten_steps(test_name_, 0); }
TEST(adams_10_steps_match_pytorch) { ten_steps(test_name_, 1); }

int main(int argc, char **argv) {
    cuda_require_device("test_gpt2cu");
    if (argc > 1) spec = argv[1];
    printf("  spec %s, B=%d T=%d, " PRECISION_NAME "\n", spec, B, T);
    cpu = gpt2_host_create(spec, NULL, 1337, B, T);
    gpu = gpt2cu_create(spec, NULL, 1337, B, T);
    inputs = (int *)malloc((size_t)B * T * sizeof(int));
    targets = (int *)malloc((size_t)B * T * sizeof(int));
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < B * T; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        inputs[i] = (int)(x % (uint64_t)cpu->vocab_size);
        targets[i] = (int)((x >> 20) % (uint64_t)cpu->vocab_size);
    }
    inputs[3] = inputs[5] = inputs[70] = 11; /* repeated tokens: the embedding backward's grouping */
    RUN_TEST(forward_matches_cpu);
    RUN_TEST(gradients_match_cpu);
    RUN_TEST(micro_steps_accumulate_bitwise_repeatably);
    RUN_TEST(shorter_sequence_matches_cpu);
    RUN_TEST(adamw_10_steps_match_pytorch);
    RUN_TEST(adams_10_steps_match_pytorch);
    gpu->free(gpu);
    cpu->free(cpu);
    TEST_EXIT();
}

/*
 * dev/bench_gpt2.c - CPU throughput of train_gpt.c: a training step (forward + backward + AdamW) on random tokens,
 * tokens/s and MFU against the SGEMM peak measured here, and a per-layer time breakdown (each layer function of
 * train_gpt.c timed alone at the model's shapes). Not a test: numbers depend on the machine and its load.
 *
 * Usage: build/bench_gpt2 SPEC B T [STEPS]     e.g. OMP_NUM_THREADS=2 build/bench_gpt2 d12 4 256 5
 */
#define TESTING
#include "train_gpt.c"

#include "optim/optim.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median seconds of `reps` runs of the statement. */
#define TIME_MEDIAN(out, reps, stmt)                                                                          \
    do {                                                                                                      \
        double ts_[16];                                                                                       \
        int r_ = (reps) > 16 ? 16 : (reps);                                                                   \
        for (int i_ = 0; i_ < r_; i_++) {                                                                     \
            double t0_ = now_seconds();                                                                       \
            stmt;                                                                                             \
            ts_[i_] = now_seconds() - t0_;                                                                    \
        }                                                                                                     \
        out = median(ts_, r_);                                                                                \
    } while (0)

/* SGEMM peak in FLOP/s: the fastest of 8 runs of a product the size of a d12 MLP matmul (fastest, not median:
 * on a shared machine the best run is the closest to what the hardware can do). */
static double sgemm_peak(void) {
    int M = 1024, N = 3072, K = 768;
    float *a = xcalloc((size_t)M * K, 4, "a"), *b = xcalloc((size_t)N * K, 4, "b"), *c = xcalloc((size_t)M * N, 4, "c");
    double t = 1e30;
    for (int i = 0; i < 8; i++) {
        double t0 = now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        double dt = now_seconds() - t0;
        if (dt < t) t = dt;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * M * N * K / t;
}

int main(int argc, char **argv) {
    fp_flush_denormals(); /* as the trainer does (trainer/train.c) */
    if (argc < 4) fatal("usage: %s SPEC B T [STEPS] [--no-breakdown], e.g. %s d12 4 256 5", argv[0], argv[0]);
    const char *spec = argv[1];
    int B = atoi(argv[2]), T = atoi(argv[3]), steps = argc > 4 ? atoi(argv[4]) : 5;
    if (steps < 1 || steps > 16) fatal("STEPS %d: use 1..16", steps);
    Model *m = gpt2_family.create(spec, NULL, 1, B, T);
    GPT2 *g = (GPT2 *)m;
    int L = g->cfg.L, C = g->cfg.C, NH = g->cfg.NH, Vp = g->cfg.Vp, N = B * T;
    size_t P = m->table.total;
    int *in = xmalloc((size_t)N * sizeof(int), "in"), *tg = xmalloc((size_t)N * sizeof(int), "tg");
    Rng rng;
    rng_seed(&rng, 5);
    for (int i = 0; i < N; i++) {
        in[i] = (int)rng_below(&rng, 50257);
        tg[i] = (int)rng_below(&rng, 50257);
    }
    float *mom = xcalloc(P, 4, "m"), *var = xcalloc(P, 4, "v");
    OptimConfig oc = {OPT_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f};
    double peak = sgemm_peak();
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("%s: %s, %.1fM parameters, B=%d T=%d, %d OpenMP threads; SGEMM peak %.1f GFLOP/s\n", spec, m->desc,
           P / 1e6, B, T, threads, peak / 1e9);

    double tf[16], tb[16], to[16], ts[16];
    m->forward(m, in, tg, B, T); /* warm-up: page in the activations */
    m->backward(m, 1.0f, NULL, NULL);
    for (int s = 0; s < steps; s++) {
        double t0 = now_seconds();
        m->forward(m, in, tg, B, T);
        double t1 = now_seconds();
        memset(m->grads, 0, P * 4);
        m->backward(m, 1.0f, NULL, NULL);
        double t2 = now_seconds();
        adamw_update(&m->table, m->params, m->grads, mom, var, 0, P, s + 1, 1e-4f, &oc);
        double t3 = now_seconds();
        tf[s] = t1 - t0;
        tb[s] = t2 - t1;
        to[s] = t3 - t2;
        ts[s] = t3 - t0;
    }
    double step = median(ts, steps);
    /* FLOPs actually done at this T: 6N for the matmuls + the attention term at T (not maxT) */
    double flops = m->flops_per_token - 12.0 * L * C * (double)g->cfg.maxT + 12.0 * L * C * (double)T;
    printf("step (median of %d): %.1f ms = forward %.1f + backward %.1f + adamw %.1f; %.0f tok/s; %.1f GFLOP/s = "
           "MFU %.1f%% of the SGEMM peak\n",
           steps, 1e3 * step, 1e3 * median(tf, steps), 1e3 * median(tb, steps), 1e3 * median(to, steps), N / step,
           flops * N / step / 1e9, 100.0 * flops * N / step / peak);

    if (argc > 5 && strcmp(argv[5], "--no-breakdown") == 0) {
        m->free(m);
        return 0;
    }
    /* per-layer breakdown: each function alone on the model's buffers (layer 0's), times L where per layer */
    GPT2Acts *a = &g->a;
    GPT2Tensors *p = &g->p, *d = &g->g;
    float *dc = a->dbuf_c, *d4 = a->dbuf_4c;
    struct { const char *name; double t; } rows[16];
    int nr = 0;
    double t;
    /* mult: how many times the model runs it per step (L per layer, 2L+1 layernorms, 1 otherwise) */
#define ROW(label, mult, stmt)                                                                                \
    do {                                                                                                      \
        TIME_MEDIAN(t, 3, stmt);                                                                              \
        rows[nr].name = label;                                                                                \
        rows[nr++].t = t * (mult);                                                                            \
    } while (0)
    ROW("layernorm fwd (x2L+1)", 2 * L + 1, layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->encoded, p->ln1w, p->ln1b, N, C));
    ROW("qkv matmul fwd", L, matmul_forward(a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C));
    ROW("attention fwd", L, attention_forward(a->atty, a->att, a->qkv, B, T, C, NH));
    ROW("attproj matmul fwd", L, matmul_forward(a->attproj, a->atty, p->attprojw, p->attprojb, N, C, C));
    ROW("fc matmul fwd", L, matmul_forward(a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C));
    ROW("gelu fwd", L, gelu_forward(a->fch_gelu, a->fch, (size_t)N * 4 * C));
    ROW("fcproj matmul fwd", L, matmul_forward(a->fcproj, a->fch_gelu, p->fcprojw, p->fcprojb, N, 4 * C, C));
    ROW("lm_head matmul fwd", 1, matmul_forward(a->logits, a->lnf, p->wte, NULL, N, C, Vp));
    ROW("crossentropy fwd+bwd", 1, crossentropy_forward(a->lse, a->logits, tg, N, 50257, Vp);
        crossentropy_backward_inplace(a->logits, a->lse, tg, N, 50257, Vp, 1.0f));
    ROW("lm_head matmul bwd", 1, matmul_backward(dc, d->wte, NULL, a->logits, a->lnf, p->wte, N, C, Vp));
    ROW("qkv+attproj+fc+fcproj bwd", L,
        matmul_backward(d4, d->fcprojw, d->fcprojb, dc, a->fch_gelu, p->fcprojw, N, 4 * C, C);
        matmul_backward(dc, d->fcw, d->fcb, d4, a->ln2, p->fcw, N, C, 4 * C);
        matmul_backward(dc, d->attprojw, d->attprojb, a->attproj, a->atty, p->attprojw, N, C, C);
        matmul_backward(dc, d->qkvw, d->qkvb, d4, a->ln1, p->qkvw, N, C, 3 * C));
    ROW("attention bwd", L, attention_backward(d4, dc, a->att, a->qkv, B, T, C, NH, a->att_scratch, (size_t)g->Tmax * g->Tmax, g->nthreads));
    ROW("gelu bwd", L, gelu_backward_inplace(d4, a->fch, (size_t)N * 4 * C));
    ROW("layernorm bwd (x2L+1)", 2 * L + 1, layernorm_backward(a->dresidual, d->ln1w, d->ln1b, dc, a->encoded, p->ln1w,
        a->ln1_mean, a->ln1_rstd, N, C, a->ln_scratch, g->nthreads));
    ROW("adamw", 1, adamw_update(&m->table, m->params, m->grads, mom, var, 0, P, 1, 0.0f, &oc));
    double sum = 0;
    for (int i = 0; i < nr; i++) sum += rows[i].t;
    printf("per-layer breakdown (each timed alone, median of 3; whole model):\n");
    for (int i = 0; i < nr; i++) printf("  %-28s %9.2f ms  %5.1f%%\n", rows[i].name, 1e3 * rows[i].t, 100 * rows[i].t / sum);
    printf("  %-28s %9.2f ms\n", "sum", 1e3 * sum);
    m->free(m);
    return 0;
}

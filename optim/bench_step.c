/*
 * optim/bench_step.c - times one optimizer step of optim/dist.c (no model): a GPT-2-like parameter table of about
 * P floats, random gradients, and distopt_step for adamw, adams, adams with ZeRO-1, scape, scape with coded masks
 * (scape+code: the owner's encode and every segment's decode, optim/mask_code.h, are inside the timed step) and scape
 * with ZeRO-1 (optim/dist_scape_zero.c); prints the median ms per step.
 * Usage: build/bench_step [P_millions=10.75] [steps=7] [density=0.1]   (run under mpirun for N > 1)
 * Not a test: it asserts nothing; use it to compare versions of the update (same machine, same command).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rng.h"
#include "common/util.h"
#include "optim/dist.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* L layers of (ln 2C, qkv 3C*C + 3C, proj C*C + C, ln 2C, fc 4C*C + 4C, fcproj 4C*C + C) plus wte V*C, lnf 2C,
 * with C = 256 and V chosen so the total is about P (like --model d4c256 of train_gpt). */
static void build_table(ParamTable *t, double pm) {
    const size_t C = 256;
    const int L = 4;
    size_t per_layer = 12 * C * C + 13 * C;
    double want = pm * 1e6 - (double)(L * per_layer + 2 * C);
    size_t V = want > C ? (size_t)(want / C) : 1;
    size_t s[2] = {V, C};
    param_table_add(t, "wte", -1, L, 1, 2, s);
    for (int l = 0; l < L; l++) {
        int b = L - 1 - l;
        s[0] = 2 * C; param_table_add(t, "ln1", l, b, 0, 1, s);
        s[0] = 3 * C; s[1] = C; param_table_add(t, "qkvw", l, b, 1, 2, s);
        s[0] = 3 * C; param_table_add(t, "qkvb", l, b, 0, 1, s);
        s[0] = C; s[1] = C; param_table_add(t, "attprojw", l, b, 1, 2, s);
        s[0] = C; param_table_add(t, "attprojb", l, b, 0, 1, s);
        s[0] = 2 * C; param_table_add(t, "ln2", l, b, 0, 1, s);
        s[0] = 4 * C; s[1] = C; param_table_add(t, "fcw", l, b, 1, 2, s);
        s[0] = 4 * C; param_table_add(t, "fcb", l, b, 0, 1, s);
        s[0] = C; s[1] = 4 * C; param_table_add(t, "fcprojw", l, b, 1, 2, s);
        s[0] = C; param_table_add(t, "fcprojb", l, b, 0, 1, s);
    }
    s[0] = 2 * C;
    param_table_add(t, "lnf", -1, L, 0, 1, s);
    for (int i = 0; i < t->n; i++) t->slices[i].dense_only = !t->slices[i].decay;
    t->num_buckets = L + 1;
}

static double process_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    double pm = argc > 1 ? atof(argv[1]) : 10.75;
    int steps = argc > 2 ? atoi(argv[2]) : 7;
    float dens = argc > 3 ? (float)atof(argv[3]) : 0.1f;
    if (!(pm > 0) || steps < 1 || steps > 1000 || !(dens > 0 && dens <= 1)) fatal("usage: bench_step [P_millions > 0] [steps 1..1000] [density in (0, 1]]");
    ParamTable tab = {0};
    build_table(&tab, pm);
    size_t P = tab.total;
    float *p = xmalloc(P * sizeof(float), "params"), *g = xmalloc(P * sizeof(float), "grads");
    float *g0 = xmalloc(P * sizeof(float), "gradient source");
    Rng r;
    rng_seed(&r, 11 + (uint64_t)comm_rank());
    rng_normal(&r, g0, P, 0.0f, 1e-3f);
    const char *names[] = {"adamw", "adams", "adams+zero", "scape", "scape+code", "scape+zero"};
    OptimizerKind kinds[] = {OPT_ADAMW, OPT_ADAMS, OPT_ADAMS, OPT_SCAPE, OPT_SCAPE, OPT_SCAPE};
    for (int o = 0; o < 6; o++) {
        rng_normal(&r, p, P, 0.0f, 0.02f);
        DistConfig cfg = {.opt = {.kind = kinds[o], .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f},
                          .clip = 1.0f, .density = kinds[o] == OPT_SCAPE ? dens : 1.0f, .density_start = 1.0f,
                          .exclude_norms = 1, .mask_coding = o == 4, .zero = o == 2 || o == 5};
        DistOptim *d = distopt_create(&tab, p, g, &cfg);
        double *ms = xmalloc((size_t)steps * sizeof(double), "times");
        double *cpu = xmalloc((size_t)steps * sizeof(double), "times");
        for (int t = 1; t <= steps + 1; t++) {
            memcpy(g, g0, P * sizeof(float));
            g[(size_t)t * 7919 % P] += 1e-4f * (float)t; /* masks move a little */
            float norm;
            comm_barrier();
            double t0 = now_seconds(), c0 = process_cpu_seconds();
            for (int b = tab.num_buckets - 1; b >= 0; b--) distopt_bucket_ready(d, b);
            distopt_step(d, t, 1e-3f, &norm);
            if (t > 1) { /* step 1 (bootstrap) not timed */
                ms[t - 2] = 1e3 * (now_seconds() - t0);
                cpu[t - 2] = 1e3 * (process_cpu_seconds() - c0);
            }
        }
        qsort(ms, (size_t)steps, sizeof(double), cmp_d);
        qsort(cpu, (size_t)steps, sizeof(double), cmp_d);
        if (comm_rank() == 0)
            printf("%-10s P=%zu N=%d d=%g: median %.1f ms/step (min %.1f, max %.1f, %d steps), CPU %.1f ms/step (all "
                   "threads; with 1 thread the work itself)\n", names[o], P, comm_world(),
                   kinds[o] == OPT_SCAPE ? dens : 1.0, ms[steps / 2], ms[0], ms[steps - 1], steps, cpu[steps / 2]);
        free(ms);
        free(cpu);
        distopt_free(d);
    }
    free(p); free(g); free(g0);
    param_table_free(&tab);
    comm_finalize();
    return 0;
}

/*
 * optim/bench_zero.c - per-rank optimizer-state memory and bytes per step of dense AdamS and SCAPE, each with and
 * without ZeRO-1 (issue 17), computed and measured.
 *
 *   build/bench_zero computed [density...]   the full-size tables (GPT-2 d12: L12 C768 Vp 50304 maxT 1024; Llama
 *                                            500m: L16 C1536 F4096 NH16 NKV8 Vp 32000; Llama 1.8b: L24 C2560 F6912
 *                                            NH32 NKV8 Vp 128256), for N = 1, 2, 4, 8: the largest rank's state
 *                                            bytes (also in units of P) and bytes sent per step (ring model,
 *                                            SCAPE.md section 6 and its sharded extension, below); then the device
 *                                            SCAPE's state, unsharded 8P + masks, ZeRO-1 as the host's
 *   build/bench_zero measured [density]      under mpirun -np N: a small GPT-2-shaped table (d2 C64 Vp 512) trained
 *                                            6 steps with random gradients by optim/dist.c in each of the 4 settings;
 *                                            the logged state (distopt_state_memory, largest rank) and the bytes sent
 *                                            at the last step (comm.h's counters, this rank), beside the same formulas
 *
 * Formulas (K = the mask's count, K_r = rank r's owned part of it, P_r its owned parameters, S = the owners' mask
 * segments in bytes, about P/8; largest rank shown):
 *   state   AdamS 4P | AdamS ZeRO-1 4 P_r | SCAPE 4P + 2 * 4K + 3 P/8 | SCAPE ZeRO-1 4P + 2 * 4 K_r + 3 P/8
 *           (SCAPE: residual, m in two buffers while a step writes m_t, three packed masks; optim/README.md)
 *   bytes   AdamS 2 * 4P (N-1)/N, ZeRO-1 the same (reduce-scatter + all-gather) | SCAPE 2 * 4K (N-1)/N + S (N-1)/N |
 *           SCAPE ZeRO-1 4K (N-1)/N (reduce-scatter) + 2 * 4K (N-1)/N (m_t and p all-gathers) + S (N-1)/N
 *   (control all-reduces, a few bytes per chunk of 16384 parameters, are left out of the formulas and shown apart)
 * Not a test: it asserts nothing. The measured part is checked exactly in test/test_dist.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/util.h"
#include "comm/comm.h"
#include "optim/dist.h"
#include "optim/scape.h"

/* the trainers' tables, shape for shape (train_gpt.c gpt2_build_table, train_llama.c llama_build_table) */
static void gpt2_table(ParamTable *t, size_t L, size_t C, size_t Vp, size_t maxT) {
    memset(t, 0, sizeof *t);
    int last = (int)L;
    param_table_add(t, "wte", -1, last, 1, 2, (size_t[]){Vp, C});
    param_table_add(t, "wpe", -1, last, 1, 2, (size_t[]){maxT, C});
    struct { const char *name; int decay, ndim; size_t d0, d1; } pl[] = {
        {"ln1w", 0, 1, C, 0},     {"ln1b", 0, 1, C, 0},     {"qkvw", 1, 2, 3 * C, C}, {"qkvb", 0, 1, 3 * C, 0},
        {"attprojw", 1, 2, C, C}, {"attprojb", 0, 1, C, 0}, {"ln2w", 0, 1, C, 0},     {"ln2b", 0, 1, C, 0},
        {"fcw", 1, 2, 4 * C, C},  {"fcb", 0, 1, 4 * C, 0},  {"fcprojw", 1, 2, C, 4 * C}, {"fcprojb", 0, 1, C, 0},
    };
    for (size_t k = 0; k < sizeof pl / sizeof pl[0]; k++)
        for (size_t l = 0; l < L; l++)
            param_table_add(t, pl[k].name, (int)l, (int)(L - 1 - l), pl[k].decay, pl[k].ndim, (size_t[]){pl[k].d0, pl[k].d1});
    param_table_add(t, "lnfw", -1, last, 0, 1, (size_t[]){C});
    param_table_add(t, "lnfb", -1, last, 0, 1, (size_t[]){C});
}

static void llama_table(ParamTable *t, size_t L, size_t C, size_t F, size_t NH, size_t NKV, size_t Vp) {
    memset(t, 0, sizeof *t);
    int last = (int)L;
    size_t KVC = NKV * (C / NH);
    param_table_add(t, "wte", -1, last, 1, 2, (size_t[]){Vp, C});
    struct { const char *name; int decay, ndim; size_t d0, d1; } pl[] = {
        {"attn_norm", 0, 1, C, 0}, {"wq", 1, 2, C, C},       {"wk", 1, 2, KVC, C}, {"wv", 1, 2, KVC, C},
        {"wo", 1, 2, C, C},        {"ffn_norm", 0, 1, C, 0}, {"w1", 1, 2, F, C},   {"w3", 1, 2, F, C},
        {"w2", 1, 2, C, F},
    };
    for (size_t k = 0; k < sizeof pl / sizeof pl[0]; k++)
        for (size_t l = 0; l < L; l++)
            param_table_add(t, pl[k].name, (int)l, (int)(L - 1 - l), pl[k].decay, pl[k].ndim, (size_t[]){pl[k].d0, pl[k].d1});
    param_table_add(t, "norm_f", -1, last, 0, 1, (size_t[]){C});
    param_table_add(t, "lm_head", -1, last, 1, 2, (size_t[]){Vp, C});
}

typedef struct {
    double state[4], bytes[4]; /* AdamS, AdamS ZeRO-1, SCAPE, SCAPE ZeRO-1: largest rank */
    double dev[2];             /* the device SCAPE (cuda/), unsharded and ZeRO-1: largest rank's state */
} Figures;

/* The formulas of the header for table t on N ranks at density d (norm gains and biases dense, the default). */
static Figures formulas(const ParamTable *t, int N, double d) {
    OwnerTable o;
    owner_table_build(&o, t, N);
    double P = (double)t->total, K = 0, Pr = 0, Kr = 0, S = 0, f = (double)(N - 1) / N;
    for (int r = 0; r < N; r++) {
        double pr = 0, kr = 0;
        for (int i = o.first[r]; i < o.first[r + 1]; i++) {
            const ParamSlice *s = &t->slices[i];
            pr += (double)s->numel;
            kr += s->dense_only ? (double)s->numel : (double)scape_k(d, s->numel);
        }
        K += kr;
        if (pr > Pr) Pr = pr;
        if (kr > Kr) Kr = kr;
        S += (double)mask_bytes(o.hi[r] - o.lo[r]);
    }
    owner_table_free(&o);
    double masks = 3.0 * (double)mask_bytes(t->total);
    /* the device keeps m dense over P, or with ZeRO-1 compact like the host's, and r (cuda/dist_scape_state.cuh's
     * sd_memory_bytes, masks as 32-bit words: within a few bytes of the host's) */
    Figures x = {{4 * P, 4 * Pr, 4 * P + 8 * K + masks, 4 * P + 8 * Kr + masks},
                 {8 * P * f, 8 * P * f, 8 * K * f + S * f, 12 * K * f + S * f},
                 {8 * P + masks, 4 * P + 8 * Kr + masks}};
    return x;
}

static const char *names[4] = {"AdamS", "AdamS ZeRO-1", "SCAPE", "SCAPE ZeRO-1"};

static void computed(int argc, char **argv) {
    double dens[8] = {0.1, 0.01};
    int nd = 2;
    if (argc > 2) {
        nd = 0;
        for (int i = 2; i < argc && nd < 8; i++) dens[nd++] = atof(argv[i]);
    }
    ParamTable g, l, l18;
    gpt2_table(&g, 12, 768, 50304, 1024);
    llama_table(&l, 16, 1536, 4096, 16, 8, 32000);
    llama_table(&l18, 24, 2560, 6912, 32, 8, 128256);
    const ParamTable *tabs[3] = {&g, &l, &l18};
    const char *tn[3] = {"GPT-2 d12", "Llama 500m", "Llama 1.8b"};
    for (int k = 0; k < 3; k++)
        for (int di = 0; di < nd; di++) {
            double P = (double)tabs[k]->total;
            printf("\n%s, P = %.0f, density %g: per-rank state (bytes, P units) and bytes sent per step\n", tn[k], P, dens[di]);
            printf("%3s | %-26s %-26s %-26s %-26s | %-12s %-12s %-12s %-12s | ZeRO-1 SCAPE <= ZeRO-1 AdamS + 4P\n", "N",
                   names[0], names[1], names[2], names[3], "AdamS", "AdamS Z1", "SCAPE", "SCAPE Z1");
            for (int N = 1; N <= 8; N *= 2) {
                Figures x = formulas(tabs[k], N, dens[di]);
                printf("%3d |", N);
                for (int i = 0; i < 4; i++) printf(" %14.0f (%5.2fP)   ", x.state[i], x.state[i] / P);
                printf("|");
                for (int i = 0; i < 4; i++) printf(" %12.0f", x.bytes[i]);
                printf(" | %s (%.2fP vs %.2fP)\n", x.state[3] <= x.state[1] + 4 * P ? "yes" : "NO", x.state[3] / P,
                       (x.state[1] + 4 * P) / P);
            }
            printf("device SCAPE (cuda/: m dense over P; with ZeRO-1 compact, as above), largest rank's state:\n");
            for (int N = 1; N <= 8; N *= 2) {
                Figures x = formulas(tabs[k], N, dens[di]);
                printf("%3d | device SCAPE %14.0f (%5.2fP)   device SCAPE ZeRO-1 %14.0f (%5.2fP)   saved %.2f GB a rank\n",
                       N, x.dev[0], x.dev[0] / P, x.dev[1], x.dev[1] / P, (x.dev[0] - x.dev[1]) / 1e9);
            }
        }
    param_table_free(&g);
    param_table_free(&l);
    param_table_free(&l18);
}

static void measured(int argc, char **argv) {
    double dens = argc > 2 ? atof(argv[2]) : 0.1;
    int rank = comm_rank(), N = comm_world();
    ParamTable t;
    gpt2_table(&t, 2, 64, 512, 64);
    size_t P = t.total;
    Figures x = formulas(&t, N, dens);
    if (rank == 0)
        printf("measured: GPT-2-shaped d2 C64 Vp512, P = %zu, N = %d, density %g (reached at step 3), step 6\n"
               "%-13s | %12s %12s %6s | %12s %12s %6s | %s\n", P, N, dens, "setting", "state", "formula", "ratio",
               "bytes sent", "formula", "ratio", "bytes by kind (all-reduce, reduce-scatter, all-gather, control)");
    for (int s = 0; s < 4; s++) {
        float *p = xmalloc(P * sizeof(float), "params"), *g = xcalloc(P, sizeof(float), "grads");
        Rng rng;
        rng_seed(&rng, 1);
        rng_normal(&rng, p, P, 0.0f, 0.02f);
        DistConfig c = {0};
        c.opt.kind = s < 2 ? OPT_ADAMS : OPT_SCAPE;
        c.opt.beta1 = 0.9f, c.opt.beta2 = 0.95f, c.opt.eps = 1e-8f, c.opt.weight_decay = 0.1f;
        c.density = (float)dens, c.density_start = 1.0f, c.density_warmup = 3, c.exclude_norms = 1, c.clip = 1.0f;
        c.zero = s & 1;
        DistOptim *d = distopt_create(&t, p, g, &c);
        CommStats k[COMM_NKINDS];
        for (int step = 1; step <= 6; step++) {
            rng_seed(&rng, (uint64_t)(1000 * step + rank));
            rng_normal(&rng, g, P, 0.0f, 1.0f);
            comm_stats_take_kind(k);
            for (int b = 0; b < t.num_buckets; b++) distopt_bucket_ready(d, b);
            float gn;
            distopt_step(d, step, 1e-3f, &gn);
            comm_stats_take_kind(k);
        }
        double st = (double)distopt_state_memory(d);
        double all[64] = {0};
        if (N <= 64) {
            comm_allgather(&st, all, sizeof st);
            for (int r = 0; r < N; r++)
                if (all[r] > st) st = all[r];
        }
        double sent = 0;
        for (int i = 0; i < COMM_CONTROL; i++) sent += (double)k[i].bytes_sent;
        if (rank == 0)
            printf("%-13s | %12.0f %12.0f %6.3f | %12.0f %12.0f %6.3f | %llu %llu %llu %llu\n", names[s], st,
                   x.state[s], st / x.state[s], sent, x.bytes[s], x.bytes[s] > 0 ? sent / x.bytes[s] : 1.0,
                   (unsigned long long)k[COMM_ALLREDUCE].bytes_sent, (unsigned long long)k[COMM_REDUCE_SCATTER].bytes_sent,
                   (unsigned long long)k[COMM_ALLGATHER].bytes_sent, (unsigned long long)k[COMM_CONTROL].bytes_sent);
        distopt_free(d);
        free(p);
        free(g);
    }
    param_table_free(&t);
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "computed") == 0) {
        if (comm_rank() == 0) computed(argc, argv);
    } else if (argc > 1 && strcmp(argv[1], "measured") == 0) {
        measured(argc, argv);
    } else {
        if (comm_rank() == 0) fprintf(stderr, "usage: bench_zero computed [density...] | measured [density] (under mpirun)\n");
        comm_finalize();
        return 2;
    }
    comm_finalize();
    return 0;
}

/*
 * test/scape_ref_driver.c - runs optim/dist_scape.c's SCAPE on a toy problem whose gradients a float64 reference can
 * recompute from its own parameters, and dumps every step's state for test/scape_ref.py (an independent numpy
 * implementation of SCAPE.md section 3) to compare with, step by step.
 * Toy: per-coordinate weighted least squares, g_{i,j} = w_j (theta_j - x_{t,i,j}) with w_j = 1 + j % 7 and
 * x_{t,i,j} = 2 sin(0.731 j + 0.377 t + 2.1 i) + 0.5 cos(1.3 j t) (rank i's "data" at step t), theta_0 =
 * 0.3 cos(0.91 j); lr_t = 0.01 (1 + 0.1 (t % 3)). Layout: two decayed matrices and an embedding-like matrix
 * (sparse), one gain and one bias (dense-only), in two buckets.
 * Usage: mpirun -np N scape_ref_driver OUT_PREFIX STEPS DENSITY WARMUP CLIP [VARIANT PARAM]
 * (VARIANT: --scape-variant's names; PARAM: the cap A of catchup and tensor-nu, rho of residual-decay; or VARIANT
 * powersgd with PARAM its rank: --optimizer powersgd, compression from step 4 (3 dense steps first), the mask dumped
 * as zeros, m AdamW's, r the error feedback e_i, and rank 0 writes the initial Q and then Q after every step to
 * OUT_PREFIX.q.bin; or VARIANT onebit-adam with PARAM its freeze step F: --optimizer onebit-adam, m the shared
 * momentum, r the worker error e_i, the mask dumped as zeros, and every rank writes its server error after every
 * step (P floats) to OUT_PREFIX.es.<rank>.bin; or VARIANT demo with PARAM its top-k: --optimizer demo, blocks of
 * side 8, decay 0.999, r the local momentum delta_i, m and the mask dumped as zeros; or VARIANT diloco with PARAM the
 * rule's "flag=value,..." (e.g. diloco-h=4,diloco-inner=adams): --optimizer diloco with its last step at STEPS, theta
 * this rank's own parameters, m its inner first moment, r the outer momentum, the mask dumped as zeros, and every rank
 * writes after every step the synchronized model theta_prev and its inner second moment (zeros for AdamS), P floats
 * each, to OUT_PREFIX.dl.<rank>.bin; or VARIANT sparseloco with PARAM its "flag=value,...": the same dumps, r its error
 * feedback e_i)
 * Writes OUT_PREFIX.<rank>.bin: int32 P, world, rank, nslices, steps; per slice int64 offset, numel, int32 decay,
 * dense_only; per rank int64 owner lo, hi; float32 theta_0 (P); then per step: float32 theta, m, r (P each),
 * uint8 mask_cur (P, unpacked), float32 grad_norm.
 * Not for: training; not a benchmark.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "optim/dist.h"
#include "optim/scape.h"

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    if (argc != 6 && argc != 8) fatal("usage: %s OUT_PREFIX STEPS DENSITY WARMUP CLIP [VARIANT PARAM]", argv[0]);
    int steps = atoi(argv[2]);
    double dens = atof(argv[3]);
    int warm = atoi(argv[4]);
    float clip = (float)atof(argv[5]);
    int rank = comm_rank(), world = comm_world();

    ParamTable tab = {0};
    size_t s2[2];
    s2[0] = 40; s2[1] = 8;  param_table_add(&tab, "wte", -1, 1, 1, 2, s2);
    s2[0] = 8;              param_table_add(&tab, "ln", 0, 0, 0, 1, s2);
    s2[0] = 8; s2[1] = 24;  param_table_add(&tab, "fcw", 0, 0, 1, 2, s2);
    s2[0] = 24;             param_table_add(&tab, "fcb", 0, 0, 0, 1, s2);
    s2[0] = 24; s2[1] = 8;  param_table_add(&tab, "projw", 0, 0, 1, 2, s2);
    size_t P = tab.total;
    float *p = xmalloc(P * sizeof(float), "p"), *g = xcalloc(P, sizeof(float), "g");
    for (size_t j = 0; j < P; j++) p[j] = (float)(0.3 * cos(0.91 * (double)j));

    DistConfig c = {0};
    c.opt.kind = OPT_SCAPE;
    c.opt.beta1 = 0.9f;
    c.opt.beta2 = 0.95f;
    c.opt.eps = 1e-8f;
    c.opt.weight_decay = 0.1f;
    c.clip = clip;
    c.density = dens;
    c.density_start = 1.0f;
    c.density_warmup = warm;
    c.exclude_norms = 1;
    int psgd = argc == 8 && strcmp(argv[6], "powersgd") == 0;
    int onebit = argc == 8 && strcmp(argv[6], "onebit-adam") == 0;
    int demo = argc == 8 && strcmp(argv[6], "demo") == 0;
    int sparseloco = argc == 8 && strcmp(argv[6], "sparseloco") == 0;
    int diloco = (argc == 8 && strcmp(argv[6], "diloco") == 0) || sparseloco;
    FILE *fq = NULL, *fes = NULL, *fdl = NULL;
    if (diloco) {
        c.opt.kind = sparseloco ? OPT_SPARSELOCO : OPT_DILOCO;
        c.last_step = steps;
        distopt_default_options(&c);
        /* argv[7]: the rule's own options as "flag=value,..." (argv's text outlives c, as string options need) */
        for (char *save = NULL, *kv = strtok_r(argv[7], ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(kv, '=');
            if (eq) *eq = '\0';
            if (!eq || distopt_set_option(&c, kv, eq + 1) != 0)
                fatal("scape_ref_driver: '%s' is not FLAG=VALUE of one of --optimizer %s's options", kv, argv[6]);
        }
    } else if (demo) {
        c.opt.kind = OPT_DEMO;
        distopt_set_option(&c, "demo-chunk", "8");
        distopt_set_option(&c, "demo-topk", argv[7]);
        distopt_set_option(&c, "demo-decay", "0.999");
    } else if (onebit) {
        c.opt.kind = OPT_ONEBIT_ADAM;
        distopt_set_option(&c, "onebit-freeze", argv[7]);
    } else if (psgd) {
        c.opt.kind = OPT_POWERSGD;
        distopt_set_option(&c, "powersgd-rank", argv[7]);
        distopt_set_option(&c, "powersgd-start", "3");
        distopt_set_option(&c, "powersgd-min-compression", "2");
    } else if (argc == 8) {
        c.variant = scape_variant_parse(argv[6]);
        if (c.variant < 0) fatal("scape_ref_driver: unknown variant '%s'", argv[6]);
        if (c.variant == SCAPE_RESIDUAL_DECAY) c.residual_decay = (float)atof(argv[7]);
        else if (c.variant != SCAPE_FAITHFUL) c.variant_cap = (float)atof(argv[7]);
    }
    DistOptim *d = distopt_create(&tab, p, g, &c);

    char path[4096];
    snprintf(path, sizeof path, "%s.%d.bin", argv[1], rank);
    FILE *f = xfopen(path, "wb", "pass a writable OUT_PREFIX");
    int32_t hdr[5] = {(int32_t)P, world, rank, tab.n, steps};
    fwrite(hdr, sizeof hdr, 1, f);
    for (int i = 0; i < tab.n; i++) {
        int64_t a[2] = {(int64_t)tab.slices[i].offset, (int64_t)tab.slices[i].numel};
        int32_t b[2] = {tab.slices[i].decay, tab.slices[i].dense_only};
        fwrite(a, sizeof a, 1, f);
        fwrite(b, sizeof b, 1, f);
    }
    for (int r = 0; r < world; r++) {
        size_t lo, hi;
        distopt_owner_range(d, r, &lo, &hi);
        int64_t a[2] = {(int64_t)lo, (int64_t)hi};
        fwrite(a, sizeof a, 1, f);
    }
    fwrite(p, sizeof(float), P, f);
    if (psgd && rank == 0) {
        size_t nq;
        const float *q0 = distopt_powersgd_q(d, &nq);
        snprintf(path, sizeof path, "%s.q.bin", argv[1]);
        fq = xfopen(path, "wb", "pass a writable OUT_PREFIX");
        fwrite(q0, sizeof(float), nq, fq);
    }
    if (onebit) {
        snprintf(path, sizeof path, "%s.es.%d.bin", argv[1], rank);
        fes = xfopen(path, "wb", "pass a writable OUT_PREFIX");
    }
    if (diloco) {
        snprintf(path, sizeof path, "%s.dl.%d.bin", argv[1], rank);
        fdl = xfopen(path, "wb", "pass a writable OUT_PREFIX");
    }
    uint8_t *mk = xmalloc(P, "mask");
    for (int t = 1; t <= steps; t++) {
        for (size_t j = 0; j < P; j++) {
            double x = 2.0 * sin(0.731 * (double)j + 0.377 * t + 2.1 * rank) + 0.5 * cos(1.3 * (double)j * t);
            g[j] = (float)(1.0 + (double)(j % 7)) * (p[j] - (float)x);
        }
        for (int b = 0; b < tab.num_buckets; b++) distopt_bucket_ready(d, b);
        float gn;
        float lr = 0.01f * (1.0f + 0.1f * (float)(t % 3));
        if (distopt_step(d, t, lr, &gn)) fatal("scape_ref_driver: step %d skipped", t);
        const uint8_t *M = distopt_mask(d, 0);
        for (size_t j = 0; j < P; j++) mk[j] = M ? (uint8_t)mask_get(M, j) : 0;
        fwrite(p, sizeof(float), P, f);
        const float *mom = distopt_moment(d);
        if (mom) fwrite(mom, sizeof(float), P, f);
        else for (size_t j = 0; j < P; j++) fwrite(&(float){0.0f}, sizeof(float), 1, f);
        fwrite(distopt_residual(d), sizeof(float), P, f);
        fwrite(mk, 1, P, f);
        fwrite(&gn, sizeof gn, 1, f);
        if (fq) {
            size_t nq;
            const float *q = distopt_powersgd_q(d, &nq);
            fwrite(q, sizeof(float), nq, fq);
        }
        if (fes) fwrite(distopt_onebit_server_error(d), sizeof(float), P, fes);
        if (fdl) {
            fwrite(distopt_synced(d), sizeof(float), P, fdl);
            const float *v = distopt_loco_inner_v(d);
            if (v) fwrite(v, sizeof(float), P, fdl);
            else for (size_t j = 0; j < P; j++) fwrite(&(float){0.0f}, sizeof(float), 1, fdl);
        }
    }
    if (fdl) fclose(fdl);
    if (fq) fclose(fq);
    if (fes) fclose(fes);
    fclose(f);
    distopt_free(d);
    free(mk);
    free(p);
    free(g);
    param_table_free(&tab);
    comm_finalize();
    return 0;
}

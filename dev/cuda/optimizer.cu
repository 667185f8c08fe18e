/*
 * dev/cuda/optimizer.cu - checks cuda/optimizer.cuh against optim/optim.c itself (linked in): three AdamW and
 * three AdamS steps on a table with a decayed matrix and an undecayed bias must give bit-identical fp32 master
 * weights and moments. The stochastically rounded bf16 copy must bracket the master value (round down or up),
 * be unbiased on average, be reproducible for a seed and change with the seed. Then times one update of 124M
 * parameters.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/optimizer.cuh"
extern "C" {
#include "common/params.h"
#include "optim/optim.h"
}

static void run_case(const char *name, OptimizerKind kind) {
    ParamTable tab;
    memset(&tab, 0, sizeof tab);
    size_t sw[2] = {300, 333}, sb[1] = {3001};
    param_table_add(&tab, "w", 0, 0, 1, 2, sw);
    param_table_add(&tab, "b", 0, 0, 0, 1, sb);
    size_t P = tab.total;
    OptimConfig cfg = {kind, 0.9f, 0.95f, 1e-8f, 0.1f};
    float *p = host_random(P, 0.5f), *m = (float *)calloc(P, 4), *v = (float *)calloc(P, 4);
    float *d_p, *d_m, *d_v;
    floatX *d_copy, *d_g;
    cudaCheck(cudaMalloc(&d_p, P * 4)); cudaCheck(cudaMalloc(&d_m, P * 4)); cudaCheck(cudaMalloc(&d_v, P * 4));
    cudaCheck(cudaMalloc(&d_copy, P * sizeof(floatX))); cudaCheck(cudaMalloc(&d_g, P * sizeof(floatX)));
    cudaCheck(cudaMemcpy(d_p, p, P * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(d_m, 0, P * 4)); cudaCheck(cudaMemset(d_v, 0, P * 4));
    int ok = 1;
    for (int t = 1; t <= 3; t++) {
        float *g = host_random(P, t == 2 ? 1e-3f : 1.0f);
        round_host(g, P); /* the device reads floatX gradients: give the CPU the same values */
        cudaCheck(cudaFree(d_g));
        d_g = to_device(g, P);
        float lr = 1e-3f * t;
        if (kind == OPT_ADAMW) adamw_update(&tab, p, g, m, v, 0, P, t, lr, &cfg);
        else adams_update(&tab, p, g, m, 0, P, t, lr, &cfg);
        for (int k = 0; k < tab.n; k++) {
            const ParamSlice *s = &tab.slices[k];
            float wd = s->decay ? cfg.weight_decay : 0.0f;
            uint32_t seed = sr_seed(1234, t, k);
            if (kind == OPT_ADAMW)
                adamw_update_tensor(d_p + s->offset, d_copy + s->offset, d_g + s->offset, d_m + s->offset,
                                    d_v + s->offset, (long)s->numel, t, lr, cfg.beta1, cfg.beta2, cfg.eps, wd, seed, 0);
            else
                adams_update_tensor(d_p + s->offset, d_copy + s->offset, d_g + s->offset, d_m + s->offset,
                                    (long)s->numel, t, lr, cfg.beta1, cfg.beta2, cfg.eps, wd, seed, 0);
        }
        float *gp = from_device_f32(d_p, P), *gm = from_device_f32(d_m, P);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < P; i++)
            if (gp[i] != p[i] || gm[i] != m[i]) { if (!bad) first = i; bad++; }
        if (kind == OPT_ADAMW) {
            float *gv = from_device_f32(d_v, P);
            for (size_t i = 0; i < P; i++) if (gv[i] != v[i]) { if (!bad) first = i; bad++; }
            free(gv);
        }
        if (bad) {
            printf("FAIL %s: step %d: %zu of %zu values differ from optim/optim.c; [%zu] param %.9g vs %.9g, m %.9g vs %.9g\n",
                   name, t, bad, P, first, gp[first], p[first], gm[first], m[first]);
            dev_failures++;
            ok = 0;
        }
        free(gp); free(gm); free(g);
    }
    if (ok) printf("ok %s (3 steps, %zu params, bitwise equal to optim/optim.c)\n", name, P);
#ifndef ENABLE_FP32
    /* stochastic rounding of the last step's copy */
    float *c = from_device(d_copy, P);
    size_t nbr = 0;
    double bias = 0;
    for (size_t i = 0; i < P; i++) {
        uint32_t pb;
        memcpy(&pb, &p[i], 4);
        uint32_t lo = pb & 0xFFFF0000u, hi = lo + 0x10000u;
        float flo, fhi;
        memcpy(&flo, &lo, 4); memcpy(&fhi, &hi, 4);
        if (c[i] != flo && c[i] != fhi) nbr++;
        if (fhi != flo) bias += (c[i] - p[i]) / fabs(fhi - flo);
    }
    char nm[96];
    snprintf(nm, sizeof nm, "%s_sr_brackets", name);
    check_true(nm, nbr == 0, "a bf16 copy is neither the round-down nor the round-up of its master value");
    snprintf(nm, sizeof nm, "%s_sr_unbiased", name);
    bias /= P;
    printf("  mean rounding error %.4f ulp over %zu values\n", bias, P);
    check_true(nm, fabs(bias) < 0.02, "mean stochastic-rounding error is not ~0 ulp");
    /* same seed reproduces, another seed changes some values */
    floatX *d_c2;
    cudaCheck(cudaMalloc(&d_c2, P * sizeof(floatX)));
    float *d_p2;
    cudaCheck(cudaMalloc(&d_p2, P * 4));
    float *c2[2];
    for (int r = 0; r < 2; r++) {
        cudaCheck(cudaMemcpy(d_p2, p, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_m, m, P * 4, cudaMemcpyHostToDevice));
        adams_update_tensor(d_p2, d_c2, d_g, d_m, (long)P, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, r == 0 ? 7u : 8u, 0);
        c2[r] = from_device(d_c2, P);
    }
    cudaCheck(cudaMemcpy(d_p2, p, P * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_m, m, P * 4, cudaMemcpyHostToDevice));
    adams_update_tensor(d_p2, d_c2, d_g, d_m, (long)P, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 7u, 0);
    float *c3 = from_device(d_c2, P);
    snprintf(nm, sizeof nm, "%s_sr_seeded", name);
    check_true(nm, memcmp(c2[0], c3, P * 4) == 0 && memcmp(c2[0], c2[1], P * 4) != 0,
               "same seed must reproduce the copy, another seed must change it");
#endif
    param_table_free(&tab);
}

int main(void) {
    cuda_require_device("optimizer");
    run_case("adamw_update", OPT_ADAMW);
    run_case("adams_update", OPT_ADAMS);
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): a small timed size */
    const long P = 100003;
#else
    const long P = 124475904;
#endif
    float *p, *m, *v;
    floatX *g, *c;
    cudaCheck(cudaMalloc(&p, P * 4)); cudaCheck(cudaMalloc(&m, P * 4)); cudaCheck(cudaMalloc(&v, P * 4));
    cudaCheck(cudaMalloc(&g, P * sizeof(floatX))); cudaCheck(cudaMalloc(&c, P * sizeof(floatX)));
    cudaCheck(cudaMemset(p, 0, P * 4)); cudaCheck(cudaMemset(m, 0, P * 4)); cudaCheck(cudaMemset(v, 0, P * 4));
    cudaCheck(cudaMemset(g, 0, P * sizeof(floatX)));
    float ms = time_ms([&] { adamw_update_tensor(p, c, g, m, v, P, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0); }, 10);
    printf("time adamw P=%ld: %.3f ms (%.0f GB/s)\n", P, ms, P * (16.0 + 2 * sizeof(floatX)) / ms / 1e6);
    return dev_failures ? 1 : 0;
}

/*
 * dev/cuda/rmsnorm.cu - checks cuda/rmsnorm.cuh against a float64 CPU reference of train_llama.c's RMSNorm: plain
 * forward, the forward fused with the residual add, backward (input gradient added to an existing residual
 * gradient, gain gradient accumulated into an existing one), bitwise determinism of the backward, and a row count
 * that is not a multiple of the backward's row block; then times forward and backward at Llama-500M's width.
 * Tolerances: dev_common.cuh's TOL_REL / TOL_ABS (fp32 1e-4 / 1e-5; bf16 2e-2 / 2e-3: one bf16 rounding of the
 * output is 2^-9 relative), the absolute part widened where stated.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/rmsnorm.cuh"

/* float64 reference. x (N,C) the (rounded) input, w (C); out (N,C), rstd (N). */
static void ref_forward(float *out, double *rstd, const float *x, const float *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (float)(xr[c] * r * w[c]);
        rstd[n] = r;
    }
}
/* dinp = dinp0 + rstd * (w dy - xhat mean(w dy xhat)); dw = dw0 + sum_n dy xhat. */
static void ref_backward(float *dinp, float *dw, const float *dinp0, const float *dw0, const float *dy, const float *x,
                         const float *w, const double *rstd, int N, int C) {
    double *acc = (double *)calloc(C, 8);
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *g = dy + (size_t)n * C;
        double r = rstd[n], dot = 0;
        for (int c = 0; c < C; c++) dot += (double)w[c] * g[c] * xr[c] * r;
        dot /= C;
        for (int c = 0; c < C; c++) {
            double xh = xr[c] * r;
            acc[c] += g[c] * xh;
            dinp[(size_t)n * C + c] = (float)(dinp0[(size_t)n * C + c] + r * (w[c] * g[c] - xh * dot));
        }
    }
    for (int c = 0; c < C; c++) dw[c] = (float)(dw0[c] + acc[c]);
    free(acc);
}

static void run_case(const char *tag, int N, int C, int timed) {
    const double eps = 1e-5;
    const size_t NC = (size_t)N * C;
    char name[128];
    float *a = host_random(NC, 1.0f), *b = host_random(NC, 1.0f), *w = host_random(C, 1.0f);
    float *dout = host_random(NC, 1.0f), *dres0 = host_random(NC, 1.0f), *dw0 = host_random(C, 1.0f);
    for (size_t i = 0; i < NC; i++) a[i] *= 1 + (i / C) % 5; /* rows of different scale: different rstd */
    for (int c = 0; c < C; c++) w[c] += 1.0f;                  /* gains around 1, as initialised */
    round_host(a, NC); round_host(b, NC); round_host(w, C); round_host(dout, NC); round_host(dres0, NC);
    round_host(dw0, C);
    floatX *d_a = to_device(a, NC), *d_b = to_device(b, NC), *d_w = to_device(w, C);
    floatX *d_res, *d_out;
    float *d_rstd;
    cudaCheck(cudaMalloc(&d_res, NC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_out, NC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_rstd, N * sizeof(float)));

    /* fused: residual = a + b (rounded to floatX), out = RMSNorm(residual) */
    fused_residual_rmsnorm_forward(d_res, d_out, d_rstd, d_a, d_b, d_w, N, C, (float)eps, 0);
    float *res = from_device(d_res, NC), *out = from_device(d_out, NC), *rstd = from_device_f32(d_rstd, N);
    float *rres = (float *)malloc(NC * 4), *rout = (float *)malloc(NC * 4), *rrstd_f = (float *)malloc(N * 4);
    double *rrstd = (double *)malloc(N * 8);
    for (size_t i = 0; i < NC; i++) rres[i] = round_to_floatX(a[i] + b[i]);
    ref_forward(rout, rrstd, rres, w, N, C, eps);
    for (int n = 0; n < N; n++) rrstd_f[n] = (float)rrstd[n];
    snprintf(name, sizeof name, "rmsnorm_fused_forward_residual_%s", tag);
    check_close(name, res, rres, NC, TOL_REL, TOL_ABS);
    snprintf(name, sizeof name, "rmsnorm_fused_forward_out_%s", tag);
    check_close(name, out, rout, NC, TOL_REL, TOL_ABS * 5);
    snprintf(name, sizeof name, "rmsnorm_forward_rstd_%s", tag); /* fp32 statistics in both builds */
    check_close(name, rstd, rrstd_f, N, 1e-5, 1e-7);

    /* plain forward on the stored residual: the same out, bit for bit */
    floatX *d_out2;
    cudaCheck(cudaMalloc(&d_out2, NC * sizeof(floatX)));
    rmsnorm_forward(d_out2, d_rstd, d_res, d_w, N, C, (float)eps, 0);
    float *out2 = from_device(d_out2, NC);
    snprintf(name, sizeof name, "rmsnorm_forward_equals_fused_%s", tag);
    check_true(name, memcmp(out, out2, NC * 4) == 0, "plain and fused forward differ");

    /* backward: dres += d/dx, dw += d/dw */
    floatX *d_dout = to_device(dout, NC), *d_dres = to_device(dres0, NC), *d_dw = to_device(dw0, C);
    float *scratch;
    cudaCheck(cudaMalloc(&scratch, rmsnorm_backward_scratch_floats(N, C) * sizeof(float)));
    rmsnorm_backward(d_dres, d_dw, scratch, d_dout, d_res, d_w, d_rstd, N, C, 0);
    float *gdres = from_device(d_dres, NC), *gdw = from_device(d_dw, C);
    float *rdres = (float *)malloc(NC * 4), *rdw = (float *)malloc(C * 4);
    ref_backward(rdres, rdw, dres0, dw0, dout, rres, w, rrstd, N, C);
    snprintf(name, sizeof name, "rmsnorm_backward_dinp_%s", tag);
    check_close(name, gdres, rdres, NC, TOL_REL, TOL_ABS * 5);
    /* sums over N rows of O(1) terms: the absolute error grows like sqrt(N) x the input rounding */
    snprintf(name, sizeof name, "rmsnorm_backward_dweight_%s", tag);
    check_close(name, gdw, rdw, C, TOL_REL, TOL_ABS * 50);
    floatX *d_dres2 = to_device(dres0, NC), *d_dw2 = to_device(dw0, C);
    rmsnorm_backward(d_dres2, d_dw2, scratch, d_dout, d_res, d_w, d_rstd, N, C, 0);
    float *gdres2 = from_device(d_dres2, NC), *gdw2 = from_device(d_dw2, C);
    snprintf(name, sizeof name, "rmsnorm_backward_deterministic_%s", tag);
    check_true(name, memcmp(gdw, gdw2, C * 4) == 0 && memcmp(gdres, gdres2, NC * 4) == 0, "two backward runs differ");

    if (timed) {
        float fms = time_ms([&] { fused_residual_rmsnorm_forward(d_res, d_out, d_rstd, d_a, d_b, d_w, N, C, (float)eps, 0); }, 20);
        float bms = time_ms([&] { rmsnorm_backward(d_dres, d_dw, scratch, d_dout, d_res, d_w, d_rstd, N, C, 0); }, 20);
        printf("time rmsnorm N=%d C=%d: fused residual forward %.3f ms (%.0f GB/s), backward %.3f ms (%.0f GB/s)\n", N,
               C, fms, 4.0 * NC * sizeof(floatX) / fms / 1e6, bms, 4.0 * NC * sizeof(floatX) / bms / 1e6);
    }
    cudaCheck(cudaFree(d_a)); cudaCheck(cudaFree(d_b)); cudaCheck(cudaFree(d_w)); cudaCheck(cudaFree(d_res));
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_out2)); cudaCheck(cudaFree(d_rstd)); cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_dres)); cudaCheck(cudaFree(d_dw)); cudaCheck(cudaFree(d_dres2)); cudaCheck(cudaFree(d_dw2));
    cudaCheck(cudaFree(scratch));
    free(a); free(b); free(w); free(dout); free(dres0); free(dw0); free(res); free(out); free(rstd); free(rres);
    free(rout); free(rrstd_f); free(rrstd); free(out2); free(gdres); free(gdw); free(rdres); free(rdw); free(gdres2);
    free(gdw2);
}

int main(void) {
    cuda_require_device("rmsnorm");
    printf("  precision " PRECISION_NAME "\n");
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): few rows */
    run_case("N264_C1536", 264, 1536, 1); /* Llama-500M's width, few rows */
#else
    run_case("N8192_C1536", 8 * 1024, 1536, 1); /* Llama-500M's width, B*T = 8192 */
#endif
    run_case("N1000_C64", 1000, 64, 0);         /* C < 64 threads' stride, N not a multiple of the row block */
    return dev_failures ? 1 : 0;
}

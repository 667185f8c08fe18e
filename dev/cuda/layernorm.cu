/*
 * dev/cuda/layernorm.cu - checks cuda/layernorm.cuh against a float64 CPU reference: plain forward, the forward
 * fused with the residual add, backward (input gradient added to an existing residual gradient, weight and bias
 * gradients accumulated), bitwise determinism of the parameter gradients; then times forward and backward.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/layernorm.cuh"

int main(void) {
    cuda_require_device("layernorm");
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): N = 260, a partial row block */
    const int N = 260, C = 768;
#else
    const int N = 8 * 1024, C = 768;
#endif
    const size_t NC = (size_t)N * C;
    float *a = host_random(NC, 1.0f), *b = host_random(NC, 1.0f), *w = host_random(C, 1.0f), *bias = host_random(C, 0.2f);
    float *dout = host_random(NC, 1.0f), *dres = host_random(NC, 1.0f), *dw0 = host_random(C, 1.0f), *db0 = host_random(C, 1.0f);
    for (size_t i = 0; i < NC; i++) a[i] += (i / C) % 5; /* rows with non-zero means */
    round_host(a, NC); round_host(b, NC); round_host(w, C); round_host(bias, C); round_host(dout, NC);
    round_host(dres, NC); round_host(dw0, C); round_host(db0, C);
    floatX *d_a = to_device(a, NC), *d_b = to_device(b, NC), *d_w = to_device(w, C), *d_bias = to_device(bias, C);
    floatX *d_res, *d_out;
    float *d_mean, *d_rstd;
    cudaCheck(cudaMalloc(&d_res, NC * sizeof(floatX))); cudaCheck(cudaMalloc(&d_out, NC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_mean, N * sizeof(float))); cudaCheck(cudaMalloc(&d_rstd, N * sizeof(float)));

    /* fused: residual = a + b, out = LN(residual) */
    fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, 0);
    float *res = from_device(d_res, NC), *out = from_device(d_out, NC);
    float *rres = (float *)malloc(NC * 4), *rout = (float *)malloc(NC * 4), *rmean = (float *)malloc(N * 4), *rrstd = (float *)malloc(N * 4);
    for (size_t i = 0; i < NC; i++) rres[i] = round_to_floatX(a[i] + b[i]);
    for (int n = 0; n < N; n++) {
        const float *x = rres + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        double r = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) rout[(size_t)n * C + c] = (float)((x[c] - m) * r * w[c] + bias[c]);
        rmean[n] = (float)m; rrstd[n] = (float)r;
    }
    check_close("fused_residual_layernorm_forward_residual", res, rres, NC, TOL_REL, TOL_ABS);
    check_close("fused_residual_layernorm_forward_out", out, rout, NC, TOL_REL, TOL_ABS * 5);
    float *mean = from_device_f32(d_mean, N), *rstd = from_device_f32(d_rstd, N);
    check_close("layernorm_forward_mean", mean, rmean, N, 1e-5, 1e-5);
    check_close("layernorm_forward_rstd", rstd, rrstd, N, 1e-4, 1e-6);

    /* plain forward on the stored residual must give the same out */
    floatX *d_out2;
    cudaCheck(cudaMalloc(&d_out2, NC * sizeof(floatX)));
    layernorm_forward(d_out2, d_mean, d_rstd, d_res, d_w, d_bias, N, C, 0);
    float *out2 = from_device(d_out2, NC);
    check_same("layernorm_forward_equals_fused", out2, out, NC);

    /* backward: dres += dLN/dx, dw += ..., db += ... */
    floatX *d_dout = to_device(dout, NC), *d_dres = to_device(dres, NC), *d_dw = to_device(dw0, C), *d_db = to_device(db0, C);
    float *scratch;
    cudaCheck(cudaMalloc(&scratch, layernorm_backward_scratch_floats(N, C) * sizeof(float)));
    layernorm_backward(d_dres, d_dw, d_db, scratch, d_dout, d_res, d_w, d_mean, d_rstd, N, C, 0);
    float *gdres = from_device(d_dres, NC), *gdw = from_device(d_dw, C), *gdb = from_device(d_db, C);
    float *rdres = (float *)malloc(NC * 4), *rdw = (float *)malloc(C * 4), *rdb = (float *)malloc(C * 4);
    double *adw = (double *)calloc(C, 8), *adb = (double *)calloc(C, 8);
    for (int n = 0; n < N; n++) {
        const float *x = rres + (size_t)n * C, *g = dout + (size_t)n * C;
        double m = mean[n], r = rstd[n], s1 = 0, s2 = 0;
        for (int c = 0; c < C; c++) {
            double xh = (x[c] - m) * r, dn = (double)w[c] * g[c];
            s1 += dn; s2 += dn * xh;
            adw[c] += g[c] * xh; adb[c] += g[c];
        }
        s1 /= C; s2 /= C;
        for (int c = 0; c < C; c++) {
            double xh = (x[c] - m) * r, dn = (double)w[c] * g[c];
            rdres[(size_t)n * C + c] = (float)(dres[(size_t)n * C + c] + (dn - s1 - xh * s2) * r);
        }
    }
    for (int c = 0; c < C; c++) { rdw[c] = (float)(dw0[c] + adw[c]); rdb[c] = (float)(db0[c] + adb[c]); }
    check_close("layernorm_backward_dinp", gdres, rdres, NC, TOL_REL, TOL_ABS * 5);
    /* sums over N = 8192 rows of O(1) terms: absolute error grows like sqrt(N) x input rounding */
    check_close("layernorm_backward_dweight", gdw, rdw, C, TOL_REL, TOL_ABS * 50);
    check_close("layernorm_backward_dbias", gdb, rdb, C, TOL_REL, TOL_ABS * 50);
    floatX *d_dw2 = to_device(dw0, C), *d_db2 = to_device(db0, C), *d_dres2 = to_device(dres, NC);
    layernorm_backward(d_dres2, d_dw2, d_db2, scratch, d_dout, d_res, d_w, d_mean, d_rstd, N, C, 0);
    float *gdw2 = from_device(d_dw2, C), *gdres2 = from_device(d_dres2, NC);
    check_same("layernorm_backward_deterministic_dweight", gdw, gdw2, C);
    check_same("layernorm_backward_deterministic_dinp", gdres, gdres2, NC);

    float fms = time_ms([&] { fused_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C, 0); }, 20);
    float bms = time_ms([&] { layernorm_backward(d_dres, d_dw, d_db, scratch, d_dout, d_res, d_w, d_mean, d_rstd, N, C, 0); }, 20);
    printf("time layernorm N=%d C=%d: fused residual forward %.3f ms (%.0f GB/s), backward %.3f ms\n", N, C, fms,
           4.0 * NC * sizeof(floatX) / fms / 1e6, bms);
    return dev_failures ? 1 : 0;
}

/*
 * dev/cuda/matmul.cu - checks cuda/matmul.cuh (cuBLASLt) against a float64 CPU reference at GPT-2 shapes:
 * forward with the bias epilogue, forward with GELU (bf16: cuBLASLt's GELU+bias epilogue; fp32 builds use the
 * GELU kernel after the GEMM) checking pre-activation and output, backward
 * (dinp overwritten, dweight and dbias accumulated onto existing values, dbias deterministic); then times the
 * forward and reports TFLOP/s.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/matmul.cuh"

static double gelu_ref(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1 + tanh(u));
}

int main(void) {
    cuda_require_device("matmul");
    Blas bl;
    blas_init(&bl);
    const int N = 2048, C = 768, OC = 3072;
    float *x = host_random((size_t)N * C, 1.0f), *w = host_random((size_t)OC * C, 0.05f), *b = host_random(OC, 0.5f);
    float *dout = host_random((size_t)N * OC, 1.0f), *dw0 = host_random((size_t)OC * C, 1.0f), *db0 = host_random(OC, 1.0f);
    round_host(x, (size_t)N * C); round_host(w, (size_t)OC * C); round_host(b, OC); round_host(dout, (size_t)N * OC);
    round_host(dw0, (size_t)OC * C); round_host(db0, OC);
    floatX *d_x = to_device(x, (size_t)N * C), *d_w = to_device(w, (size_t)OC * C), *d_b = to_device(b, OC);
    floatX *d_out, *d_pre;
    cudaCheck(cudaMalloc(&d_out, (size_t)N * OC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_pre, (size_t)N * OC * sizeof(floatX)));

    double *ref = (double *)malloc((size_t)N * OC * sizeof(double));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            const float *xr = x + (size_t)n * C, *wr = w + (size_t)o * C;
            for (int c = 0; c < C; c++) s += (double)xr[c] * wr[c];
            ref[(size_t)n * OC + o] = s;
        }
    float *r1 = (float *)malloc((size_t)N * OC * 4), *r2 = (float *)malloc((size_t)N * OC * 4);
    for (size_t i = 0; i < (size_t)N * OC; i++) { r1[i] = (float)ref[i]; r2[i] = (float)gelu_ref(ref[i]); }

    matmul_forward(&bl, d_out, NULL, d_x, d_w, d_b, N, C, OC, 0);
    float *out = from_device(d_out, (size_t)N * OC);
    check_close("matmul_forward_bias", out, r1, (size_t)N * OC, TOL_REL, TOL_ABS * 5);
    matmul_forward(&bl, d_out, d_pre, d_x, d_w, d_b, N, C, OC, 0);
    float *pre = from_device(d_pre, (size_t)N * OC);
    free(out);
    out = from_device(d_out, (size_t)N * OC);
    check_close("matmul_forward_gelu_preact", pre, r1, (size_t)N * OC, TOL_REL, TOL_ABS * 5);
    /* the GELU must be the tanh approximation GPT-2 uses (bf16 build: cuBLASLt's epilogue; fp32: gelu.cuh) */
    check_close("matmul_forward_gelu_out", out, r2, (size_t)N * OC, TOL_REL, TOL_ABS * 5);

    /* backward */
    floatX *d_dout = to_device(dout, (size_t)N * OC), *d_dw = to_device(dw0, (size_t)OC * C), *d_db = to_device(db0, OC);
    floatX *d_dx;
    float *scratch;
    cudaCheck(cudaMalloc(&d_dx, (size_t)N * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&scratch, matmul_backward_scratch_floats(N, OC) * sizeof(float)));
    matmul_backward(&bl, d_dx, d_dw, d_db, scratch, d_dout, d_x, d_w, N, C, OC, 0.0f, 0);
    float *gdx = from_device(d_dx, (size_t)N * C), *gdw = from_device(d_dw, (size_t)OC * C), *gdb = from_device(d_db, OC);
    float *rdx = (float *)malloc((size_t)N * C * 4), *rdw = (float *)malloc((size_t)OC * C * 4), *rdb = (float *)malloc(OC * 4);
    double *acc = (double *)calloc(C, 8);
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) acc[c] = 0;
        for (int o = 0; o < OC; o++) {
            double g = dout[(size_t)n * OC + o];
            const float *wr = w + (size_t)o * C;
            for (int c = 0; c < C; c++) acc[c] += g * wr[c];
        }
        for (int c = 0; c < C; c++) rdx[(size_t)n * C + c] = (float)acc[c];
    }
    double *adw = (double *)calloc((size_t)OC * C, 8), *adb = (double *)calloc(OC, 8);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double g = dout[(size_t)n * OC + o];
            adb[o] += g;
            const float *xr = x + (size_t)n * C;
            double *dr = adw + (size_t)o * C;
            for (int c = 0; c < C; c++) dr[c] += g * xr[c];
        }
    for (size_t i = 0; i < (size_t)OC * C; i++) rdw[i] = (float)(dw0[i] + adw[i]);
    for (int o = 0; o < OC; o++) rdb[o] = (float)(db0[o] + adb[o]);
    check_close("matmul_backward_dinp", gdx, rdx, (size_t)N * C, TOL_REL, TOL_ABS * 20);
    check_close("matmul_backward_dweight", gdw, rdw, (size_t)OC * C, TOL_REL, TOL_ABS * 20);
    check_close("matmul_backward_dbias", gdb, rdb, OC, TOL_REL, TOL_ABS * 20);
    floatX *d_db2 = to_device(db0, OC);
    matmul_backward(&bl, NULL, d_dw, d_db2, scratch, d_dout, d_x, d_w, N, C, OC, 0.0f, 0);
    float *gdb2 = from_device(d_db2, OC);
    check_true("matmul_backward_dbias_deterministic", memcmp(gdb, gdb2, OC * 4) == 0, "two runs differ");

    /* timing at the size of GPT-2 124M's fc layer with B*T = 8192 */
    const int TN = 8192;
    floatX *t_x, *t_out, *t_pre;
    cudaCheck(cudaMalloc(&t_x, (size_t)TN * C * sizeof(floatX))); cudaCheck(cudaMemset(t_x, 0, (size_t)TN * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_out, (size_t)TN * OC * sizeof(floatX))); cudaCheck(cudaMalloc(&t_pre, (size_t)TN * OC * sizeof(floatX)));
    float ms = time_ms([&] { matmul_forward(&bl, t_out, t_pre, t_x, d_w, d_b, TN, C, OC, 0); }, 20);
    printf("time matmul_forward gelu+bias N=%d C=%d OC=%d: %.3f ms, %.1f TFLOP/s\n", TN, C, OC, ms,
           2.0 * TN * C * OC / ms / 1e9);
    blas_free(&bl);
    return dev_failures ? 1 : 0;
}

/*
 * dev/cuda/attention.cu - checks cuda/attention.cuh against a float64 CPU reference of causal attention (written
 * as plain loops, independent of the GEMM formulation): forward output, the saved att (upper triangle zero), and
 * the backward's dqkv; then times forward and backward at GPT-2 124M's size (B=8, T=1024, C=768, NH=12).
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/attention.cuh"

int main(void) {
    cuda_require_device("attention");
    Blas bl;
    blas_init(&bl);
    const int B = 2, T = 128, C = 256, NH = 4, hs = C / NH;
    const size_t n3 = (size_t)B * T * 3 * C, n = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = host_random(n3, 1.0f), *dout = host_random(n, 1.0f);
    round_host(qkv, n3); round_host(dout, n);
    /* reference forward and backward in float64 */
    double *att = (double *)calloc(na, 8);
    float *rout = (float *)calloc(n, 4), *ratt = (float *)calloc(na, 4), *rdqkv = (float *)calloc(n3, 4);
    double *dq = (double *)calloc(n3, 8);
    double sc = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t1 = 0; t1 < T; t1++) {
                const float *q = qkv + ((size_t)b * T + t1) * 3 * C + h * hs;
                double *a = att + (((size_t)b * NH + h) * T + t1) * T, mx = -1e300, sum = 0;
                for (int t2 = 0; t2 <= t1; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    a[t2] = s * sc;
                    if (a[t2] > mx) mx = a[t2];
                }
                for (int t2 = 0; t2 <= t1; t2++) { a[t2] = exp(a[t2] - mx); sum += a[t2]; }
                for (int t2 = 0; t2 <= t1; t2++) a[t2] /= sum;
                for (int d = 0; d < hs; d++) {
                    double s = 0;
                    for (int t2 = 0; t2 <= t1; t2++) s += a[t2] * qkv[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + d];
                    rout[((size_t)b * T + t1) * C + h * hs + d] = (float)s;
                }
                /* backward of this row */
                const float *g = dout + ((size_t)b * T + t1) * C + h * hs;
                double *datt = (double *)malloc((t1 + 1) * 8), dot = 0;
                for (int t2 = 0; t2 <= t1; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) { s += (double)g[d] * v[d]; dq[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + d] += a[t2] * g[d]; }
                    datt[t2] = s;
                    dot += s * a[t2];
                }
                for (int t2 = 0; t2 <= t1; t2++) {
                    double dp = a[t2] * (datt[t2] - dot) * sc;
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    for (int d = 0; d < hs; d++) {
                        dq[((size_t)b * T + t1) * 3 * C + h * hs + d] += dp * k[d];
                        dq[((size_t)b * T + t2) * 3 * C + C + h * hs + d] += dp * q[d];
                    }
                }
                free(datt);
            }
    for (size_t i = 0; i < na; i++) ratt[i] = (float)att[i];
    for (size_t i = 0; i < n3; i++) rdqkv[i] = (float)dq[i];

    floatX *d_qkv = to_device(qkv, n3), *d_dout = to_device(dout, n), *d_out, *d_att, *d_scr, *d_dqkv;
    cudaCheck(cudaMalloc(&d_out, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_att, na * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dqkv, n3 * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_scr, attention_backward_scratch_elems(B, T, C, NH) * sizeof(floatX)));
    attention_forward(&bl, d_out, d_att, d_scr, d_qkv, B, T, C, NH, 0);
    float *out = from_device(d_out, n), *gatt = from_device(d_att, na);
    check_close("attention_forward_att", gatt, ratt, na, TOL_REL, TOL_ABS);
    check_close("attention_forward_out", out, rout, n, TOL_REL, TOL_ABS * 5);
    attention_backward(&bl, d_dqkv, d_scr, d_dout, d_att, d_qkv, B, T, C, NH, 0);
    float *gdq = from_device(d_dqkv, n3);
    check_close("attention_backward_dqkv", gdq, rdqkv, n3, TOL_REL * 2, TOL_ABS * 10);

    /* timing at GPT-2 124M size */
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): a small timed size */
    const int TB = 1, TT = 64, TC = 768, TNH = 12;
#else
    const int TB = 8, TT = 1024, TC = 768, TNH = 12;
#endif
    floatX *t_qkv, *t_out, *t_att, *t_scr, *t_dqkv;
    cudaCheck(cudaMalloc(&t_qkv, (size_t)TB * TT * 3 * TC * sizeof(floatX)));
    cudaCheck(cudaMemset(t_qkv, 0, (size_t)TB * TT * 3 * TC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_out, (size_t)TB * TT * TC * sizeof(floatX)));
    cudaCheck(cudaMemset(t_out, 0, (size_t)TB * TT * TC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_att, (size_t)TB * TNH * TT * TT * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_dqkv, (size_t)TB * TT * 3 * TC * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_scr, attention_backward_scratch_elems(TB, TT, TC, TNH) * sizeof(floatX)));
    float fms = time_ms([&] { attention_forward(&bl, t_out, t_att, t_scr, t_qkv, TB, TT, TC, TNH, 0); }, 10);
    float bms = time_ms([&] { attention_backward(&bl, t_dqkv, t_scr, t_out, t_att, t_qkv, TB, TT, TC, TNH, 0); }, 10);
    printf("time attention B=%d T=%d C=%d NH=%d: forward %.3f ms, backward %.3f ms\n", TB, TT, TC, TNH, fms, bms);
    blas_free(&bl);
    return dev_failures ? 1 : 0;
}

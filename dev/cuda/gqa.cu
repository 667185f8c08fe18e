/*
 * dev/cuda/gqa.cu - checks cuda/gqa.cuh against a float64 CPU reference of train_llama.c's causal grouped-query
 * attention (plain loops over (b, h, t1, t2), independent of the GEMM formulation): forward output, the saved att
 * (upper triangle exactly zero), and the backward's dq, dk, dv (dk and dv summed over each group's query heads);
 * for NKV = NH (multi-head), 1 < NKV < NH, and NKV = 1 (multi-query); bitwise determinism of the backward; then
 * times forward and backward at Llama-500M's attention (NH 16, NKV 8, hd 96).
 * Tolerances: as dev/cuda/attention.cu (bf16: att and out are rounded once, the backward goes through bf16 datt;
 * dk, dv add NH/NKV bf16-rounded per-head terms, hence twice the dq tolerance).
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/gqa.cuh"

static void run_case(Blas *bl, int B, int T, int NH, int NKV, int hd) {
    int C = NH * hd, KVC = NKV * hd, group = NH / NKV;
    size_t nq = (size_t)B * T * C, nkv = (size_t)B * T * KVC, na = (size_t)B * NH * T * T;
    char name[128], tag[64];
    snprintf(tag, sizeof tag, "B%d_T%d_NH%d_NKV%d_hd%d", B, T, NH, NKV, hd);
    float *q = host_random(nq, 1.0f), *k = host_random(nkv, 1.0f), *v = host_random(nkv, 1.0f);
    float *dout = host_random(nq, 1.0f);
    round_host(q, nq); round_host(k, nkv); round_host(v, nkv); round_host(dout, nq);
    /* float64 reference, train_llama.c's attention_forward / attention_backward */
    double *att = (double *)calloc(na, 8), *dq = (double *)calloc(nq, 8), *dk = (double *)calloc(nkv, 8);
    double *dv = (double *)calloc(nkv, 8), *datt = (double *)malloc((size_t)T * 8);
    float *rout = (float *)calloc(nq, 4);
    double sc = 1.0 / sqrt((double)hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kvh = h / group;
            for (int t1 = 0; t1 < T; t1++) {
                const float *qt = q + ((size_t)b * T + t1) * C + h * hd;
                double *a = att + (((size_t)b * NH + h) * T + t1) * T, mx = -1e300, sum = 0;
                for (int t2 = 0; t2 <= t1; t2++) {
                    const float *kt = k + ((size_t)b * T + t2) * KVC + kvh * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += (double)qt[d] * kt[d];
                    a[t2] = s * sc;
                    if (a[t2] > mx) mx = a[t2];
                }
                for (int t2 = 0; t2 <= t1; t2++) { a[t2] = exp(a[t2] - mx); sum += a[t2]; }
                for (int t2 = 0; t2 <= t1; t2++) a[t2] /= sum;
                for (int d = 0; d < hd; d++) {
                    double s = 0;
                    for (int t2 = 0; t2 <= t1; t2++) s += a[t2] * v[((size_t)b * T + t2) * KVC + kvh * hd + d];
                    rout[((size_t)b * T + t1) * C + h * hd + d] = (float)s;
                }
                const float *g = dout + ((size_t)b * T + t1) * C + h * hd;
                double dot = 0;
                for (int t2 = 0; t2 <= t1; t2++) {
                    const float *vt = v + ((size_t)b * T + t2) * KVC + kvh * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) {
                        s += (double)g[d] * vt[d];
                        dv[((size_t)b * T + t2) * KVC + kvh * hd + d] += a[t2] * g[d];
                    }
                    datt[t2] = s;
                    dot += s * a[t2];
                }
                for (int t2 = 0; t2 <= t1; t2++) {
                    double dp = a[t2] * (datt[t2] - dot) * sc;
                    const float *kt = k + ((size_t)b * T + t2) * KVC + kvh * hd;
                    for (int d = 0; d < hd; d++) {
                        dq[((size_t)b * T + t1) * C + h * hd + d] += dp * kt[d];
                        dk[((size_t)b * T + t2) * KVC + kvh * hd + d] += dp * qt[d];
                    }
                }
            }
        }
    float *ratt = (float *)malloc(na * 4), *rdq = (float *)malloc(nq * 4), *rdk = (float *)malloc(nkv * 4);
    float *rdv = (float *)malloc(nkv * 4);
    for (size_t i = 0; i < na; i++) ratt[i] = (float)att[i];
    for (size_t i = 0; i < nq; i++) rdq[i] = (float)dq[i];
    for (size_t i = 0; i < nkv; i++) { rdk[i] = (float)dk[i]; rdv[i] = (float)dv[i]; }

    floatX *d_q = to_device(q, nq), *d_k = to_device(k, nkv), *d_v = to_device(v, nkv), *d_dout = to_device(dout, nq);
    floatX *d_out, *d_att, *d_scr, *d_dq, *d_dk, *d_dv;
    size_t fs = gqa_forward_scratch_elems(B, T, C), bs = gqa_backward_scratch_elems(B, T, C, NH);
    cudaCheck(cudaMalloc(&d_out, nq * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_att, na * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_scr, (fs > bs ? fs : bs) * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dq, nq * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dk, nkv * sizeof(floatX)));
    cudaCheck(cudaMalloc(&d_dv, nkv * sizeof(floatX)));
    /* garbage in the outputs: the backward overwrites, never adds */
    cudaCheck(cudaMemset(d_dq, 0x7F, nq * sizeof(floatX)));
    cudaCheck(cudaMemset(d_dk, 0x7F, nkv * sizeof(floatX)));
    cudaCheck(cudaMemset(d_dv, 0x7F, nkv * sizeof(floatX)));
    gqa_forward(bl, d_out, d_att, d_scr, d_q, d_k, d_v, B, T, NH, NKV, hd, 0);
    float *out = from_device(d_out, nq), *gatt = from_device(d_att, na);
    snprintf(name, sizeof name, "gqa_forward_att_%s", tag);
    check_close(name, gatt, ratt, na, TOL_REL, TOL_ABS);
    size_t upper_nonzero = 0;
    for (size_t r = 0; r < (size_t)B * NH * T; r++)
        for (int t2 = (int)(r % T) + 1; t2 < T; t2++) upper_nonzero += gatt[r * T + t2] != 0.0f;
    snprintf(name, sizeof name, "gqa_forward_att_causal_zero_%s", tag);
    char what[96];
    snprintf(what, sizeof what, "%zu entries above the diagonal are not 0", upper_nonzero);
    check_true(name, upper_nonzero == 0, what);
    snprintf(name, sizeof name, "gqa_forward_out_%s", tag);
    check_close(name, out, rout, nq, TOL_REL, TOL_ABS * 5);

    gqa_backward(bl, d_dq, d_dk, d_dv, d_scr, d_dout, d_att, d_q, d_k, d_v, B, T, NH, NKV, hd, 0);
    float *gdq = from_device(d_dq, nq), *gdk = from_device(d_dk, nkv), *gdv = from_device(d_dv, nkv);
    snprintf(name, sizeof name, "gqa_backward_dq_%s", tag);
    check_close(name, gdq, rdq, nq, TOL_REL * 2, TOL_ABS * 10);
    snprintf(name, sizeof name, "gqa_backward_dk_%s", tag);
    check_close(name, gdk, rdk, nkv, TOL_REL * 2, TOL_ABS * 20);
    snprintf(name, sizeof name, "gqa_backward_dv_%s", tag);
    check_close(name, gdv, rdv, nkv, TOL_REL * 2, TOL_ABS * 20);
    gqa_backward(bl, d_dq, d_dk, d_dv, d_scr, d_dout, d_att, d_q, d_k, d_v, B, T, NH, NKV, hd, 0);
    float *gdq2 = from_device(d_dq, nq), *gdk2 = from_device(d_dk, nkv), *gdv2 = from_device(d_dv, nkv);
    snprintf(name, sizeof name, "gqa_backward_deterministic_%s", tag);
    check_true(name, !memcmp(gdq, gdq2, nq * 4) && !memcmp(gdk, gdk2, nkv * 4) && !memcmp(gdv, gdv2, nkv * 4),
               "two backward runs differ");

    cudaCheck(cudaFree(d_q)); cudaCheck(cudaFree(d_k)); cudaCheck(cudaFree(d_v)); cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_att)); cudaCheck(cudaFree(d_scr)); cudaCheck(cudaFree(d_dq));
    cudaCheck(cudaFree(d_dk)); cudaCheck(cudaFree(d_dv));
    free(q); free(k); free(v); free(dout); free(att); free(dq); free(dk); free(dv); free(datt); free(rout);
    free(ratt); free(rdq); free(rdk); free(rdv); free(out); free(gatt); free(gdq); free(gdk); free(gdv);
    free(gdq2); free(gdk2); free(gdv2);
}

int main(void) {
    cuda_require_device("gqa");
    printf("  precision " PRECISION_NAME "\n");
    Blas bl;
    blas_init(&bl);
    run_case(&bl, 2, 64, 4, 4, 32);  /* NKV = NH: plain multi-head attention */
    run_case(&bl, 2, 64, 8, 2, 32);  /* groups of 4 */
    run_case(&bl, 1, 37, 4, 1, 16);  /* multi-query, odd T */
    run_case(&bl, 2, 128, 16, 8, 96); /* Llama-500M's heads (groups of 2), hd 96 */

    /* timing at Llama-500M's attention, B=4, T=2048 (one layer) */
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): a small timed size */
    const int TB = 1, TT = 64, TNH = 16, TNKV = 8, Thd = 96, TC = TNH * Thd, TKVC = TNKV * Thd;
#else
    const int TB = 4, TT = 2048, TNH = 16, TNKV = 8, Thd = 96, TC = TNH * Thd, TKVC = TNKV * Thd;
#endif
    size_t tq = (size_t)TB * TT * TC, tkv = (size_t)TB * TT * TKVC;
    size_t fs = gqa_forward_scratch_elems(TB, TT, TC), bs = gqa_backward_scratch_elems(TB, TT, TC, TNH);
    floatX *t_q, *t_k, *t_v, *t_out, *t_att, *t_scr, *t_dq, *t_dk, *t_dv;
    cudaCheck(cudaMalloc(&t_q, tq * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_k, tkv * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_v, tkv * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_out, tq * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_dq, tq * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_dk, tkv * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_dv, tkv * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_att, (size_t)TB * TNH * TT * TT * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_scr, (fs > bs ? fs : bs) * sizeof(floatX)));
    cudaCheck(cudaMemset(t_q, 0, tq * sizeof(floatX)));
    cudaCheck(cudaMemset(t_k, 0, tkv * sizeof(floatX)));
    cudaCheck(cudaMemset(t_v, 0, tkv * sizeof(floatX)));
    cudaCheck(cudaMemset(t_out, 0, tq * sizeof(floatX)));
    float fms = time_ms([&] { gqa_forward(&bl, t_out, t_att, t_scr, t_q, t_k, t_v, TB, TT, TNH, TNKV, Thd, 0); }, 5);
    float bms = time_ms([&] { gqa_backward(&bl, t_dq, t_dk, t_dv, t_scr, t_out, t_att, t_q, t_k, t_v, TB, TT, TNH,
                                           TNKV, Thd, 0); }, 5);
    double flops = 4.0 * TB * TNH * (double)TT * TT * Thd; /* the two forward GEMMs, full T x T */
    printf("time gqa B=%d T=%d NH=%d NKV=%d hd=%d: forward %.3f ms (%.0f TFLOP/s), backward %.3f ms\n", TB, TT, TNH,
           TNKV, Thd, fms, flops / fms / 1e9, bms);
    blas_free(&bl);
    return dev_failures ? 1 : 0;
}

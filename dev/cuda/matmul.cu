/*
 * dev/cuda/matmul.cu - checks cuda/matmul.cuh (cuBLASLt) against a float64 CPU reference at GPT-2 shapes:
 * forward with the bias epilogue, forward with GELU (bf16: cuBLASLt's GELU+bias epilogue; fp32 builds use the
 * GELU kernel after the GEMM) checking pre-activation and output, backward
 * (dinp overwritten, dweight and dbias accumulated onto existing values, dbias deterministic), cuBLASLt's plan
 * table (a repeated call reuses its plan, same bits as replanned, correct past a full table); then times the host
 * overhead per GEMM with and without the table, and the forward in TFLOP/s.
 */
#include <time.h>
#include "dev/cuda/dev_common.cuh"
#include "cuda/matmul.cuh"

static double gelu_ref(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1 + tanh(u));
}
/* the exact (erf) GELU, only to print how far the result is from it: GPT-2 uses the tanh form */
static double gelu_erf(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

/* A device copy of h at element offset 8 of its allocation: a 16-byte (bf16) or 32-byte (fp32) aligned view like
 * layer l's slice of a flat parameter or activation buffer, instead of cudaMalloc's 256-byte alignment. */
static floatX *to_device_view(const float *h, size_t n) {
    float *tmp = (float *)calloc(n + 8, sizeof(float));
    if (h) memcpy(tmp + 8, h, n * sizeof(float));
    floatX *d = to_device(tmp, n + 8);
    free(tmp);
    return d + 8;
}

int main(void) {
    cuda_require_device("matmul");
    Blas bl;
    blas_init(&bl);
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): N = 264 */
    const int N = 264, C = 768, OC = 3072;
#else
    const int N = 2048, C = 768, OC = 3072;
#endif
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
    {
        double e_tanh = 0, e_erf = 0;
        for (size_t i = 0; i < (size_t)N * OC; i++) {
            e_tanh += fabs(out[i] - r2[i]);
            e_erf += fabs(out[i] - gelu_erf(ref[i]));
        }
        printf("info matmul_forward_gelu_out: mean |err| vs tanh GELU %.3g, vs erf GELU %.3g (tanh expected smaller)\n",
               e_tanh / ((double)N * OC), e_erf / ((double)N * OC));
    }

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
    check_same("matmul_backward_dbias_deterministic", gdb, gdb2, OC);

    /* The same through 16-byte aligned views (cuBLASLt must be told the alignment, see lt_alignment): forward with
     * bias + GELU, and backward with dinp ACCUMULATED (dinp_beta 1) onto existing values. */
    {
        float *dx0 = host_random((size_t)N * C, 1.0f);
        round_host(dx0, (size_t)N * C);
        floatX *v_x = to_device_view(x, (size_t)N * C), *v_w = to_device_view(w, (size_t)OC * C);
        floatX *v_b = to_device_view(b, OC), *v_out = to_device_view(NULL, (size_t)N * OC);
        floatX *v_pre = to_device_view(NULL, (size_t)N * OC), *v_dout = to_device_view(dout, (size_t)N * OC);
        floatX *v_dx = to_device_view(dx0, (size_t)N * C), *v_dw = to_device_view(dw0, (size_t)OC * C);
        floatX *v_db = to_device_view(db0, OC);
        matmul_forward(&bl, v_out, v_pre, v_x, v_w, v_b, N, C, OC, 0);
        float *vo = from_device(v_out, (size_t)N * OC), *vp = from_device(v_pre, (size_t)N * OC);
        check_close("matmul_forward_gelu_views_preact", vp, r1, (size_t)N * OC, TOL_REL, TOL_ABS * 5);
        check_close("matmul_forward_gelu_views_out", vo, r2, (size_t)N * OC, TOL_REL, TOL_ABS * 5);
        matmul_backward(&bl, v_dx, v_dw, v_db, scratch, v_dout, v_x, v_w, N, C, OC, 1.0f, 0);
        float *vdx = from_device(v_dx, (size_t)N * C), *vdw = from_device(v_dw, (size_t)OC * C), *vdb = from_device(v_db, OC);
        for (size_t i = 0; i < (size_t)N * C; i++) rdx[i] += dx0[i];
        check_close("matmul_backward_views_dinp_accumulated", vdx, rdx, (size_t)N * C, TOL_REL, TOL_ABS * 20);
        check_close("matmul_backward_views_dweight", vdw, rdw, (size_t)OC * C, TOL_REL, TOL_ABS * 20);
        check_close("matmul_backward_views_dbias", vdb, rdb, OC, TOL_REL, TOL_ABS * 20);
        free(dx0); free(vo); free(vp); free(vdx); free(vdw); free(vdb);
    }

    /* The plan table (cuda/matmul.cuh, LtPlan): a repeated configuration finds its plan (the table does not grow)
     * and gives the same bits as the same call planned afresh; past LT_PLANS_MAX configurations a GEMM is planned
     * for the one call and is still right. */
    {
        size_t no = (size_t)N * OC;
        int np = bl.nplans;
        matmul_forward(&bl, d_out, d_pre, d_x, d_w, d_b, N, C, OC, 0); /* planned by the checks above */
        char what[96];
        snprintf(what, sizeof what, "%d plans after the repeated call, %d before", bl.nplans, np);
        check_true("lt_plans_repeated_call_hits", bl.nplans == np && np > 0, what);
        float *o1 = from_device(d_out, no), *p1 = from_device(d_pre, no);
        lt_plans_clear(&bl);
        matmul_forward(&bl, d_out, d_pre, d_x, d_w, d_b, N, C, OC, 0);
        float *o2 = from_device(d_out, no), *p2 = from_device(d_pre, no);
        check_same("lt_plans_cached_equals_replanned_out", o1, o2, no);
        check_same("lt_plans_cached_equals_replanned_preact", p1, p2, no);
        free(o1); free(p1); free(o2); free(p2);

        /* D (8 x n) = A (8 x 8) B (8 x n), column-major, A = w's first 64 values, B = x's first 8n; n grows until
         * the table is full, then once more */
        const int nmax = LT_PLANS_MAX + 1;
        floatX *d_small;
        cudaCheck(cudaMalloc(&d_small, (size_t)8 * nmax * sizeof(floatX)));
        int n8 = 0;
        while (bl.nplans < LT_PLANS_MAX && n8 < nmax - 1) {
            n8++;
            lt_matmul(&bl, d_small, d_w, d_x, NULL, NULL, 8, n8, 8, 8, 8, 8, CUBLAS_OP_N, CUBLAS_OP_N, 0.0f,
                      CUBLASLT_EPILOGUE_DEFAULT, 0);
        }
        n8++;
        lt_matmul(&bl, d_small, d_w, d_x, NULL, NULL, 8, n8, 8, 8, 8, 8, CUBLAS_OP_N, CUBLAS_OP_N, 0.0f,
                  CUBLASLT_EPILOGUE_DEFAULT, 0);
        snprintf(what, sizeof what, "%d plans, expected the table full at %d", bl.nplans, LT_PLANS_MAX);
        check_true("lt_plans_table_full", bl.nplans == LT_PLANS_MAX, what);
        float *gs = from_device(d_small, (size_t)8 * n8), *rs = (float *)malloc((size_t)8 * n8 * sizeof(float));
        for (int c = 0; c < n8; c++)
            for (int i = 0; i < 8; i++) {
                double acc = 0;
                for (int q = 0; q < 8; q++) acc += (double)w[i + 8 * q] * x[q + 8 * c];
                rs[i + 8 * c] = (float)acc;
            }
        check_close("lt_plans_beyond_table_gemm", gs, rs, (size_t)8 * n8, TOL_REL, TOL_ABS * 5);
        free(gs); free(rs);
        cudaCheck(cudaFree(d_small));
        lt_plans_clear(&bl);
    }

    /* The host time per call that the plan table saves: a GEMM small enough (64 x 64 x 64, bias epilogue) that
     * the host side is most of its cost, run with its plan cached and with the table cleared before every call
     * (descriptors, layouts, preference and heuristic each time, as before the table). Host time only: each
     * batch of calls is timed on the host, then the stream is drained outside the timing, so a full launch queue
     * never makes the host wait on the GPU. */
    {
#ifdef CUDA_EMU /* the CPU emulator: a few calls, the figures mean nothing here */
        const int batches = 2, per_batch = 5;
#else
        const int batches = 20, per_batch = 100;
#endif
        const int tn = 64, tc = 64, toc = 64;
        double host_s[2] = {0, 0};
        for (int rebuild = 0; rebuild < 2; rebuild++) {
            lt_plans_clear(&bl);
            matmul_forward(&bl, d_out, NULL, d_x, d_w, d_b, tn, tc, toc, 0); /* warm: the plan (and the library) */
            cudaCheck(cudaDeviceSynchronize());
            for (int bt = 0; bt < batches; bt++) {
                struct timespec t0, t1;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                for (int i = 0; i < per_batch; i++) {
                    if (rebuild) lt_plans_clear(&bl);
                    matmul_forward(&bl, d_out, NULL, d_x, d_w, d_b, tn, tc, toc, 0);
                }
                clock_gettime(CLOCK_MONOTONIC, &t1);
                host_s[rebuild] += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
                cudaCheck(cudaDeviceSynchronize());
            }
        }
        double us_cached = 1e6 * host_s[0] / (batches * per_batch), us_rebuilt = 1e6 * host_s[1] / (batches * per_batch);
        printf("time lt_matmul host overhead per call (matmul_forward bias N=%d C=%d OC=%d, %d calls): cached plan "
               "%.2f us, planned every call %.2f us, ratio %.1fx\n", tn, tc, toc, batches * per_batch, us_cached,
               us_rebuilt, us_rebuilt / us_cached);
        lt_plans_clear(&bl);
    }

    /* timing at the size of GPT-2 124M's fc layer with B*T = 8192 */
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): a small timed size */
    const int TN = 64;
#else
    const int TN = 8192;
#endif
    floatX *t_x, *t_out, *t_pre;
    cudaCheck(cudaMalloc(&t_x, (size_t)TN * C * sizeof(floatX))); cudaCheck(cudaMemset(t_x, 0, (size_t)TN * C * sizeof(floatX)));
    cudaCheck(cudaMalloc(&t_out, (size_t)TN * OC * sizeof(floatX))); cudaCheck(cudaMalloc(&t_pre, (size_t)TN * OC * sizeof(floatX)));
    float ms = time_ms([&] { matmul_forward(&bl, t_out, t_pre, t_x, d_w, d_b, TN, C, OC, 0); }, 20);
    printf("time matmul_forward gelu+bias N=%d C=%d OC=%d: %.3f ms, %.1f TFLOP/s\n", TN, C, OC, ms,
           2.0 * TN * C * OC / ms / 1e9);
    blas_free(&bl);
    return dev_failures ? 1 : 0;
}

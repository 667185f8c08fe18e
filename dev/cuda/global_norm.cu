/*
 * dev/cuda/global_norm.cu - checks the deterministic global gradient norm of cuda/optimizer.cuh against a float64
 * CPU sum (several sizes, including ones smaller than the grid), bitwise repeatability, and the clipping scale
 * kernel; the update's float64 per-chunk partials (sumsq_partials) against their documented order, bitwise; then
 * times the norm, and the partials, over 124M values.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/optimizer.cuh"

int main(void) {
    cuda_require_device("global_norm");
    float *d_out, *d_scr;
    cudaCheck(cudaMalloc(&d_out, 4));
    cudaCheck(cudaMalloc(&d_scr, GNORM_BLOCKS * 4));
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): the large case at 1/10 */
    const long sizes[3] = {1, 1000, 1000003};
#else
    const long sizes[3] = {1, 1000, 10000019};
#endif
    for (int k = 0; k < 3; k++) {
        long n = sizes[k];
        float *x = host_random(n, 1.0f);
        round_host(x, n);
        double s = 0;
        for (long i = 0; i < n; i++) s += (double)x[i] * x[i];
        float ref = (float)sqrt(s);
        floatX *d_x = to_device(x, n);
        float got[2];
        for (int r = 0; r < 2; r++) {
            global_norm(d_out, d_scr, d_x, n, 0);
            cudaCheck(cudaMemcpy(&got[r], d_out, 4, cudaMemcpyDeviceToHost));
        }
        char nm[64];
        snprintf(nm, sizeof nm, "global_norm_n%ld", n);
        check_close(nm, &got[0], &ref, 1, 1e-5, 0);
        snprintf(nm, sizeof nm, "global_norm_n%ld_repeatable", n);
        check_same(nm, &got[0], &got[1], 1);
        if (k == 2) {
            scale_kernel<<<ceil_div(n, 256), 256>>>(d_x, n, 0.5f);
            cudaCheckLaunch();
            global_norm(d_out, d_scr, d_x, n, 0);
            float half;
            cudaCheck(cudaMemcpy(&half, d_out, 4, cudaMemcpyDeviceToHost));
            float rh = ref * 0.5f;
            check_close("scale_kernel_halves_norm", &half, &rh, 1, 1e-5, 0);
        }
        cudaCheck(cudaFree(d_x));
        free(x);
    }
    /* the update's float64 norm partials (sumsq_partials): per chunk, bitwise the order optim/dist.c's dist_sumsq
     * documents (lanes, then the halving tree), written out again here; and within 1e-12 of a long double sum */
    {
        const long ns[] = {1, 255, 256, 257, 65535, 65536, 65537, 3 * 65536 + 1000};
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            long n = ns[k], nch = sumsq_chunks(n);
            float *x = host_random(n, 1.0f);
            for (long i = 0; i < n; i += 7) x[i] *= 1e3f; /* a spread of magnitudes: order matters */
            float *d_x;
            double *d_part;
            cudaCheck(cudaMalloc(&d_x, n * sizeof(float)));
            cudaCheck(cudaMemcpy(d_x, x, n * sizeof(float), cudaMemcpyHostToDevice));
            cudaCheck(cudaMalloc(&d_part, nch * sizeof(double)));
            sumsq_partials(d_part, d_x, n, 0);
            double *got = (double *)malloc(nch * sizeof(double));
            cudaCheck(cudaMemcpy(got, d_part, nch * sizeof(double), cudaMemcpyDeviceToHost));
            int same = 1;
            double worst = 0;
            for (long c = 0; c < nch; c++) {
                long a = c * SUMSQ_CHUNK, e = a + SUMSQ_CHUNK < n ? a + SUMSQ_CHUNK : n;
                volatile double lane[SUMSQ_LANES] = {0}; /* volatile: each product and sum rounded to double */
                for (long j = a; j < e; j++) {
                    volatile double sq = (double)x[j] * (double)x[j];
                    lane[(j - a) % SUMSQ_LANES] = lane[(j - a) % SUMSQ_LANES] + sq;
                }
                for (int w = SUMSQ_LANES / 2; w > 0; w >>= 1)
                    for (int l = 0; l < w; l++) lane[l] = lane[l] + lane[l + w];
                long double exact = 0;
                for (long j = a; j < e; j++) exact += (long double)x[j] * x[j];
                same &= memcmp((const void *)&lane[0], &got[c], sizeof(double)) == 0;
                double rel = fabs((double)((got[c] - exact) / exact));
                if (rel > worst) worst = rel;
            }
            char nm[64], what[128];
            snprintf(nm, sizeof nm, "sumsq_partials_n%ld_lane_tree_order_bitwise", n);
            snprintf(what, sizeof what, "a chunk's partial differs from the lane/tree order's sum (%ld chunks)", nch);
            check_true(nm, same, what);
            snprintf(nm, sizeof nm, "sumsq_partials_n%ld_close_to_long_double", n);
            snprintf(what, sizeof what, "worst relative error %.3e", worst);
            check_true(nm, worst < 1e-12, what);
            cudaCheck(cudaFree(d_x));
            cudaCheck(cudaFree(d_part));
            free(got);
            free(x);
        }
    }
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): a small timed size */
    const long P = 100003;
#else
    const long P = 124475904;
#endif
    floatX *g;
    cudaCheck(cudaMalloc(&g, P * sizeof(floatX)));
    cudaCheck(cudaMemset(g, 0, P * sizeof(floatX)));
    float ms = time_ms([&] { global_norm(d_out, d_scr, g, P, 0); }, 10);
    printf("time global_norm P=%ld: %.3f ms (%.0f GB/s)\n", P, ms, P * sizeof(floatX) / ms / 1e6);
    {
        float *g32;
        double *part;
        cudaCheck(cudaMalloc(&g32, P * sizeof(float)));
        cudaCheck(cudaMemset(g32, 0, P * sizeof(float)));
        cudaCheck(cudaMalloc(&part, sumsq_chunks(P) * sizeof(double)));
        float ms2 = time_ms([&] { sumsq_partials(part, g32, P, 0); }, 10);
        printf("time sumsq_partials P=%ld (fp32, %ld blocks): %.3f ms (%.0f GB/s)\n", P, sumsq_chunks(P), ms2,
               P * sizeof(float) / ms2 / 1e6);
        cudaCheck(cudaFree(g32));
        cudaCheck(cudaFree(part));
    }
    return dev_failures ? 1 : 0;
}

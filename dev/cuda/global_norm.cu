/*
 * dev/cuda/global_norm.cu - checks the deterministic global gradient norm of cuda/optimizer.cuh against a float64
 * CPU sum (several sizes, including ones smaller than the grid), bitwise repeatability, and the clipping scale
 * kernel; then times the norm over 124M values.
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
    return dev_failures ? 1 : 0;
}

/*
 * dev/cuda/gelu.cu - checks cuda/gelu.cuh against a float64 CPU reference (tanh GELU, forward and backward,
 * including large |x| where tanh saturates) and times both.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/gelu.cuh"

int main(void) {
    cuda_require_device("gelu");
#ifdef CUDA_EMU /* the CPU emulator (make test-emu): a small n */
    const long n = 64L * 1024 + 3;
#else
    const long n = 8L * 1024 * 3072;
#endif
    float *x = host_random(n, 6.0f), *dy = host_random(n, 1.0f);
    x[0] = 40.0f; x[1] = -40.0f; x[2] = 0.0f;
    round_host(x, n); round_host(dy, n);
    floatX *d_x = to_device(x, n), *d_y, *d_d = to_device(dy, n);
    cudaCheck(cudaMalloc(&d_y, n * sizeof(floatX)));
    gelu_forward(d_y, d_x, n, 0);
    gelu_backward_inplace(d_d, d_x, n, 0);
    float *y = from_device(d_y, n), *dx = from_device(d_d, n);
    float *ry = (float *)malloc(n * sizeof(float)), *rdx = (float *)malloc(n * sizeof(float));
    const double k = sqrt(2.0 / M_PI);
    for (long i = 0; i < n; i++) {
        double v = x[i], u = k * (v + 0.044715 * v * v * v), th = tanh(u);
        ry[i] = (float)(0.5 * v * (1 + th));
        rdx[i] = (float)(dy[i] * (0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * 0.044715 * v * v)));
    }
    check_close("gelu_forward", y, ry, n, TOL_REL, TOL_ABS);
    check_close("gelu_backward", dx, rdx, n, TOL_REL, TOL_ABS);
    float fms = time_ms([&] { gelu_forward(d_y, d_x, n, 0); }, 20);
    float bms = time_ms([&] { gelu_backward_inplace(d_d, d_x, n, 0); }, 20);
    printf("time gelu n=%ld: forward %.3f ms (%.0f GB/s), backward %.3f ms (%.0f GB/s)\n", n, fms,
           2.0 * n * sizeof(floatX) / fms / 1e6, bms, 3.0 * n * sizeof(floatX) / bms / 1e6);
    return dev_failures ? 1 : 0;
}

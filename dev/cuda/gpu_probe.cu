/*
 * dev/cuda/gpu_probe.cu - the first command of `make test-gpu`: passes only if a CUDA device is usable and prints
 * what it is (name, compute capability, memory), so a GPU run's log says what it ran on. Fails with one line
 * on a machine without a GPU or driver.
 */
#include "cuda/common.cuh"

int main(void) {
    cuda_require_device("gpu_probe");
    int dev = 0;
    cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, dev));
    int drv = 0, rt = 0;
    cudaCheck(cudaDriverGetVersion(&drv));
    cudaCheck(cudaRuntimeGetVersion(&rt));
    printf("ok gpu_probe (%s, sm_%d%d, %.1f GiB, %d SMs, driver %d, runtime %d, " PRECISION_NAME ")\n", p.name,
           p.major, p.minor, p.totalGlobalMem / 1073741824.0, p.multiProcessorCount, drv, rt);
    return 0;
}

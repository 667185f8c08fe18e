/*
 * dev/cuda/emu/selftest.cu - the CPU emulator's own test: tiny kernels with deliberate bugs that it must report,
 * one per command-line case (dev/cuda/emu/expect_fail.sh runs each and requires the failure and its message),
 * and `ok`: correct kernels it must run correctly (barriers, shuffles, NaN-filled fresh device memory).
 * Built only by cuda/mk/emu.mk (g++ with the emulator's headers); never by nvcc.
 */
#include "dev/cuda/dev_common.cuh"
#include "cuda/matmul.cuh"

/* writes out[0..n]: one element past the end (the classic `<=` bound) */
__global__ static void off_by_one_write_kernel(float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;
}
__global__ static void off_by_one_read_kernel(float *out, const float *in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i + 1];
}
/* lanes past n exit before the warp reduction: a shuffle with exited lanes */
__global__ static void early_exit_shuffle_kernel(float *out, const float *in, int n) {
    int i = threadIdx.x;
    if (i >= n) return;
    float v = warp_sum(in[i]);
    if (i == 0) out[0] = v;
}
/* thread 0 exits before the block barrier the others wait at */
__global__ static void exit_before_syncthreads_kernel(float *out) {
    __shared__ float sh[64];
    if (threadIdx.x == 0) return;
    sh[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = sh[(threadIdx.x + 1) % 64];
}
/* even and odd threads wait at different barriers */
__global__ static void divergent_syncthreads_kernel(float *out) {
    if (threadIdx.x % 2) {
        __syncthreads();
        out[threadIdx.x] = 1.0f;
    } else {
        __syncthreads();
        out[threadIdx.x] = 2.0f;
    }
}
__global__ static void __launch_bounds__(128) bounded_kernel(float *out) { out[threadIdx.x] = 0.0f; }
/* correct: a block sum through shared memory and warp sums, 2-D grid indexing */
__global__ static void block_sum_kernel(float *out, const float *in, int n) {
    __shared__ float part[32];
    int t = threadIdx.x;
    float v = 0.0f;
    for (int i = t; i < n; i += blockDim.x) v += in[(long)blockIdx.y * n + i];
    v = warp_sum(v);
    if (t % 32 == 0) part[t / 32] = v;
    __syncthreads();
    if (t < 32) {
        float w = t < (int)(blockDim.x / 32) ? part[t] : 0.0f;
        w = warp_sum(w);
        if (t == 0) out[blockIdx.y * gridDim.x + blockIdx.x] = w;
    }
}

static int ok_case(void) {
    const int n = 1000, rows = 3;
    float *h = host_random((size_t)n * rows, 1.0f);
    float *d_in, *d_out;
    cudaCheck(cudaMalloc(&d_in, (size_t)n * rows * 4));
    cudaCheck(cudaMalloc(&d_out, 2 * rows * 4));
    float fresh;
    cudaCheck(cudaMemcpy(&fresh, d_out, 4, cudaMemcpyDeviceToHost));
    check_true("emu_fresh_device_memory_is_nan", fresh != fresh, "cudaMalloc'd memory must read as NaN in the emulator");
    cudaCheck(cudaMemcpy(d_in, h, (size_t)n * rows * 4, cudaMemcpyHostToDevice));
    block_sum_kernel<<<dim3(2, rows), 256>>>(d_out, d_in, n);
    cudaCheckLaunch();
    float got[2 * rows], ref[2 * rows];
    cudaCheck(cudaMemcpy(got, d_out, sizeof got, cudaMemcpyDeviceToHost));
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += h[(size_t)r * n + i];
        ref[2 * r] = ref[2 * r + 1] = (float)s;
    }
    check_close("emu_block_sum_2d_grid", got, ref, 2 * rows, 1e-5, 1e-5);
    bounded_kernel<<<1, 256>>>(d_out);
    check_true("emu_launch_beyond_launch_bounds_fails", cudaGetLastError() == cudaErrorInvalidConfiguration,
               "a launch with more threads than __launch_bounds__ must fail");
    cudaCheck(cudaFree(d_in));
    cudaCheck(cudaFree(d_out));
    free(h);
    return dev_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "ok")) return ok_case();
    float *d, *e;
    cudaCheck(cudaMalloc(&d, 256 * 4));
    cudaCheck(cudaMalloc(&e, 256 * 4));
    cudaCheck(cudaMemset(e, 0, 256 * 4));
    if (!strcmp(c, "oob_write")) off_by_one_write_kernel<<<2, 256>>>(d, 256); /* the grid covers 512 */
    else if (!strcmp(c, "oob_read")) off_by_one_read_kernel<<<1, 256>>>(d, e, 256);
    else if (!strcmp(c, "exited_lane_shuffle")) early_exit_shuffle_kernel<<<1, 64>>>(d, e, 40);
    else if (!strcmp(c, "syncthreads_after_exit")) exit_before_syncthreads_kernel<<<1, 64>>>(d);
    else if (!strcmp(c, "divergent_syncthreads")) divergent_syncthreads_kernel<<<1, 64>>>(d);
    else if (!strcmp(c, "host_pointer_argument")) {
        static float host[256];
        off_by_one_read_kernel<<<1, 32>>>(d, host, 32);
    } else if (!strcmp(c, "memcpy_direction")) {
        float host[4] = {0};
        cudaCheck(cudaMemcpy(d, host, sizeof host, cudaMemcpyDeviceToHost)); /* kinds swapped */
    } else if (!strcmp(c, "lt_leading_dimension") || !strcmp(c, "lt_alignment")) {
        Blas bl;
        blas_init(&bl);
        floatX *a, *b, *out;
        cudaCheck(cudaMalloc(&a, 64 * 64 * sizeof(floatX)));
        cudaCheck(cudaMalloc(&b, 64 * 64 * sizeof(floatX)));
        cudaCheck(cudaMalloc(&out, 64 * 64 * sizeof(floatX)));
        cudaCheck(cudaMemset(a, 0, 64 * 64 * sizeof(floatX)));
        cudaCheck(cudaMemset(b, 0, 64 * 64 * sizeof(floatX)));
        if (!strcmp(c, "lt_leading_dimension")) /* B's leading dimension 80 > its 64 rows: reads past its end */
            lt_matmul(&bl, out, a, b, NULL, NULL, 64, 64, 64, 64, 80, 64, CUBLAS_OP_N, CUBLAS_OP_N, 0.0f,
                      CUBLASLT_EPILOGUE_DEFAULT, 0);
        else { /* an algorithm chosen for 256-byte-aligned pointers, then run on a pointer 2 elements in */
            cublasLtMatmulDesc_t desc;
            cublasLtMatrixLayout_t l;
            cublasLtMatmulPreference_t pref;
            cublasLtMatmulHeuristicResult_t heur;
            int found = 0;
            float one = 1.0f, zero = 0.0f;
            cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            cublasCheck(cublasLtMatrixLayoutCreate(&l, CUDA_FLOATX, 32, 32, 64));
            cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
            cublasCheck(cublasLtMatmulAlgoGetHeuristic(bl.lt, desc, l, l, l, l, pref, 1, &heur, &found));
            cublasCheck(cublasLtMatmul(bl.lt, desc, &one, a + 2, l, b, l, &zero, out, l, out, l, &heur.algo,
                                       bl.workspace, CUBLASLT_WORKSPACE_BYTES, 0));
        }
    } else {
        fprintf(stderr, "error: dev/cuda/emu/selftest: unknown case '%s'; see the cases in cuda/mk/emu.mk\n", c);
        return 2;
    }
    cudaCheckLaunch();
    printf("  the bug went unreported\n");
    return 0;
}

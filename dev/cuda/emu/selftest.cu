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

__global__ static void fill_kernel(float *out, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
__global__ static void copy_kernel(float *out, const float *in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i];
}

/* Stream order (EMU_STREAMS=defer): two streams that share a buffer, ordered by an event when `ordered`, else
 * not: a producer and a consumer (read after write, "raw"), or a reader and a later writer (write after read,
 * "war"); then a device-to-host copy into pinned memory read by the host after a stream synchronisation when
 * `ordered`, else before. Returns the number of values that are not what the program order says. */
static int stream_order_case(const char *which, int ordered) {
    const int n = 64;
    float *d, *e, *pinned, got[64];
    cudaStream_t a, b;
    cudaEvent_t ev;
    cudaCheck(cudaMalloc(&d, n * 4));
    cudaCheck(cudaMalloc(&e, n * 4));
    cudaCheck(cudaMallocHost(&pinned, n * 4));
    cudaCheck(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    float want = 0.0f;
    if (!strcmp(which, "raw")) {
        fill_kernel<<<1, n, 0, a>>>(d, 1.0f, n);
        cudaCheck(cudaEventRecord(ev, a));
        if (ordered) cudaCheck(cudaStreamWaitEvent(b, ev, 0));
        copy_kernel<<<1, n, 0, b>>>(e, d, n);
        want = 1.0f;
    } else if (!strcmp(which, "war")) {
        fill_kernel<<<1, n>>>(d, 1.0f, n); /* the legacy stream: before all that follows */
        copy_kernel<<<1, n, 0, a>>>(e, d, n);
        cudaCheck(cudaEventRecord(ev, a));
        if (ordered) cudaCheck(cudaStreamWaitEvent(b, ev, 0));
        fill_kernel<<<1, n, 0, b>>>(d, 2.0f, n);
        want = 1.0f;
    } else { /* "host": the host reads pinned memory a copy on stream a writes */
        fill_kernel<<<1, n, 0, a>>>(e, 3.0f, n);
        cudaCheck(cudaMemcpyAsync(pinned, e, n * 4, cudaMemcpyDeviceToHost, a));
        if (ordered) cudaCheck(cudaStreamSynchronize(a));
        memcpy(got, pinned, sizeof got);
        want = 3.0f;
    }
    cudaCheckLaunch();
    if (strcmp(which, "host")) {
        cudaCheck(cudaStreamSynchronize(a));
        cudaCheck(cudaStreamSynchronize(b));
        cudaCheck(cudaMemcpy(got, e, sizeof got, cudaMemcpyDeviceToHost));
    }
    int bad = 0;
    for (int i = 0; i < n; i++) bad += got[i] != want;
    if (bad) printf("  stream order %s: %d of %d values read stale (element 0 is %g, the program order says %g)\n", which, bad, n, got[0], want);
    cudaCheck(cudaEventDestroy(ev));
    cudaCheck(cudaStreamDestroy(a));
    cudaCheck(cudaStreamDestroy(b));
    cudaCheck(cudaFreeHost(pinned));
    cudaCheck(cudaFree(d));
    cudaCheck(cudaFree(e));
    return bad;
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
    { /* CUDA semantics the queues must keep: a host-to-host copy on a stream is synchronous; an event recorded on
       * two streams and destroyed while both records are queued (the older record must not touch it) */
        float *p1, *p2, *dd;
        cudaStream_t a, b;
        cudaCheck(cudaMalloc(&dd, 4));
        cudaEvent_t ev;
        cudaCheck(cudaMallocHost(&p1, 4));
        cudaCheck(cudaMallocHost(&p2, 4));
        cudaCheck(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
        cudaCheck(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
        p1[0] = 5.0f;
        cudaCheck(cudaMemcpyAsync(p2, p1, 4, cudaMemcpyHostToHost, a));
        check_true("emu_host_to_host_copy_is_synchronous", p2[0] == 5.0f, "pinned-to-pinned cudaMemcpyAsync must have copied when it returns");
        cudaCheck(cudaEventCreate(&ev));
        fill_kernel<<<1, 1, 0, a>>>(dd, 1.0f, 1);
        cudaCheck(cudaEventRecord(ev, a));
        cudaCheck(cudaEventRecord(ev, b));
        cudaCheck(cudaEventDestroy(ev));
        cudaCheck(cudaStreamSynchronize(a));
        cudaCheck(cudaStreamSynchronize(b));
        cudaCheck(cudaStreamDestroy(a));
        cudaCheck(cudaStreamDestroy(b));
        cudaCheck(cudaFreeHost(p1));
        cudaCheck(cudaFreeHost(p2));
        cudaCheck(cudaFree(dd));
    }
    const char *orders[] = {"raw", "war", "host"};
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "emu_stream_order_%s_with_sync_is_kept", orders[i]);
        check_true(name, stream_order_case(orders[i], 1) == 0, "work ordered by events and synchronisation must see the program order");
    }
    return dev_failures ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    if (!strcmp(c, "ok")) return ok_case();
    if (!strcmp(c, "unordered_streams_raw")) return stream_order_case("raw", 0) ? 1 : 0;
    if (!strcmp(c, "unordered_streams_war")) return stream_order_case("war", 0) ? 1 : 0;
    if (!strcmp(c, "host_reads_before_sync")) return stream_order_case("host", 0) ? 1 : 0;
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

/*
 * cuda/optimizer.cuh - AdamW and AdamS parameter updates on the device with exactly the formulas and rounding of
 * optim/optim.c (so fp32 master weights match the CPU bit for bit): fp32 master weights and moments, floatX
 * gradients, and a floatX parameter copy for the next forward, written with stochastic rounding from a
 * reproducible per-tensor/per-step seed (sr_seed in common.cuh). Plus the deterministic global gradient norm.
 * Intrinsics (__fmul_rn, ...) keep nvcc from contracting into FMAs, which the CPU build (-ffp-contract=off) never
 * does. Not for: SCAPE's masked update (optim/).
 */
#ifndef CUDA_OPTIMIZER_CUH
#define CUDA_OPTIMIZER_CUH

#include <math.h>
#include "cuda/common.cuh"

/* AdamW (Loshchilov & Hutter, arXiv 1711.05101, Algorithm 2, Adam bias correction), see optim/optim.h:
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr * ( (m/bc1) / (sqrt(v/bc2) + eps) + wd * p ) */
template <typename TG>
__global__ static void adamw_kernel(float *master, floatX *copy, const TG *grad, float *m, float *v, long n,
                                    float lr, float b1, float b2, float bc1, float bc2, float eps, float wd,
                                    uint32_t seed) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = to_float(grad[i]);
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(1.0f - b1, g));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(1.0f - b2, g), g));
    m[i] = mi;
    v[i] = vi;
    float p = master[i];
    float upd = __fadd_rn(__fdiv_rn(__fdiv_rn(mi, bc1), __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, bc2)), eps)), __fmul_rn(wd, p));
    p = __fsub_rn(p, __fmul_rn(lr, upd));
    master[i] = p;
    if (copy) store_rounded(copy + i, p, hash_u32((uint32_t)i, seed));
}
/* AdamS (Zhang, Wang, Chen, arXiv 2505.16363; SCAPE.md section 1), one state tensor m:
 *   nu = b2 m_{t-1}^2 + (1-b2) g^2;  m = b1 m + (1-b1) g;  p -= lr * ( (m/bc1) / (sqrt(nu)/sqrt(bc2) + eps) + wd p ) */
template <typename TG>
__global__ static void adams_kernel(float *master, floatX *copy, const TG *grad, float *m, long n, float lr,
                                    float b1, float b2, float bc1, float sqrt_bc2, float eps, float wd, uint32_t seed) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = to_float(grad[i]), mp = m[i];
    float nu = __fadd_rn(__fmul_rn(__fmul_rn(b2, mp), mp), __fmul_rn(__fmul_rn(1.0f - b2, g), g));
    float mi = __fadd_rn(__fmul_rn(b1, mp), __fmul_rn(1.0f - b1, g));
    m[i] = mi;
    float p = master[i];
    float upd = __fadd_rn(__fdiv_rn(__fdiv_rn(mi, bc1), __fadd_rn(__fdiv_rn(__fsqrt_rn(nu), sqrt_bc2), eps)), __fmul_rn(wd, p));
    p = __fsub_rn(p, __fmul_rn(lr, upd));
    master[i] = p;
    if (copy) store_rounded(copy + i, p, hash_u32((uint32_t)i, seed));
}

/* One AdamW step on one tensor of n elements (t >= 1 the step; wd 0 for gains and biases). Bias corrections
 * are computed in double and cast, like optim/optim.c. copy may be NULL (no floatX copy wanted). The gradient
 * is floatX (the kernel tests) or float (the device update's averaged fp32 gradient, cuda/dist.cu). Element
 * i of the copy is rounded with hash_u32(i, seed): i counts from the pointer passed, so pass whole tensors. */
template <typename TG>
static void adamw_update_tensor(float *master, floatX *copy, const TG *grad, float *m, float *v, long n, int t,
                                float lr, float b1, float b2, float eps, float wd, uint32_t seed, cudaStream_t s) {
    float bc1 = (float)(1.0 - pow((double)b1, t)), bc2 = (float)(1.0 - pow((double)b2, t));
    adamw_kernel<<<ceil_div(n, 256), 256, 0, s>>>(master, copy, grad, m, v, n, lr, b1, b2, bc1, bc2, eps, wd, seed);
    cudaCheckLaunch();
}
template <typename TG>
static void adams_update_tensor(float *master, floatX *copy, const TG *grad, float *m, long n, int t, float lr,
                                float b1, float b2, float eps, float wd, uint32_t seed, cudaStream_t s) {
    float bc1 = (float)(1.0 - pow((double)b1, t)), sqrt_bc2 = (float)sqrt(1.0 - pow((double)b2, t));
    adams_kernel<<<ceil_div(n, 256), 256, 0, s>>>(master, copy, grad, m, n, lr, b1, b2, bc1, sqrt_bc2, eps, wd, seed);
    cudaCheckLaunch();
}

/* Global L2 norm of a floatX buffer, deterministic: a FIXED grid of GNORM_BLOCKS blocks each sums a grid-stride
 * share in a fixed order and tree-reduces in shared memory; one block then sums the partials in float64 in block
 * order. The result does not depend on timing, only on n. */
#define GNORM_BLOCKS 512
#define GNORM_THREADS 512
__global__ static void global_norm_partial_kernel(float *partial, const floatX *x, long n) {
    __shared__ float sh[GNORM_THREADS];
    float s = 0.0f;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float v = to_float(x[i]);
        s += v * v;
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
__global__ static void global_norm_final_kernel(float *out, const float *partial, int np) {
    double s = 0.0;
    for (int i = 0; i < np; i++) s += partial[i];
    *out = (float)sqrt(s);
}
/* out (1 float, device) = sqrt(sum x^2) over n elements; scratch: GNORM_BLOCKS floats on the device. */
static void global_norm(float *out, float *scratch, const floatX *x, long n, cudaStream_t s) {
    global_norm_partial_kernel<<<GNORM_BLOCKS, GNORM_THREADS, 0, s>>>(scratch, x, n);
    cudaCheckLaunch();
    global_norm_final_kernel<<<1, 1, 0, s>>>(out, scratch, GNORM_BLOCKS);
    cudaCheckLaunch();
}

/* ---- the device update's gradient side (cuda/dist.cu, train_gpt.cu) ---- */

/* acc[i] += (float)g[i] over n elements: one micro-step's floatX gradients into the fp32 accumulator, the sum the
 * host path computes on the CPU (train_gpt.cu), so both give the same bits. */
__global__ static void grad_accumulate_kernel(float *acc, const floatX *g, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] = __fadd_rn(acc[i], to_float(g[i]));
}
static void grad_accumulate(float *acc, const floatX *g, long n, cudaStream_t s) {
    if (n <= 0) return;
    grad_accumulate_kernel<<<ceil_div(n, 256), 256, 0, s>>>(acc, g, n);
    cudaCheckLaunch();
}

/* x[i] = x[i] / N: the averaging of a summed all-reduce, the division comm/comm.c does after MPI's sum */
__global__ static void div_f32_kernel(float *x, long n, float N) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fdiv_rn(x[i], N);
}
static void div_f32(float *x, long n, float N, cudaStream_t s) {
    if (n <= 0) return;
    div_f32_kernel<<<ceil_div(n, 256), 256, 0, s>>>(x, n, N);
    cudaCheckLaunch();
}

/* x[i] *= sc in fp32 (gradient clipping of the averaged gradient, as optim/dist_dense.c's dense_step) */
__global__ static void scale_f32_kernel(float *x, long n, float sc) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fmul_rn(x[i], sc);
}
static void scale_f32(float *x, long n, float sc, cudaStream_t s) {
    if (n <= 0) return;
    scale_f32_kernel<<<ceil_div(n, 256), 256, 0, s>>>(x, n, sc);
    cudaCheckLaunch();
}

/* copy[i] = floatX(master[i]) with the stochastic rounding adamw_kernel/adams_kernel use (same hash, index and
 * seed), so a copy rebuilt from the master (after a ZeRO-1 all-gather, after a resume) equals the one the update
 * wrote. One whole tensor per call. */
__global__ static void sr_copy_kernel(floatX *copy, const float *master, long n, uint32_t seed) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) store_rounded(copy + i, master[i], hash_u32((uint32_t)i, seed));
}
static void sr_copy(floatX *copy, const float *master, long n, uint32_t seed, cudaStream_t s) {
    if (n <= 0) return;
    sr_copy_kernel<<<ceil_div(n, 256), 256, 0, s>>>(copy, master, n, seed);
    cudaCheckLaunch();
}

/* Sum of squares in float64 exactly as optim/dist.c's dist_sumsq (its header gives the order): chunk c covers
 * [c*SUMSQ_CHUNK, ...) of x (n floats) and is one block of SUMSQ_LANES threads; lane l adds the squares of
 * elements l, l + SUMSQ_LANES, ... of the chunk in turn ((double)x * (double)x, then add, each rounded: no FMA),
 * then the lanes are added by the fixed halving tree lane[l] += lane[l + w], w = SUMSQ_LANES/2 .. 1; part[c] gets
 * lane 0. The host adds the nch partials in order, so the norm has the CPU update's bits and every rank clips and
 * skips alike. Reads are coalesced (a warp takes 32 consecutive floats) and nch blocks fill the GPU; the first
 * version ran one thread per chunk, serially, about P/65536 threads. */
#define SUMSQ_CHUNK 65536
#define SUMSQ_LANES 256
__global__ static void __launch_bounds__(SUMSQ_LANES) sumsq_chunks_kernel(double *part, const float *x, long n) {
    __shared__ double lane[SUMSQ_LANES];
    long a = (long)blockIdx.x * SUMSQ_CHUNK, e = a + SUMSQ_CHUNK < n ? a + SUMSQ_CHUNK : n;
    int l = threadIdx.x;
    double s = 0.0;
    #pragma unroll 4
    for (long j = a + l; j < e; j += SUMSQ_LANES) {
        double v = (double)x[j];
        s = __dadd_rn(s, __dmul_rn(v, v));
    }
    lane[l] = s;
    __syncthreads();
    for (int w = SUMSQ_LANES / 2; w > 0; w >>= 1) {
        if (l < w) lane[l] = __dadd_rn(lane[l], lane[l + w]);
        __syncthreads();
    }
    if (l == 0) part[blockIdx.x] = lane[0];
}
static long sumsq_chunks(long n) { return (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK; }
static void sumsq_partials(double *part, const float *x, long n, cudaStream_t s) {
    long nch = sumsq_chunks(n);
    if (nch == 0) return;
    sumsq_chunks_kernel<<<nch, SUMSQ_LANES, 0, s>>>(part, x, n);
    cudaCheckLaunch();
}

/* x *= scale (gradient clipping), n elements */
__global__ static void scale_kernel(floatX *x, long n, float scale) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = from_float<floatX>(to_float(x[i]) * scale);
}

#endif

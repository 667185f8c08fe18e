/*
 * cuda/rmsnorm.cuh - RMSNorm (Zhang & Sennrich, arXiv 1910.07467, eq. 4) with a gain and no bias, as Llama uses:
 * forward (saving rstd), forward fused with the residual add that precedes it, and backward that adds into the
 * residual stream's gradient. Mirrors rmsnorm_forward / rmsnorm_backward of train_llama.c: statistics and sums in
 * fp32, one warp per row; the gain's gradient is reduced without atomics (per-block partial sums over a fixed
 * row range, then a fixed-order sum over blocks), so it is bitwise reproducible.
 * Shapes: N rows (B*T), C channels. Not for: LayerNorm (layernorm.cuh).
 */
#ifndef CUDA_RMSNORM_CUH
#define CUDA_RMSNORM_CUH

#include "cuda/common.cuh"

/* One warp per row. If res_a is non-NULL the row is first x = res_a + res_b, written (rounded to floatX) to
 * residual, and the stored value is normalised, exactly as an unfused add followed by RMSNorm would; else
 * x = inp. out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps), saved (fp32) for backward. */
__global__ static void rmsnorm_forward_kernel(floatX *out, float *rstd, floatX *residual, const floatX *inp,
                                              const floatX *res_a, const floatX *res_b, const floatX *weight, int N,
                                              int C, float eps) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    long base = (long)row * C;
    const floatX *x = inp ? inp + base : residual + base;
    if (res_a) {
        for (int i = lane; i < C; i += 32)
            residual[base + i] = from_float<floatX>(to_float(res_a[base + i]) + to_float(res_b[base + i]));
        __syncwarp(); /* each lane re-reads elements other lanes wrote */
        x = residual + base;
    }
    float ss = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float v = to_float(x[i]);
        ss += v * v;
    }
    float r = 1.0f / sqrtf(warp_sum(ss) / C + eps); /* as train_llama.c: 1/sqrtf, not rsqrtf */
    for (int i = lane; i < C; i += 32) out[base + i] = from_float<floatX>(to_float(x[i]) * r * to_float(weight[i]));
    if (lane == 0) rstd[row] = r;
}

#define RMSNORM_THREADS 256 /* 8 warps, 8 rows per block in forward */
/* out (N,C) = RMSNorm(inp) * weight; rstd (N) fp32; weight (C). eps from the model (train_llama.c's norm_eps). */
static void rmsnorm_forward(floatX *out, float *rstd, const floatX *inp, const floatX *weight, int N, int C, float eps,
                            cudaStream_t s) {
    rmsnorm_forward_kernel<<<ceil_div(N, RMSNORM_THREADS / 32), RMSNORM_THREADS, 0, s>>>(out, rstd, NULL, inp, NULL,
                                                                                        NULL, weight, N, C, eps);
    cudaCheckLaunch();
}
/* residual (N,C) = a + b, then out = RMSNorm(residual) * weight. residual may not alias a or b. */
static void fused_residual_rmsnorm_forward(floatX *residual, floatX *out, float *rstd, const floatX *a,
                                           const floatX *b, const floatX *weight, int N, int C, float eps,
                                           cudaStream_t s) {
    rmsnorm_forward_kernel<<<ceil_div(N, RMSNORM_THREADS / 32), RMSNORM_THREADS, 0, s>>>(out, rstd, residual, NULL, a,
                                                                                        b, weight, N, C, eps);
    cudaCheckLaunch();
}

/* Rows handled per block by the backward; its partial sums scratch holds ceil(N/RMSNORM_BWD_ROWS) x C floats. */
#define RMSNORM_BWD_ROWS 64

/* With xhat = x*rstd and dnorm = dout*weight: dinp += rstd * (dnorm - xhat * mean(dnorm * xhat)) (train_llama.c
 * rmsnorm_backward); partial[blk, c] = sum of dout*xhat over the block's rows, rows in increasing order.
 * One warp per row for dinp; then thread c walks the block's rows for the partial of column c. */
__global__ static void rmsnorm_backward_kernel(floatX *dinp, float *partial, const floatX *dout, const floatX *inp,
                                               const floatX *weight, const float *rstd, int N, int C) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    int row0 = blockIdx.x * RMSNORM_BWD_ROWS;
    for (int row = row0 + warp; row < row0 + RMSNORM_BWD_ROWS && row < N; row += nwarps) {
        long base = (long)row * C;
        float r = rstd[row];
        float dot = 0.0f;
        for (int i = lane; i < C; i += 32)
            dot += to_float(weight[i]) * to_float(dout[base + i]) * to_float(inp[base + i]) * r;
        dot = warp_sum(dot) / C;
        for (int i = lane; i < C; i += 32) {
            float xhat = to_float(inp[base + i]) * r;
            float d = r * (to_float(weight[i]) * to_float(dout[base + i]) - xhat * dot);
            dinp[base + i] = from_float<floatX>(to_float(dinp[base + i]) + d);
        }
    }
    float *pw = partial + (long)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dw = 0.0f;
        for (int row = row0; row < row0 + RMSNORM_BWD_ROWS && row < N; row++)
            dw += to_float(inp[(long)row * C + c]) * rstd[row] * to_float(dout[(long)row * C + c]);
        pw[c] = dw;
    }
}
/* dweight[c] += sum over blocks (in block order) of partial[blk, c]: one rounding to floatX per call. */
__global__ static void rmsnorm_param_reduce_kernel(floatX *dweight, const float *partial, int nblocks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f;
    for (int b = 0; b < nblocks; b++) dw += partial[(long)b * C + c];
    dweight[c] = from_float<floatX>(to_float(dweight[c]) + dw);
}
static size_t rmsnorm_backward_scratch_floats(int N, int C) { return (size_t)ceil_div(N, RMSNORM_BWD_ROWS) * C; }
/* dinp (N,C) += input gradient (this add IS the residual branch's backward: dinp is the residual stream's
 * gradient); dweight (C) += the gain's gradient. dout (N,C) the gradient of the norm's output, inp (N,C) its input
 * (the residual), weight (C), rstd (N) from forward. dinp must not alias dout or inp. scratch: device, at least
 * rmsnorm_backward_scratch_floats(N, C) floats. */
static void rmsnorm_backward(floatX *dinp, floatX *dweight, float *scratch, const floatX *dout, const floatX *inp,
                             const floatX *weight, const float *rstd, int N, int C, cudaStream_t s) {
    int nb = ceil_div(N, RMSNORM_BWD_ROWS);
    rmsnorm_backward_kernel<<<nb, RMSNORM_THREADS, 0, s>>>(dinp, scratch, dout, inp, weight, rstd, N, C);
    cudaCheckLaunch();
    rmsnorm_param_reduce_kernel<<<ceil_div(C, 256), 256, 0, s>>>(dweight, scratch, nb, C);
    cudaCheckLaunch();
}

#endif

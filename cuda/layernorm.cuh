/*
 * cuda/layernorm.cuh - LayerNorm (Ba, Kiros, Hinton, arXiv 1607.06450; eps 1e-5, biased variance, like GPT-2)
 * forward, forward fused with the residual add that precedes it, and backward that adds into the residual
 * stream's gradient. Statistics and sums in fp32; one warp per row. Parameter gradients are reduced without
 * atomics (per-block partial sums, then a fixed-order reduction), so they are bitwise reproducible.
 * Shapes: N rows, C channels. Not for: RMSNorm (Llama).
 */
#ifndef CUDA_LAYERNORM_CUH
#define CUDA_LAYERNORM_CUH

#include "cuda/common.cuh"

#define LN_EPS 1e-5f

/* One warp per row. If res_a is non-NULL, the row is first x = res_a + res_b, written to residual (the fusion
 * of `residual = a + b; out = LN(residual)`); else x = inp. mean, rstd (N) fp32, saved for backward. */
__global__ static void layernorm_forward_kernel(floatX *out, float *mean, float *rstd, floatX *residual,
                                                const floatX *inp, const floatX *res_a, const floatX *res_b,
                                                const floatX *weight, const floatX *bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    long base = (long)row * C;
    const floatX *x = inp ? inp + base : residual + base;
    if (res_a) {
        for (int i = lane; i < C; i += 32) {
            float v = to_float(res_a[base + i]) + to_float(res_b[base + i]);
            residual[base + i] = from_float<floatX>(v);
        }
        __syncwarp();
        x = residual + base; /* normalise the stored (rounded) sum, as an unfused residual + LN would */
    }
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += to_float(x[i]);
    float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = to_float(x[i]) - m;
        v += d * d;
    }
    float r = rsqrtf(warp_sum(v) / C + LN_EPS);
    for (int i = lane; i < C; i += 32) {
        float y = (to_float(x[i]) - m) * r * to_float(weight[i]) + to_float(bias[i]);
        out[base + i] = from_float<floatX>(y);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* out (N,C) = LN(inp) * weight + bias. */
static void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *weight,
                              const floatX *bias, int N, int C, cudaStream_t s) {
    layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, s>>>(out, mean, rstd, NULL, inp, NULL, NULL, weight, bias, N, C);
    cudaCheckLaunch();
}
/* residual (N,C) = a + b, then out = LN(residual) * weight + bias. residual may not alias a or b. */
static void fused_residual_layernorm_forward(floatX *residual, floatX *out, float *mean, float *rstd,
                                             const floatX *a, const floatX *b, const floatX *weight,
                                             const floatX *bias, int N, int C, cudaStream_t s) {
    layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, s>>>(out, mean, rstd, residual, NULL, a, b, weight, bias, N, C);
    cudaCheckLaunch();
}

/* Rows handled per block by the backward; the partial sums scratch holds ceil(N/LN_BWD_ROWS) x 2C floats. */
#define LN_BWD_ROWS 64

/* dinp += dnorm * rstd * (w - mean(dnorm w) - xhat mean(dnorm w xhat))  (the standard LayerNorm backward),
 * partial[blk, 0:C] = sum of dout*xhat over the block's rows, partial[blk, C:2C] = sum of dout. One warp per row,
 * the block's rows summed in row order by looping, so the partials are deterministic. */
__global__ static void layernorm_backward_kernel(floatX *dinp, float *partial, const floatX *dout,
                                                 const floatX *inp, const floatX *weight, const float *mean,
                                                 const float *rstd, int N, int C) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    int row0 = blockIdx.x * LN_BWD_ROWS;
    for (int row = row0 + warp; row < row0 + LN_BWD_ROWS && row < N; row += nwarps) {
        long base = (long)row * C;
        float m = mean[row], r = rstd[row];
        float s1 = 0.0f, s2 = 0.0f;
        for (int i = lane; i < C; i += 32) {
            float xh = (to_float(inp[base + i]) - m) * r;
            float dn = to_float(weight[i]) * to_float(dout[base + i]);
            s1 += dn;
            s2 += dn * xh;
        }
        s1 = warp_sum(s1) / C;
        s2 = warp_sum(s2) / C;
        for (int i = lane; i < C; i += 32) {
            float xh = (to_float(inp[base + i]) - m) * r;
            float dn = to_float(weight[i]) * to_float(dout[base + i]);
            float d = (dn - s1 - xh * s2) * r;
            dinp[base + i] = from_float<floatX>(to_float(dinp[base + i]) + d);
        }
    }
    /* parameter-gradient partials: thread c walks the block's rows in order */
    float *pw = partial + (long)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dw = 0.0f, db = 0.0f;
        for (int row = row0; row < row0 + LN_BWD_ROWS && row < N; row++) {
            float g = to_float(dout[(long)row * C + c]);
            dw += g * (to_float(inp[(long)row * C + c]) - mean[row]) * rstd[row];
            db += g;
        }
        pw[c] = dw;
        pw[C + c] = db;
    }
}
/* dweight[c] += sum over blocks of partial[blk, c] (blocks in order); same for dbias. */
__global__ static void layernorm_param_reduce_kernel(floatX *dweight, floatX *dbias, const float *partial,
                                                     int nblocks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int b = 0; b < nblocks; b++) {
        dw += partial[(long)b * 2 * C + c];
        db += partial[(long)b * 2 * C + C + c];
    }
    dweight[c] = from_float<floatX>(to_float(dweight[c]) + dw);
    dbias[c] = from_float<floatX>(to_float(dbias[c]) + db);
}
static size_t layernorm_backward_scratch_floats(int N, int C) { return (size_t)ceil_div(N, LN_BWD_ROWS) * 2 * C; }
/* dinp (N,C) += input gradient (this add IS the residual branch's backward: dinp is the residual stream's
 * gradient); dweight, dbias (C) += parameter gradients. scratch: layernorm_backward_scratch_floats(N, C). */
static void layernorm_backward(floatX *dinp, floatX *dweight, floatX *dbias, float *scratch, const floatX *dout,
                               const floatX *inp, const floatX *weight, const float *mean, const float *rstd, int N,
                               int C, cudaStream_t s) {
    int nb = ceil_div(N, LN_BWD_ROWS);
    layernorm_backward_kernel<<<nb, 256, 0, s>>>(dinp, scratch, dout, inp, weight, mean, rstd, N, C);
    cudaCheckLaunch();
    layernorm_param_reduce_kernel<<<ceil_div(C, 256), 256, 0, s>>>(dweight, dbias, scratch, nb, C);
    cudaCheckLaunch();
}

#endif

/*
 * cuda/attention.cuh - causal multi-head self-attention (Vaswani et al., arXiv 1706.03762, section 3.2.1) with
 * cuBLAS strided-batched GEMMs for Q K^T and att V and a fused scale + causal mask + softmax kernel (fp32 math).
 * Shapes: qkv (B,T,3C) = [q | k | v] per row, head h at channels h*hs..(h+1)*hs of each; NH heads, hs = C/NH;
 * att (B,NH,T,T) saved for backward (0 above the diagonal); out (B,T,C).
 * Not for: the cuDNN flash-attention path (ENABLE_CUDNN; not written yet).
 */
#ifndef CUDA_ATTENTION_CUH
#define CUDA_ATTENTION_CUH

#include <math.h>
#include "cuda/matmul.cuh"

/* qkv (B,T,3C) -> q, k, v (B,NH,T,hs) each */
__global__ static void attn_permute_kernel(floatX *q, floatX *k, floatX *v, const floatX *qkv, int B, int T, int NH,
                                           int hs) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * NH * T * hs) return;
    int d = i % hs, t = (i / hs) % T, h = (i / ((long)hs * T)) % NH, b = i / ((long)hs * T * NH);
    int C = NH * hs;
    long src = ((long)b * T + t) * 3 * C + h * hs + d;
    q[i] = qkv[src];
    k[i] = qkv[src + C];
    v[i] = qkv[src + 2 * C];
}
/* inverse: dq, dk, dv (B,NH,T,hs) -> dqkv (B,T,3C), overwriting */
__global__ static void attn_unpermute_qkv_kernel(floatX *dqkv, const floatX *dq, const floatX *dk, const floatX *dv,
                                                 int B, int T, int NH, int hs) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * NH * T * hs) return;
    int d = i % hs, t = (i / hs) % T, h = (i / ((long)hs * T)) % NH, b = i / ((long)hs * T * NH);
    int C = NH * hs;
    long dst = ((long)b * T + t) * 3 * C + h * hs + d;
    dqkv[dst] = dq[i];
    dqkv[dst + C] = dk[i];
    dqkv[dst + 2 * C] = dv[i];
}
/* y (B,NH,T,hs) <-> out (B,T,C); dir 0: y -> out, dir 1: out -> y */
__global__ static void attn_heads_kernel(floatX *out, floatX *y, int B, int T, int NH, int hs, int dir) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * NH * T * hs) return;
    int d = i % hs, t = (i / hs) % T, h = (i / ((long)hs * T)) % NH, b = i / ((long)hs * T * NH);
    long o = ((long)b * T + t) * NH * hs + h * hs + d;
    if (dir == 0) out[o] = y[i];
    else y[i] = out[o];
}

/* att[row, t2] = softmax_{t2 <= t1}(scale * preatt[row, t2]), 0 for t2 > t1; row = (b,h,t1); one warp per row.
 * In place is allowed (att == preatt). */
__global__ static void softmax_causal_kernel(floatX *att, const floatX *preatt, int rows, int T, float scale) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int t1 = row % T;
    const floatX *p = preatt + (long)row * T;
    floatX *a = att + (long)row * T;
    float mx = -INFINITY;
    for (int t = lane; t <= t1; t += 32) mx = fmaxf(mx, scale * to_float(p[t]));
    mx = warp_max(mx);
    float s = 0.0f;
    for (int t = lane; t <= t1; t += 32) s += expf(scale * to_float(p[t]) - mx);
    float inv = 1.0f / warp_sum(s);
    for (int t = lane; t < T; t += 32) a[t] = from_float<floatX>(t <= t1 ? expf(scale * to_float(p[t]) - mx) * inv : 0.0f);
}
/* datt -> dpreatt in place: d = scale * att * (datt - sum_t att datt), 0 above the diagonal. one warp per row */
__global__ static void softmax_causal_backward_kernel(floatX *datt, const floatX *att, int rows, int T, float scale) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int t1 = row % T;
    floatX *d = datt + (long)row * T;
    const floatX *a = att + (long)row * T;
    float dot = 0.0f;
    for (int t = lane; t <= t1; t += 32) dot += to_float(a[t]) * to_float(d[t]);
    dot = warp_sum(dot);
    for (int t = lane; t < T; t += 32)
        d[t] = from_float<floatX>(t <= t1 ? scale * to_float(a[t]) * (to_float(d[t]) - dot) : 0.0f);
}

/* C_i = op(A_i) op(B_i) (+ beta C_i), i < batch: column-major m x n, see matmul.cuh for the row-major view */
static void gemm_batched(Blas *bl, floatX *c, const floatX *a, const floatX *b, int m, int n, int k, int lda,
                         long long sa, int ldb, long long sb, int ldc, long long sc, int batch, cublasOperation_t ta,
                         cublasOperation_t tb, float beta, cudaStream_t s) {
    float alpha = 1.0f;
    cublasCheck(cublasSetStream(bl->blas, s));
    cublasCheck(cublasGemmStridedBatchedEx(bl->blas, ta, tb, m, n, k, &alpha, a, CUDA_FLOATX, lda, sa, b, CUDA_FLOATX,
                                           ldb, sb, &beta, c, CUDA_FLOATX, ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT));
}

/* Scratch the attention needs besides att: q, k, v, y (B,NH,T,hs) each, in floatX elements. */
static size_t attention_scratch_elems(int B, int T, int C) { return 4 * (size_t)B * T * C; }

/* out (B,T,C) = causal attention of qkv (B,T,3C); att (B,NH,T,T) saved for backward; scratch as above. */
static void attention_forward(Blas *bl, floatX *out, floatX *att, floatX *scratch, const floatX *qkv, int B, int T,
                              int C, int NH, cudaStream_t s) {
    int hs = C / NH;
    long n = (long)B * T * C;
    floatX *q = scratch, *k = q + n, *v = k + n, *y = v + n;
    attn_permute_kernel<<<ceil_div(n, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    cudaCheckLaunch();
    long long sq = (long long)T * hs, st = (long long)T * T;
    /* preatt_cm (t2,t1) = k_cm^T q_cm */
    gemm_batched(bl, att, k, q, T, T, hs, hs, sq, hs, sq, T, st, B * NH, CUBLAS_OP_T, CUBLAS_OP_N, 0.0f, s);
    int rows = B * NH * T;
    softmax_causal_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(att, att, rows, T, 1.0f / sqrtf((float)hs));
    cudaCheckLaunch();
    /* y_cm (d,t1) = v_cm (d,t2) att_cm (t2,t1) */
    gemm_batched(bl, y, v, att, hs, T, T, hs, sq, T, st, hs, sq, B * NH, CUBLAS_OP_N, CUBLAS_OP_N, 0.0f, s);
    attn_heads_kernel<<<ceil_div(n, 256), 256, 0, s>>>(out, y, B, T, NH, hs, 0);
    cudaCheckLaunch();
}

/* Scratch of the backward: q, k, v, dy, dq, dk, dv (B,NH,T,hs) and datt (B,NH,T,T), in floatX elements. */
static size_t attention_backward_scratch_elems(int B, int T, int C, int NH) {
    return 7 * (size_t)B * T * C + (size_t)B * NH * T * T;
}
/* dqkv (B,T,3C) OVERWRITTEN with d(loss)/d(qkv), from dout (B,T,C), the forward's att and its input qkv. */
static void attention_backward(Blas *bl, floatX *dqkv, floatX *scratch, const floatX *dout, const floatX *att,
                               const floatX *qkv, int B, int T, int C, int NH, cudaStream_t s) {
    int hs = C / NH;
    long n = (long)B * T * C;
    floatX *q = scratch, *k = q + n, *v = k + n, *dy = v + n, *dq = dy + n, *dk = dq + n, *dv = dk + n, *datt = dv + n;
    attn_permute_kernel<<<ceil_div(n, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    cudaCheckLaunch();
    attn_heads_kernel<<<ceil_div(n, 256), 256, 0, s>>>((floatX *)dout, dy, B, T, NH, hs, 1);
    cudaCheckLaunch();
    long long sq = (long long)T * hs, st = (long long)T * T;
    int batch = B * NH;
    /* datt_cm (t2,t1) = v_cm^T dy_cm */
    gemm_batched(bl, datt, v, dy, T, T, hs, hs, sq, hs, sq, T, st, batch, CUBLAS_OP_T, CUBLAS_OP_N, 0.0f, s);
    /* dv_cm (d,t2) = dy_cm (d,t1) att_cm^T (t1,t2) */
    gemm_batched(bl, dv, dy, att, hs, T, T, hs, sq, T, st, hs, sq, batch, CUBLAS_OP_N, CUBLAS_OP_T, 0.0f, s);
    int rows = batch * T;
    softmax_causal_backward_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(datt, att, rows, T, 1.0f / sqrtf((float)hs));
    cudaCheckLaunch();
    /* dq_cm (d,t1) = k_cm (d,t2) dpre_cm (t2,t1);  dk_cm (d,t2) = q_cm (d,t1) dpre_cm^T (t1,t2) */
    gemm_batched(bl, dq, k, datt, hs, T, T, hs, sq, T, st, hs, sq, batch, CUBLAS_OP_N, CUBLAS_OP_N, 0.0f, s);
    gemm_batched(bl, dk, q, datt, hs, T, T, hs, sq, T, st, hs, sq, batch, CUBLAS_OP_N, CUBLAS_OP_T, 0.0f, s);
    attn_unpermute_qkv_kernel<<<ceil_div(n, 256), 256, 0, s>>>(dqkv, dq, dk, dv, B, T, NH, hs);
    cudaCheckLaunch();
}

#endif

/*
 * cuda/gelu.cuh - GELU, tanh approximation (Hendrycks & Gimpel, arXiv 1606.08415, section 2), as GPT-2 uses:
 * y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Elementwise over n values, fp32 arithmetic.
 * (The forward can also run as a cuBLASLt epilogue, see matmul.cuh; this is the standalone version.)
 */
#ifndef CUDA_GELU_CUH
#define CUDA_GELU_CUH

#include "cuda/common.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

__global__ static void gelu_forward_kernel(floatX *out, const floatX *inp, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_float(inp[i]);
    out[i] = from_float<floatX>(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x))));
}
/* dinout (n): d(out) on entry, d(inp) on exit; inp (n) the forward's input. */
__global__ static void gelu_backward_kernel(floatX *dinout, const floatX *inp, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_float(inp[i]);
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    dinout[i] = from_float<floatX>(to_float(dinout[i]) * grad);
}
static void gelu_forward(floatX *out, const floatX *inp, long n, cudaStream_t s) {
    gelu_forward_kernel<<<ceil_div(n, 256), 256, 0, s>>>(out, inp, n);
    cudaCheckLaunch();
}
static void gelu_backward_inplace(floatX *dinout, const floatX *inp, long n, cudaStream_t s) {
    gelu_backward_kernel<<<ceil_div(n, 256), 256, 0, s>>>(dinout, inp, n);
    cudaCheckLaunch();
}

#endif

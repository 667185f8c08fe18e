/*
 * cuda/swiglu.cuh - SwiGLU (Shazeer, arXiv 2002.05202, eq. 6): out = silu(gate) * up, silu(g) = g * sigmoid(g),
 * with gate = h @ w1^T and up = h @ w3^T computed by two separate GEMMs, as train_llama.c keeps w1 and w3 as two
 * tensors. Forward and an in-place backward mirroring swiglu_forward / swiglu_backward_inplace there; fp32 math,
 * accurate expf. Shapes: n = B*T*F elements (F the hidden size). Not for: the projections (matmul.cuh).
 */
#ifndef CUDA_SWIGLU_CUH
#define CUDA_SWIGLU_CUH

#include "cuda/common.cuh"

__global__ static void swiglu_forward_kernel(floatX *out, const floatX *gate, const floatX *up, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = to_float(gate[i]);
    out[i] = from_float<floatX>(g / (1.0f + expf(-g)) * to_float(up[i]));
}
/* out, gate, up (n); out may not alias gate or up. */
static void swiglu_forward(floatX *out, const floatX *gate, const floatX *up, long n, cudaStream_t s) {
    swiglu_forward_kernel<<<ceil_div(n, 256), 256, 0, s>>>(out, gate, up, n);
    cudaCheckLaunch();
}

__global__ static void swiglu_backward_kernel(floatX *dgate, floatX *dup, const floatX *gate, const floatX *up, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = to_float(gate[i]), d = to_float(dgate[i]);
    float sig = 1.0f / (1.0f + expf(-g));
    dup[i] = from_float<floatX>(d * g * sig);
    dgate[i] = from_float<floatX>(d * to_float(up[i]) * sig * (1.0f + g * (1.0f - sig)));
}
/* IN PLACE: on entry dgate (n) holds d(out); on exit dgate = d(gate) and dup (n) = d(up) (overwritten).
 * d silu(g)/dg = sig(g) * (1 + g * (1 - sig(g))). gate, up (n) from forward; dup may not alias anything. */
static void swiglu_backward_inplace(floatX *dgate, floatX *dup, const floatX *gate, const floatX *up, long n,
                                    cudaStream_t s) {
    swiglu_backward_kernel<<<ceil_div(n, 256), 256, 0, s>>>(dgate, dup, gate, up, n);
    cudaCheckLaunch();
}

#endif

/*
 * cuda/rope.cuh - rotary position embedding (Su et al., "RoFormer", arXiv 2104.09864, eq. 15) in place on q or k,
 * in train_llama.c's rotate-half layout (Hugging Face / Meta checkpoints): within each head vector of hd entries,
 * entry j and entry j + hd/2 form the pair rotated by the angle of (t, j), j < hd/2:
 *   x'[j] = x[j] cos - x[j+hd/2] sin;  x'[j+hd/2] = x[j+hd/2] cos + x[j] sin.
 * The angle table is train_llama.c's own (rope_table: computed in double, rounded once to float; the trainer gets
 * it through models/llama_host.h and uploads it), so both backends rotate by the same float cos/sin. Positions are
 * 0..T-1 in every row of the batch. Backward is the inverse rotation (the rotation is orthogonal).
 * Shapes: B batch, T sequence, nh heads in a row (NH for q, NKV for k), hd head dimension (even),
 * cos_tab, sin_tab (maxT, hd/2), T <= maxT. Not for: the table itself (train_llama.c).
 */
#ifndef CUDA_ROPE_CUH
#define CUDA_ROPE_CUH

#include "cuda/common.cuh"

/* One thread per (row, head, pair j): i = ((n * nh) + h) * half + j, n = b*T + t. sign +1 forward, -1 backward. */
__global__ static void rope_kernel(floatX *x, const float *cos_tab, const float *sin_tab, int N, int T, int nh, int hd,
                                   float sign) {
    int half = hd / 2;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)N * nh * half) return;
    int j = (int)(i % half);
    long nhh = i / half; /* n * nh + h */
    int t = (int)((nhh / nh) % T);
    long base = nhh * hd;
    float c = cos_tab[(long)t * half + j], sn = sign * sin_tab[(long)t * half + j];
    float re = to_float(x[base + j]), im = to_float(x[base + j + half]);
    x[base + j] = from_float<floatX>(re * c - im * sn);
    x[base + j + half] = from_float<floatX>(im * c + re * sn);
}
/* x (B,T,nh*hd) rotated in place by position t of each row (train_llama.c rope_inplace with sign +1). */
static void rope_forward(floatX *x, const float *cos_tab, const float *sin_tab, int B, int T, int nh, int hd,
                         cudaStream_t s) {
    long n = (long)B * T * nh * (hd / 2);
    rope_kernel<<<ceil_div(n, 256), 256, 0, s>>>(x, cos_tab, sin_tab, B * T, T, nh, hd, 1.0f);
    cudaCheckLaunch();
}
/* dx (B,T,nh*hd) in place: the gradient w.r.t. the rotated vector becomes the gradient w.r.t. the unrotated one,
 * dx = R(-angle) dy (train_llama.c rope_inplace with sign -1). */
static void rope_backward(floatX *dx, const float *cos_tab, const float *sin_tab, int B, int T, int nh, int hd,
                          cudaStream_t s) {
    long n = (long)B * T * nh * (hd / 2);
    rope_kernel<<<ceil_div(n, 256), 256, 0, s>>>(dx, cos_tab, sin_tab, B * T, T, nh, hd, -1.0f);
    cudaCheckLaunch();
}

#endif

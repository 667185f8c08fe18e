/*
 * cuda/classifier.cuh - the classifier's softmax + cross-entropy fused with its gradient: one block per row reads
 * the logits once for max and sum (online softmax, Milakov & Gimelshein, arXiv 1805.02867) and, in the same
 * launch, overwrites them with d(loss)/d(logits), so probabilities are never stored. Padded columns V..Vp-1 are
 * ignored and get gradient 0. Per-row losses are written in fp32; the mean is taken on the host in double, so it
 * does not depend on the launch configuration. Shapes: N = B*T rows, V real vocabulary, Vp padded.
 */
#ifndef CUDA_CLASSIFIER_CUH
#define CUDA_CLASSIFIER_CUH

#include "cuda/common.cuh"

/* (m, s) pairs: s = sum exp(x - m); combining two keeps the larger max */
static __device__ inline void softmax_combine(float &m, float &s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    s = (m == -INFINITY ? 0.0f : s * expf(m - mn)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mn));
    m = mn;
}

#define CLS_THREADS 1024
/* losses[n] = log sum exp(logits[n,:V]) - logits[n, targets[n]]; if grad_scale != 0, logits[n,:] is replaced by
 * grad_scale * (softmax - onehot(target)) (0 in the padding). grad_scale = loss_scale / N for the mean loss. */
__global__ static void __launch_bounds__(CLS_THREADS) fused_classifier_kernel(floatX *logits, float *losses,
        const int *targets, int V, int Vp, float grad_scale) {
    __shared__ float sm[32], ss[32];
    int n = blockIdx.x;
    floatX *row = logits + (long)n * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) softmax_combine(m, s, to_float(row[i]), 1.0f);
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), s2 = __shfl_xor_sync(0xFFFFFFFFu, s, o);
        softmax_combine(m, s, m2, s2);
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < nw ? sm[lane] : -INFINITY;
        s = lane < nw ? ss[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, o), s2 = __shfl_xor_sync(0xFFFFFFFFu, s, o);
            softmax_combine(m, s, m2, s2);
        }
        if (lane == 0) { sm[0] = m; ss[0] = s; }
    }
    __syncthreads();
    float lse = sm[0] + logf(ss[0]);
    int tgt = targets[n];
    if (threadIdx.x == 0) losses[n] = lse - to_float(row[tgt]);
    if (grad_scale == 0.0f) return;
    __syncthreads(); /* row[tgt] is read above before any thread overwrites it */
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float g = i < V ? grad_scale * (expf(to_float(row[i]) - lse) - (i == tgt ? 1.0f : 0.0f)) : 0.0f;
        row[i] = from_float<floatX>(g);
    }
}
/* logits (N,Vp) floatX, targets (N) device, losses (N) device fp32. grad_scale 0: loss only. */
static void fused_classifier(floatX *logits, float *losses, const int *targets, int N, int V, int Vp,
                             float grad_scale, cudaStream_t st) {
    fused_classifier_kernel<<<N, CLS_THREADS, 0, st>>>(logits, losses, targets, V, Vp, grad_scale);
    cudaCheckLaunch();
}

#endif

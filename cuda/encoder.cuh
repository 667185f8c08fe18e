/*
 * cuda/encoder.cuh - token + position embedding, forward and a deterministic backward.
 * Shapes: B batch, T sequence, C channels, N = B*T rows, Vp padded vocabulary, maxT position rows.
 * Backward uses no atomics: tokens are grouped on the host (inputs live there anyway, from the data loader) and
 * each distinct token's row of dwte is summed by one thread per channel in increasing row order, so gradients are
 * bitwise reproducible. Not for: the lm_head use of wte (matmul.cuh).
 */
#ifndef CUDA_ENCODER_CUH
#define CUDA_ENCODER_CUH

#include <stdlib.h>
#include "cuda/common.cuh"

/* out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]; out (N,C), inp (N) device token ids, wte (Vp,C), wpe (maxT,C). */
__global__ static void encoder_forward_kernel(floatX *out, const int *inp, const floatX *wte, const floatX *wpe,
                                              int N, int T, int C) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    float v = to_float(wte[(long)inp[n] * C + c]) + to_float(wpe[(long)(n % T) * C + c]);
    out[i] = from_float<floatX>(v);
}
static void encoder_forward(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T,
                            int C, cudaStream_t s) {
    long n = (long)B * T * C;
    encoder_forward_kernel<<<ceil_div(n, 256), 256, 0, s>>>(out, inp, wte, wpe, B * T, T, C);
    cudaCheckLaunch();
}

/* The host-side plan of the backward: rows grouped by token. order (N): row indices sorted by (token, row);
 * seg_start (nseg+1): segment k covers order[seg_start[k] .. seg_start[k+1]); seg_tok (nseg): its token. */
typedef struct {
    int *order, *seg_start, *seg_tok;
    int nseg;
} EncoderPlan;

/* Counting sort by token (stable, so rows stay increasing inside a segment). inp (N) host ids in [0, Vp);
 * the arrays must hold N, N+1 and N ints; count is Vp ints of scratch. */
static void encoder_backward_plan(EncoderPlan *p, const int *inp, int N, int Vp, int *count) {
    for (int v = 0; v < Vp; v++) count[v] = 0;
    for (int n = 0; n < N; n++) count[inp[n]]++;
    int nseg = 0, pos = 0;
    for (int v = 0; v < Vp; v++) {
        if (!count[v]) continue;
        p->seg_start[nseg] = pos;
        p->seg_tok[nseg] = v;
        int c = count[v];
        count[v] = pos; /* now the next write position of token v */
        pos += c;
        nseg++;
    }
    p->seg_start[nseg] = pos;
    p->nseg = nseg;
    for (int n = 0; n < N; n++) p->order[count[inp[n]]++] = n;
}

/* dwte[tok,:] += sum over the segment's rows of dout[row,:], in row order, fp32 accumulation. grid (nseg, C/256) */
__global__ static void encoder_backward_wte_kernel(floatX *dwte, const floatX *dout, const int *order,
                                                   const int *seg_start, const int *seg_tok, int C) {
    int k = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int j = seg_start[k]; j < seg_start[k + 1]; j++) acc += to_float(dout[(long)order[j] * C + c]);
    floatX *d = dwte + (long)seg_tok[k] * C + c;
    *d = from_float<floatX>(to_float(*d) + acc);
}
/* dwpe[t,:] += sum over b (in order) of dout[b,t,:]. one thread per (t, c). */
__global__ static void encoder_backward_wpe_kernel(floatX *dwpe, const floatX *dout, int B, int T, int C) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += to_float(dout[(long)b * T * C + i]);
    dwpe[i] = from_float<floatX>(to_float(dwpe[i]) + acc);
}
/* dwte (Vp,C), dwpe (maxT,C) += scatter of dout (N,C). plan arrays on the device (d_order, d_seg_start,
 * d_seg_tok copied from an EncoderPlan). */
static void encoder_backward(floatX *dwte, floatX *dwpe, const floatX *dout, const int *d_order,
                             const int *d_seg_start, const int *d_seg_tok, int nseg, int B, int T, int C,
                             cudaStream_t s) {
    dim3 grid(nseg, ceil_div(C, 256));
    if (nseg > 0) encoder_backward_wte_kernel<<<grid, 256, 0, s>>>(dwte, dout, d_order, d_seg_start, d_seg_tok, C);
    cudaCheckLaunch();
    encoder_backward_wpe_kernel<<<ceil_div((long)T * C, 256), 256, 0, s>>>(dwpe, dout, B, T, C);
    cudaCheckLaunch();
}

#endif

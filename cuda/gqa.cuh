/*
 * cuda/gqa.cuh - causal grouped-query attention (Ainslie et al., arXiv 2305.13245) for Llama: NH query heads,
 * NKV key/value heads (NH % NKV == 0), query head h reads key/value head h / (NH/NKV); scores scaled by
 * 1/sqrt(hd). Mirrors attention_forward / attention_backward of train_llama.c.
 *
 * Route: q, k and v are packed into attention.cuh's qkv layout (B,T,3C), C = NH*hd, with each key/value head
 * copied to the NH/NKV query heads of its group (gqa_expand_qkv), so that multi-head attention runs unchanged:
 * cuda/attention.cuh's Attention (cuDNN's fused flash attention where the build has it, else its strided-batched
 * GEMMs and fused softmax). The backward's d(qkv) is folded back (gqa_reduce_dqkv): dq copied, each group's NH/NKV
 * heads of dk and dv summed into the NKV heads in a fixed order (fp32, one rounding), so it is deterministic
 * without atomics; with the cuBLAS path these are the same GEMMs and roundings head by head as an attention
 * written for GQA directly.
 * Memory cost of the expansion: one (B,T,3C) buffer for the packed input and one for its gradient, not per layer
 * (the packing is redone in the backward from the layer's saved q, k, v): e.g. 2 x 75 MiB at Llama-500M, B=4,
 * T=2048 (C 1536, bf16).
 * gqa_forward / gqa_backward are the whole route on the cuBLAS path with the caller's att, for the kernel test.
 *
 * Layouts: q (B,T,NH*hd) and out (B,T,NH*hd) heads concatenated per row; k, v (B,T,NKV*hd); qkv (B,T,3C) rows
 * [q | k expanded | v expanded]; att (B,NH,T,T) softmax probabilities, 0 above the diagonal. Not for: RoPE
 * (rope.cuh; q and k arrive rotated).
 */
#ifndef CUDA_GQA_CUH
#define CUDA_GQA_CUH

#include <math.h>
#include "cuda/attention.cuh"

/* qkv (N,3C) rows [q | k expanded | v expanded] from q (N,C), k, v (N,NKV*hd): channel C + h*hd + d of a row is
 * k's channel (h / (NH/NKV))*hd + d, likewise for v. One thread per element of qkv. */
__global__ static void gqa_expand_qkv_kernel(floatX *qkv, const floatX *q, const floatX *k, const floatX *v, long N,
                                             int NH, int NKV, int hd) {
    const long C = (long)NH * hd, KVC = (long)NKV * hd;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * 3 * C) return;
    long row = i / (3 * C);
    long c = i % (3 * C);
    if (c < C) {
        qkv[i] = q[row * C + c];
        return;
    }
    const int part = (int)(c / C); /* 1: k, 2: v */
    const long ch = c % C;
    const long kv_ch = (ch / hd) / (NH / NKV) * hd + ch % hd;
    qkv[i] = part == 1 ? k[row * KVC + kv_ch] : v[row * KVC + kv_ch];
}

/* dq (N,C) = dqkv's q part; dk, dv (N,NKV*hd) = the sums over each group's NH/NKV heads of dqkv's k and v parts,
 * heads of the group in increasing order, in fp32 with one rounding. All OVERWRITTEN. One thread per element of
 * (N,C) (the dk, dv work on the first N*KVC threads). */
__global__ static void gqa_reduce_dqkv_kernel(floatX *dq, floatX *dk, floatX *dv, const floatX *dqkv, long N, int NH,
                                              int NKV, int hd) {
    const long C = (long)NH * hd, KVC = (long)NKV * hd;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * C) return;
    dq[i] = dqkv[(i / C) * 3 * C + i % C];
    if (i >= N * KVC) return;
    const long row = i / KVC, kv_ch = i % KVC;
    const int kvh = (int)(kv_ch / hd), d = (int)(kv_ch % hd), group = NH / NKV;
    const floatX *r = dqkv + row * 3 * C;
    float sk = 0.0f, sv = 0.0f;
    for (int g = 0; g < group; g++) {
        const long ch = (long)(kvh * group + g) * hd + d;
        sk += to_float(r[C + ch]);
        sv += to_float(r[2 * C + ch]);
    }
    dk[i] = from_float<floatX>(sk);
    dv[i] = from_float<floatX>(sv);
}

/* qkv (B*T,3C) = the packed, expanded q, k, v of one layer (gqa_expand_qkv_kernel), on stream s */
static void gqa_expand_qkv(floatX *qkv, const floatX *q, const floatX *k, const floatX *v, int B, int T, int NH,
                           int NKV, int hd, cudaStream_t s) {
    long n = (long)B * T * 3 * NH * hd;
    gqa_expand_qkv_kernel<<<ceil_div(n, 256), 256, 0, s>>>(qkv, q, k, v, (long)B * T, NH, NKV, hd);
    cudaCheckLaunch();
}

/* dq (B,T,NH*hd), dk, dv (B,T,NKV*hd) OVERWRITTEN from the packed gradient dqkv (B,T,3C) (gqa_reduce_dqkv_kernel) */
static void gqa_reduce_dqkv(floatX *dq, floatX *dk, floatX *dv, const floatX *dqkv, int B, int T, int NH, int NKV,
                            int hd, cudaStream_t s) {
    long n = (long)B * T * NH * hd;
    gqa_reduce_dqkv_kernel<<<ceil_div(n, 256), 256, 0, s>>>(dq, dk, dv, dqkv, (long)B * T, NH, NKV, hd);
    cudaCheckLaunch();
}

/* floatX elements of scratch gqa_forward needs: the packed qkv (B,T,3C) and attention_forward's. C = NH*hd. */
static size_t gqa_forward_scratch_elems(int B, int T, int C) { return 3 * (size_t)B * T * C + attention_scratch_elems(B, T, C); }
/* floatX elements of scratch gqa_backward needs: qkv and dqkv (B,T,3C) and attention_backward's. */
static size_t gqa_backward_scratch_elems(int B, int T, int C, int NH) {
    return 6 * (size_t)B * T * C + attention_backward_scratch_elems(B, T, C, NH);
}

/* out (B,T,NH*hd) = causal GQA of q (B,T,NH*hd), k, v (B,T,NKV*hd) on the cuBLAS path; att (B,NH,T,T) written and
 * saved for backward. scratch: gqa_forward_scratch_elems(B, T, NH*hd) floatX on the device. */
static void gqa_forward(Blas *bl, floatX *out, floatX *att, floatX *scratch, const floatX *q, const floatX *k,
                        const floatX *v, int B, int T, int NH, int NKV, int hd, cudaStream_t s) {
    const int C = NH * hd;
    floatX *qkv = scratch;
    gqa_expand_qkv(qkv, q, k, v, B, T, NH, NKV, hd, s);
    attention_forward(bl, out, att, qkv + 3 * (size_t)B * T * C, qkv, B, T, C, NH, s);
}

/* dq (B,T,NH*hd), dk, dv (B,T,NKV*hd) OVERWRITTEN with d(loss)/d(q, k, v) from dout (B,T,NH*hd), the forward's att
 * and its inputs q, k, v (cuBLAS path). scratch: gqa_backward_scratch_elems(B, T, NH*hd, NH) floatX on the device. */
static void gqa_backward(Blas *bl, floatX *dq, floatX *dk, floatX *dv, floatX *scratch, const floatX *dout,
                         const floatX *att, const floatX *q, const floatX *k, const floatX *v, int B, int T, int NH,
                         int NKV, int hd, cudaStream_t s) {
    const int C = NH * hd;
    const size_t n3 = 3 * (size_t)B * T * C;
    floatX *qkv = scratch, *dqkv = scratch + n3;
    gqa_expand_qkv(qkv, q, k, v, B, T, NH, NKV, hd, s);
    attention_backward(bl, dqkv, dqkv + n3, dout, att, qkv, B, T, C, NH, s);
    gqa_reduce_dqkv(dq, dk, dv, dqkv, B, T, NH, NKV, hd, s);
}

#endif

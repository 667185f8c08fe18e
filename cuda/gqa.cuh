/*
 * cuda/gqa.cuh - causal grouped-query attention (Ainslie et al., arXiv 2305.13245) for Llama: NH query heads,
 * NKV key/value heads (NH % NKV == 0), query head h reads key/value head h / (NH/NKV); scores scaled by
 * 1/sqrt(hd). Mirrors attention_forward / attention_backward of train_llama.c.
 *
 * Route: the keys and values are expanded to NH heads (each key/value head copied to the NH/NKV query heads of its
 * group) while permuting to the (B,NH,T,hd) layout, and then attention.cuh's multi-head machinery runs unchanged:
 * its strided-batched GEMMs (gemm_batched), fused scale + causal mask + softmax kernels and head permutation.
 * Backward computes the expanded dK, dV per query head and sums each group's NH/NKV heads into the NKV heads in a
 * fixed order (fp32, one rounding), so it is deterministic without atomics.
 * Memory cost of the expansion: scratch only, not per layer. Forward scratch 4 x B*T*C floatX (q, expanded k and v,
 * y), the same as attention.cuh's for C = NH*hd; backward 7 x B*T*C + B*NH*T*T (q, k, v, dy, dq, dk, dv, datt).
 * The expansion's own share is 2 x B*T*(C - KVC) of the forward scratch (k, v) and 4 x B*T*(C - KVC) of the
 * backward's (k, v, dk, dv): e.g. 48 MiB at Llama-500M, B=4, T=2048 (C 1536, KVC 768, bf16). The saved att
 * (B,NH,T,T) per layer is the dominant activation either way (no flash attention yet).
 *
 * Layouts: q (B,T,NH*hd) and out (B,T,NH*hd) heads concatenated per row; k, v (B,T,NKV*hd); att (B,NH,T,T) softmax
 * probabilities, 0 above the diagonal. Not for: RoPE (rope.cuh; q and k arrive rotated).
 */
#ifndef CUDA_GQA_CUH
#define CUDA_GQA_CUH

#include <math.h>
#include "cuda/attention.cuh"

/* q (B,T,NH*hd), k, v (B,T,NKV*hd) -> qh, kh, vh (B,NH,T,hd); kh, vh expanded: head h copies kv head h/group.
 * One thread per element of (B,NH,T,hd). */
__global__ static void gqa_permute_kernel(floatX *qh, floatX *kh, floatX *vh, const floatX *q, const floatX *k,
                                          const floatX *v, int B, int T, int NH, int NKV, int hd) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * NH * T * hd) return;
    int d = (int)(i % hd), t = (int)((i / hd) % T), h = (int)((i / ((long)hd * T)) % NH);
    long b = i / ((long)hd * T * NH);
    long row = b * T + t;
    int kvh = h / (NH / NKV);
    qh[i] = q[row * NH * hd + (long)h * hd + d];
    kh[i] = k[row * NKV * hd + (long)kvh * hd + d];
    vh[i] = v[row * NKV * hd + (long)kvh * hd + d];
}

/* dk, dv (B,T,NKV*hd) OVERWRITTEN with the sums over each group's query heads of dkh, dvh (B,NH,T,hd), heads of the
 * group in increasing order. One thread per element of (B,T,NKV*hd). */
__global__ static void gqa_reduce_kv_kernel(floatX *dk, floatX *dv, const floatX *dkh, const floatX *dvh, int B, int T,
                                            int NH, int NKV, int hd) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * T * NKV * hd) return;
    int d = (int)(i % hd), kvh = (int)((i / hd) % NKV);
    long row = i / ((long)hd * NKV); /* b*T + t */
    long b = row / T;
    int t = (int)(row % T), group = NH / NKV;
    float sk = 0.0f, sv = 0.0f;
    for (int g = 0; g < group; g++) {
        long src = ((b * NH + (long)kvh * group + g) * T + t) * hd + d;
        sk += to_float(dkh[src]);
        sv += to_float(dvh[src]);
    }
    dk[i] = from_float<floatX>(sk);
    dv[i] = from_float<floatX>(sv);
}

/* floatX elements of scratch gqa_forward needs: qh, kh, vh, y (B,NH,T,hd). C = NH*hd. */
static size_t gqa_forward_scratch_elems(int B, int T, int C) { return 4 * (size_t)B * T * C; }
/* floatX elements of scratch gqa_backward needs: qh, kh, vh, dy, dqh, dkh, dvh (B,NH,T,hd) and datt (B,NH,T,T). */
static size_t gqa_backward_scratch_elems(int B, int T, int C, int NH) {
    return 7 * (size_t)B * T * C + (size_t)B * NH * T * T;
}

/* out (B,T,NH*hd) = causal GQA of q (B,T,NH*hd), k, v (B,T,NKV*hd); att (B,NH,T,T) written and saved for backward.
 * scratch: gqa_forward_scratch_elems(B, T, NH*hd) floatX on the device. */
static void gqa_forward(Blas *bl, floatX *out, floatX *att, floatX *scratch, const floatX *q, const floatX *k,
                        const floatX *v, int B, int T, int NH, int NKV, int hd, cudaStream_t s) {
    long n = (long)B * T * NH * hd;
    floatX *qh = scratch, *kh = qh + n, *vh = kh + n, *y = vh + n;
    gqa_permute_kernel<<<ceil_div(n, 256), 256, 0, s>>>(qh, kh, vh, q, k, v, B, T, NH, NKV, hd);
    cudaCheckLaunch();
    long long sq = (long long)T * hd, st = (long long)T * T;
    /* per (b,h): preatt (T,T) row-major = q k^T; column-major that is preatt_cm (t2,t1) = kh_cm^T qh_cm */
    gemm_batched(bl, att, kh, qh, T, T, hd, hd, sq, hd, sq, T, st, B * NH, CUBLAS_OP_T, CUBLAS_OP_N, 0.0f, s);
    int rows = B * NH * T;
    softmax_causal_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(att, att, rows, T, 1.0f / sqrtf((float)hd));
    cudaCheckLaunch();
    /* y (T,hd) = att v: y_cm (d,t1) = vh_cm (d,t2) att_cm (t2,t1) */
    gemm_batched(bl, y, vh, att, hd, T, T, hd, sq, T, st, hd, sq, B * NH, CUBLAS_OP_N, CUBLAS_OP_N, 0.0f, s);
    attn_heads_kernel<<<ceil_div(n, 256), 256, 0, s>>>(out, y, B, T, NH, hd, 0);
    cudaCheckLaunch();
}

/* dq (B,T,NH*hd), dk, dv (B,T,NKV*hd) OVERWRITTEN with d(loss)/d(q, k, v) from dout (B,T,NH*hd), the forward's att
 * and its inputs q, k, v. scratch: gqa_backward_scratch_elems(B, T, NH*hd, NH) floatX on the device. */
static void gqa_backward(Blas *bl, floatX *dq, floatX *dk, floatX *dv, floatX *scratch, const floatX *dout,
                         const floatX *att, const floatX *q, const floatX *k, const floatX *v, int B, int T, int NH,
                         int NKV, int hd, cudaStream_t s) {
    long n = (long)B * T * NH * hd;
    floatX *qh = scratch, *kh = qh + n, *vh = kh + n, *dy = vh + n, *dqh = dy + n, *dkh = dqh + n, *dvh = dkh + n;
    floatX *datt = dvh + n;
    gqa_permute_kernel<<<ceil_div(n, 256), 256, 0, s>>>(qh, kh, vh, q, k, v, B, T, NH, NKV, hd);
    cudaCheckLaunch();
    attn_heads_kernel<<<ceil_div(n, 256), 256, 0, s>>>((floatX *)dout, dy, B, T, NH, hd, 1); /* reads dout only */
    cudaCheckLaunch();
    long long sq = (long long)T * hd, st = (long long)T * T;
    int batch = B * NH;
    /* datt (t1,t2) = dy v^T: datt_cm (t2,t1) = vh_cm^T dy_cm */
    gemm_batched(bl, datt, vh, dy, T, T, hd, hd, sq, hd, sq, T, st, batch, CUBLAS_OP_T, CUBLAS_OP_N, 0.0f, s);
    /* dv (t2,d) = att^T dy: dvh_cm (d,t2) = dy_cm (d,t1) att_cm^T (t1,t2) */
    gemm_batched(bl, dvh, dy, att, hd, T, T, hd, sq, T, st, hd, sq, batch, CUBLAS_OP_N, CUBLAS_OP_T, 0.0f, s);
    int rows = batch * T;
    softmax_causal_backward_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(datt, att, rows, T, 1.0f / sqrtf((float)hd));
    cudaCheckLaunch();
    /* dq (t1,d) = dpre k: dqh_cm (d,t1) = kh_cm (d,t2) dpre_cm (t2,t1);
     * dk (t2,d) = dpre^T q: dkh_cm (d,t2) = qh_cm (d,t1) dpre_cm^T (t1,t2) */
    gemm_batched(bl, dqh, kh, datt, hd, T, T, hd, sq, T, st, hd, sq, batch, CUBLAS_OP_N, CUBLAS_OP_N, 0.0f, s);
    gemm_batched(bl, dkh, qh, datt, hd, T, T, hd, sq, T, st, hd, sq, batch, CUBLAS_OP_N, CUBLAS_OP_T, 0.0f, s);
    attn_heads_kernel<<<ceil_div(n, 256), 256, 0, s>>>(dq, dqh, B, T, NH, hd, 0);
    cudaCheckLaunch();
    long nkv = (long)B * T * NKV * hd;
    gqa_reduce_kv_kernel<<<ceil_div(nkv, 256), 256, 0, s>>>(dk, dv, dkh, dvh, B, T, NH, NKV, hd);
    cudaCheckLaunch();
}

#endif

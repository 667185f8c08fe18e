/*
 * dev/cuda/attention_ref.cuh - float64 CPU reference of causal multi-head attention for the kernel tests
 * (dev/cuda/attention.cu, dev/cuda/attention_cudnn.cu): plain loops over (b, h, t1, t2), independent of any GEMM
 * or flash formulation. Not for: grouped-query attention (dev/cuda/gqa.cu has its own).
 */
#ifndef DEV_CUDA_ATTENTION_REF_CUH
#define DEV_CUDA_ATTENTION_REF_CUH

#include <math.h>
#include <stdlib.h>

/* From qkv (B,T,3C) and dout (B,T,C), NH heads of hs = C/NH, scores scaled by 1/sqrt(hs), causal:
 *   out (B,T,C), att (B,NH,T,T) softmax probabilities (0 above the diagonal), dqkv (B,T,3C) = d(sum out*dout)/dqkv,
 *   lse (B,NH,T) = log sum_{t2<=t1} exp(scaled score): the statistics of Dao et al., FlashAttention-2
 *   (arXiv 2307.08691), Algorithm 1, line 13 (m + log l). Each output may be NULL. */
static void attention_reference(const float *qkv, const float *dout, int B, int T, int C, int NH, float *out,
                                float *att_out, float *dqkv, float *lse) {
    int hs = C / NH;
    size_t n3 = (size_t)B * T * 3 * C;
    double *dq = (double *)calloc(n3, 8), *a = (double *)malloc((size_t)T * 8), *datt = (double *)malloc((size_t)T * 8);
    double sc = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t1 = 0; t1 < T; t1++) {
                const float *q = qkv + ((size_t)b * T + t1) * 3 * C + h * hs;
                double mx = -1e300, sum = 0;
                for (int t2 = 0; t2 <= t1; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += (double)q[d] * k[d];
                    a[t2] = s * sc;
                    if (a[t2] > mx) mx = a[t2];
                }
                for (int t2 = 0; t2 <= t1; t2++) { a[t2] = exp(a[t2] - mx); sum += a[t2]; }
                for (int t2 = 0; t2 <= t1; t2++) a[t2] /= sum;
                size_t row = ((size_t)b * NH + h) * T + t1;
                if (lse) lse[row] = (float)(mx + log(sum));
                if (att_out)
                    for (int t2 = 0; t2 < T; t2++) att_out[row * T + t2] = t2 <= t1 ? (float)a[t2] : 0.0f;
                if (out)
                    for (int d = 0; d < hs; d++) {
                        double s = 0;
                        for (int t2 = 0; t2 <= t1; t2++) s += a[t2] * qkv[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + d];
                        out[((size_t)b * T + t1) * C + h * hs + d] = (float)s;
                    }
                if (!dqkv) continue;
                /* backward of this row: dv += a g, datt = g . v, dpre = a (datt - a . datt) scale */
                const float *g = dout + ((size_t)b * T + t1) * C + h * hs;
                double dot = 0;
                for (int t2 = 0; t2 <= t1; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) {
                        s += (double)g[d] * v[d];
                        dq[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + d] += a[t2] * g[d];
                    }
                    datt[t2] = s;
                    dot += s * a[t2];
                }
                for (int t2 = 0; t2 <= t1; t2++) {
                    double dp = a[t2] * (datt[t2] - dot) * sc;
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    for (int d = 0; d < hs; d++) {
                        dq[((size_t)b * T + t1) * 3 * C + h * hs + d] += dp * k[d];
                        dq[((size_t)b * T + t2) * 3 * C + C + h * hs + d] += dp * q[d];
                    }
                }
            }
    if (dqkv)
        for (size_t i = 0; i < n3; i++) dqkv[i] = (float)dq[i];
    free(dq);
    free(a);
    free(datt);
}

#endif

/*
 * train_gpt.c - GPT-2 on the CPU in fp32: the parameter table, forward and backward pass of every layer, model
 * files (llm.c's layout), and the ModelFamily the shared training loop (trainer/train.c) drives.
 *
 * This is the reference every other backend is checked against, and test/test_gpt2.c checks it against PyTorch
 * (dev/ref/gpt2_ref.py). It reads top to bottom: layers as <layer>_forward / <layer>_backward pairs over raw
 * pointers, then the model (table, memory, forward, backward), then model files, then the family.
 * Not for: data, optimizer, logging, checkpoints of training state (common/, optim/).
 *
 * Shapes: B batch, T sequence length, C channels, NH heads, hs = C/NH head size, L layers, V vocabulary (50257),
 * Vp padded vocabulary (multiple of 128, 50304), maxT the model's maximum sequence length, N = B*T rows.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#ifdef BLAS_FALLBACK
#include "models/blas_fallback.h" /* GPU machines without OpenBLAS: a plain sgemm (models/blas_fallback.c) */
#else
#include <cblas.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/model.h"
#include "common/params.h"
#include "common/rng.h"
#include "common/util.h"
#include "tokenizer/tokenizer.h"

#define GPT2_MAGIC 20240326
#define GPT2_VERSION_FP32 3
#define GPT2_VERSION_BF16 5
#define GPT2_HEADER_INTS 256

/* exp(x) for x <= 0 (every caller: softmax arguments x - max, and tanh_f32) in float, written so that the
 * compiler vectorizes it: glibc's expf has no SIMD variant without -ffast-math, and the softmaxes and GELU would
 * spend most of their time in it. Cephes' expf: x = k ln2 + r with |r| <= ln2/2 (ln2 split in two so k*ln2 is
 * exact), e^r by a degree-7 polynomial, 2^k put into the exponent bits. Relative error < 1e-7 on [-87, 0]
 * (checked against exp() in test_gpt2). Below about -87.3 (e^x < 2^-126) it returns 0 through a 0/1 multiplier
 * rather than a float select or clamp, which would stop gcc from vectorizing the loops that store. NaN stays
 * NaN; -inf gives NaN. */
static inline float exp_f32(float x) {
    float t = x * 1.44269504088896341f;
    int32_t k = (int32_t)(t - 0.5f); /* round(t) for t <= 0 */
    int32_t kc = k < -126 ? -126 : k;
    float keep = k < -126 ? 0.0f : 1.0f;
    float n = (float)kc;
    float r = (x - n * 0.693359375f - n * -2.12194440e-4f) * keep;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { int32_t i; float f; } scale = {.i = (kc + 127) << 23}; /* 2^kc */
    return p * scale.f * keep;
}

/* tanh(u) = sign(u) (1 - e) / (1 + e) with e = e^{-2|u|} <= 1, through exp_f32 so GELU vectorizes too. Absolute
 * error about 1e-7 (relative accuracy is lost near 0, where GELU multiplies tanh by a small x anyway). */
static inline float tanh_f32(float u) {
    float e = exp_f32(-2.0f * fabsf(u));
    return copysignf((1.0f - e) / (1.0f + e), u);
}

/* ----------------------------------------------------------------------------------------------------------
 * Layers. Forward functions overwrite their outputs; backward functions ADD into their input gradients and
 * parameter gradients (so gradients of tensors used twice, like wte, accumulate).
 * ---------------------------------------------------------------------------------------------------------- */

/* Token + position embedding: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:].
 * out (B,T,C), inp (B,T) token ids in [0,V), wte (Vp,C), wpe (maxT,C). */
static void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        float *o = out + (size_t)bt * C;
        const float *we = wte + (size_t)inp[bt] * C;
        const float *pe = wpe + (size_t)(bt % T) * C;
        for (int i = 0; i < C; i++) o[i] = we[i] + pe[i];
    }
}

/* dwte (Vp,C), dwpe (maxT,C) += scatter of dout (B,T,C). Serial over B*T because rows of dwte collide when a
 * token repeats; it is O(B*T*C), negligible next to the matmuls. */
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {
        const float *d = dout + (size_t)bt * C;
        float *dwe = dwte + (size_t)inp[bt] * C;
        float *dpe = dwpe + (size_t)(bt % T) * C;
        for (int i = 0; i < C; i++) {
            dwe[i] += d[i];
            dpe[i] += d[i];
        }
    }
}

/* LayerNorm (Ba, Kiros, Hinton, arXiv 1607.06450) over the last dimension, eps 1e-5 like GPT-2:
 * out = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps), biased variance.
 * out (N,C), mean (N), rstd (N) saved for backward, inp (N,C), weight (C), bias (C). */
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                              const float *bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        v /= C;
        float s = 1.0f / sqrtf(v + 1e-5f);
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

/* dinp (N,C) += d/dx; dweight (C), dbias (C) +=. With xhat = (x-mean)*rstd and dnorm = dout*weight:
 * dx = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)). The parameter gradients are reductions over N;
 * each thread sums its rows into a private (2,C) buffer and the buffers are added in thread order, so the result
 * does not depend on scheduling. scratch holds nthreads*2*C floats. */
static void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, const float *mean, const float *rstd, int N, int C,
                               float *scratch, int nthreads) {
    #pragma omp parallel num_threads(nthreads)
    {
        int tid = 0, nt = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        float *dw = scratch + (size_t)tid * 2 * C, *db = dw + C;
        memset(dw, 0, 2 * (size_t)C * sizeof(float));
        int lo = (int)((int64_t)N * tid / nt), hi = (int)((int64_t)N * (tid + 1) / nt);
        for (int n = lo; n < hi; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
            for (int i = 0; i < C; i++) {
                float xhat = (x[i] - m) * s;
                float dnorm = weight[i] * dy[i];
                dnorm_mean += dnorm;
                dnorm_xhat_mean += dnorm * xhat;
            }
            dnorm_mean /= C;
            dnorm_xhat_mean /= C;
            for (int i = 0; i < C; i++) {
                float xhat = (x[i] - m) * s;
                float dnorm = weight[i] * dy[i];
                db[i] += dy[i];
                dw[i] += xhat * dy[i];
                dx[i] += s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
            }
        }
        #pragma omp barrier
        #pragma omp for schedule(static)
        for (int i = 0; i < C; i++) {
            float sw = 0.0f, sb = 0.0f;
            for (int k = 0; k < nt; k++) {
                sw += scratch[(size_t)k * 2 * C + i];
                sb += scratch[(size_t)k * 2 * C + C + i];
            }
            dweight[i] += sw;
            dbias[i] += sb;
        }
    }
}

/* Linear layer: out = inp @ weight^T + bias, weight stored (OC, C) row-major like PyTorch's nn.Linear, so one
 * sgemm with weight transposed reads both operands in place. out (N,OC), inp (N,C), weight (OC,C), bias (OC)
 * or NULL. */
static void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                           int OC) {
    float beta = 0.0f;
    if (bias) {
        /* seed out with the bias so sgemm adds onto it: one pass over out instead of two */
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

/* Backward of matmul_forward: dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) +=
 * column sums of dout (skipped when dbias is NULL). dout (N,OC), inp (N,C), weight (OC,C). */
static void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) {
        /* each thread owns a contiguous block of output channels: no sharing, deterministic order over n */
        #pragma omp parallel for schedule(static)
        for (int o = 0; o < OC; o++) {
            float s = 0.0f;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
            dbias[o] += s;
        }
    }
}

/* Causal multi-head self-attention (Vaswani et al., arXiv 1706.03762, eq. 1) with scale 1/sqrt(hs).
 * inp (B,T,3C) holds q, k, v side by side per position, head h at columns h*hs..; out (B,T,C) heads
 * concatenated; att (B,NH,T,T) the softmax probabilities P, 0 above the diagonal.
 * The two products of each (b, h) are SGEMMs on strided views of inp (row stride 3C), no copies:
 * S = scale * Q K^T over the full (T, T) block (the masked half is computed and dropped: twice the FLOPs of the
 * causal part, yet 2x faster than dot-product loops at T = 256), a causal softmax row by row, then Y = P V; the
 * zeros above the diagonal make the mask free in the second product. Parallel over (b, h), each product on
 * one thread (BLAS runs single-threaded inside the loop): these products are too small to split well, and each
 * output element is computed the same way either way. */
static void attention_forward(float *out, float *att, const float *inp, int B, int T, int C, int NH) {
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *q = inp + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        float *p = att + (size_t)bh * T * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, p, T);
        for (int t = 0; t < T; t++) {
            float *a = p + (size_t)t * T;
            float maxv = -INFINITY, sum = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) maxv = a[t2] > maxv ? a[t2] : maxv;
            #pragma omp simd reduction(+ : sum)
            for (int t2 = 0; t2 <= t; t2++) {
                a[t2] = exp_f32(a[t2] - maxv);
                sum += a[t2];
            }
            float inv = 1.0f / sum;
            for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
            for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, v, C3, 0.0f,
                    out + (size_t)b * T * C + h * hs, C);
    }
}

/* Backward of attention_forward, per (b, h): dP = dY V^T; dV += P^T dY; dS = P * (dP - rowsum(P * dP)) *
 * scale (softmax backward; 0 where P is masked); dQ += dS K; dK += dS^T Q. Parallel over (b, h) as the forward
 * (each (b, h) writes its own columns of dinp) on at most nthreads threads; scratch_all holds nthreads blocks of
 * scratch_stride >= T*T floats: each thread's (T, T) holds dP then dS. */
static void attention_backward(float *dinp, const float *dout, const float *att, const float *inp, int B, int T,
                               int C, int NH, float *scratch_all, size_t scratch_stride, int nthreads) {
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *scratch = scratch_all + (size_t)tid * scratch_stride;
        const float *q = inp + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
        float *dq = dinp + (size_t)b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
        const float *p = att + (size_t)bh * T * T, *dy = dout + (size_t)b * T * C + h * hs;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, C3, 0.0f, scratch, T);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, dy, C, 1.0f, dv, C3);
        for (int t = 0; t < T; t++) {
            const float *pr = p + (size_t)t * T;
            float *d = scratch + (size_t)t * T;
            float dot = 0.0f;
            #pragma omp simd reduction(+ : dot)
            for (int t2 = 0; t2 <= t; t2++) dot += pr[t2] * d[t2];
            #pragma omp simd
            for (int t2 = 0; t2 <= t; t2++) d[t2] = pr[t2] * (d[t2] - dot) * scale;
            for (int t2 = t + 1; t2 < T; t2++) d[t2] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, scratch, T, k, C3, 1.0f, dq, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, scratch, T, q, C3, 1.0f, dk, C3);
    }
}

/* GELU, tanh approximation (Hendrycks & Gimpel, arXiv 1606.08415, section 2), as GPT-2 uses:
 * y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). out, inp (n). */
#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
static void gelu_forward(float *out, const float *inp, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_f32(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

/* In place: dinout (n) holds d(out) on entry and d(inp) on exit; inp (n) the GELU input from forward. */
static void gelu_backward_inplace(float *dinout, const float *inp, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanh_f32(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinout[i] *= grad;
    }
}

/* out = a + b; out, a, b (n). The backward of a residual is the identity on both inputs, so there is no
 * residual_backward: backward reuses one gradient buffer for the residual stream (see gpt2_backward). */
static void residual_forward(float *out, const float *a, const float *b, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* Fused softmax + cross-entropy over the V real columns of each row (padded columns V..Vp-1 are ignored).
 * logits (N,Vp), targets (N) in [0,V); writes lse (N) = log sum exp(logits[n, :V]) for backward and returns the
 * mean loss over N rows, summed in double so the result does not depend on the thread count. */
static float crossentropy_forward(float *lse, const float *logits, const int *targets, int N, int V, int Vp) {
    double loss = 0.0;
    #pragma omp parallel for schedule(static) reduction(+ : loss)
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * Vp;
        float maxv = -INFINITY;
        #pragma omp simd reduction(max : maxv)
        for (int i = 0; i < V; i++) maxv = row[i] > maxv ? row[i] : maxv;
        float sum = 0.0f;
        #pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; i++) sum += exp_f32(row[i] - maxv);
        lse[n] = maxv + logf(sum);
        loss += (double)(lse[n] - row[targets[n]]);
    }
    return (float)(loss / N);
}

/* Backward of crossentropy_forward for loss_scale * mean loss, IN PLACE: on entry buf (N,Vp) holds the logits,
 * on exit d(loss)/d(logits) = scale/N * (softmax - onehot(target)), with 0 in the padded columns. Overwriting
 * the logits saves a (N,Vp) buffer, the largest activation of a small model. */
static void crossentropy_backward_inplace(float *buf, const float *lse, const int *targets, int N, int V, int Vp,
                                          float loss_scale) {
    float s = loss_scale / (float)N;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = buf + (size_t)n * Vp;
        float l = lse[n];
        #pragma omp simd
        for (int i = 0; i < V; i++) row[i] = s * exp_f32(row[i] - l);
        for (int i = V; i < Vp; i++) row[i] = 0.0f;
        row[targets[n]] -= s;
    }
}

/* ----------------------------------------------------------------------------------------------------------
 * The model.
 * ---------------------------------------------------------------------------------------------------------- */

typedef struct {
    int L, C, NH, maxT, V, Vp;
} GPT2Config;

/* Pointers into the flat parameter (or gradient) buffer, in llm.c's tensor-major order. */
typedef struct {
    float *wte;      /* (Vp, C) token embedding, also the lm_head (weight tying) */
    float *wpe;      /* (maxT, C) */
    float *ln1w;     /* (L, C) */
    float *ln1b;     /* (L, C) */
    float *qkvw;     /* (L, 3C, C) */
    float *qkvb;     /* (L, 3C) */
    float *attprojw; /* (L, C, C) */
    float *attprojb; /* (L, C) */
    float *ln2w;     /* (L, C) */
    float *ln2b;     /* (L, C) */
    float *fcw;      /* (L, 4C, C) */
    float *fcb;      /* (L, 4C) */
    float *fcprojw;  /* (L, C, 4C) */
    float *fcprojb;  /* (L, C) */
    float *lnfw;     /* (C) */
    float *lnfb;     /* (C) */
} GPT2Tensors;

/* Activations of one forward pass, sized for Bmax x Tmax; per-layer strides use the maximum sizes so a
 * smaller forward (sampling) uses a prefix of each layer's block. */
typedef struct {
    float *encoded;   /* (B, T, C) */
    float *ln1;       /* (L, B, T, C) */
    float *ln1_mean;  /* (L, B, T) */
    float *ln1_rstd;  /* (L, B, T) */
    float *qkv;       /* (L, B, T, 3C) */
    float *atty;      /* (L, B, T, C) */
    float *att;       /* (L, B, NH, T, T) softmax probabilities */
    float *attproj;   /* (L, B, T, C) */
    float *residual2; /* (L, B, T, C) */
    float *ln2;       /* (L, B, T, C) */
    float *ln2_mean;  /* (L, B, T) */
    float *ln2_rstd;  /* (L, B, T) */
    float *fch;       /* (L, B, T, 4C) */
    float *fch_gelu;  /* (L, B, T, 4C) */
    float *fcproj;    /* (L, B, T, C) */
    float *residual3; /* (L, B, T, C) */
    float *lnf;       /* (B, T, C) */
    float *lnf_mean;  /* (B, T) */
    float *lnf_rstd;  /* (B, T) */
    float *logits;    /* (B, T, Vp); overwritten by d(loss)/d(logits) in backward */
    float *lse;       /* (B, T) log-sum-exp of each logits row */
    /* backward scratch, reused by every layer (a layer's activation gradients are dead once it is done) */
    float *dresidual; /* (B, T, C) gradient of the residual stream */
    float *dbuf_c;    /* (B, T, C) dln1 / datty / dln2 / dlnf */
    float *dbuf_4c;   /* (B, T, 4C) dqkv (first 3C) / dfch */
    float *ln_scratch;/* (nthreads, 2, C) layernorm_backward partial sums */
    float *att_scratch;/* (nthreads, Tmax, Tmax) attention_backward: each thread's dP / dS of one (b, h) */
} GPT2Acts;

typedef struct {
    Model base; /* first, so a Model* is a GPT2* */
    GPT2Config cfg;
    GPT2Tensors p, g;
    GPT2Acts a;
    float *acts_memory;
    int Bmax, Tmax;
    size_t att_max;   /* floats in one layer's att block: Bmax * NH * Tmax * Tmax */
    int nthreads;
    int B, T;         /* shape of the last forward */
    int *inputs, *targets; /* (Bmax*Tmax) copies from the last forward */
    int have_targets;
} GPT2;

/* Builds the parameter table in llm.c's tensor-major memory order, one entry per (tensor, layer).
 * Buckets: layer l -> L-1-l (backward finishes the last layer first), wte/wpe/lnf -> L (finished last). */
static void gpt2_build_table(ParamTable *t, const GPT2Config *c) {
    size_t L = c->L, C = c->C;
    int last = c->L; /* bucket of the embeddings and final norm */
    memset(t, 0, sizeof *t);
    param_table_add(t, "wte", -1, last, 1, 2, (size_t[]){(size_t)c->Vp, C});
    param_table_add(t, "wpe", -1, last, 1, 2, (size_t[]){(size_t)c->maxT, C});
    struct { const char *name; int decay, ndim; size_t d0, d1; } per_layer[] = {
        {"ln1w", 0, 1, C, 0},         {"ln1b", 0, 1, C, 0},      {"qkvw", 1, 2, 3 * C, C},
        {"qkvb", 0, 1, 3 * C, 0},     {"attprojw", 1, 2, C, C},  {"attprojb", 0, 1, C, 0},
        {"ln2w", 0, 1, C, 0},         {"ln2b", 0, 1, C, 0},      {"fcw", 1, 2, 4 * C, C},
        {"fcb", 0, 1, 4 * C, 0},      {"fcprojw", 1, 2, C, 4 * C}, {"fcprojb", 0, 1, C, 0},
    };
    for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++)
        for (size_t l = 0; l < L; l++)
            param_table_add(t, per_layer[k].name, (int)l, (int)(L - 1 - l), per_layer[k].decay, per_layer[k].ndim,
                            (size_t[]){per_layer[k].d0, per_layer[k].d1});
    param_table_add(t, "lnfw", -1, last, 0, 1, (size_t[]){C});
    param_table_add(t, "lnfb", -1, last, 0, 1, (size_t[]){C});
}

/* Points the 16 tensor pointers into `base` using the table (layer 0's entry starts each (L, ...) block). */
static void gpt2_point_tensors(GPT2Tensors *p, float *base, const ParamTable *t) {
    const char *names[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                             "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    float **ptrs[16] = {&p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
                        &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    for (int i = 0; i < 16; i++) {
        int layer = (i >= 2 && i < 14) ? 0 : -1;
        int idx = param_table_find(t, names[i], layer);
        if (idx < 0) fatal("internal: tensor %s missing from the GPT-2 table", names[i]);
        *ptrs[i] = base + t->slices[idx].offset;
    }
}

/* GPT-2 initialisation from `seed` (Radford et al. 2019, section 2.3, as in llm.c / nanoGPT): linear weights and
 * wte N(0, 0.02); attprojw and fcprojw (the projections into the residual stream) N(0, 0.02/sqrt(2L)); wpe
 * N(0, 0.01) like llm.c; biases 0; LayerNorm gains 1. The padded rows V..Vp-1 of wte are 0 so they never change
 * a logit. Slice i draws from its own stream seeded rng_mix(seed, i), so slices initialise in parallel and the
 * result is independent of the thread count. */
static void gpt2_init_params(GPT2 *m, uint64_t seed) {
    const ParamTable *t = &m->base.table;
    const GPT2Config *c = &m->cfg;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < t->n; i++) {
        const ParamSlice *s = &t->slices[i];
        float *w = m->base.params + s->offset;
        Rng rng;
        rng_seed(&rng, rng_mix(seed, (uint64_t)i));
        if (!s->decay) {
            float v = (strcmp(s->name + strlen(s->name) - 1, "w") == 0) ? 1.0f : 0.0f; /* ln*w gains, biases */
            for (size_t k = 0; k < s->numel; k++) w[k] = v;
        } else if (strcmp(s->name, "wte") == 0) {
            rng_normal(&rng, w, (size_t)c->V * c->C, 0.0f, 0.02f);
            memset(w + (size_t)c->V * c->C, 0, (size_t)(c->Vp - c->V) * c->C * sizeof(float));
        } else if (strcmp(s->name, "wpe") == 0) {
            rng_normal(&rng, w, s->numel, 0.0f, 0.01f);
        } else {
            int resid = strcmp(s->name, "attprojw") == 0 || strcmp(s->name, "fcprojw") == 0;
            rng_normal(&rng, w, s->numel, 0.0f, resid ? 0.02f / sqrtf(2.0f * c->L) : 0.02f);
        }
    }
}

/* Carves the activations for Bmax x Tmax out of one allocation. */
/* Floats of the activations for Bmax x Tmax (sizes[] as gpt2_alloc_acts carves them, if non-NULL, 26 entries). */
static size_t gpt2_act_floats(const GPT2Config *c, int Bmax, int Tmax, int nthreads, size_t *sizes) {
    size_t L = c->L, C = c->C, N = (size_t)Bmax * Tmax, NH = c->NH, Vp = c->Vp;
    size_t att_max = (size_t)Bmax * NH * Tmax * Tmax;
    size_t s[] = {N * C, L * N * C, L * N, L * N, L * N * 3 * C, L * N * C, L * att_max,
                  L * N * C, L * N * C, L * N * C, L * N, L * N, L * N * 4 * C, L * N * 4 * C,
                  L * N * C, L * N * C, N * C, N, N, N * Vp, N,
                  N * C, N * C, N * 4 * C, (size_t)nthreads * 2 * C, (size_t)nthreads * Tmax * Tmax};
    size_t total = 0;
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        total += s[i];
        if (sizes) sizes[i] = s[i];
    }
    return total;
}

static int gpt2_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static void gpt2_alloc_acts(GPT2 *m, int Bmax, int Tmax) {
    const GPT2Config *c = &m->cfg;
    size_t N = (size_t)Bmax * Tmax;
    m->Bmax = Bmax;
    m->Tmax = Tmax;
    m->att_max = (size_t)Bmax * c->NH * Tmax * Tmax;
    m->nthreads = gpt2_threads();
    GPT2Acts *a = &m->a;
    float **ptrs[] = {&a->encoded, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty, &a->att,
                      &a->attproj, &a->residual2, &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu,
                      &a->fcproj, &a->residual3, &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->logits, &a->lse,
                      &a->dresidual, &a->dbuf_c, &a->dbuf_4c, &a->ln_scratch, &a->att_scratch};
    size_t sizes[sizeof ptrs / sizeof ptrs[0]];
    size_t n = sizeof sizes / sizeof sizes[0], total = gpt2_act_floats(c, Bmax, Tmax, m->nthreads, sizes);
    m->acts_memory = xmalloc(total * sizeof(float), "GPT-2 activations (reduce --batch or --seq)");
    float *p = m->acts_memory;
    for (size_t i = 0; i < n; i++) {
        *ptrs[i] = p;
        p += sizes[i];
    }
    m->inputs = xmalloc(N * sizeof(int), "GPT-2 inputs");
    m->targets = xmalloc(N * sizeof(int), "GPT-2 targets");
}

/* Forward pass (see Model.forward in common/model.h). inputs, targets (B,T) token ids in [0,V); targets may be
 * NULL. Returns the mean cross-entropy, or 0 without targets. fatal() if B x T does not fit the activations or
 * a token id is out of range. */
static float gpt2_forward(Model *model, const int *inputs, const int *targets, int B, int T) {
    GPT2 *m = (GPT2 *)model;
    const GPT2Config *c = &m->cfg;
    int L = c->L, C = c->C, NH = c->NH, V = c->V, Vp = c->Vp;
    if (B < 1 || T < 1 || T > c->maxT || (size_t)B * T > (size_t)m->Bmax * m->Tmax ||
        (size_t)B * NH * T * T > m->att_max)
        fatal("forward with B=%d T=%d does not fit this model (sized for B=%d T=%d, maximum sequence length %d); "
              "use a smaller batch or sequence", B, T, m->Bmax, m->Tmax, c->maxT);
    size_t N = (size_t)B * T, LN = (size_t)m->Bmax * m->Tmax; /* LN: per-layer stride in rows */
    for (size_t i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V)
            fatal("input token %d at position %zu is outside the vocabulary [0, %d); the data does not match the "
                  "GPT-2 tokenizer", inputs[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            fatal("target token %d at position %zu is outside the vocabulary [0, %d); the data does not match the "
                  "GPT-2 tokenizer", targets[i], i, V);
    }
    memcpy(m->inputs, inputs, N * sizeof(int));
    if (targets) memcpy(m->targets, targets, N * sizeof(int));
    m->B = B;
    m->T = T;
    m->have_targets = targets != NULL;

    GPT2Tensors *p = &m->p;
    GPT2Acts *a = &m->a;
    encoder_forward(a->encoded, inputs, p->wte, p->wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * LN * C;
        /* this layer's weights */
        const float *ln1w = p->ln1w + (size_t)l * C, *ln1b = p->ln1b + (size_t)l * C;
        const float *qkvw = p->qkvw + (size_t)l * 3 * C * C, *qkvb = p->qkvb + (size_t)l * 3 * C;
        const float *attprojw = p->attprojw + (size_t)l * C * C, *attprojb = p->attprojb + (size_t)l * C;
        const float *ln2w = p->ln2w + (size_t)l * C, *ln2b = p->ln2b + (size_t)l * C;
        const float *fcw = p->fcw + (size_t)l * 4 * C * C, *fcb = p->fcb + (size_t)l * 4 * C;
        const float *fcprojw = p->fcprojw + (size_t)l * C * 4 * C, *fcprojb = p->fcprojb + (size_t)l * C;
        /* this layer's activations */
        float *ln1 = a->ln1 + (size_t)l * LN * C, *ln1_mean = a->ln1_mean + (size_t)l * LN;
        float *ln1_rstd = a->ln1_rstd + (size_t)l * LN, *qkv = a->qkv + (size_t)l * LN * 3 * C;
        float *atty = a->atty + (size_t)l * LN * C, *att = a->att + (size_t)l * m->att_max;
        float *attproj = a->attproj + (size_t)l * LN * C, *residual2 = a->residual2 + (size_t)l * LN * C;
        float *ln2 = a->ln2 + (size_t)l * LN * C, *ln2_mean = a->ln2_mean + (size_t)l * LN;
        float *ln2_rstd = a->ln2_rstd + (size_t)l * LN, *fch = a->fch + (size_t)l * LN * 4 * C;
        float *fch_gelu = a->fch_gelu + (size_t)l * LN * 4 * C, *fcproj = a->fcproj + (size_t)l * LN * C;
        float *residual3 = a->residual3 + (size_t)l * LN * C;

        layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, ln1w, ln1b, (int)N, C);
        matmul_forward(qkv, ln1, qkvw, qkvb, (int)N, C, 3 * C);
        attention_forward(atty, att, qkv, B, T, C, NH);
        matmul_forward(attproj, atty, attprojw, attprojb, (int)N, C, C);
        residual_forward(residual2, residual, attproj, N * C);
        layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, ln2w, ln2b, (int)N, C);
        matmul_forward(fch, ln2, fcw, fcb, (int)N, C, 4 * C);
        gelu_forward(fch_gelu, fch, N * 4 * C);
        matmul_forward(fcproj, fch_gelu, fcprojw, fcprojb, (int)N, 4 * C, C);
        residual_forward(residual3, residual2, fcproj, N * C);
    }
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (size_t)(L - 1) * LN * C, p->lnfw, p->lnfb,
                      (int)N, C);
    matmul_forward(a->logits, a->lnf, p->wte, NULL, (int)N, C, Vp); /* lm_head tied to wte */
    if (!targets) return 0.0f;
    return crossentropy_forward(a->lse, a->logits, targets, (int)N, V, Vp);
}

/* Backward pass (see Model.backward in common/model.h): ADDS d(loss_scale * loss)/d(params) into grads and
 * calls on_bucket(ctx, b) as bucket b becomes final: layer L-1 (bucket 0) first, ..., layer 0 (bucket L-1), then
 * the embeddings and final norm (bucket L). Consumes the logits (they become their gradient). fatal() if the
 * last forward had no targets. */
static void gpt2_backward(Model *model, float loss_scale, BucketReadyFn on_bucket, void *ctx) {
    GPT2 *m = (GPT2 *)model;
    if (!m->have_targets) fatal("internal: backward called after a forward without targets");
    m->have_targets = 0; /* the logits are about to be overwritten: a second backward would be wrong */
    const GPT2Config *c = &m->cfg;
    int L = c->L, C = c->C, NH = c->NH, V = c->V, Vp = c->Vp, B = m->B, T = m->T;
    size_t N = (size_t)B * T, LN = (size_t)m->Bmax * m->Tmax;
    GPT2Tensors *p = &m->p, *g = &m->g;
    GPT2Acts *a = &m->a;
    float *dres = a->dresidual, *dc = a->dbuf_c, *d4c = a->dbuf_4c;

    /* loss -> logits -> lnf -> last residual */
    float *dlogits = a->logits;
    crossentropy_backward_inplace(dlogits, a->lse, m->targets, (int)N, V, Vp, loss_scale);
    memset(dc, 0, N * C * sizeof(float));
    matmul_backward(dc, g->wte, NULL, dlogits, a->lnf, p->wte, (int)N, C, Vp);
    memset(dres, 0, N * C * sizeof(float));
    layernorm_backward(dres, g->lnfw, g->lnfb, dc, a->residual3 + (size_t)(L - 1) * LN * C, p->lnfw, a->lnf_mean,
                       a->lnf_rstd, (int)N, C, a->ln_scratch, m->nthreads);

    for (int l = L - 1; l >= 0; l--) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * LN * C;
        const float *ln1w = p->ln1w + (size_t)l * C;
        const float *qkvw = p->qkvw + (size_t)l * 3 * C * C;
        const float *attprojw = p->attprojw + (size_t)l * C * C;
        const float *ln2w = p->ln2w + (size_t)l * C;
        const float *fcw = p->fcw + (size_t)l * 4 * C * C;
        const float *fcprojw = p->fcprojw + (size_t)l * C * 4 * C;
        float *dln1w = g->ln1w + (size_t)l * C, *dln1b = g->ln1b + (size_t)l * C;
        float *dqkvw = g->qkvw + (size_t)l * 3 * C * C, *dqkvb = g->qkvb + (size_t)l * 3 * C;
        float *dattprojw = g->attprojw + (size_t)l * C * C, *dattprojb = g->attprojb + (size_t)l * C;
        float *dln2w = g->ln2w + (size_t)l * C, *dln2b = g->ln2b + (size_t)l * C;
        float *dfcw = g->fcw + (size_t)l * 4 * C * C, *dfcb = g->fcb + (size_t)l * 4 * C;
        float *dfcprojw = g->fcprojw + (size_t)l * C * 4 * C, *dfcprojb = g->fcprojb + (size_t)l * C;
        const float *ln1 = a->ln1 + (size_t)l * LN * C, *ln1_mean = a->ln1_mean + (size_t)l * LN;
        const float *ln1_rstd = a->ln1_rstd + (size_t)l * LN, *qkv = a->qkv + (size_t)l * LN * 3 * C;
        const float *atty = a->atty + (size_t)l * LN * C, *att = a->att + (size_t)l * m->att_max;
        const float *residual2 = a->residual2 + (size_t)l * LN * C;
        const float *ln2 = a->ln2 + (size_t)l * LN * C, *ln2_mean = a->ln2_mean + (size_t)l * LN;
        const float *ln2_rstd = a->ln2_rstd + (size_t)l * LN, *fch = a->fch + (size_t)l * LN * 4 * C;
        const float *fch_gelu = a->fch_gelu + (size_t)l * LN * 4 * C;

        /* dres is d(residual3); residual3 = residual2 + fcproj, so d(fcproj) = d(residual2) = dres */
        memset(d4c, 0, N * 4 * C * sizeof(float));
        matmul_backward(d4c, dfcprojw, dfcprojb, dres, fch_gelu, fcprojw, (int)N, 4 * C, C);
        gelu_backward_inplace(d4c, fch, N * 4 * C);
        memset(dc, 0, N * C * sizeof(float));
        matmul_backward(dc, dfcw, dfcb, d4c, ln2, fcw, (int)N, C, 4 * C);
        layernorm_backward(dres, dln2w, dln2b, dc, residual2, ln2w, ln2_mean, ln2_rstd, (int)N, C, a->ln_scratch,
                           m->nthreads);
        /* dres is now d(residual2); residual2 = residual + attproj */
        memset(dc, 0, N * C * sizeof(float));
        matmul_backward(dc, dattprojw, dattprojb, dres, atty, attprojw, (int)N, C, C);
        float *dqkv = d4c; /* (B, T, 3C) in the first 3/4 of the 4C buffer */
        memset(dqkv, 0, N * 3 * C * sizeof(float));
        attention_backward(dqkv, dc, att, qkv, B, T, C, NH, a->att_scratch, (size_t)m->Tmax * m->Tmax, m->nthreads);
        memset(dc, 0, N * C * sizeof(float));
        matmul_backward(dc, dqkvw, dqkvb, dqkv, ln1, qkvw, (int)N, C, 3 * C);
        layernorm_backward(dres, dln1w, dln1b, dc, residual, ln1w, ln1_mean, ln1_rstd, (int)N, C, a->ln_scratch,
                           m->nthreads);
        /* dres is now d(this layer's input) */
        if (on_bucket) on_bucket(ctx, L - 1 - l);
    }
    encoder_backward(g->wte, g->wpe, dres, m->inputs, B, T, C);
    if (on_bucket) on_bucket(ctx, L);
}

static const float *gpt2_logits(const Model *model) { return ((const GPT2 *)model)->a.logits; }

static void gpt2_free(Model *model) {
    GPT2 *m = (GPT2 *)model;
    if (!m) return;
    free(m->base.params);
    free(m->base.grads);
    free(m->acts_memory);
    free(m->inputs);
    free(m->targets);
    param_table_free(&m->base.table);
    free(m);
}

/* ----------------------------------------------------------------------------------------------------------
 * Model files: llm.c's layout. Header of 256 int32: [magic 20240326, version, maxT, V, L, NH, C, Vp], zeros;
 * then every parameter in table order, fp32 (version 3) or bf16 (version 5, upper 16 bits of the fp32).
 * ---------------------------------------------------------------------------------------------------------- */

/* Writes the model file (version 3, fp32) atomically (write_file_atomic: a new temp file, fsync, rename). fatal() on I/O errors
 * naming the path; on failure the temporary file is removed and `path` is untouched. */
static void gpt2_save(const Model *model, const char *path) {
    const GPT2 *m = (const GPT2 *)model;
    const GPT2Config *c = &m->cfg;
    int32_t header[GPT2_HEADER_INTS] = {GPT2_MAGIC, GPT2_VERSION_FP32, c->maxT, c->V, c->L, c->NH, c->C, c->Vp};
    write_file_atomic(path, header, sizeof header, model->params, model->table.total * sizeof(float));
}

static Model *gpt2_new(const GPT2Config *cfg, int B, int T);

/* Reads a llm.c GPT-2 model file (version 3 fp32 or 5 bf16). Checks magic, version, hyper-parameters and the
 * exact file length; fatal() naming the file and the fix. Activations sized for B x T. */
/* Reads and checks a model file's header (magic, version, hyper-parameters, the exact file length); fatal() naming
 * the file and the fix. *elem: bytes per stored parameter (4 fp32, 2 bf16). The file is left open after the
 * header in *fp (NULL: closed). */
static GPT2Config gpt2_read_config(const char *path, int T, size_t *elem, FILE **fp) {
    FILE *f = xfopen(path, "rb", "Pass an existing GPT-2 model file (llm.c layout) with --init");
    int32_t h[GPT2_HEADER_INTS];
    int64_t size = file_size(path);
    if (size < (int64_t)sizeof h)
        fatal("%s: %lld bytes, shorter than the 1024-byte model header; the file is truncated or not a model file",
              path, (long long)size);
    xfread(h, sizeof h, f, path, "the model header");
    if (h[0] != GPT2_MAGIC)
        fatal("%s: bad magic %d (expected %d); not a llm.c GPT-2 model file (Llama files go to train_llama)", path,
              h[0], GPT2_MAGIC);
    if (h[1] != GPT2_VERSION_FP32 && h[1] != GPT2_VERSION_BF16)
        fatal("%s: unsupported model file version %d (expected 3 fp32 or 5 bf16); re-export it with llm.c's "
              "train_gpt2.py", path, h[1]);
    GPT2Config cfg = {.maxT = h[2], .V = h[3], .L = h[4], .NH = h[5], .C = h[6], .Vp = h[7]};
    if (cfg.maxT < 1 || cfg.V < 1 || cfg.L < 1 || cfg.NH < 1 || cfg.C < 1 || cfg.C % cfg.NH != 0 ||
        cfg.Vp < cfg.V || cfg.maxT > 1 << 20 || cfg.C > 1 << 16 || cfg.L > 1024 || cfg.Vp > 1 << 24)
        fatal("%s: implausible header (maxT=%d V=%d L=%d NH=%d C=%d Vp=%d); the file is corrupt", path, cfg.maxT,
              cfg.V, cfg.L, cfg.NH, cfg.C, cfg.Vp);
    if (T > cfg.maxT)
        fatal("--seq %d exceeds the model's maximum sequence length %d (from %s); use --seq <= %d", T, cfg.maxT,
              path, cfg.maxT);
    /* check the length before allocating anything: a corrupt header must not turn into a huge allocation */
    ParamTable table;
    gpt2_build_table(&table, &cfg);
    *elem = h[1] == GPT2_VERSION_FP32 ? 4 : 2;
    int64_t want = (int64_t)sizeof h + (int64_t)(table.total * *elem);
    param_table_free(&table);
    if (size != want)
        fatal("%s: %lld bytes but a version %d model with these hyper-parameters has %lld; the file is truncated "
              "or corrupt, re-export it", path, (long long)size, h[1], (long long)want);
    if (fp) *fp = f;
    else fclose(f);
    return cfg;
}

static Model *gpt2_load(const char *path, int B, int T) {
    FILE *f;
    size_t elem;
    GPT2Config cfg = gpt2_read_config(path, T, &elem, &f);
    Model *model = gpt2_new(&cfg, B, T);
    if (elem == 4) {
        xfread(model->params, model->table.total * 4, f, path, "the parameters");
    } else {
        uint16_t *tmp = xmalloc(model->table.total * 2, "bf16 parameters");
        xfread(tmp, model->table.total * 2, f, path, "the bf16 parameters");
        uint32_t *dst = (uint32_t *)model->params;
        for (size_t i = 0; i < model->table.total; i++) dst[i] = (uint32_t)tmp[i] << 16;
        free(tmp);
    }
    fclose(f);
    return model;
}

/* ----------------------------------------------------------------------------------------------------------
 * The family: model specs, creation, FLOPs.
 * ---------------------------------------------------------------------------------------------------------- */

/* Training FLOPs per token at T = maxT, for MFU: 6 * (non-embedding parameters + lm_head Vp*C) for the matmuls
 * forward and backward (Kaplan et al., arXiv 2001.08361, section 2.1: 2N forward, 4N backward), plus
 * 12 * L * C * maxT for attention scores and the weighted sum of values (PaLM, Chowdhery et al., arXiv
 * 2204.02311, appendix B; full T x T, not halved for the causal mask). wpe and the embedding lookup do no
 * matmul work and are not counted. */
static double gpt2_flops_per_token(const GPT2Config *c, const ParamTable *t) {
    double non_embedding = (double)t->total - (double)c->Vp * c->C - (double)c->maxT * c->C;
    return 6.0 * (non_embedding + (double)c->Vp * c->C) + 12.0 * c->L * c->C * (double)c->maxT;
}

/* Allocates a model of this configuration with parameters and gradients zeroed, activations for B x T. */
static Model *gpt2_new(const GPT2Config *cfg, int B, int T) {
    GPT2 *m = xcalloc(1, sizeof *m, "GPT-2 model");
    m->cfg = *cfg;
    Model *b = &m->base;
    b->family = "gpt2";
    snprintf(b->desc, sizeof b->desc, "GPT-2 L=%d C=%d NH=%d maxT=%d V=%d", cfg->L, cfg->C, cfg->NH, cfg->maxT,
             cfg->V);
    gpt2_build_table(&b->table, cfg);
    b->params = xcalloc(b->table.total, sizeof(float), "GPT-2 parameters");
    b->grads = xcalloc(b->table.total, sizeof(float), "GPT-2 gradients");
    gpt2_point_tensors(&m->p, b->params, &b->table);
    gpt2_point_tensors(&m->g, b->grads, &b->table);
    b->vocab_size = cfg->V;
    b->padded_vocab_size = cfg->Vp;
    b->tokenizer = tokenizer_kind_for_vocab(cfg->V); /* V 4096: bpe4k; NULL: GPT-2's */
    b->max_seq_len = cfg->maxT;
    b->num_layers = cfg->L;
    b->channels = cfg->C;
    b->num_heads = cfg->NH;
    b->flops_per_token = gpt2_flops_per_token(cfg, &b->table);
    b->forward = gpt2_forward;
    b->backward = gpt2_backward;
    b->logits = gpt2_logits;
    b->save = gpt2_save;
    b->free = gpt2_free;
    gpt2_alloc_acts(m, B, T);
    return b;
}

#define GPT2_MODEL_HELP                                                                                          \
    "GPT-2: d6 (C=384, NH=6, 30M), d12 (124M), d24 (350M), d36 (774M), d48 (1558M), or "                        \
    "d<L>c<C>[h<NH>][t<maxT>][v<V>] e.g. d4c128h4t256 (NH defaults to C/64, maxT to 1024, V to GPT-2's 50257; "     \
    "v4096 is the bpe4k tokenizer's vocabulary)"

/* Parses a spec: the depths of llm.c's train_gpt2.cu (d6 384/6, d12 768/12, d24 1024/16, d36 1280/20, d48
 * 1600/25; C = 64*NH) or "d<L>c<C>[h<NH>][t<maxT>][v<V>]". V = 50257 (Vp = 50304) unless given; Vp is V rounded
 * up to a multiple of 128. fatal() naming --model on error. */
static GPT2Config gpt2_parse_spec(const char *spec) {
    GPT2Config c = {.maxT = 1024, .V = 50257, .Vp = 50304};
    const char *s = spec;
    long vals[5] = {0, 0, 0, 0, 0}; /* d, c, h, t, v */
    const char *keys = "dchtv";
    int k = 0, ok = spec && *s == 'd';
    while (ok && *s) {
        const char *kp = strchr(keys + k, *s);
        if (!kp || !*kp) { ok = 0; break; }
        k = (int)(kp - keys);
        char *end;
        errno = 0;
        long v = strtol(s + 1, &end, 10);
        if (end == s + 1 || v < 1 || v > 1 << 20 || errno) { ok = 0; break; }
        vals[k++] = v;
        s = end;
    }
    if (!ok) fatal_usage("--model '%s' is not a GPT-2 spec; use %s", spec ? spec : "", GPT2_MODEL_HELP);
    c.L = (int)vals[0];
    if (vals[1] == 0) {
        static const int table[][3] = {{6, 384, 6}, {12, 768, 12}, {24, 1024, 16}, {36, 1280, 20}, {48, 1600, 25}};
        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
            if (table[i][0] == c.L) { c.C = table[i][1]; c.NH = table[i][2]; }
        if (c.C == 0)
            fatal_usage("--model '%s': no standard GPT-2 of depth %d; give the width, e.g. d%dc256 (%s)", spec, c.L,
                        c.L, GPT2_MODEL_HELP);
        if (vals[2]) c.NH = (int)vals[2];
    } else {
        c.C = (int)vals[1];
        c.NH = vals[2] ? (int)vals[2] : c.C / 64;
        if (c.NH < 1)
            fatal_usage("--model '%s': C=%d is under 64, so give the number of heads, e.g. d%dc%dh2", spec, c.C, c.L,
                        c.C);
    }
    if (vals[3]) c.maxT = (int)vals[3];
    if (vals[4]) {
        if (vals[4] < 2)
            fatal_usage("--model '%s': a vocabulary of %ld tokens is too small (%s)", spec, vals[4], GPT2_MODEL_HELP);
        c.V = (int)vals[4];
        c.Vp = (c.V + 127) / 128 * 128;
    }
    if (c.C % c.NH != 0)
        fatal_usage("--model '%s': C=%d is not divisible by NH=%d heads; pick h so that C/h is whole", spec, c.C, c.NH);
    return c;
}

/* ModelFamily.create for GPT-2 (see common/model.h). With init_path the file's hyper-parameters are used and
 * spec is ignored. fatal() if T exceeds the model's maximum sequence length, with the fix. */
static Model *gpt2_create(const char *spec, const char *init_path, uint64_t seed, int B, int T) {
    if (B < 1 || T < 1) fatal("--batch %d / --seq %d must both be at least 1", B, T);
    if (init_path) return gpt2_load(init_path, B, T);
    GPT2Config c = gpt2_parse_spec(spec);
    if (T > c.maxT)
        fatal("--seq %d exceeds the model's maximum sequence length %d; use --seq <= %d", T, c.maxT, c.maxT);
    Model *m = gpt2_new(&c, B, T);
    gpt2_init_params((GPT2 *)m, seed);
    return m;
}

/* ModelFamily.memory_bytes for GPT-2: what gpt2_create allocates (parameters, gradients, activations for B x T),
 * from the spec or the model file's header, without allocating; the model's parameter count in *num_params and
 * its canonical spec (d<L>c<C>h<NH>t<maxT>v<V>, which gpt2_parse_spec reads back to the same model) in spec_out. */
static double gpt2_memory_bytes(const char *spec, const char *init_path, int B, int T, size_t *num_params,
                                char *spec_out, size_t cap) {
    size_t elem;
    GPT2Config c = init_path ? gpt2_read_config(init_path, T, &elem, NULL) : gpt2_parse_spec(spec);
    ParamTable table;
    gpt2_build_table(&table, &c);
    *num_params = table.total;
    param_table_free(&table);
    snprintf(spec_out, cap, "d%dc%dh%dt%dv%d", c.L, c.C, c.NH, c.maxT, c.V);
    return 4.0 * (2.0 * (double)*num_params + (double)gpt2_act_floats(&c, B, T, gpt2_threads(), NULL)) +
           8.0 * B * T;
}

const ModelFamily gpt2_family = {
    .family = "gpt2",
    .tokenizer = "gpt2",
    .default_model = "d4c128h4",
    .model_help = GPT2_MODEL_HELP,
    .create = gpt2_create,
    .memory_bytes = gpt2_memory_bytes,
};

#ifndef TESTING
#include "trainer/train.h"
int main(int argc, char **argv) { return train_main(argc, argv, &gpt2_family); }
#endif

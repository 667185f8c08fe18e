/*
 * train_llama.c - Llama on the CPU in fp32: the parameter table, forward and backward pass of every layer, model
 * files, and the ModelFamily the shared training loop (trainer/train.c) drives.
 *
 * The architecture is Llama 2 / Llama 3's (Touvron et al., arXiv 2302.13971 and 2307.09288): untied token
 * embedding and lm_head, pre-norm RMSNorm blocks, rotary position embeddings in the rotate-half layout of the
 * Hugging Face / Meta checkpoints, grouped-query attention, SwiGLU MLP, no biases. test/test_llama.c checks it
 * against PyTorch (dev/ref/llama_ref.py). It reads top to bottom like train_gpt.c: layers as
 * <layer>_forward / <layer>_backward pairs over raw pointers, then the model (table, memory, forward, backward),
 * then model files, then the family.
 * Not for: data, optimizer, logging, checkpoints of training state (common/, optim/), tokenizers (tokenizer/).
 *
 * Shapes: B batch, T sequence length, C channels, NH query heads, NKV key/value heads (NH % NKV == 0),
 * hd = C/NH head dimension, KVC = NKV*hd, F the SwiGLU hidden size, L layers, V vocabulary, Vp padded vocabulary
 * (multiple of 128), maxT the maximum sequence length, N = B*T rows.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

#define LLAMA_MAGIC 20261129
#define LLAMA_VERSION_FP32 3
#define LLAMA_HEADER_INTS 256

/* ----------------------------------------------------------------------------------------------------------
 * Layers. Forward functions overwrite their outputs; backward functions ADD into their input gradients and
 * parameter gradients, except where a name ends in _inplace.
 * ---------------------------------------------------------------------------------------------------------- */

/* Token embedding: out[b,t,:] = wte[inp[b,t],:]. Llama has no position embedding table (positions enter
 * through RoPE inside attention). out (N,C), inp (N) token ids in [0,V), wte (Vp,C). */
static void embedding_forward(float *out, const int *inp, const float *wte, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * C, wte + (size_t)inp[n] * C, (size_t)C * sizeof(float));
}

/* dwte (Vp,C) += scatter of dout (N,C). Serial because rows collide when a token repeats; O(N*C). */
static void embedding_backward(float *dwte, const float *dout, const int *inp, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
        float *dw = dwte + (size_t)inp[n] * C;
        for (int i = 0; i < C; i++) dw[i] += d[i];
    }
}

/* RMSNorm (Zhang & Sennrich, arXiv 1910.07467, eq. 4) with a gain and no bias, as Llama uses:
 * out = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps). out (N,C), rstd (N) saved for backward, inp (N,C),
 * weight (C). */
static void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                            float eps) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float ss = 0.0f;
        for (int i = 0; i < C; i++) ss += x[i] * x[i];
        float s = 1.0f / sqrtf(ss / C + eps);
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] = x[i] * s * weight[i];
        rstd[n] = s;
    }
}

/* dinp (N,C) += d/dx; dweight (C) +=. With xhat = x*rstd and dnorm = dout*weight:
 * dx = rstd * (dnorm - xhat * mean(dnorm * xhat)); dweight = sum over rows of dout * xhat. Each thread sums its
 * rows of dweight into a private (C) buffer and the buffers are added in thread order, so the result does not
 * depend on scheduling. scratch holds nthreads*C floats. */
static void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             const float *rstd, int N, int C, float *scratch, int nthreads) {
    #pragma omp parallel num_threads(nthreads)
    {
        int tid = 0, nt = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        float *dw = scratch + (size_t)tid * C;
        memset(dw, 0, (size_t)C * sizeof(float));
        int lo = (int)((int64_t)N * tid / nt), hi = (int)((int64_t)N * (tid + 1) / nt);
        for (int n = lo; n < hi; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float s = rstd[n];
            float dnorm_xhat_mean = 0.0f;
            for (int i = 0; i < C; i++) dnorm_xhat_mean += weight[i] * dy[i] * x[i] * s;
            dnorm_xhat_mean /= C;
            for (int i = 0; i < C; i++) {
                float xhat = x[i] * s;
                dw[i] += xhat * dy[i];
                dx[i] += s * (weight[i] * dy[i] - xhat * dnorm_xhat_mean);
            }
        }
        #pragma omp barrier
        #pragma omp for schedule(static)
        for (int i = 0; i < C; i++) {
            float sw = 0.0f;
            for (int k = 0; k < nt; k++) sw += scratch[(size_t)k * C + i];
            dweight[i] += sw;
        }
    }
}

/* Linear layer without bias: out = inp @ weight^T, weight stored (OC, C) row-major like PyTorch's nn.Linear.
 * out (N,OC), inp (N,C), weight (OC,C). */
static void matmul_forward(float *out, const float *inp, const float *weight, int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
}

/* Backward of matmul_forward: dinp (N,C) += dout @ weight; dweight (OC,C) += dout^T @ inp.
 * dout (N,OC), inp (N,C), weight (OC,C). */
static void matmul_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                            int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
}

/* The RoPE angle table (Su et al., "RoFormer", arXiv 2104.09864, eq. 15): for position t and pair j < hd/2,
 * angle = t * theta^(-2j/hd). cos_tab, sin_tab (maxT, hd/2), computed in double and rounded once. */
static void rope_table(float *cos_tab, float *sin_tab, int maxT, int hd, double theta) {
    int half = hd / 2;
    for (int t = 0; t < maxT; t++)
        for (int j = 0; j < half; j++) {
            double angle = (double)t * pow(theta, -2.0 * j / hd);
            cos_tab[(size_t)t * half + j] = (float)cos(angle);
            sin_tab[(size_t)t * half + j] = (float)sin(angle);
        }
}

/* Rotary position embedding IN PLACE, rotate-half layout (Hugging Face / Meta checkpoints): in each head vector
 * of hd entries, entry j and entry j + hd/2 form the pair (real, imaginary) rotated by the angle of (t, j):
 *   x'[j] = x[j] cos - x[j+hd/2] sin;  x'[j+hd/2] = x[j+hd/2] cos + x[j] sin.
 * x (B,T,nh*hd) with nh heads per row (NH for q, NKV for k); cos_tab, sin_tab (maxT, hd/2) from rope_table.
 * sign = +1 rotates forward; sign = -1 rotates back, which is the backward pass (the rotation is orthogonal,
 * so its transpose is its inverse): dx = R(-angle) dy. */
static void rope_inplace(float *x, const float *cos_tab, const float *sin_tab, int B, int T, int nh, int hd,
                         float sign) {
    int half = hd / 2;
    #pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float *c = cos_tab + (size_t)t * half, *s = sin_tab + (size_t)t * half;
        for (int h = 0; h < nh; h++) {
            float *v = x + ((size_t)bt * nh + h) * hd;
            for (int j = 0; j < half; j++) {
                float re = v[j], im = v[j + half], sn = sign * s[j];
                v[j] = re * c[j] - im * sn;
                v[j + half] = im * c[j] + re * sn;
            }
        }
    }
}

/* Causal grouped-query attention (Ainslie et al., arXiv 2305.13245): query head h reads key/value head
 * h / (NH/NKV), scores scaled by 1/sqrt(hd) (Vaswani et al., arXiv 1706.03762, eq. 1).
 * out (B,T,NH*hd) heads concatenated; att (B,NH,T,T) the softmax probabilities, only t2 <= t written (the rest is
 * never read); q (B,T,NH*hd), k, v (B,T,NKV*hd) after RoPE. One (b, h) pair per OpenMP iteration: each writes
 * disjoint rows of att and out. */
static void attention_forward(float *out, float *att, const float *q, const float *k, const float *v, int B, int T,
                              int NH, int NKV, int hd) {
    int C = NH * hd, KVC = NKV * hd, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)hd);
    #pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH, kvh = h / group;
        const float *kb = k + (size_t)b * T * KVC + kvh * hd, *vb = v + (size_t)b * T * KVC + kvh * hd;
        for (int t = 0; t < T; t++) {
            const float *qt = q + ((size_t)b * T + t) * C + h * hd;
            float *a = att + ((size_t)bh * T + t) * T;
            float maxv = -INFINITY;
            for (int t2 = 0; t2 <= t; t2++) {
                const float *kt = kb + (size_t)t2 * KVC;
                float s = 0.0f;
                #pragma omp simd reduction(+ : s)
                for (int i = 0; i < hd; i++) s += qt[i] * kt[i];
                s *= scale;
                a[t2] = s;
                if (s > maxv) maxv = s;
            }
            float sum = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                float e = expf(a[t2] - maxv);
                a[t2] = e;
                sum += e;
            }
            float inv = 1.0f / sum;
            float *o = out + ((size_t)b * T + t) * C + h * hd;
            for (int i = 0; i < hd; i++) o[i] = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                float p = a[t2] * inv;
                a[t2] = p;
                const float *vt = vb + (size_t)t2 * KVC;
                #pragma omp simd
                for (int i = 0; i < hd; i++) o[i] += p * vt[i];
            }
        }
    }
}

/* Backward of attention_forward: dq (B,T,NH*hd), dk, dv (B,T,NKV*hd) += gradients; dout (B,T,NH*hd); att, q, k, v
 * from forward. Row t of head h: datt = dout . v, dscore = att * (datt - sum(att * datt)) * scale (softmax
 * backward), then dq, dk, dv. The NH/NKV query heads of a group all add into the same dk, dv, so the OpenMP
 * work unit is a (b, kv head) pair that walks its query heads in order: no races, deterministic sums. */
static void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *att, const float *q,
                               const float *k, const float *v, int B, int T, int NH, int NKV, int hd) {
    int C = NH * hd, KVC = NKV * hd, group = NH / NKV;
    float scale = 1.0f / sqrtf((float)hd);
    #pragma omp parallel for schedule(static)
    for (int bkv = 0; bkv < B * NKV; bkv++) {
        int b = bkv / NKV, kvh = bkv % NKV;
        const float *kb = k + (size_t)b * T * KVC + kvh * hd, *vb = v + (size_t)b * T * KVC + kvh * hd;
        float *dkb = dk + (size_t)b * T * KVC + kvh * hd, *dvb = dv + (size_t)b * T * KVC + kvh * hd;
        float datt[T];
        for (int h = kvh * group; h < (kvh + 1) * group; h++) {
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *dy = dout + ((size_t)b * T + t) * C + h * hd;
                float dot = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *vt = vb + (size_t)t2 * KVC;
                    float *dvt = dvb + (size_t)t2 * KVC;
                    float s = 0.0f;
                    #pragma omp simd reduction(+ : s)
                    for (int i = 0; i < hd; i++) {
                        s += dy[i] * vt[i];
                        dvt[i] += a[t2] * dy[i];
                    }
                    datt[t2] = s;
                    dot += a[t2] * s;
                }
                const float *qt = q + ((size_t)b * T + t) * C + h * hd;
                float *dqt = dq + ((size_t)b * T + t) * C + h * hd;
                for (int t2 = 0; t2 <= t; t2++) {
                    float ds = a[t2] * (datt[t2] - dot) * scale;
                    const float *kt = kb + (size_t)t2 * KVC;
                    float *dkt = dkb + (size_t)t2 * KVC;
                    #pragma omp simd
                    for (int i = 0; i < hd; i++) {
                        dqt[i] += ds * kt[i];
                        dkt[i] += ds * qt[i];
                    }
                }
            }
        }
    }
}

/* SwiGLU (Shazeer, arXiv 2002.05202, eq. 6): out = silu(gate) * up, silu(x) = x * sigmoid(x).
 * out, gate, up (n) where gate = x @ w1^T, up = x @ w3^T. */
static void swiglu_forward(float *out, const float *gate, const float *up, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* Backward of swiglu_forward, IN PLACE: on entry dgate (n) holds d(out); on exit dgate = d(gate) and
 * dup (n) = d(up) (overwritten). d silu(g)/dg = sig(g) * (1 + g * (1 - sig(g))). gate, up (n) from forward. */
static void swiglu_backward_inplace(float *dgate, float *dup, const float *gate, const float *up, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], d = dgate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        dup[i] = d * g * sig;
        dgate[i] = d * up[i] * sig * (1.0f + g * (1.0f - sig));
    }
}

/* out = a + b; out, a, b (n). The backward of a residual is the identity on both inputs, so there is no
 * residual_backward: backward keeps one gradient buffer for the residual stream (see llama_backward). */
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
        for (int i = 0; i < V; i++) maxv = row[i] > maxv ? row[i] : maxv;
        float sum = 0.0f;
        for (int i = 0; i < V; i++) sum += expf(row[i] - maxv);
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
        for (int i = 0; i < V; i++) row[i] = s * expf(row[i] - l);
        for (int i = V; i < Vp; i++) row[i] = 0.0f;
        row[targets[n]] -= s;
    }
}

/* ----------------------------------------------------------------------------------------------------------
 * The model.
 * ---------------------------------------------------------------------------------------------------------- */

typedef struct {
    int L, C, NH, NKV, F, V, Vp, maxT;
    float rope_theta, norm_eps;
} LlamaConfig;

/* Pointers into the flat parameter (or gradient) buffer. Memory order (tensor-major, the model file's order):
 * wte, then all layers' attn_norm, then all layers' wq, wk, wv, wo, ffn_norm, w1, w3, w2, then norm_f, lm_head.
 * Weight names follow Meta's Llama code (w1 gate, w3 up, w2 down); linear weights are (out, in) like nn.Linear. */
typedef struct {
    float *wte;       /* (Vp, C) token embedding (not tied to lm_head) */
    float *attn_norm; /* (L, C) RMSNorm gain before attention */
    float *wq;        /* (L, C, C) = (L, NH*hd, C) */
    float *wk;        /* (L, KVC, C) */
    float *wv;        /* (L, KVC, C) */
    float *wo;        /* (L, C, C) attention output projection */
    float *ffn_norm;  /* (L, C) RMSNorm gain before the MLP */
    float *w1;        /* (L, F, C) gate */
    float *w3;        /* (L, F, C) up */
    float *w2;        /* (L, C, F) down */
    float *norm_f;    /* (C) final RMSNorm gain */
    float *lm_head;   /* (Vp, C) */
} LlamaTensors;

/* Activations of one forward pass, sized for Bmax x Tmax; per-layer strides use the maximum sizes so a
 * smaller forward (sampling) uses a prefix of each layer's block. */
typedef struct {
    float *x0;        /* (B, T, C) embedded tokens, the residual stream entering layer 0 */
    float *h1;        /* (L, B, T, C) attn_norm output */
    float *rstd1;     /* (L, B, T) */
    float *q;         /* (L, B, T, C) queries after RoPE */
    float *k;         /* (L, B, T, KVC) keys after RoPE */
    float *v;         /* (L, B, T, KVC) */
    float *att;       /* (L, B, NH, T, T) softmax probabilities */
    float *atty;      /* (L, B, T, C) attention output, heads concatenated */
    float *x2;        /* (L, B, T, C) residual after attention */
    float *h2;        /* (L, B, T, C) ffn_norm output */
    float *rstd2;     /* (L, B, T) */
    float *gate;      /* (L, B, T, F) h2 @ w1^T */
    float *up;        /* (L, B, T, F) h2 @ w3^T */
    float *swi;       /* (L, B, T, F) silu(gate) * up */
    float *x3;        /* (L, B, T, C) residual after the MLP: the layer's output */
    float *hf;        /* (B, T, C) norm_f output */
    float *rstdf;     /* (B, T) */
    float *logits;    /* (B, T, Vp); overwritten by d(loss)/d(logits) in backward */
    float *lse;       /* (B, T) log-sum-exp of each logits row */
    float *proj;      /* (B, T, C) wo / w2 output before the residual add; dead after the add, so shared */
    /* backward scratch, reused by every layer (a layer's activation gradients are dead once it is done) */
    float *dres;      /* (B, T, C) gradient of the residual stream */
    float *dbuf_c;    /* (B, T, C) dh1 / datty / dh2 / dhf */
    float *dq;        /* (B, T, C) */
    float *dk;        /* (B, T, KVC) */
    float *dv;        /* (B, T, KVC) */
    float *dgate;     /* (B, T, F) d(swi) then d(gate) */
    float *dup;       /* (B, T, F) */
    float *norm_scratch; /* (nthreads, C) rmsnorm_backward partial sums */
    float *rope_cos;  /* (maxT, hd/2) RoPE table, constant */
    float *rope_sin;  /* (maxT, hd/2) */
} LlamaActs;

typedef struct {
    Model base; /* first, so a Model* is a Llama* */
    LlamaConfig cfg;
    LlamaTensors p, g;
    LlamaActs a;
    float *acts_memory;
    int Bmax, Tmax;
    size_t att_max;   /* floats in one layer's att block: Bmax * NH * Tmax * Tmax */
    int nthreads;
    int B, T;         /* shape of the last forward */
    int *inputs, *targets; /* (Bmax*Tmax) copies from the last forward */
    int have_targets;
} Llama;

/* Builds the parameter table in the tensor-major memory order documented at LlamaTensors, one entry per
 * (tensor, layer). decay 1 for wte, lm_head and the linear weights, 0 for RMSNorm gains (which SCAPE keeps
 * dense). Buckets: layer l -> L-1-l (backward finishes the last layer first); wte, norm_f and lm_head -> L. */
static void llama_build_table(ParamTable *t, const LlamaConfig *c) {
    size_t L = c->L, C = c->C, F = c->F, KVC = (size_t)c->NKV * (c->C / c->NH), Vp = c->Vp;
    int last = c->L;
    memset(t, 0, sizeof *t);
    param_table_add(t, "wte", -1, last, 1, 2, (size_t[]){Vp, C});
    struct { const char *name; int decay, ndim; size_t d0, d1; } per_layer[] = {
        {"attn_norm", 0, 1, C, 0}, {"wq", 1, 2, C, C},       {"wk", 1, 2, KVC, C}, {"wv", 1, 2, KVC, C},
        {"wo", 1, 2, C, C},        {"ffn_norm", 0, 1, C, 0}, {"w1", 1, 2, F, C},   {"w3", 1, 2, F, C},
        {"w2", 1, 2, C, F},
    };
    for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++)
        for (size_t l = 0; l < L; l++)
            param_table_add(t, per_layer[k].name, (int)l, (int)(L - 1 - l), per_layer[k].decay, per_layer[k].ndim,
                            (size_t[]){per_layer[k].d0, per_layer[k].d1});
    param_table_add(t, "norm_f", -1, last, 0, 1, (size_t[]){C});
    param_table_add(t, "lm_head", -1, last, 1, 2, (size_t[]){Vp, C});
}

#define LLAMA_NUM_TENSORS 12
static const char *const llama_tensor_names[LLAMA_NUM_TENSORS] = {
    "wte", "attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w3", "w2", "norm_f", "lm_head"};

/* Points the 12 tensor pointers into `base` using the table (layer 0's entry starts each (L, ...) block). */
static void llama_point_tensors(LlamaTensors *p, float *base, const ParamTable *t) {
    float **ptrs[LLAMA_NUM_TENSORS] = {&p->wte, &p->attn_norm, &p->wq, &p->wk, &p->wv, &p->wo,
                                       &p->ffn_norm, &p->w1, &p->w3, &p->w2, &p->norm_f, &p->lm_head};
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) {
        int layer = (i >= 1 && i <= 9) ? 0 : -1;
        int idx = param_table_find(t, llama_tensor_names[i], layer);
        if (idx < 0) fatal("internal: tensor %s missing from the Llama table", llama_tensor_names[i]);
        *ptrs[i] = base + t->slices[idx].offset;
    }
}

/* Initialisation from `seed`, GPT-2 style as in nanoGPT / llm.c (Llama's papers do not state one): wte, lm_head,
 * wq, wk, wv, w1, w3 N(0, 0.02); wo and w2 (the projections into the residual stream) N(0, 0.02/sqrt(2L));
 * RMSNorm gains 1. The padded rows V..Vp-1 of wte and lm_head are 0 (they never change a logit and get no
 * gradient). Slice i draws from its own stream seeded rng_mix(seed, i), so slices initialise in parallel and the
 * result is independent of the thread count. */
static void llama_init_params(Llama *m, uint64_t seed) {
    const ParamTable *t = &m->base.table;
    const LlamaConfig *c = &m->cfg;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < t->n; i++) {
        const ParamSlice *s = &t->slices[i];
        float *w = m->base.params + s->offset;
        Rng rng;
        rng_seed(&rng, rng_mix(seed, (uint64_t)i));
        if (!s->decay) {
            for (size_t k = 0; k < s->numel; k++) w[k] = 1.0f;
        } else if (strcmp(s->name, "wte") == 0 || strcmp(s->name, "lm_head") == 0) {
            rng_normal(&rng, w, (size_t)c->V * c->C, 0.0f, 0.02f);
            memset(w + (size_t)c->V * c->C, 0, (size_t)(c->Vp - c->V) * c->C * sizeof(float));
        } else {
            int resid = strcmp(s->name, "wo") == 0 || strcmp(s->name, "w2") == 0;
            rng_normal(&rng, w, s->numel, 0.0f, resid ? 0.02f / sqrtf(2.0f * c->L) : 0.02f);
        }
    }
}

/* Carves the activations for Bmax x Tmax out of one allocation and fills the RoPE table. */
/* Floats of the activations for Bmax x Tmax (sizes[] as llama_alloc_acts carves them, if non-NULL, 30 entries). */
static size_t llama_act_floats(const LlamaConfig *c, int Bmax, int Tmax, int nthreads, size_t *sizes) {
    size_t L = c->L, C = c->C, N = (size_t)Bmax * Tmax, NH = c->NH, Vp = c->Vp, F = c->F;
    size_t hd = C / NH, KVC = (size_t)c->NKV * hd, att_max = (size_t)Bmax * NH * Tmax * Tmax;
    size_t s[] = {N * C, L * N * C, L * N, L * N * C, L * N * KVC, L * N * KVC, L * att_max, L * N * C,
                  L * N * C, L * N * C, L * N, L * N * F, L * N * F, L * N * F, L * N * C, N * C, N, N * Vp, N,
                  N * C, N * C, N * C, N * C, N * KVC, N * KVC, N * F, N * F,
                  (size_t)nthreads * C, (size_t)c->maxT * hd / 2, (size_t)c->maxT * hd / 2};
    size_t total = 0;
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        total += s[i];
        if (sizes) sizes[i] = s[i];
    }
    return total;
}

static int llama_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static void llama_alloc_acts(Llama *m, int Bmax, int Tmax) {
    const LlamaConfig *c = &m->cfg;
    size_t N = (size_t)Bmax * Tmax, hd = (size_t)c->C / c->NH;
    m->Bmax = Bmax;
    m->Tmax = Tmax;
    m->att_max = (size_t)Bmax * c->NH * Tmax * Tmax;
    m->nthreads = llama_threads();
    LlamaActs *a = &m->a;
    float **ptrs[] = {&a->x0, &a->h1, &a->rstd1, &a->q, &a->k, &a->v, &a->att, &a->atty, &a->x2, &a->h2,
                      &a->rstd2, &a->gate, &a->up, &a->swi, &a->x3, &a->hf, &a->rstdf, &a->logits, &a->lse,
                      &a->proj, &a->dres, &a->dbuf_c, &a->dq, &a->dk, &a->dv, &a->dgate, &a->dup,
                      &a->norm_scratch, &a->rope_cos, &a->rope_sin};
    size_t sizes[sizeof ptrs / sizeof ptrs[0]];
    size_t n = sizeof sizes / sizeof sizes[0], total = llama_act_floats(c, Bmax, Tmax, m->nthreads, sizes);
    m->acts_memory = xmalloc(total * sizeof(float), "Llama activations (reduce --batch or --seq)");
    float *p = m->acts_memory;
    for (size_t i = 0; i < n; i++) {
        *ptrs[i] = p;
        p += sizes[i];
    }
    rope_table(a->rope_cos, a->rope_sin, c->maxT, (int)hd, c->rope_theta);
    m->inputs = xmalloc(N * sizeof(int), "Llama inputs");
    m->targets = xmalloc(N * sizeof(int), "Llama targets");
}

/* Forward pass (see Model.forward in common/model.h). inputs, targets (B,T) token ids in [0,V); targets may be
 * NULL. Returns the mean cross-entropy, or 0 without targets. Positions are 0..T-1 in every row. fatal() if
 * B x T does not fit the activations or a token id is out of range. */
static float llama_forward(Model *model, const int *inputs, const int *targets, int B, int T) {
    Llama *m = (Llama *)model;
    const LlamaConfig *c = &m->cfg;
    int L = c->L, C = c->C, NH = c->NH, NKV = c->NKV, F = c->F, V = c->V, Vp = c->Vp;
    int hd = C / NH, KVC = NKV * hd;
    float eps = c->norm_eps;
    if (B < 1 || T < 1 || T > c->maxT || (size_t)B * T > (size_t)m->Bmax * m->Tmax ||
        (size_t)B * NH * T * T > m->att_max)
        fatal("forward with B=%d T=%d does not fit this model (sized for B=%d T=%d, maximum sequence length %d); "
              "use a smaller batch or sequence", B, T, m->Bmax, m->Tmax, c->maxT);
    size_t N = (size_t)B * T, LN = (size_t)m->Bmax * m->Tmax; /* LN: per-layer stride in rows */
    for (size_t i = 0; i < N; i++) {
        if (inputs[i] < 0 || inputs[i] >= V)
            fatal("input token %d at position %zu is outside the vocabulary [0, %d); the data does not match the "
                  "model's tokenizer", inputs[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            fatal("target token %d at position %zu is outside the vocabulary [0, %d); the data does not match the "
                  "model's tokenizer", targets[i], i, V);
    }
    memcpy(m->inputs, inputs, N * sizeof(int));
    if (targets) memcpy(m->targets, targets, N * sizeof(int));
    m->B = B;
    m->T = T;
    m->have_targets = targets != NULL;

    LlamaTensors *p = &m->p;
    LlamaActs *a = &m->a;
    embedding_forward(a->x0, inputs, p->wte, (int)N, C);
    for (int l = 0; l < L; l++) {
        const float *x = l == 0 ? a->x0 : a->x3 + (size_t)(l - 1) * LN * C;
        /* this layer's weights */
        const float *attn_norm = p->attn_norm + (size_t)l * C, *ffn_norm = p->ffn_norm + (size_t)l * C;
        const float *wq = p->wq + (size_t)l * C * C, *wk = p->wk + (size_t)l * KVC * C;
        const float *wv = p->wv + (size_t)l * KVC * C, *wo = p->wo + (size_t)l * C * C;
        const float *w1 = p->w1 + (size_t)l * F * C, *w3 = p->w3 + (size_t)l * F * C;
        const float *w2 = p->w2 + (size_t)l * C * F;
        /* this layer's activations */
        float *h1 = a->h1 + (size_t)l * LN * C, *rstd1 = a->rstd1 + (size_t)l * LN;
        float *q = a->q + (size_t)l * LN * C, *k = a->k + (size_t)l * LN * KVC, *v = a->v + (size_t)l * LN * KVC;
        float *att = a->att + (size_t)l * m->att_max, *atty = a->atty + (size_t)l * LN * C;
        float *x2 = a->x2 + (size_t)l * LN * C, *h2 = a->h2 + (size_t)l * LN * C;
        float *rstd2 = a->rstd2 + (size_t)l * LN, *gate = a->gate + (size_t)l * LN * F;
        float *up = a->up + (size_t)l * LN * F, *swi = a->swi + (size_t)l * LN * F;
        float *x3 = a->x3 + (size_t)l * LN * C;

        /* attention block: x2 = x + wo(attention(rope(wq h1), rope(wk h1), wv h1)), h1 = rmsnorm(x) */
        rmsnorm_forward(h1, rstd1, x, attn_norm, (int)N, C, eps);
        matmul_forward(q, h1, wq, (int)N, C, C);
        matmul_forward(k, h1, wk, (int)N, C, KVC);
        matmul_forward(v, h1, wv, (int)N, C, KVC);
        rope_inplace(q, a->rope_cos, a->rope_sin, B, T, NH, hd, 1.0f);
        rope_inplace(k, a->rope_cos, a->rope_sin, B, T, NKV, hd, 1.0f);
        attention_forward(atty, att, q, k, v, B, T, NH, NKV, hd);
        matmul_forward(a->proj, atty, wo, (int)N, C, C);
        residual_forward(x2, x, a->proj, N * C);
        /* MLP block: x3 = x2 + w2(silu(w1 h2) * w3 h2), h2 = rmsnorm(x2) */
        rmsnorm_forward(h2, rstd2, x2, ffn_norm, (int)N, C, eps);
        matmul_forward(gate, h2, w1, (int)N, C, F);
        matmul_forward(up, h2, w3, (int)N, C, F);
        swiglu_forward(swi, gate, up, N * F);
        matmul_forward(a->proj, swi, w2, (int)N, F, C);
        residual_forward(x3, x2, a->proj, N * C);
    }
    rmsnorm_forward(a->hf, a->rstdf, a->x3 + (size_t)(L - 1) * LN * C, p->norm_f, (int)N, C, eps);
    matmul_forward(a->logits, a->hf, p->lm_head, (int)N, C, Vp);
    if (!targets) return 0.0f;
    return crossentropy_forward(a->lse, a->logits, targets, (int)N, V, Vp);
}

/* Backward pass (see Model.backward in common/model.h): ADDS d(loss_scale * loss)/d(params) into grads and
 * calls on_bucket(ctx, b) as bucket b becomes final: layer L-1 (bucket 0) first, ..., layer 0 (bucket L-1), then
 * wte, norm_f and lm_head (bucket L). Consumes the logits (they become their gradient). fatal() if the last
 * forward had no targets. */
static void llama_backward(Model *model, float loss_scale, BucketReadyFn on_bucket, void *ctx) {
    Llama *m = (Llama *)model;
    if (!m->have_targets) fatal("internal: backward called after a forward without targets");
    m->have_targets = 0; /* the logits are about to be overwritten: a second backward would be wrong */
    const LlamaConfig *c = &m->cfg;
    int L = c->L, C = c->C, NH = c->NH, NKV = c->NKV, F = c->F, V = c->V, Vp = c->Vp, B = m->B, T = m->T;
    int hd = C / NH, KVC = NKV * hd;
    size_t N = (size_t)B * T, LN = (size_t)m->Bmax * m->Tmax;
    LlamaTensors *p = &m->p, *g = &m->g;
    LlamaActs *a = &m->a;
    float *dres = a->dres, *dc = a->dbuf_c;

    /* loss -> logits -> norm_f -> last residual */
    float *dlogits = a->logits;
    crossentropy_backward_inplace(dlogits, a->lse, m->targets, (int)N, V, Vp, loss_scale);
    memset(dc, 0, N * C * sizeof(float));
    matmul_backward(dc, g->lm_head, dlogits, a->hf, p->lm_head, (int)N, C, Vp);
    memset(dres, 0, N * C * sizeof(float));
    rmsnorm_backward(dres, g->norm_f, dc, a->x3 + (size_t)(L - 1) * LN * C, p->norm_f, a->rstdf, (int)N, C,
                     a->norm_scratch, m->nthreads);

    for (int l = L - 1; l >= 0; l--) {
        const float *x = l == 0 ? a->x0 : a->x3 + (size_t)(l - 1) * LN * C;
        const float *attn_norm = p->attn_norm + (size_t)l * C, *ffn_norm = p->ffn_norm + (size_t)l * C;
        const float *wq = p->wq + (size_t)l * C * C, *wk = p->wk + (size_t)l * KVC * C;
        const float *wv = p->wv + (size_t)l * KVC * C, *wo = p->wo + (size_t)l * C * C;
        const float *w1 = p->w1 + (size_t)l * F * C, *w3 = p->w3 + (size_t)l * F * C;
        const float *w2 = p->w2 + (size_t)l * C * F;
        float *dattn_norm = g->attn_norm + (size_t)l * C, *dffn_norm = g->ffn_norm + (size_t)l * C;
        float *dwq = g->wq + (size_t)l * C * C, *dwk = g->wk + (size_t)l * KVC * C;
        float *dwv = g->wv + (size_t)l * KVC * C, *dwo = g->wo + (size_t)l * C * C;
        float *dw1 = g->w1 + (size_t)l * F * C, *dw3 = g->w3 + (size_t)l * F * C;
        float *dw2 = g->w2 + (size_t)l * C * F;
        const float *h1 = a->h1 + (size_t)l * LN * C, *rstd1 = a->rstd1 + (size_t)l * LN;
        const float *q = a->q + (size_t)l * LN * C, *k = a->k + (size_t)l * LN * KVC;
        const float *v = a->v + (size_t)l * LN * KVC;
        const float *att = a->att + (size_t)l * m->att_max, *atty = a->atty + (size_t)l * LN * C;
        const float *x2 = a->x2 + (size_t)l * LN * C, *h2 = a->h2 + (size_t)l * LN * C;
        const float *rstd2 = a->rstd2 + (size_t)l * LN, *gate = a->gate + (size_t)l * LN * F;
        const float *up = a->up + (size_t)l * LN * F, *swi = a->swi + (size_t)l * LN * F;

        /* dres is d(x3); x3 = x2 + w2(swi), so d(w2 output) = d(x2) = dres */
        memset(a->dgate, 0, N * F * sizeof(float));
        matmul_backward(a->dgate, dw2, dres, swi, w2, (int)N, F, C);
        swiglu_backward_inplace(a->dgate, a->dup, gate, up, N * F);
        memset(dc, 0, N * C * sizeof(float));
        matmul_backward(dc, dw1, a->dgate, h2, w1, (int)N, C, F);
        matmul_backward(dc, dw3, a->dup, h2, w3, (int)N, C, F);
        rmsnorm_backward(dres, dffn_norm, dc, x2, ffn_norm, rstd2, (int)N, C, a->norm_scratch, m->nthreads);
        /* dres is now d(x2); x2 = x + wo(atty) */
        memset(dc, 0, N * C * sizeof(float));
        matmul_backward(dc, dwo, dres, atty, wo, (int)N, C, C);
        memset(a->dq, 0, N * C * sizeof(float));
        memset(a->dk, 0, N * KVC * sizeof(float));
        memset(a->dv, 0, N * KVC * sizeof(float));
        attention_backward(a->dq, a->dk, a->dv, dc, att, q, k, v, B, T, NH, NKV, hd);
        /* the gradients w.r.t. the rotated q, k rotate back to the gradients w.r.t. wq h1, wk h1 */
        rope_inplace(a->dq, a->rope_cos, a->rope_sin, B, T, NH, hd, -1.0f);
        rope_inplace(a->dk, a->rope_cos, a->rope_sin, B, T, NKV, hd, -1.0f);
        memset(dc, 0, N * C * sizeof(float));
        matmul_backward(dc, dwq, a->dq, h1, wq, (int)N, C, C);
        matmul_backward(dc, dwk, a->dk, h1, wk, (int)N, C, KVC);
        matmul_backward(dc, dwv, a->dv, h1, wv, (int)N, C, KVC);
        rmsnorm_backward(dres, dattn_norm, dc, x, attn_norm, rstd1, (int)N, C, a->norm_scratch, m->nthreads);
        /* dres is now d(this layer's input) */
        if (on_bucket) on_bucket(ctx, L - 1 - l);
    }
    embedding_backward(g->wte, dres, m->inputs, (int)N, C);
    if (on_bucket) on_bucket(ctx, L);
}

static const float *llama_logits(const Model *model) { return ((const Llama *)model)->a.logits; }

static void llama_free(Model *model) {
    Llama *m = (Llama *)model;
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
 * Model files, in llm.c's style with their own magic. Header of 256 int32:
 *   [0] magic 20261129  [1] version 3 (fp32)  [2] L  [3] C  [4] NH  [5] NKV  [6] F  [7] V  [8] Vp  [9] maxT
 *   [10] rope theta, [11] RMSNorm eps (both the bits of an IEEE float32)  [12..255] 0
 * then every parameter in table order (see LlamaTensors), fp32 little-endian; nothing after.
 * ---------------------------------------------------------------------------------------------------------- */

static int32_t float_bits(float f) {
    int32_t i;
    memcpy(&i, &f, 4);
    return i;
}

static float bits_float(int32_t i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}

/* Writes the model file (version 3, fp32) atomically (write_file_atomic: a new temp file, fsync, rename). fatal() on I/O errors
 * naming the path; on failure the temporary file is removed and `path` is untouched. */
static void llama_save(const Model *model, const char *path) {
    const Llama *m = (const Llama *)model;
    const LlamaConfig *c = &m->cfg;
    int32_t header[LLAMA_HEADER_INTS] = {LLAMA_MAGIC, LLAMA_VERSION_FP32, c->L, c->C, c->NH, c->NKV, c->F,
                                         c->V, c->Vp, c->maxT, float_bits(c->rope_theta), float_bits(c->norm_eps)};
    write_file_atomic(path, header, sizeof header, model->params, model->table.total * sizeof(float));
}

/* Checks a configuration from a spec or a file header; returns NULL if usable, else what is wrong. */
static const char *llama_config_problem(const LlamaConfig *c) {
    static char why[160];
    if (c->L < 1 || c->C < 1 || c->NH < 1 || c->NKV < 1 || c->F < 1 || c->V < 1 || c->maxT < 1 || c->L > 1024 ||
        c->C > 1 << 16 || c->F > 1 << 18 || c->Vp > 1 << 24 || c->maxT > 1 << 20)
        snprintf(why, sizeof why, "sizes out of range (L=%d C=%d NH=%d NKV=%d F=%d V=%d maxT=%d)", c->L, c->C,
                 c->NH, c->NKV, c->F, c->V, c->maxT);
    else if (c->C % c->NH != 0 || (c->C / c->NH) % 2 != 0)
        snprintf(why, sizeof why, "C=%d must be NH=%d heads of an even head dimension", c->C, c->NH);
    else if (c->NH % c->NKV != 0)
        snprintf(why, sizeof why, "NH=%d query heads are not a multiple of NKV=%d key/value heads", c->NH, c->NKV);
    else if (c->Vp < c->V || c->Vp % 128 != 0)
        snprintf(why, sizeof why, "padded vocabulary Vp=%d is not a multiple of 128 at least V=%d", c->Vp, c->V);
    else if (!(c->rope_theta > 1.0f) || !isfinite(c->rope_theta) || !(c->norm_eps > 0.0f) || !(c->norm_eps < 1.0f))
        snprintf(why, sizeof why, "RoPE theta %g must be > 1 and RMSNorm eps %g in (0, 1)", c->rope_theta,
                 c->norm_eps);
    else
        return NULL;
    return why;
}

static Model *llama_new(const LlamaConfig *cfg, int B, int T);

/* Reads a Llama model file (version 3, fp32; layout above). Checks magic, version, hyper-parameters and the exact
 * file length; fatal() with one line naming the file and the fix. Activations sized for B x T. */
/* Reads and checks a model file's header (magic, version, hyper-parameters, the exact file length); fatal() naming
 * the file and the fix. The file is left open after the header in *fp (NULL: closed). */
static LlamaConfig llama_read_config(const char *path, int T, FILE **fp) {
    int64_t size = file_size(path);
    FILE *f = xfopen(path, "rb", "Pass an existing Llama model file (written by train_llama) with --init");
    int32_t h[LLAMA_HEADER_INTS];
    if (size < (int64_t)sizeof h)
        fatal("%s: %lld bytes, shorter than the 1024-byte model header; the file is truncated or not a model file",
              path, (long long)size);
    xfread(h, sizeof h, f, path, "the model header");
    if (h[0] != LLAMA_MAGIC)
        fatal("%s: bad magic %d (expected %d); not a Llama model file of this runtime (GPT-2 files go to "
              "train_gpt)", path, h[0], LLAMA_MAGIC);
    if (h[1] != LLAMA_VERSION_FP32)
        fatal("%s: unsupported Llama model file version %d (expected %d, fp32); re-save it with train_llama", path,
              h[1], LLAMA_VERSION_FP32);
    LlamaConfig cfg = {.L = h[2], .C = h[3], .NH = h[4], .NKV = h[5], .F = h[6], .V = h[7], .Vp = h[8],
                       .maxT = h[9], .rope_theta = bits_float(h[10]), .norm_eps = bits_float(h[11])};
    const char *why = llama_config_problem(&cfg);
    if (why) fatal("%s: implausible header: %s; the file is corrupt", path, why);
    if (T > cfg.maxT)
        fatal("--seq %d exceeds the model's maximum sequence length %d (from %s); use --seq <= %d", T, cfg.maxT,
              path, cfg.maxT);
    ParamTable tab;
    llama_build_table(&tab, &cfg);
    int64_t want = (int64_t)sizeof h + (int64_t)(tab.total * sizeof(float));
    param_table_free(&tab);
    if (size != want)
        fatal("%s: %lld bytes but a version 3 Llama model with these hyper-parameters has %lld; the file is "
              "truncated or corrupt, re-save it", path, (long long)size, (long long)want);
    if (fp) *fp = f;
    else fclose(f);
    return cfg;
}

static Model *llama_load(const char *path, int B, int T) {
    FILE *f;
    LlamaConfig cfg = llama_read_config(path, T, &f);
    Model *model = llama_new(&cfg, B, T);
    xfread(model->params, model->table.total * sizeof(float), f, path, "the parameters");
    fclose(f);
    return model;
}

/* ----------------------------------------------------------------------------------------------------------
 * The family: model specs, creation, FLOPs.
 * ---------------------------------------------------------------------------------------------------------- */

/* Training FLOPs per token at T = maxT, for MFU: 6 * (parameters - wte) for the matmuls forward and backward
 * (Kaplan et al., arXiv 2001.08361, section 2.1: 2N forward, 4N backward; wte is a lookup, lm_head a matmul and
 * counted), plus 12 * L * C * maxT for attention scores and the weighted sum of values (PaLM, Chowdhery et al.,
 * arXiv 2204.02311, appendix B; full T x T, not halved for the causal mask; with GQA the query side still has
 * NH * hd = C columns). RoPE, norms and SwiGLU's elementwise work are not counted. */
static double llama_flops_per_token(const LlamaConfig *c, const ParamTable *t) {
    double matmul_params = (double)t->total - (double)c->Vp * c->C;
    return 6.0 * matmul_params + 12.0 * c->L * (double)c->C * c->maxT;
}

/* Allocates a model of this configuration with parameters and gradients zeroed, activations for B x T. */
static Model *llama_new(const LlamaConfig *cfg, int B, int T) {
    Llama *m = xcalloc(1, sizeof *m, "Llama model");
    m->cfg = *cfg;
    Model *b = &m->base;
    b->family = "llama";
    snprintf(b->desc, sizeof b->desc, "Llama L=%d C=%d NH=%d NKV=%d F=%d V=%d", cfg->L, cfg->C, cfg->NH, cfg->NKV,
             cfg->F, cfg->V);
    llama_build_table(&b->table, cfg);
    b->params = xcalloc(b->table.total, sizeof(float), "Llama parameters");
    b->grads = xcalloc(b->table.total, sizeof(float), "Llama gradients");
    llama_point_tensors(&m->p, b->params, &b->table);
    llama_point_tensors(&m->g, b->grads, &b->table);
    b->vocab_size = cfg->V;
    b->padded_vocab_size = cfg->Vp;
    b->max_seq_len = cfg->maxT;
    b->num_layers = cfg->L;
    b->channels = cfg->C;
    b->num_heads = cfg->NH;
    b->flops_per_token = llama_flops_per_token(cfg, &b->table);
    /* Llama 3's vocabulary (the 1.8b spec) or bpe4k (v4096): its shards and tokenizer; any other V uses the
     * family's Llama 2 */
    b->tokenizer = tokenizer_kind_for_vocab(cfg->V);
    b->forward = llama_forward;
    b->backward = llama_backward;
    b->logits = llama_logits;
    b->save = llama_save;
    b->free = llama_free;
    llama_alloc_acts(m, B, T);
    return b;
}

#define LLAMA_DEFAULT_MODEL "l4c256h8kv2f688"
#define LLAMA_MODEL_HELP                                                                                          \
    "Llama: 500m (SCAPE's Llama-500M: L16 C1536 F4096 NH16 NKV8, theta 1e5, V 32000), 1.8b (L24 C2560 F6912 "     \
    "NH32 NKV8, theta 1e4, V 128256), or l<L>c<C>h<NH>[kv<NKV>][f<F>][v<V>][t<maxT>][r<theta>][e<eps>], e.g. "    \
    "l4c256h8kv2f688 (NKV defaults to NH, F to 8C/3 rounded up to 16, V 32000, maxT 1024, theta 1e4, eps 1e-5); " \
    "options also follow a named model, e.g. 500mt4096"

/* Rounds the vocabulary up to a multiple of 128 (rows of wte / lm_head), for aligned matmuls. */
static int llama_pad_vocab(int V) { return (V + 127) / 128 * 128; }

/* Parses a model spec (see LLAMA_MODEL_HELP): a named model or l<L>c<C>h<NH>, then optional key/value
 * overrides kv, f, v, t (integers), r, e (floats, e.g. r5e5, e1e-6). fatal() naming --model on error. */
static LlamaConfig llama_parse_spec(const char *spec) {
    LlamaConfig c = {.V = 32000, .maxT = 1024, .rope_theta = 1e4f, .norm_eps = 1e-5f};
    const char *s = spec ? spec : "";
    int named = 0;
    if (strncmp(s, "500m", 4) == 0) {
        c.L = 16, c.C = 1536, c.F = 4096, c.NH = 16, c.NKV = 8, c.rope_theta = 1e5f, c.maxT = 2048;
        s += 4;
        named = 1;
    } else if (strncmp(s, "1.8b", 4) == 0) {
        c.L = 24, c.C = 2560, c.F = 6912, c.NH = 32, c.NKV = 8, c.V = 128256, c.maxT = 2048;
        s += 4;
        named = 1;
    }
    int ok = named || *s == 'l';
    while (ok && *s) {
        static const char *const keys[] = {"kv", "l", "c", "h", "f", "v", "t", "r", "e"};
        int key = -1;
        for (int i = 0; i < 9 && key < 0; i++)
            if (strncmp(s, keys[i], strlen(keys[i])) == 0) key = i;
        if (key < 0) { ok = 0; break; }
        s += strlen(keys[key]);
        char *end;
        errno = 0;
        if (key >= 7) {
            double d = strtod(s, &end);
            if (end == s || errno || !(d > 0)) { ok = 0; break; }
            if (key == 7) c.rope_theta = (float)d;
            else c.norm_eps = (float)d;
        } else {
            long v = strtol(s, &end, 10);
            if (end == s || errno || v < 1 || v > 1 << 24) { ok = 0; break; }
            int *dst[] = {&c.NKV, &c.L, &c.C, &c.NH, &c.F, &c.V, &c.maxT};
            *dst[key] = (int)v;
        }
        s = end;
    }
    if (!ok || c.L < 1 || c.C < 1 || c.NH < 1)
        fatal_usage("--model '%s' is not a Llama spec; use %s", spec ? spec : "", LLAMA_MODEL_HELP);
    if (c.NKV == 0) c.NKV = c.NH;
    if (c.F == 0) c.F = (8 * c.C / 3 + 15) / 16 * 16;
    c.Vp = llama_pad_vocab(c.V);
    const char *why = llama_config_problem(&c);
    if (why) fatal_usage("--model '%s': %s; %s", spec, why, LLAMA_MODEL_HELP);
    return c;
}

/* ModelFamily.create for Llama (see common/model.h). With init_path the file's hyper-parameters are used and
 * spec is ignored. fatal() if T exceeds the model's maximum sequence length, with the fix. */
static Model *llama_create(const char *spec, const char *init_path, uint64_t seed, int B, int T) {
    if (B < 1 || T < 1) fatal("--batch %d / --seq %d must both be at least 1", B, T);
    if (init_path) return llama_load(init_path, B, T);
    LlamaConfig c = llama_parse_spec(spec);
    if (T > c.maxT)
        fatal("--seq %d exceeds the model's maximum sequence length %d; use --seq <= %d or a spec with t<maxT>", T,
              c.maxT, c.maxT);
    Model *m = llama_new(&c, B, T);
    llama_init_params((Llama *)m, seed);
    return m;
}

/* ModelFamily.memory_bytes for Llama: what llama_create allocates (parameters, gradients, activations for B x T),
 * from the spec or the model file's header, without allocating; the parameter count in *num_params and the
 * canonical spec (l<L>c<C>h<NH>kv<NKV>f<F>v<V>t<maxT>r<theta>e<eps>, read back by llama_parse_spec to the same
 * model) in spec_out. */
static double llama_memory_bytes(const char *spec, const char *init_path, int B, int T, size_t *num_params,
                                 char *spec_out, size_t cap) {
    LlamaConfig c = init_path ? llama_read_config(init_path, T, NULL) : llama_parse_spec(spec);
    ParamTable table;
    llama_build_table(&table, &c);
    *num_params = table.total;
    param_table_free(&table);
    snprintf(spec_out, cap, "l%dc%dh%dkv%df%dv%dt%dr%.9ge%.9g", c.L, c.C, c.NH, c.NKV, c.F, c.V, c.maxT,
             (double)c.rope_theta, (double)c.norm_eps);
    return 4.0 * (2.0 * (double)*num_params + (double)llama_act_floats(&c, B, T, llama_threads(), NULL)) +
           8.0 * B * T;
}

const ModelFamily llama_family = {
    .family = "llama",
    .tokenizer = "llama2",
    .default_model = LLAMA_DEFAULT_MODEL,
    .model_help = LLAMA_MODEL_HELP,
    .create = llama_create,
    .memory_bytes = llama_memory_bytes,
};

#ifndef TESTING
#include "trainer/train.h"
int main(int argc, char **argv) { return train_main(argc, argv, &llama_family); }
#endif

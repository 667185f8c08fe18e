/*
 * cuda/attention.cuh - causal multi-head self-attention (Vaswani et al., arXiv 1706.03762, section 3.2.1) with
 * cuBLAS strided-batched GEMMs for Q K^T and att V and a fused scale + causal mask + softmax kernel (fp32 math).
 * Shapes: qkv (B,T,3C) = [q | k | v] per row, head h at channels h*hs..(h+1)*hs of each; NH heads, hs = C/NH;
 * att (B,NH,T,T) saved for backward (0 above the diagonal); out (B,T,C).
 * Also here, at the end: Attention, the attention of a whole model (what train_gpt.cu calls), which chooses once
 * between cuDNN's fused flash attention (cuda/attention_cudnn.cuh; builds with ENABLE_CUDNN, bf16 only) and these
 * cuBLAS kernels, owns what each keeps per layer, and falls back to cuBLAS for good if cuDNN fails at run time.
 * Not for: grouped-query attention (cuda/gqa.cuh reuses the kernels above).
 */
#ifndef CUDA_ATTENTION_CUH
#define CUDA_ATTENTION_CUH

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/matmul.cuh"
#include "cuda/attention_cudnn.cuh" /* empty unless ENABLE_CUDNN and bf16 */

/* qkv (B,T,3C) -> q, k, v (B,NH,T,hs) each */
__global__ static void attn_permute_kernel(floatX *q, floatX *k, floatX *v, const floatX *qkv, int B, int T, int NH,
                                           int hs) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * NH * T * hs) return;
    int d = i % hs, t = (i / hs) % T, h = (i / ((long)hs * T)) % NH, b = i / ((long)hs * T * NH);
    int C = NH * hs;
    long src = ((long)b * T + t) * 3 * C + h * hs + d;
    q[i] = qkv[src];
    k[i] = qkv[src + C];
    v[i] = qkv[src + 2 * C];
}
/* inverse: dq, dk, dv (B,NH,T,hs) -> dqkv (B,T,3C), overwriting */
__global__ static void attn_unpermute_qkv_kernel(floatX *dqkv, const floatX *dq, const floatX *dk, const floatX *dv,
                                                 int B, int T, int NH, int hs) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * NH * T * hs) return;
    int d = i % hs, t = (i / hs) % T, h = (i / ((long)hs * T)) % NH, b = i / ((long)hs * T * NH);
    int C = NH * hs;
    long dst = ((long)b * T + t) * 3 * C + h * hs + d;
    dqkv[dst] = dq[i];
    dqkv[dst + C] = dk[i];
    dqkv[dst + 2 * C] = dv[i];
}
/* y (B,NH,T,hs) <-> out (B,T,C); dir 0: y -> out, dir 1: out -> y */
__global__ static void attn_heads_kernel(floatX *out, floatX *y, int B, int T, int NH, int hs, int dir) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * NH * T * hs) return;
    int d = i % hs, t = (i / hs) % T, h = (i / ((long)hs * T)) % NH, b = i / ((long)hs * T * NH);
    long o = ((long)b * T + t) * NH * hs + h * hs + d;
    if (dir == 0) out[o] = y[i];
    else y[i] = out[o];
}

/* att[row, t2] = softmax_{t2 <= t1}(scale * preatt[row, t2]), 0 for t2 > t1; row = (b,h,t1); one warp per row.
 * In place is allowed (att == preatt). */
__global__ static void softmax_causal_kernel(floatX *att, const floatX *preatt, int rows, int T, float scale) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int t1 = row % T;
    const floatX *p = preatt + (long)row * T;
    floatX *a = att + (long)row * T;
    float mx = -INFINITY;
    for (int t = lane; t <= t1; t += 32) mx = fmaxf(mx, scale * to_float(p[t]));
    mx = warp_max(mx);
    float s = 0.0f;
    for (int t = lane; t <= t1; t += 32) s += expf(scale * to_float(p[t]) - mx);
    float inv = 1.0f / warp_sum(s);
    for (int t = lane; t < T; t += 32) a[t] = from_float<floatX>(t <= t1 ? expf(scale * to_float(p[t]) - mx) * inv : 0.0f);
}
/* datt -> dpreatt in place: d = scale * att * (datt - sum_t att datt), 0 above the diagonal. one warp per row */
__global__ static void softmax_causal_backward_kernel(floatX *datt, const floatX *att, int rows, int T, float scale) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int t1 = row % T;
    floatX *d = datt + (long)row * T;
    const floatX *a = att + (long)row * T;
    float dot = 0.0f;
    for (int t = lane; t <= t1; t += 32) dot += to_float(a[t]) * to_float(d[t]);
    dot = warp_sum(dot);
    for (int t = lane; t < T; t += 32)
        d[t] = from_float<floatX>(t <= t1 ? scale * to_float(a[t]) * (to_float(d[t]) - dot) : 0.0f);
}

/* C_i = op(A_i) op(B_i) (+ beta C_i), i < batch: column-major m x n, see matmul.cuh for the row-major view */
static void gemm_batched(Blas *bl, floatX *c, const floatX *a, const floatX *b, int m, int n, int k, int lda,
                         long long sa, int ldb, long long sb, int ldc, long long sc, int batch, cublasOperation_t ta,
                         cublasOperation_t tb, float beta, cudaStream_t s) {
    float alpha = 1.0f;
    cublasCheck(cublasSetStream(bl->blas, s));
    cublasCheck(cublasGemmStridedBatchedEx(bl->blas, ta, tb, m, n, k, &alpha, a, CUDA_FLOATX, lda, sa, b, CUDA_FLOATX,
                                           ldb, sb, &beta, c, CUDA_FLOATX, ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT));
}

/* Scratch the attention needs besides att: q, k, v, y (B,NH,T,hs) each, in floatX elements. */
static size_t attention_scratch_elems(int B, int T, int C) { return 4 * (size_t)B * T * C; }

/* out (B,T,C) = causal attention of qkv (B,T,3C); att (B,NH,T,T) saved for backward; scratch as above. */
static void attention_forward(Blas *bl, floatX *out, floatX *att, floatX *scratch, const floatX *qkv, int B, int T,
                              int C, int NH, cudaStream_t s) {
    int hs = C / NH;
    long n = (long)B * T * C;
    floatX *q = scratch, *k = q + n, *v = k + n, *y = v + n;
    attn_permute_kernel<<<ceil_div(n, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    cudaCheckLaunch();
    long long sq = (long long)T * hs, st = (long long)T * T;
    /* preatt_cm (t2,t1) = k_cm^T q_cm */
    gemm_batched(bl, att, k, q, T, T, hs, hs, sq, hs, sq, T, st, B * NH, CUBLAS_OP_T, CUBLAS_OP_N, 0.0f, s);
    int rows = B * NH * T;
    softmax_causal_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(att, att, rows, T, 1.0f / sqrtf((float)hs));
    cudaCheckLaunch();
    /* y_cm (d,t1) = v_cm (d,t2) att_cm (t2,t1) */
    gemm_batched(bl, y, v, att, hs, T, T, hs, sq, T, st, hs, sq, B * NH, CUBLAS_OP_N, CUBLAS_OP_N, 0.0f, s);
    attn_heads_kernel<<<ceil_div(n, 256), 256, 0, s>>>(out, y, B, T, NH, hs, 0);
    cudaCheckLaunch();
}

/* Scratch of the backward: q, k, v, dy, dq, dk, dv (B,NH,T,hs) and datt (B,NH,T,T), in floatX elements. */
static size_t attention_backward_scratch_elems(int B, int T, int C, int NH) {
    return 7 * (size_t)B * T * C + (size_t)B * NH * T * T;
}
/* dqkv (B,T,3C) OVERWRITTEN with d(loss)/d(qkv), from dout (B,T,C), the forward's att and its input qkv. */
static void attention_backward(Blas *bl, floatX *dqkv, floatX *scratch, const floatX *dout, const floatX *att,
                               const floatX *qkv, int B, int T, int C, int NH, cudaStream_t s) {
    int hs = C / NH;
    long n = (long)B * T * C;
    floatX *q = scratch, *k = q + n, *v = k + n, *dy = v + n, *dq = dy + n, *dk = dq + n, *dv = dk + n, *datt = dv + n;
    attn_permute_kernel<<<ceil_div(n, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    cudaCheckLaunch();
    attn_heads_kernel<<<ceil_div(n, 256), 256, 0, s>>>((floatX *)dout, dy, B, T, NH, hs, 1);
    cudaCheckLaunch();
    long long sq = (long long)T * hs, st = (long long)T * T;
    int batch = B * NH;
    /* datt_cm (t2,t1) = v_cm^T dy_cm */
    gemm_batched(bl, datt, v, dy, T, T, hs, hs, sq, hs, sq, T, st, batch, CUBLAS_OP_T, CUBLAS_OP_N, 0.0f, s);
    /* dv_cm (d,t2) = dy_cm (d,t1) att_cm^T (t1,t2) */
    gemm_batched(bl, dv, dy, att, hs, T, T, hs, sq, T, st, hs, sq, batch, CUBLAS_OP_N, CUBLAS_OP_T, 0.0f, s);
    int rows = batch * T;
    softmax_causal_backward_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(datt, att, rows, T, 1.0f / sqrtf((float)hs));
    cudaCheckLaunch();
    /* dq_cm (d,t1) = k_cm (d,t2) dpre_cm (t2,t1);  dk_cm (d,t2) = q_cm (d,t1) dpre_cm^T (t1,t2) */
    gemm_batched(bl, dq, k, datt, hs, T, T, hs, sq, T, st, hs, sq, batch, CUBLAS_OP_N, CUBLAS_OP_N, 0.0f, s);
    gemm_batched(bl, dk, q, datt, hs, T, T, hs, sq, T, st, hs, sq, batch, CUBLAS_OP_N, CUBLAS_OP_T, 0.0f, s);
    attn_unpermute_qkv_kernel<<<ceil_div(n, 256), 256, 0, s>>>(dqkv, dq, dk, dv, B, T, NH, hs);
    cudaCheckLaunch();
}

/* ---------------------------------------------------------------- the attention of a whole model */

/* Per model: which path runs, and the state each layer's forward leaves for its backward.
 *   cuDNN (ATTENTION_CUDNN builds, chosen at init if its plans build): stats (L,Bmax,NH,Tmax) fp32 per layer,
 *     the log-sum-exp rows of Dao et al.'s FlashAttention-2 (arXiv 2307.08691, Algorithm 1, line 13); no (T,T)
 *     matrix is stored.
 *   cuBLAS: att (L,Bmax,NH,Tmax,Tmax) floatX probabilities per layer and the kernels' scratch.
 * A forward no backward follows (sampling: B=1 and a growing T) at a shape without a cuDNN plan runs on cuBLAS
 * with one layer's probabilities at a time (grown as needed), rather than building a cuDNN graph per length.
 * A cuDNN failure at run time (a graph for a new shape that does not build, an execution that is refused)
 * prints one line and switches to cuBLAS for the rest of the run, allocating its buffers then. A layer whose
 * forward ran on cuDNN but whose backward must run on cuBLAS has its probabilities recomputed from qkv first. */
typedef struct {
    int L, Bmax, Tmax, C, NH;
    Blas *bl;
    int cudnn;               /* 1 while the cuDNN path is active */
    unsigned char *by_cudnn; /* (L) host: 1 where layer l's last forward ran on cuDNN (its stats are saved) */
    size_t att_max;          /* Bmax*NH*Tmax*Tmax */
    floatX *att;             /* (L,Bmax,NH,Tmax,Tmax) cuBLAS path; NULL while it has not been needed */
    floatX *scratch;         /* attention_backward_scratch_elems + Bmax*Tmax*C (a recomputed output); likewise */
    float *stats;            /* (L,stats_stride) cuDNN path, layer l's (Bmax,NH,Tmax) at l*stats_stride; NULL in builds without it */
    size_t stats_stride;     /* cudnn_attention_stats_stride(Bmax, NH, Tmax) floats */
    floatX *infer_att;       /* cuDNN path, inference at other shapes: one layer's (B,NH,T,T), grown as needed */
    floatX *infer_scratch;   /* its scratch: attention_scratch_elems */
    size_t infer_att_elems, infer_scratch_elems;
#ifdef ATTENTION_CUDNN
    CudnnAttn cd;
#endif
    char desc[256];          /* one line: the path and what it keeps, for the start-up output */
} Attention;

/* bytes as "%.2f GiB" or "%.1f MiB" into buf (the start-up line's sizes: GPT-2 124M's att is GiB, a test's KiB) */
static const char *attention_size(char *buf, size_t n, double bytes) {
    if (bytes >= 1073741824.0) snprintf(buf, n, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(buf, n, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

/* cudaMalloc or exit with one line naming what and how much (the fallback's late allocation has nothing to
 * fall back to) */
static void *attention_alloc(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        fprintf(stderr, "error: cannot allocate %.2f GiB of GPU memory for %s (%s); reduce --batch or --seq\n",
                bytes / 1073741824.0, what, cudaGetErrorString(e));
        exit(1);
    }
    return p;
}

/* the cuBLAS path's buffers, allocated on first need */
static void attention_cublas_buffers(Attention *at) {
    if (at->att) return;
    at->att = (floatX *)attention_alloc((size_t)at->L * at->att_max * sizeof(floatX),
                                        "the attention probabilities (L,B,NH,T,T)");
    size_t sc = attention_backward_scratch_elems(at->Bmax, at->Tmax, at->C, at->NH) + (size_t)at->Bmax * at->Tmax * at->C;
    at->scratch = (floatX *)attention_alloc(sc * sizeof(floatX), "the attention scratch");
}

#ifdef ATTENTION_CUDNN
/* cuDNN failed (why): one line, then cuBLAS for the rest of the run */
static void attention_cudnn_failed(Attention *at, const char *why) {
    char sz[32];
    fprintf(stderr, "warning: %s; cuDNN attention is off for the rest of the run, using cuBLAS attention "
            "(+%s for the (L,B,NH,T,T) probabilities)\n", why,
            attention_size(sz, sizeof sz, (double)at->L * at->att_max * sizeof(floatX)));
    at->cudnn = 0;
    attention_cublas_buffers(at);
    snprintf(at->desc, sizeof at->desc, "cuBLAS batched GEMMs + fused softmax (cuDNN failed at run time)");
}
#endif

/* Sets up the attention of L layers for batches up to B x T, C channels, NH heads: cuDNN when this build has it
 * (USE_CUDNN=1 or the *_cudnn targets, bf16) and its plans build on this GPU, else cuBLAS. Prints one line
 * "attention: ..." (rank 0 only; OMPI_COMM_WORLD_RANK), and, where cuDNN was wanted but is not used, why.
 * Exits (one line) only if GPU memory runs out. */
static void attention_init(Attention *at, Blas *bl, int L, int B, int T, int C, int NH) {
    memset(at, 0, sizeof *at);
    at->L = L; at->Bmax = B; at->Tmax = T; at->C = C; at->NH = NH; at->bl = bl;
    at->att_max = (size_t)B * NH * T * T;
    at->by_cudnn = (unsigned char *)calloc(L, 1);
    if (!at->by_cudnn) { fprintf(stderr, "error: out of host memory for the attention layers\n"); exit(1); }
    char sz[32], sz2[32];
    double att_bytes = (double)L * at->att_max * sizeof(floatX);
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    int verbose = !rank || atoi(rank) == 0;
#ifdef ATTENTION_CUDNN
    char why[CDNN_WHY];
    if (cudnn_attention_init(&at->cd, B, T, NH, C / NH, why)) {
        at->cudnn = 1;
        at->stats_stride = cudnn_attention_stats_stride(B, NH, T);
        at->stats = (float *)attention_alloc((size_t)L * at->stats_stride * sizeof(float), "the attention statistics");
        size_t v = cudnnGetVersion();
        int det = cudnn_attention_deterministic(&at->cd, B, T);
        snprintf(at->desc, sizeof at->desc, "cuDNN %zu.%zu.%zu fused flash attention (saves (L,B,NH,T) fp32 "
                 "statistics: %s, not %s of probabilities; backward %s; reshape mode %s)", v / 10000, v % 10000 / 100,
                 v % 100, attention_size(sz, sizeof sz, (double)L * B * NH * T * 4),
                 attention_size(sz2, sizeof sz2, att_bytes), det ? "deterministic" : "not bitwise reproducible",
                 cdnn_reshape_mode_set() ? "view" : "the library's default");
        if (!det && verbose) fprintf(stderr, "note: cuDNN refused the deterministic attention backward (%s); its "
                                     "dQ is accumulated with atomics\n", at->cd.bwd_note);
    } else {
        fprintf(stderr, "warning: %s; using cuBLAS attention\n", why);
        snprintf(at->desc, sizeof at->desc, "cuBLAS batched GEMMs + fused softmax (cuDNN unavailable, see the "
                 "warning; saves (L,B,NH,T,T) probabilities: %s)", attention_size(sz, sizeof sz, att_bytes));
    }
#else
    snprintf(at->desc, sizeof at->desc, "cuBLAS batched GEMMs + fused softmax (%s; saves (L,B,NH,T,T) probabilities: "
             "%s)",
#if defined(ENABLE_CUDNN)
             "fp32 build: cuDNN's flash attention takes bf16/fp16 only",
#else
             "built without cuDNN; USE_CUDNN=1 adds it",
#endif
             attention_size(sz, sizeof sz, att_bytes));
    (void)sz2;
#endif
    if (!at->cudnn) attention_cublas_buffers(at);
    if (verbose) printf("attention: %s\n", at->desc);
}

/* "cuDNN" or "cuBLAS": the path running now */
static const char *attention_path(const Attention *at) { return at->cudnn ? "cuDNN" : "cuBLAS"; }

#ifdef ATTENTION_CUDNN
/* grows a buffer of the inference-only cuBLAS forward to n elements */
static void attention_grow(floatX **buf, size_t *have, size_t n, const char *what) {
    if (*have >= n) return;
    if (*buf) cudaCheck(cudaFree(*buf));
    *buf = (floatX *)attention_alloc(n * sizeof(floatX), what);
    *have = n;
}
#endif

/* out (B,T,C) = causal attention of layer l's qkv (B,T,3C). need_backward: a backward of this forward follows
 * (training; the model passes "has targets"), so what it needs is kept for layer l; 0 for sampling. */
static void attention_layer_forward(Attention *at, int l, floatX *out, const floatX *qkv, int B, int T,
                                    int need_backward, cudaStream_t s) {
#ifdef ATTENTION_CUDNN
    if (at->cudnn && !need_backward && !cudnn_attention_has_plan(&at->cd, B, T)) {
        attention_grow(&at->infer_att, &at->infer_att_elems, (size_t)B * at->NH * T * T, "sampling attention");
        attention_grow(&at->infer_scratch, &at->infer_scratch_elems, attention_scratch_elems(B, T, at->C),
                       "sampling attention");
        at->by_cudnn[l] = 0;
        attention_forward(at->bl, out, at->infer_att, at->infer_scratch, qkv, B, T, at->C, at->NH, s);
        return;
    }
    if (at->cudnn) {
        char why[CDNN_WHY];
        float *stats = at->stats + (size_t)l * at->stats_stride;
        if (cudnn_attention_forward(&at->cd, out, stats, qkv, B, T, s, why)) {
            at->by_cudnn[l] = 1;
            return;
        }
        attention_cudnn_failed(at, why);
    }
#endif
    at->by_cudnn[l] = 0;
    attention_forward(at->bl, out, at->att + l * at->att_max, at->scratch, qkv, B, T, at->C, at->NH, s);
}

/* dqkv (B,T,3C) OVERWRITTEN with d(loss)/d(qkv) of layer l, from dout (B,T,C) and that layer's forward input qkv
 * and output out (the cuDNN backward reads out; cuBLAS reads its saved probabilities). */
static void attention_layer_backward(Attention *at, int l, floatX *dqkv, const floatX *dout, const floatX *out,
                                     const floatX *qkv, int B, int T, cudaStream_t s) {
    floatX *att = NULL;
#ifdef ATTENTION_CUDNN
    if (at->by_cudnn[l] && at->cudnn) {
        char why[CDNN_WHY];
        const float *stats = at->stats + (size_t)l * at->stats_stride;
        if (cudnn_attention_backward(&at->cd, dqkv, dout, out, stats, qkv, B, T, s, why)) return;
        attention_cudnn_failed(at, why);
    }
#endif
    if (!at->att) {
        fprintf(stderr, "error: internal: attention backward of layer %d after a forward without targets\n", l);
        exit(1);
    }
    att = at->att + l * at->att_max;
    if (at->by_cudnn[l]) { /* forward ran on cuDNN: recompute the probabilities (its output goes to scratch) */
        floatX *y = at->scratch + attention_backward_scratch_elems(at->Bmax, at->Tmax, at->C, at->NH);
        attention_forward(at->bl, y, att, at->scratch, qkv, B, T, at->C, at->NH, s);
        at->by_cudnn[l] = 0;
    }
    attention_backward(at->bl, dqkv, at->scratch, dout, att, qkv, B, T, at->C, at->NH, s);
}

/* whether B x T fits what attention_init was sized for */
static int attention_fits(const Attention *at, int B, int T) {
    return B >= 1 && T >= 1 && (size_t)B * at->NH * T * T <= at->att_max && (size_t)B * T <= (size_t)at->Bmax * at->Tmax &&
           T <= at->Tmax;
}

static void attention_free(Attention *at) {
#ifdef ATTENTION_CUDNN
    cudnn_attention_free(&at->cd);
#endif
    if (at->att) cudaCheck(cudaFree(at->att));
    if (at->scratch) cudaCheck(cudaFree(at->scratch));
    if (at->stats) cudaCheck(cudaFree(at->stats));
    if (at->infer_att) cudaCheck(cudaFree(at->infer_att));
    if (at->infer_scratch) cudaCheck(cudaFree(at->infer_scratch));
    free(at->by_cudnn);
    memset(at, 0, sizeof *at);
}

#endif

/*
 * train_llama.cu - Llama on NVIDIA GPUs (one per rank, or ranks sharing one with --comm mpi): the same model,
 * flags, logs, data and checkpoints as train_llama.c, with forward and backward on the device (floatX = bf16
 * activations, parameters and gradients with fp32 accumulation; PRECISION=FP32 builds an all-fp32 version for
 * tight comparison with the CPU trainer).
 *
 * The architecture is train_llama.c's, layer for layer: untied token embedding and lm_head, pre-norm RMSNorm
 * blocks (cuda/rmsnorm.cuh, fused with the residual add before it), rotary position embeddings in the
 * rotate-half layout with the CPU's own angle table (cuda/rope.cuh), grouped-query attention (cuda/gqa.cuh: the
 * key/value heads expanded into cuda/attention.cuh's Attention, cuDNN's fused flash attention in builds with it
 * (train_llamacu_cudnn, USE_CUDNN=1), else batched GEMMs and softmax), SwiGLU MLP with separate gate (w1) and up (w3) projections
 * (cuda/swiglu.cuh), no biases; linear layers through cuBLASLt (cuda/matmul.cuh), softmax + cross-entropy fused
 * with its gradient (cuda/classifier.cuh).
 *
 * How it fits the shared loop (trainer/train.c, common/model.h), two ways, exactly as train_gpt.cu:
 *   device update (adamw, adams, scape; Model.create_updater -> cuda/dist.h): the GPU holds the fp32 master
 *     weights, the optimizer state and the floatX copy the forward reads. Each backward adds its floatX
 *     gradients, bucket by bucket (layer L-1 first, ..., layer 0, then wte + norm_f + lm_head), into an fp32
 *     accumulator on the device and, on the last micro-step, hands each finished bucket to the update, whose
 *     all-reduce (NCCL, or host-staged MPI) overlaps the rest of backward. No per-step copy of parameters or gradients crosses PCIe; save()
 *     downloads the master for the model file, and sampling runs the forward on the device weights.
 *   host update (topk-ef, or --update host): the host model of models/llama_host.c (train_llama.c's own
 *     table, init and model files) owns the fp32 master parameters and gradients in host memory. Each forward
 *     uploads the master parameters into an fp32 device copy and converts them to floatX; each backward computes
 *     this micro-step's gradients into a zeroed floatX buffer, adds them into the host gradients and then reports
 *     every bucket final; the loop's DistOptim (SCAPE, MPI on host buffers, so several ranks can share one GPU)
 *     does the rest.
 * Either way checkpoints and logs are the CPU trainer's. Not yet here: activation recomputation (and, without
 * cuDNN, flash attention: the cuBLAS path stores the (B,NH,T,T) probabilities per layer).
 *
 * Shapes: B batch, T sequence, C channels, NH query heads, NKV key/value heads, hd = C/NH, KVC = NKV*hd, F SwiGLU
 * hidden size, L layers, V vocabulary, Vp padded vocabulary, N = B*T rows.
 */
#include <math.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/encoder.cuh"
#include "cuda/matmul.cuh"
#include "cuda/rmsnorm.cuh"
#include "cuda/rope.cuh"
#include "cuda/gqa.cuh"
#include "cuda/swiglu.cuh"
#include "cuda/classifier.cuh"
#include "cuda/trainer.cuh"
#include "models/llama_host.h"
#include "cuda/dist.h"
extern "C" {
#include "trainer/train.h"
#include "common/util.h"
}

/* The 12 tensors of the flat buffer (train_llama.c's LlamaTensors), each pointing at layer 0's slice; the layers
 * of a per-layer tensor follow contiguously (tensor-major order). Linear weights are (out, in). */
typedef struct {
    floatX *wte;       /* (Vp, C) */
    floatX *attn_norm; /* (L, C) */
    floatX *wq;        /* (L, C, C) */
    floatX *wk, *wv;   /* (L, KVC, C) */
    floatX *wo;        /* (L, C, C) */
    floatX *ffn_norm;  /* (L, C) */
    floatX *w1, *w3;   /* (L, F, C) gate, up */
    floatX *w2;        /* (L, C, F) down */
    floatX *norm_f;    /* (C) */
    floatX *lm_head;   /* (Vp, C) */
} Tensors;

/* Device activations; per-layer ones hold L slices of Bmax*Tmax rows (a smaller forward uses a prefix of each). */
typedef struct {
    floatX *x0;                /* (N,C) embedded tokens: the residual stream entering layer 0 */
    floatX *h1;                /* (L,N,C) attn_norm output */
    float *rstd1;              /* (L,N) */
    floatX *q;                 /* (L,N,C) queries after RoPE */
    floatX *k, *v;             /* (L,N,KVC) keys after RoPE, values */
    floatX *atty;              /* (L,N,C) attention output, heads concatenated */
    floatX *x2;                /* (L,N,C) residual after attention */
    floatX *h2;                /* (L,N,C) ffn_norm output */
    float *rstd2;              /* (L,N) */
    floatX *gate, *up, *swi;   /* (L,N,F) h2 w1^T, h2 w3^T, silu(gate) * up */
    floatX *x3;                /* (L,N,C) residual after the MLP: the layer's output */
    floatX *hf;                /* (N,C) norm_f output */
    float *rstdf;              /* (N) */
    floatX *logits;            /* (N,Vp); the backward turns it into dlogits */
    float *losses;             /* (N) per-row cross-entropy */
    floatX *proj;              /* (N,C) wo / w2 output; dead once the next fused residual + norm has added it */
    /* backward buffers, reused by every layer (a layer's activation gradients are dead once it is done) */
    floatX *dres;              /* (N,C) gradient of the residual stream */
    floatX *dc;                /* (N,C) d(h1) / d(atty) / d(h2) / d(hf) */
    floatX *dq;                /* (N,C) */
    floatX *dk, *dv;           /* (N,KVC) */
    floatX *dgate, *dup;       /* (N,F) d(swi) then d(gate); d(up) */
    floatX *qkv;               /* (N,3C) one layer's q, k, v packed for the attention (gqa_expand_qkv) */
    floatX *dqkv;              /* (N,3C) its gradient, folded back into dq, dk, dv (gqa_reduce_dqkv) */
    float *fscratch;           /* (rmsnorm_backward_scratch_floats) the gains' partial sums */
    float *rope_cos, *rope_sin; /* (maxT, hd/2) train_llama.c's RoPE table, constant */
} Acts;

typedef struct {
    Model base;       /* params, grads, table: the host model's (shared, not copied) */
    Model *host;      /* models/llama_host.c model: owns table, host params/grads, writes model files */
    int L, C, NH, NKV, hd, KVC, F, V, Vp, maxT, Bmax, Tmax, B, T, have_targets;
    float eps;        /* RMSNorm epsilon */
    Attention attn;   /* cuDNN or cuBLAS attention and what each layer keeps for backward (cuda/attention.cuh) */
    DeviceParams dp;  /* fp32 master, floatX params and gradients, host or device update (cuda/trainer.cuh) */
    Tensors p, g;
    Acts a;
    DeviceBatch batch; /* tokens, the embedding-backward plan, losses (cuda/trainer.cuh) */
    float *h_logits;  /* (N,Vp) for Model.logits, allocated on first use */
    Blas bl;
    cudaStream_t s;
} LlamaCU;

static void point_tensors(Tensors *t, floatX *base, const ParamTable *tab) {
    static const char *names[12] = {"wte", "attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w3", "w2",
                                    "norm_f", "lm_head"};
    floatX **ptrs[12] = {&t->wte, &t->attn_norm, &t->wq, &t->wk, &t->wv, &t->wo, &t->ffn_norm, &t->w1, &t->w3,
                         &t->w2, &t->norm_f, &t->lm_head};
    for (int i = 0; i < 12; i++) {
        int layer = (i >= 1 && i <= 9) ? 0 : -1;
        int idx = param_table_find(tab, names[i], layer);
        if (idx < 0) fatal("internal: tensor %s missing from the Llama table", names[i]);
        *ptrs[i] = base + tab->slices[idx].offset;
    }
}


/* Token embedding without positions (train_llama.c embedding_forward): out[n,:] = wte[inp[n],:].
 * out (N,C), inp (N) device token ids in [0,V), wte (Vp,C). Positions enter through RoPE. */
__global__ static void embedding_forward_kernel(floatX *out, const int *inp, const floatX *wte, int N, int C) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)N * C) return;
    long n = i / C;
    out[i] = wte[(long)inp[n] * C + i % C];
}

/* ---------------------------------------------------------------------------------------------------------------
 * Forward and backward (train_llama.c's llama_forward / llama_backward, step for step).
 * --------------------------------------------------------------------------------------------------------------- */

static float llamacu_forward(Model *model, const int *inputs, const int *targets, int B, int T) {
    LlamaCU *m = (LlamaCU *)model;
    int L = m->L, C = m->C, NH = m->NH, NKV = m->NKV, hd = m->hd, KVC = m->KVC, F = m->F, V = m->V, Vp = m->Vp;
    float eps = m->eps;
    if (B < 1 || T < 1 || T > m->maxT || (size_t)B * T > (size_t)m->Bmax * m->Tmax || !attention_fits(&m->attn, B, T))
        fatal("forward with B=%d T=%d does not fit this model (sized for B=%d T=%d, maximum sequence length %d); "
              "use a smaller batch or sequence", B, T, m->Bmax, m->Tmax, m->maxT);
    size_t N = (size_t)B * T, LN = (size_t)m->Bmax * m->Tmax; /* LN: per-layer stride in rows */
    cudaStream_t s = m->s;
    device_batch_upload(&m->batch, inputs, targets, N, V, "model's tokenizer", s);
    m->B = B;
    m->T = T;
    m->have_targets = targets != NULL;

    device_params_upload(&m->dp); /* host update: the loop may have changed the host parameters */

    Tensors *p = &m->p;
    Acts *a = &m->a;
    Blas *bl = &m->bl;
    int n = (int)N;
    embedding_forward_kernel<<<ceil_div((long)N * C, 256), 256, 0, s>>>(a->x0, m->batch.d_inputs, p->wte, n, C);
    cudaCheckLaunch();
    for (int l = 0; l < L; l++) {
        size_t lz = (size_t)l;
        /* this layer's weights */
        const floatX *attn_norm = p->attn_norm + lz * C, *ffn_norm = p->ffn_norm + lz * C;
        const floatX *wq = p->wq + lz * C * C, *wk = p->wk + lz * KVC * C, *wv = p->wv + lz * KVC * C;
        const floatX *wo = p->wo + lz * C * C, *w1 = p->w1 + lz * F * C, *w3 = p->w3 + lz * F * C;
        const floatX *w2 = p->w2 + lz * C * F;
        /* this layer's activations */
        floatX *h1 = a->h1 + lz * LN * C, *q = a->q + lz * LN * C, *k = a->k + lz * LN * KVC;
        floatX *v = a->v + lz * LN * KVC, *atty = a->atty + lz * LN * C;
        floatX *x2 = a->x2 + lz * LN * C, *h2 = a->h2 + lz * LN * C, *gate = a->gate + lz * LN * F;
        floatX *up = a->up + lz * LN * F, *swi = a->swi + lz * LN * F;
        float *rstd1 = a->rstd1 + lz * LN, *rstd2 = a->rstd2 + lz * LN;
        floatX *x = l == 0 ? a->x0 : a->x3 + (lz - 1) * LN * C;

        /* attention block: x2 = x + wo(attention(rope(wq h1), rope(wk h1), wv h1)), h1 = rmsnorm(x) */
        if (l == 0)
            rmsnorm_forward(h1, rstd1, x, attn_norm, n, C, eps, s);
        else /* x = x3 of the previous layer = its x2 + its MLP output (still in proj), fused with this norm */
            fused_residual_rmsnorm_forward(x, h1, rstd1, a->x2 + (lz - 1) * LN * C, a->proj, attn_norm, n, C, eps, s);
        matmul_forward(bl, q, NULL, h1, wq, NULL, n, C, C, s);
        matmul_forward(bl, k, NULL, h1, wk, NULL, n, C, KVC, s);
        matmul_forward(bl, v, NULL, h1, wv, NULL, n, C, KVC, s);
        rope_forward(q, a->rope_cos, a->rope_sin, B, T, NH, hd, s);
        rope_forward(k, a->rope_cos, a->rope_sin, B, T, NKV, hd, s);
        gqa_expand_qkv(a->qkv, q, k, v, B, T, NH, NKV, hd, s);
        attention_layer_forward(&m->attn, l, atty, a->qkv, B, T, targets != NULL, s);
        matmul_forward(bl, a->proj, NULL, atty, wo, NULL, n, C, C, s);
        /* MLP block: x3 = x2 + w2(silu(w1 h2) * w3 h2), h2 = rmsnorm(x2); x2 = x + proj fused with the norm */
        fused_residual_rmsnorm_forward(x2, h2, rstd2, x, a->proj, ffn_norm, n, C, eps, s);
        matmul_forward(bl, gate, NULL, h2, w1, NULL, n, C, F, s);
        matmul_forward(bl, up, NULL, h2, w3, NULL, n, C, F, s);
        swiglu_forward(swi, gate, up, (long)N * F, s);
        matmul_forward(bl, a->proj, NULL, swi, w2, NULL, n, F, C, s);
    }
    /* the last layer's x3 = x2 + proj, fused with the final norm */
    fused_residual_rmsnorm_forward(a->x3 + (size_t)(L - 1) * LN * C, a->hf, a->rstdf, a->x2 + (size_t)(L - 1) * LN * C,
                                   a->proj, p->norm_f, n, C, eps, s);
    matmul_forward(bl, a->logits, NULL, a->hf, p->lm_head, NULL, n, C, Vp, s);
    if (!targets) {
        cudaCheck(cudaStreamSynchronize(s));
        return 0.0f;
    }
    fused_classifier(a->logits, a->losses, m->batch.d_targets, n, V, Vp, 0.0f, s);
    device_batch_plan_backward(&m->batch, N, s); /* host work while the GPU runs the forward */
    return device_batch_mean_loss(&m->batch, a->losses, N, s);
}

static void llamacu_backward(Model *model, float loss_scale, BucketReadyFn on_bucket, void *ctx) {
    LlamaCU *m = (LlamaCU *)model;
    if (!m->have_targets) fatal("internal: backward called after a forward without targets");
    m->have_targets = 0; /* the logits are about to be overwritten: a second backward would be wrong */
    int L = m->L, C = m->C, NH = m->NH, NKV = m->NKV, hd = m->hd, KVC = m->KVC, F = m->F, V = m->V, Vp = m->Vp;
    int B = m->B, T = m->T;
    size_t N = (size_t)B * T, LN = (size_t)m->Bmax * m->Tmax, P = m->base.table.total;
    int n = (int)N;
    cudaStream_t s = m->s;
    Tensors *p = &m->p, *g = &m->g;
    Acts *a = &m->a;
    Blas *bl = &m->bl;
    cudaCheck(cudaMemsetAsync(m->dp.grads, 0, P * sizeof(floatX), s));

    /* loss -> logits -> norm_f -> the last layer's output */
    fused_classifier(a->logits, a->losses, m->batch.d_targets, n, V, Vp, loss_scale / (float)N, s);
    matmul_backward(bl, a->dc, g->lm_head, NULL, NULL, a->logits, a->hf, p->lm_head, n, C, Vp, 0.0f, s);
    cudaCheck(cudaMemsetAsync(a->dres, 0, N * C * sizeof(floatX), s));
    rmsnorm_backward(a->dres, g->norm_f, a->fscratch, a->dc, a->x3 + (size_t)(L - 1) * LN * C, p->norm_f, a->rstdf,
                     n, C, s);

    for (int l = L - 1; l >= 0; l--) {
        size_t lz = (size_t)l;
        const floatX *attn_norm = p->attn_norm + lz * C, *ffn_norm = p->ffn_norm + lz * C;
        const floatX *wq = p->wq + lz * C * C, *wk = p->wk + lz * KVC * C, *wv = p->wv + lz * KVC * C;
        const floatX *wo = p->wo + lz * C * C, *w1 = p->w1 + lz * F * C, *w3 = p->w3 + lz * F * C;
        const floatX *w2 = p->w2 + lz * C * F;
        floatX *dattn_norm = g->attn_norm + lz * C, *dffn_norm = g->ffn_norm + lz * C;
        floatX *dwq = g->wq + lz * C * C, *dwk = g->wk + lz * KVC * C, *dwv = g->wv + lz * KVC * C;
        floatX *dwo = g->wo + lz * C * C, *dw1 = g->w1 + lz * F * C, *dw3 = g->w3 + lz * F * C;
        floatX *dw2 = g->w2 + lz * C * F;
        const floatX *x = l == 0 ? a->x0 : a->x3 + (lz - 1) * LN * C;
        const floatX *h1 = a->h1 + lz * LN * C, *q = a->q + lz * LN * C, *k = a->k + lz * LN * KVC;
        const floatX *v = a->v + lz * LN * KVC, *atty = a->atty + lz * LN * C;
        const floatX *x2 = a->x2 + lz * LN * C, *h2 = a->h2 + lz * LN * C, *gate = a->gate + lz * LN * F;
        const floatX *up = a->up + lz * LN * F, *swi = a->swi + lz * LN * F;
        const float *rstd1 = a->rstd1 + lz * LN, *rstd2 = a->rstd2 + lz * LN;

        /* dres is d(x3); x3 = x2 + w2(swi), so d(w2 output) = dres */
        matmul_backward(bl, a->dgate, dw2, NULL, NULL, a->dres, swi, w2, n, F, C, 0.0f, s); /* dgate = d(swi) */
        swiglu_backward_inplace(a->dgate, a->dup, gate, up, (long)N * F, s);
        matmul_backward(bl, a->dc, dw1, NULL, NULL, a->dgate, h2, w1, n, C, F, 0.0f, s);
        matmul_backward(bl, a->dc, dw3, NULL, NULL, a->dup, h2, w3, n, C, F, 1.0f, s); /* dc += */
        rmsnorm_backward(a->dres, dffn_norm, a->fscratch, a->dc, x2, ffn_norm, rstd2, n, C, s);
        /* dres is now d(x2); x2 = x + wo(atty) */
        matmul_backward(bl, a->dc, dwo, NULL, NULL, a->dres, atty, wo, n, C, C, 0.0f, s); /* dc = d(atty) */
        gqa_expand_qkv(a->qkv, q, k, v, B, T, NH, NKV, hd, s); /* the forward's packing, redone */
        attention_layer_backward(&m->attn, l, a->dqkv, a->dc, atty, a->qkv, B, T, s);
        gqa_reduce_dqkv(a->dq, a->dk, a->dv, a->dqkv, B, T, NH, NKV, hd, s);
        /* the gradients w.r.t. the rotated q, k rotate back to the gradients w.r.t. wq h1, wk h1 */
        rope_backward(a->dq, a->rope_cos, a->rope_sin, B, T, NH, hd, s);
        rope_backward(a->dk, a->rope_cos, a->rope_sin, B, T, NKV, hd, s);
        matmul_backward(bl, a->dc, dwq, NULL, NULL, a->dq, h1, wq, n, C, C, 0.0f, s); /* dc = d(h1) */
        matmul_backward(bl, a->dc, dwk, NULL, NULL, a->dk, h1, wk, n, C, KVC, 1.0f, s);
        matmul_backward(bl, a->dc, dwv, NULL, NULL, a->dv, h1, wv, n, C, KVC, 1.0f, s);
        rmsnorm_backward(a->dres, dattn_norm, a->fscratch, a->dc, x, attn_norm, rstd1, n, C, s);
        /* dres is now d(this layer's input) */
        if (m->dp.device_update) device_params_bucket_done(&m->dp, L - 1 - l, on_bucket, ctx); /* layer l final */
    }
    /* dwte += scatter of dres: each distinct token's row summed over its rows in increasing order, no atomics */
    const DeviceBatch *db = &m->batch; /* the plan built during the forward */
    dim3 grid(db->plan.nseg, ceil_div(C, 256));
    encoder_backward_wte_kernel<<<grid, 256, 0, s>>>(g->wte, a->dres, db->d_order, db->d_seg_start, db->d_seg_tok, C);
    cudaCheckLaunch();
    if (m->dp.device_update) /* wte, norm_f and lm_head (the last two were final since the start) */
        device_params_bucket_done(&m->dp, L, on_bucket, ctx);
    else
        device_params_add_to_host(&m->dp, on_bucket, ctx);
}

static const float *llamacu_logits(const Model *model) {
    LlamaCU *m = (LlamaCU *)model;
    return logits_to_host(&m->h_logits, (size_t)m->Bmax * m->Tmax, m->a.logits, (size_t)m->B * m->T, m->Vp, m->s);
}

static void llamacu_save(const Model *model, const char *path) {
    LlamaCU *m = (LlamaCU *)model;
    device_params_to_host(&m->dp); /* device update: the GPU holds the master weights the writer reads */
    m->host->save(m->host, path);
}

static void llamacu_free(Model *model) {
    LlamaCU *m = (LlamaCU *)model;
    if (!m) return;
    cudaCheck(cudaStreamSynchronize(m->s));
    Acts *a = &m->a;
    void *dev[] = {a->x0, a->h1, a->rstd1, a->q, a->k, a->v, a->qkv, a->dqkv, a->atty, a->x2, a->h2,
                   a->rstd2, a->gate, a->up, a->swi, a->x3, a->hf, a->rstdf, a->logits, a->losses, a->proj, a->dres,
                   a->dc, a->dq, a->dk, a->dv, a->dgate, a->dup, a->fscratch, a->rope_cos,
                   a->rope_sin};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaCheck(cudaFree(dev[i]));
    device_params_free(&m->dp);
    device_batch_free(&m->batch);
    attention_free(&m->attn);
    free(m->h_logits);
    blas_free(&m->bl);
    cudaCheck(cudaStreamDestroy(m->s));
    m->host->free(m->host);
    free(m);
}

/* ModelFamily.create: the host model (file or seeded init, identical to the CPU trainer's), then device memory
 * for B x T. fatal() with the fix if there is no GPU, T is too long, a width does not suit cuBLASLt, or memory runs
 * out. */
static Model *llamacu_create(const char *spec, const char *init_path, uint64_t seed, int B, int T) {
    if (B < 1 || T < 1) fatal("--batch %d / --seq %d must both be at least 1", B, T);
    select_gpu("train_llamacu", "train_llama");
    /* activations for one token only: the CPU model serves for its parameters, table and files */
    Model *host = llama_host_create(spec, init_path, seed, 1, 1);
    LlamaHostConfig c = llama_host_config(host);
    if (T > c.maxT)
        fatal("--seq %d exceeds the model's maximum sequence length %d; use --seq <= %d", T, c.maxT, c.maxT);
    int hd = c.C / c.NH, KVC = c.NKV * hd;
    /* cuBLASLt needs 16-byte aligned rows and tensors: every GEMM width (C, KVC, F) a multiple of 8 */
    if (c.C % 8 != 0 || KVC % 8 != 0 || c.F % 8 != 0)
        fatal("the CUDA trainer needs C=%d, NKV*hd=%d and F=%d all divisible by 8 for cuBLASLt; choose another "
              "--model (e.g. f<F> with F a multiple of 8)", c.C, KVC, c.F);
    LlamaCU *m = (LlamaCU *)xcalloc(1, sizeof *m, "Llama CUDA model");
    m->host = host;
    Model *b = &m->base;
    b->family = host->family;
    b->table = host->table; /* shared; the host model frees it */
    b->params = host->params;
    b->grads = host->grads;
    b->vocab_size = host->vocab_size;
    b->padded_vocab_size = host->padded_vocab_size;
    b->max_seq_len = host->max_seq_len;
    b->num_layers = host->num_layers;
    b->channels = host->channels;
    b->num_heads = host->num_heads;
    b->flops_per_token = host->flops_per_token;
    b->tokenizer = host->tokenizer;
    b->forward = llamacu_forward;
    b->backward = llamacu_backward;
    b->logits = llamacu_logits;
    b->save = llamacu_save;
    b->free = llamacu_free;
    m->L = c.L; m->C = c.C; m->NH = c.NH; m->NKV = c.NKV; m->hd = hd; m->KVC = KVC; m->F = c.F; m->V = c.V;
    m->Vp = c.Vp; m->maxT = c.maxT; m->eps = c.norm_eps; m->Bmax = B; m->Tmax = T;

    cudaCheck(cudaStreamCreate(&m->s));
    blas_init(&m->bl);
    size_t N = (size_t)B * T, L = m->L, C = m->C, F = m->F, Vp = m->Vp, kvc = (size_t)KVC;
    device_params_alloc(&m->dp, b, m->s);
    point_tensors(&m->p, m->dp.params, &b->table);
    point_tensors(&m->g, m->dp.grads, &b->table);
    int nb = b->table.num_buckets;
    if (nb != m->L + 1) fatal("internal: the Llama table has %d gradient buckets, expected L+1 = %d", nb, m->L + 1);
    Acts *a = &m->a;
    size_t X = sizeof(floatX);
    a->x0 = (floatX *)dalloc(N * C * X, "activations");
    a->h1 = (floatX *)dalloc(L * N * C * X, "activations");
    a->rstd1 = (float *)dalloc(L * N * 4, "activations");
    a->q = (floatX *)dalloc(L * N * C * X, "activations");
    a->k = (floatX *)dalloc(L * N * kvc * X, "activations");
    a->v = (floatX *)dalloc(L * N * kvc * X, "activations");
    a->atty = (floatX *)dalloc(L * N * C * X, "activations");
    a->x2 = (floatX *)dalloc(L * N * C * X, "activations");
    a->h2 = (floatX *)dalloc(L * N * C * X, "activations");
    a->rstd2 = (float *)dalloc(L * N * 4, "activations");
    a->gate = (floatX *)dalloc(L * N * F * X, "activations");
    a->up = (floatX *)dalloc(L * N * F * X, "activations");
    a->swi = (floatX *)dalloc(L * N * F * X, "activations");
    a->x3 = (floatX *)dalloc(L * N * C * X, "activations");
    a->hf = (floatX *)dalloc(N * C * X, "activations");
    a->rstdf = (float *)dalloc(N * 4, "activations");
    a->logits = (floatX *)dalloc(N * Vp * X, "the logits");
    a->losses = (float *)dalloc(N * 4, "the losses");
    a->proj = (floatX *)dalloc(N * C * X, "activations");
    a->dres = (floatX *)dalloc(N * C * X, "gradient buffers");
    a->dc = (floatX *)dalloc(N * C * X, "gradient buffers");
    a->dq = (floatX *)dalloc(N * C * X, "gradient buffers");
    a->dk = (floatX *)dalloc(N * kvc * X, "gradient buffers");
    a->dv = (floatX *)dalloc(N * kvc * X, "gradient buffers");
    a->dgate = (floatX *)dalloc(N * F * X, "gradient buffers");
    a->dup = (floatX *)dalloc(N * F * X, "gradient buffers");
    a->qkv = (floatX *)dalloc(N * 3 * C * X, "attention buffers");
    a->dqkv = (floatX *)dalloc(N * 3 * C * X, "attention buffers");
    attention_init(&m->attn, &m->bl, m->L, B, T, m->C, m->NH); /* cuDNN or cuBLAS; prints "attention: ..." */
    snprintf(b->desc, sizeof b->desc, "%.36s, CUDA " PRECISION_NAME ", %s attn", host->desc, attention_path(&m->attn));
    a->fscratch = (float *)dalloc(rmsnorm_backward_scratch_floats((int)N, (int)C) * 4, "reduction scratch");
    /* train_llama.c's own angle table for every position the model allows */
    size_t nrope = (size_t)c.maxT * (hd / 2);
    float *hcos = (float *)xmalloc(nrope * 4, "RoPE table"), *hsin = (float *)xmalloc(nrope * 4, "RoPE table");
    llama_host_rope_table(hcos, hsin, c.maxT, hd, (double)c.rope_theta);
    a->rope_cos = (float *)dalloc(nrope * 4, "the RoPE table");
    a->rope_sin = (float *)dalloc(nrope * 4, "the RoPE table");
    cudaCheck(cudaMemcpy(a->rope_cos, hcos, nrope * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(a->rope_sin, hsin, nrope * 4, cudaMemcpyHostToDevice));
    free(hcos);
    free(hsin);
    device_batch_create(&m->batch, N, (int)Vp);
    return b;
}

#if !defined(TESTING) || defined(TESTING_DEVICE_UPDATE)
/* Model.create_updater: the device-resident update for adamw, adams and scape, NULL (the loop's host update) for
 * topk-ef: cuda/trainer.cuh's device_params_create_updater. (Compiled into the trainer and into
 * test/gpu/test_llamacu_update.cu, which link cuda/dist.o.) */
static Updater *llamacu_create_updater(Model *model, const UpdaterConfig *cfg) {
    return device_params_create_updater(&((LlamaCU *)model)->dp, cfg);
}
#endif

#ifndef TESTING
static Model *llamacu_create_trainer(const char *spec, const char *init_path, uint64_t seed, int B, int T) {
    Model *model = llamacu_create(spec, init_path, seed, B, T);
    model->create_updater = llamacu_create_updater;
    return model;
}

static ModelFamily llamacu_family;

int main(int argc, char **argv) {
    const ModelFamily *cpu = llama_host_family();
    llamacu_family = *cpu;
    llamacu_family.create = llamacu_create_trainer;
    return train_main(argc, argv, &llamacu_family);
}
#endif

/*
 * train_gpt.cu - GPT-2 on NVIDIA GPUs (one per rank, or ranks sharing one with --comm mpi): the same model,
 * flags, logs, data and checkpoints as train_gpt.c, with forward and backward on the device (floatX = bf16
 * activations, parameters and gradients with fp32 accumulation; PRECISION=FP32 builds an all-fp32 version for
 * tight comparison with the CPU trainer).
 *
 * How it fits the shared loop (trainer/train.c, common/model.h), two ways:
 *   device update (adamw, adams, scape; Model.create_updater -> cuda/dist.h): the GPU holds the fp32 master
 *     weights, the optimizer state and the floatX copy the forward reads. Each backward adds its floatX
 *     gradients, bucket by bucket (one layer at a time), into an fp32 accumulator on the device and, on the last
 *     micro-step, hands each finished bucket to the update, whose all-reduce (NCCL, or host-staged MPI) overlaps
 *     the rest of backward.
 *     No per-step copy of parameters or gradients crosses PCIe; save() downloads the master for the model file.
 *   host update (topk-ef, or --update host): the host model of models/gpt2_host.c (train_gpt.c's table, init and
 *     model files) owns the fp32 master parameters and gradients in host memory. Each forward uploads the master
 *     parameters and converts them to floatX; each backward computes this micro-step's gradients into a zeroed
 *     floatX buffer, adds them into the host gradients and reports every bucket final; the loop's DistOptim
 *     (MPI on host buffers, so several ranks can share one GPU) does the rest.
 * Either way checkpoints and logs are the CPU trainer's; the parameter-side plumbing of both ways is
 * cuda/trainer.cuh's DeviceParams. Attention is cuda/attention.cuh's Attention: cuDNN's fused flash attention in
 * builds with cuDNN (USE_CUDNN=1, or train_gptcu_cudnn; bf16), keeping (B,NH,T) statistics per layer, else cuBLAS
 * GEMMs keeping the (B,NH,T,T) probabilities; the start-up line names the one in use.
 *
 * Shapes: B batch, T sequence, C channels, NH heads, L layers, V vocabulary, Vp padded vocabulary, N = B*T.
 */
#include <math.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/encoder.cuh"
#include "cuda/layernorm.cuh"
#include "cuda/gelu.cuh"
#include "cuda/matmul.cuh"
#include "cuda/attention.cuh"
#include "cuda/classifier.cuh"
#include "cuda/trainer.cuh"
#include "models/gpt2_host.h"
#include "cuda/dist.h"
extern "C" {
#include "trainer/train.h"
#include "common/util.h"
}

/* the 16 tensors of the flat buffer, each pointing at layer 0's slice (layers follow contiguously) */
typedef struct {
    floatX *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
        *fcprojb, *lnfw, *lnfb;
} Tensors;

/* device activations; per-layer ones hold L slices of Bmax*Tmax rows */
typedef struct {
    floatX *encoded;                 /* (N,C) */
    floatX *ln1, *qkv, *atty;        /* (L,N,C) (L,N,3C) (L,N,C); attention's own state lives in GPT2CU.attn */
    floatX *attproj, *residual2, *ln2, *fch, *fch_gelu, *fcproj, *residual3; /* (L,N,C|4C) */
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd; /* (L,N) */
    floatX *lnf;                     /* (N,C) */
    float *lnf_mean, *lnf_rstd;      /* (N) */
    floatX *logits;                  /* (N,Vp); the backward turns it into dlogits */
    float *losses;                   /* (N) per-row cross-entropy */
    floatX *dres, *dc, *d4c;         /* (N,C) (N,C) (N,4C) gradient buffers of backward */
    float *fscratch;                 /* layernorm / bias-gradient partial sums */
} Acts;

typedef struct {
    Model base;       /* params, grads, table: the host model's (shared, not copied) */
    Model *host;      /* models/gpt2_host.c model: owns table, host params/grads, writes model files */
    int L, C, NH, V, Vp, maxT, Bmax, Tmax, B, T, have_targets;
    DeviceParams dp;  /* fp32 master, floatX params and gradients, host or device update (cuda/trainer.cuh) */
    Tensors p, g;
    Acts a;
    DeviceBatch batch; /* tokens, the embedding-backward plan, losses (cuda/trainer.cuh) */
    float *h_logits;  /* (N,Vp) for Model.logits, allocated on first use */
    Blas bl;
    Attention attn;   /* cuDNN or cuBLAS attention and what each layer keeps for backward (cuda/attention.cuh) */
    cudaStream_t s;
} GPT2CU;

static void point_tensors(Tensors *t, floatX *base, const ParamTable *tab) {
    static const char *names[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    floatX **ptrs[16] = {&t->wte, &t->wpe, &t->ln1w, &t->ln1b, &t->qkvw, &t->qkvb, &t->attprojw, &t->attprojb,
                         &t->ln2w, &t->ln2b, &t->fcw, &t->fcb, &t->fcprojw, &t->fcprojb, &t->lnfw, &t->lnfb};
    for (int i = 0; i < 16; i++) {
        int layer = (i >= 2 && i < 14) ? 0 : -1;
        int idx = param_table_find(tab, names[i], layer);
        if (idx < 0) fatal("internal: tensor %s missing from the GPT-2 table", names[i]);
        *ptrs[i] = base + tab->slices[idx].offset;
    }
}

static float gpt2cu_forward(Model *model, const int *inputs, const int *targets, int B, int T) {
    GPT2CU *m = (GPT2CU *)model;
    int L = m->L, C = m->C, V = m->V, Vp = m->Vp;
    if (B < 1 || T < 1 || T > m->maxT || (size_t)B * T > (size_t)m->Bmax * m->Tmax || !attention_fits(&m->attn, B, T))
        fatal("forward with B=%d T=%d does not fit this model (sized for B=%d T=%d, maximum sequence length %d); "
              "use a smaller batch or sequence", B, T, m->Bmax, m->Tmax, m->maxT);
    size_t N = (size_t)B * T, LN = (size_t)m->Bmax * m->Tmax;
    cudaStream_t s = m->s;
    device_batch_upload(&m->batch, inputs, targets, N, V, "GPT-2 tokenizer", s);
    m->B = B;
    m->T = T;
    m->have_targets = targets != NULL;

    device_params_upload(&m->dp); /* host update: the loop may have changed the host parameters */

    Tensors *p = &m->p;
    Acts *a = &m->a;
    Blas *bl = &m->bl;
    int n = (int)N;
    encoder_forward(a->encoded, m->batch.d_inputs, p->wte, p->wpe, B, T, C, s);
    for (int l = 0; l < L; l++) {
        floatX *ln1 = a->ln1 + l * LN * C, *qkv = a->qkv + l * LN * 3 * C, *atty = a->atty + l * LN * C;
        floatX *attproj = a->attproj + l * LN * C;
        floatX *residual2 = a->residual2 + l * LN * C, *ln2 = a->ln2 + l * LN * C, *fch = a->fch + l * LN * 4 * C;
        floatX *fch_gelu = a->fch_gelu + l * LN * 4 * C, *fcproj = a->fcproj + l * LN * C;
        float *ln1_mean = a->ln1_mean + l * LN, *ln1_rstd = a->ln1_rstd + l * LN;
        float *ln2_mean = a->ln2_mean + l * LN, *ln2_rstd = a->ln2_rstd + l * LN;
        floatX *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * LN * C;
        if (l == 0)
            layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p->ln1w, p->ln1b, n, C, s);
        else /* residual3 of the previous layer = residual2 + fcproj, fused with this layer's first norm */
            fused_residual_layernorm_forward(residual, ln1, ln1_mean, ln1_rstd, a->residual2 + (l - 1) * LN * C,
                                             a->fcproj + (l - 1) * LN * C, p->ln1w + l * C, p->ln1b + l * C, n, C, s);
        matmul_forward(bl, qkv, NULL, ln1, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + l * 3 * C, n, C, 3 * C, s);
        attention_layer_forward(&m->attn, l, atty, qkv, B, T, targets != NULL, s);
        matmul_forward(bl, attproj, NULL, atty, p->attprojw + (size_t)l * C * C, p->attprojb + l * C, n, C, C, s);
        fused_residual_layernorm_forward(residual2, ln2, ln2_mean, ln2_rstd, residual, attproj, p->ln2w + l * C,
                                         p->ln2b + l * C, n, C, s);
        matmul_forward(bl, fch_gelu, fch, ln2, p->fcw + (size_t)l * 4 * C * C, p->fcb + l * 4 * C, n, C, 4 * C, s);
        matmul_forward(bl, fcproj, NULL, fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + l * C, n,
                       4 * C, C, s);
    }
    fused_residual_layernorm_forward(a->residual3 + (L - 1) * LN * C, a->lnf, a->lnf_mean, a->lnf_rstd,
                                     a->residual2 + (L - 1) * LN * C, a->fcproj + (L - 1) * LN * C, p->lnfw, p->lnfb,
                                     n, C, s);
    matmul_forward(bl, a->logits, NULL, a->lnf, p->wte, NULL, n, C, Vp, s); /* lm_head tied to wte */
    if (!targets) {
        cudaCheck(cudaStreamSynchronize(s));
        return 0.0f;
    }
    fused_classifier(a->logits, a->losses, m->batch.d_targets, n, V, Vp, 0.0f, s);
    device_batch_plan_backward(&m->batch, N, s); /* host work while the GPU runs the forward */
    return device_batch_mean_loss(&m->batch, a->losses, N, s);
}

static void gpt2cu_backward(Model *model, float loss_scale, BucketReadyFn on_bucket, void *ctx) {
    GPT2CU *m = (GPT2CU *)model;
    if (!m->have_targets) fatal("internal: backward called after a forward without targets");
    m->have_targets = 0;
    int L = m->L, C = m->C, V = m->V, Vp = m->Vp, B = m->B, T = m->T;
    size_t N = (size_t)B * T, LN = (size_t)m->Bmax * m->Tmax, P = m->base.table.total;
    int n = (int)N;
    cudaStream_t s = m->s;
    Tensors *p = &m->p, *g = &m->g;
    Acts *a = &m->a;
    Blas *bl = &m->bl;
    cudaCheck(cudaMemsetAsync(m->dp.grads, 0, P * sizeof(floatX), s));

    fused_classifier(a->logits, a->losses, m->batch.d_targets, n, V, Vp, loss_scale / (float)N, s);
    matmul_backward(bl, a->dc, g->wte, NULL, a->fscratch, a->logits, a->lnf, p->wte, n, C, Vp, 0.0f, s);
    cudaCheck(cudaMemsetAsync(a->dres, 0, N * C * sizeof(floatX), s));
    layernorm_backward(a->dres, g->lnfw, g->lnfb, a->fscratch, a->dc, a->residual3 + (L - 1) * LN * C, p->lnfw,
                       a->lnf_mean, a->lnf_rstd, n, C, s);
    for (int l = L - 1; l >= 0; l--) {
        const floatX *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * LN * C;
        floatX *dqkv = a->d4c; /* (N,3C) in the first 3/4 of the 4C buffer */
        matmul_backward(bl, a->d4c, g->fcprojw + (size_t)l * C * 4 * C, g->fcprojb + l * C, a->fscratch, a->dres,
                        a->fch_gelu + l * LN * 4 * C, p->fcprojw + (size_t)l * C * 4 * C, n, 4 * C, C, 0.0f, s);
        gelu_backward_inplace(a->d4c, a->fch + l * LN * 4 * C, (long)N * 4 * C, s);
        matmul_backward(bl, a->dc, g->fcw + (size_t)l * 4 * C * C, g->fcb + l * 4 * C, a->fscratch, a->d4c,
                        a->ln2 + l * LN * C, p->fcw + (size_t)l * 4 * C * C, n, C, 4 * C, 0.0f, s);
        layernorm_backward(a->dres, g->ln2w + l * C, g->ln2b + l * C, a->fscratch, a->dc, a->residual2 + l * LN * C,
                           p->ln2w + l * C, a->ln2_mean + l * LN, a->ln2_rstd + l * LN, n, C, s);
        matmul_backward(bl, a->dc, g->attprojw + (size_t)l * C * C, g->attprojb + l * C, a->fscratch, a->dres,
                        a->atty + l * LN * C, p->attprojw + (size_t)l * C * C, n, C, C, 0.0f, s);
        attention_layer_backward(&m->attn, l, dqkv, a->dc, a->atty + l * LN * C, a->qkv + l * LN * 3 * C, B, T, s);
        matmul_backward(bl, a->dc, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + l * 3 * C, a->fscratch, dqkv,
                        a->ln1 + l * LN * C, p->qkvw + (size_t)l * 3 * C * C, n, C, 3 * C, 0.0f, s);
        layernorm_backward(a->dres, g->ln1w + l * C, g->ln1b + l * C, a->fscratch, a->dc, residual, p->ln1w + l * C,
                           a->ln1_mean + l * LN, a->ln1_rstd + l * LN, n, C, s);
        if (m->dp.device_update) device_params_bucket_done(&m->dp, L - 1 - l, on_bucket, ctx); /* layer l final */
    }
    const DeviceBatch *db = &m->batch; /* the plan built during the forward */
    encoder_backward(g->wte, g->wpe, a->dres, db->d_order, db->d_seg_start, db->d_seg_tok, db->plan.nseg, B, T, C, s);
    if (m->dp.device_update)
        device_params_bucket_done(&m->dp, L, on_bucket, ctx); /* wte (lm_head and embedding), wpe, lnf */
    else
        device_params_add_to_host(&m->dp, on_bucket, ctx);
}

static const float *gpt2cu_logits(const Model *model) {
    GPT2CU *m = (GPT2CU *)model;
    return logits_to_host(&m->h_logits, (size_t)m->Bmax * m->Tmax, m->a.logits, (size_t)m->B * m->T, m->Vp, m->s);
}

static void gpt2cu_save(const Model *model, const char *path) {
    GPT2CU *m = (GPT2CU *)model;
    device_params_to_host(&m->dp); /* device update: the GPU holds the master weights the writer reads */
    m->host->save(m->host, path);  /* version 3 fp32, from the host master parameters */
}

static void gpt2cu_free(Model *model) {
    GPT2CU *m = (GPT2CU *)model;
    if (!m) return;
    cudaCheck(cudaStreamSynchronize(m->s));
    void *dev[] = {m->a.encoded, m->a.ln1, m->a.qkv, m->a.atty, m->a.attproj,
                   m->a.residual2, m->a.ln2, m->a.fch, m->a.fch_gelu, m->a.fcproj, m->a.residual3, m->a.ln1_mean,
                   m->a.ln1_rstd, m->a.ln2_mean, m->a.ln2_rstd, m->a.lnf, m->a.lnf_mean, m->a.lnf_rstd, m->a.logits,
                   m->a.losses, m->a.dres, m->a.dc, m->a.d4c, m->a.fscratch};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaCheck(cudaFree(dev[i]));
    device_params_free(&m->dp);
    device_batch_free(&m->batch);
    free(m->h_logits);
    attention_free(&m->attn);
    blas_free(&m->bl);
    cudaCheck(cudaStreamDestroy(m->s));
    m->host->free(m->host);
    free(m);
}

/* ModelFamily.create: the host model (file or seeded init, identical to the CPU trainer's), then device memory
 * for B x T. fatal() with the fix if there is no GPU, T is too long, or memory runs out. */
static Model *gpt2cu_create(const char *spec, const char *init_path, uint64_t seed, int B, int T) {
    if (B < 1 || T < 1) fatal("--batch %d / --seq %d must both be at least 1", B, T);
    select_gpu("train_gptcu", "train_gpt");
    /* activations for one token only: the CPU model serves for its parameters, table and files */
    Model *host = gpt2_host_create(spec, init_path, seed, 1, 1);
    if (T > host->max_seq_len)
        fatal("--seq %d exceeds the model's maximum sequence length %d; use --seq <= %d", T, host->max_seq_len,
              host->max_seq_len);
    if (host->channels % 8 != 0)
        fatal("the CUDA trainer needs channels C divisible by 8 for cuBLASLt (model has C=%d); choose another --model",
              host->channels);
    GPT2CU *m = (GPT2CU *)xcalloc(1, sizeof *m, "GPT-2 CUDA model");
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
    b->forward = gpt2cu_forward;
    b->backward = gpt2cu_backward;
    b->logits = gpt2cu_logits;
    b->save = gpt2cu_save;
    b->free = gpt2cu_free;
    m->L = host->num_layers; m->C = host->channels; m->NH = host->num_heads; m->V = host->vocab_size;
    m->Vp = host->padded_vocab_size; m->maxT = host->max_seq_len; m->Bmax = B; m->Tmax = T;

    cudaCheck(cudaStreamCreate(&m->s));
    blas_init(&m->bl);
    attention_init(&m->attn, &m->bl, m->L, B, T, m->C, m->NH); /* cuDNN or cuBLAS; prints "attention: ..." */
    snprintf(b->desc, sizeof b->desc, "%.36s, CUDA " PRECISION_NAME ", %s attn", host->desc, attention_path(&m->attn));
    size_t N = (size_t)B * T, L = m->L, C = m->C, Vp = m->Vp;
    device_params_alloc(&m->dp, b, m->s);
    point_tensors(&m->p, m->dp.params, &b->table);
    point_tensors(&m->g, m->dp.grads, &b->table);
    Acts *a = &m->a;
    size_t X = sizeof(floatX);
    a->encoded = (floatX *)dalloc(N * C * X, "activations");
    a->ln1 = (floatX *)dalloc(L * N * C * X, "activations");
    a->qkv = (floatX *)dalloc(L * N * 3 * C * X, "activations");
    a->atty = (floatX *)dalloc(L * N * C * X, "activations");
    a->attproj = (floatX *)dalloc(L * N * C * X, "activations");
    a->residual2 = (floatX *)dalloc(L * N * C * X, "activations");
    a->ln2 = (floatX *)dalloc(L * N * C * X, "activations");
    a->fch = (floatX *)dalloc(L * N * 4 * C * X, "activations");
    a->fch_gelu = (floatX *)dalloc(L * N * 4 * C * X, "activations");
    a->fcproj = (floatX *)dalloc(L * N * C * X, "activations");
    a->residual3 = (floatX *)dalloc(L * N * C * X, "activations");
    a->ln1_mean = (float *)dalloc(L * N * 4, "activations");
    a->ln1_rstd = (float *)dalloc(L * N * 4, "activations");
    a->ln2_mean = (float *)dalloc(L * N * 4, "activations");
    a->ln2_rstd = (float *)dalloc(L * N * 4, "activations");
    a->lnf = (floatX *)dalloc(N * C * X, "activations");
    a->lnf_mean = (float *)dalloc(N * 4, "activations");
    a->lnf_rstd = (float *)dalloc(N * 4, "activations");
    a->logits = (floatX *)dalloc(N * Vp * X, "the logits");
    a->losses = (float *)dalloc(N * 4, "the losses");
    a->dres = (floatX *)dalloc(N * C * X, "gradient buffers");
    a->dc = (floatX *)dalloc(N * C * X, "gradient buffers");
    a->d4c = (floatX *)dalloc(N * 4 * C * X, "gradient buffers");
    size_t fs = layernorm_backward_scratch_floats((int)N, (int)C), ms = matmul_backward_scratch_floats((int)N, 4 * (int)C);
    a->fscratch = (float *)dalloc((fs > ms ? fs : ms) * 4, "reduction scratch");
    device_batch_create(&m->batch, N, (int)Vp);
    return b;
}

#if !defined(TESTING) || defined(TESTING_DEVICE_UPDATE)
/* Model.create_updater: the device-resident update for adamw, adams and scape, NULL (the loop's host update) for
 * topk-ef: cuda/trainer.cuh's device_params_create_updater. (Compiled into the trainer and into
 * test/gpu/test_gpt2cu_update.cu, which link cuda/dist.o.) */
static Updater *gpt2cu_create_updater(Model *model, const UpdaterConfig *cfg) {
    return device_params_create_updater(&((GPT2CU *)model)->dp, cfg);
}
#endif

#ifndef TESTING
static Model *gpt2cu_create_trainer(const char *spec, const char *init_path, uint64_t seed, int B, int T) {
    Model *model = gpt2cu_create(spec, init_path, seed, B, T);
    model->create_updater = gpt2cu_create_updater;
    return model;
}

static ModelFamily gpt2cu_family;

int main(int argc, char **argv) {
    const ModelFamily *cpu = gpt2_host_family();
    gpt2cu_family = *cpu;
    gpt2cu_family.create = gpt2cu_create_trainer;
    return train_main(argc, argv, &gpt2cu_family);
}
#endif

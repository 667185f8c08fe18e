/*
 * common/model.h - what a model file (train_gpt.c, train_llama.c) gives the shared training loop.
 *
 * A model owns one flat parameter buffer and one flat gradient buffer laid out by its ParamTable, plus its
 * activations. The loop (trainer/train.c) owns everything else: data, optimizer, SCAPE, communication,
 * checkpoints, logging, sampling. Shapes: B batch, T sequence length, V vocabulary, Vp padded vocabulary.
 */
#ifndef COMMON_MODEL_H
#define COMMON_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/params.h"

/* Called by backward as soon as every gradient of `bucket` is final (see params.h for bucket order). */
typedef void (*BucketReadyFn)(void *ctx, int bucket);

struct Updater;       /* optim/updater.h */
struct UpdaterConfig;

typedef struct Model Model;
struct Model {
    const char *family;    /* "gpt2" or "llama" */
    char desc[64];         /* human description, e.g. "d12 (L=12, C=768, NH=12)" */
    ParamTable table;
    float *params;         /* (table.total) */
    float *grads;          /* (table.total), accumulated by backward */
    int vocab_size;        /* V, real tokens */
    int padded_vocab_size; /* Vp >= V, rows of wte/lm_head */
    int max_seq_len;       /* maxT */
    int num_layers, channels, num_heads;
    double flops_per_token;/* training FLOPs per token at T = max_seq_len (6N + attention), for MFU */
    /* Tokenizer kind of this model's vocabulary when it differs from ModelFamily.tokenizer (tokenizer_kind_for_vocab:
     * V 4096 "bpe4k", V 128256 "llama3"); NULL: the family's. Picks the default corpus directory and the sampler's
     * tokenizer. */
    const char *tokenizer;

    /* Forward pass on inputs (B,T). If targets (B,T) is non-NULL returns the mean cross-entropy over B*T,
     * else returns 0 and only logits are valid. B*T must not exceed what the model was sized for (model_alloc). */
    float (*forward)(Model *m, const int *inputs, const int *targets, int B, int T);
    /* Backward of the last forward with targets: ADDS d(loss_scale * loss)/d(params) into grads (so micro-steps
     * accumulate), calling on_bucket (may be NULL) as each bucket becomes final. */
    void (*backward)(Model *m, float loss_scale, BucketReadyFn on_bucket, void *ctx);
    /* Logits (B,T,Vp) of the last forward; entries >= V are padding. */
    const float *(*logits)(const Model *m);
    /* Writes the model file (llm.c layout for GPT-2) atomically; fatal() on I/O error. */
    void (*save)(const Model *m, const char *path);
    void (*free)(Model *m);
    /* Optional (NULL in the CPU models): an update that keeps the parameters where the model computes (the CUDA
     * trainers' device-resident AdamW/AdamS, cuda/dist.h), or NULL when the model does not handle this
     * configuration (then the loop uses the host update on params/grads, as for the CPU models). Called once,
     * after create and before any forward; it broadcasts rank 0's parameters as distopt_create does. Once it
     * returned an Updater, params/grads on the host are no longer the live state: the model refreshes params
     * from its device copy in save(), and backward hands grads to the Updater itself. */
    struct Updater *(*create_updater)(Model *m, const struct UpdaterConfig *cfg);
};

/* How the shared loop creates models of one family. */
typedef struct {
    const char *family;          /* "gpt2" */
    const char *tokenizer;       /* tokenizer kind for tokenizer_load(): "gpt2"; NULL: samples print as token ids */
    const char *default_model;   /* --model default, e.g. "d4c256" */
    const char *model_help;      /* one line for --help describing accepted --model values */
    /* Creates a model: from the file `init_path` if non-NULL (fatal() on a bad file), else from `spec`
     * (e.g. "d12", "d6c384h6", family-specific) with seeded initialisation. Activations are sized for B x T
     * (T <= max_seq_len, else fatal() with the fix). */
    Model *(*create)(const char *spec, const char *init_path, uint64_t seed, int B, int T);
    /* Optional (NULL: no memory check, --model compared as typed): the bytes create(spec, init_path, B, T) would
     * allocate (parameters, gradients, activations), found without allocating (the spec parsed, or the file's
     * header read and checked, fatal() as create); the parameter count in *num_params; the model's canonical
     * spec into spec_out (cap bytes), which create reads back to the same architecture, so two specs (or a spec
     * and a model file) describe the same model exactly when their canonical specs are equal. */
    double (*memory_bytes)(const char *spec, const char *init_path, int B, int T, size_t *num_params,
                           char *spec_out, size_t cap);
} ModelFamily;

#endif

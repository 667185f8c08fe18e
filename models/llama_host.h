/*
 * models/llama_host.h - what train_llama.cu and export/ take from the CPU Llama (models/llama_host.c, which includes
 * train_llama.c): a host model that owns the parameter table, the fp32 parameters and gradients, the seeded
 * initialisation and the model files; the hyper-parameters the device model needs; and the CPU's own RoPE angle
 * table, so the GPU rotates by exactly the same float angles. Not for: forward/backward (train_llama.cu).
 */
#ifndef MODELS_LLAMA_HOST_H
#define MODELS_LLAMA_HOST_H

#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#include "common/model.h"

/* The hyper-parameters of a Llama model (train_llama.c's LlamaConfig, field for field). hd = C/NH, KVC = NKV*hd. */
typedef struct {
    int L, C, NH, NKV, F, V, Vp, maxT;
    float rope_theta, norm_eps;
} LlamaHostConfig;

/* The CPU Llama of train_llama.c created from init_path (a Llama model file, version 3) or spec with seeded init,
 * activations for B x T (the trainer passes 1 x 1: it never runs the CPU model; tests run it as the reference).
 * fatal() on a bad file or spec, with the fix. */
Model *llama_host_create(const char *spec, const char *init_path, uint64_t seed, int B, int T);
/* The configuration of a model made by llama_host_create. */
LlamaHostConfig llama_host_config(const Model *m);
/* train_llama.c's rope_table: cos_tab, sin_tab (maxT, hd/2), angle t * theta^(-2j/hd) computed in double and
 * rounded once to float. */
void llama_host_rope_table(float *cos_tab, float *sin_tab, int maxT, int hd, double theta);
/* train_llama.c's family (for its default model, help text and tokenizer). */
const ModelFamily *llama_host_family(void);

#ifdef __cplusplus
}
#endif
#endif

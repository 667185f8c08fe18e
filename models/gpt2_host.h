/*
 * models/gpt2_host.h - what train_gpt.cu and export/ take from the CPU GPT-2 (models/gpt2_host.c): a host model that owns the
 * parameter table, the fp32 parameters and gradients, and writes model files. Not for: forward/backward.
 */
#ifndef MODELS_GPT2_HOST_H
#define MODELS_GPT2_HOST_H

#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#include "common/model.h"

/* The CPU GPT-2 of train_gpt.c created from init_path (a llm.c model file) or spec with seeded init, activations
 * for B x T (the trainer passes 1 x 1: it never runs the CPU model; tests run it as the reference). fatal() on a
 * bad file or spec. */
Model *gpt2_host_create(const char *spec, const char *init_path, uint64_t seed, int B, int T);
/* train_gpt.c's family (for its default model, help text and tokenizer). */
const ModelFamily *gpt2_host_family(void);

#ifdef __cplusplus
}
#endif
#endif

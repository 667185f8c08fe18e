/*
 * trainer/sampler.h - picks the next token from one row of logits: greedy, temperature, top-k; and the tokens a
 * sample starts from.
 * Deterministic given the Rng state (which the checkpoint saves), so sampling does not break bit-identical
 * resume. Not for: running the model (trainer/train.c calls forward), tokenizing.
 */
#ifndef TRAINER_SAMPLER_H
#define TRAINER_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "common/rng.h"

/* logits: (V) real-vocabulary entries of one position (padding entries excluded by passing V, not Vp).
 * temperature <= 0: argmax (lowest id on ties), no random draw. Otherwise p_i ~ exp(logit_i / temperature),
 * restricted to the top_k largest logits when 0 < top_k < V (ties broken by the lower id); one rng_uniform
 * draw picks the token by inverse CDF in float64. Returns an id in [0, V). */
int sample_token(const float *logits, int V, float temperature, int top_k, Rng *rng);

/* The tokens a sample starts from, as a training document starts (`tok shards` puts the tokenizer's BOS before
 * each): prompt (n_prompt ids, encoded with special tokens allowed) into out (room for n_prompt + 1), returns the
 * count and sets *lead to 1 when a BOS was put in front. Empty prompt: [bos]. Tokenizer with a BOS of its own
 * (own_bos: Llama's <s> or <|begin_of_text|>): [bos] + prompt, unless the prompt already starts with bos (one
 * BOS whatever the prompt spells). Otherwise (GPT-2, whose "bos" is its end-of-text) the prompt alone. */
size_t sample_context(const int32_t *prompt, size_t n_prompt, int32_t bos, int own_bos, int32_t *out, int *lead);

#endif

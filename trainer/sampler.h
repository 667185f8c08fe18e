/*
 * trainer/sampler.h - picks the next token from one row of logits: greedy, temperature, top-k.
 * Deterministic given the Rng state (which the checkpoint saves), so sampling does not break bit-identical
 * resume. Not for: running the model (trainer/train.c calls forward), tokenizing.
 */
#ifndef TRAINER_SAMPLER_H
#define TRAINER_SAMPLER_H

#include "common/rng.h"

/* logits: (V) real-vocabulary entries of one position (padding entries excluded by passing V, not Vp).
 * temperature <= 0: argmax (lowest id on ties), no random draw. Otherwise p_i ~ exp(logit_i / temperature),
 * restricted to the top_k largest logits when 0 < top_k < V (ties broken by the lower id); one rng_uniform
 * draw picks the token by inverse CDF in float64. Returns an id in [0, V). */
int sample_token(const float *logits, int V, float temperature, int top_k, Rng *rng);

#endif

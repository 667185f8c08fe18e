/*
 * common/rng.h - the runtime's one random number generator: small, seedable, its whole state one uint64 so it
 * can be checkpointed. xorshift64* (Vigna, "An experimental exploration of Marsaglia's xorshift generators",
 * 2016) seeded through splitmix64. Used for initialisation, shuffling, dropout-free sampling.
 */
#ifndef COMMON_RNG_H
#define COMMON_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct { uint64_t s; } Rng;

void rng_seed(Rng *r, uint64_t seed);   /* any seed, 0 included */
uint64_t rng_u64(Rng *r);
uint32_t rng_u32(Rng *r);
float rng_uniform(Rng *r);              /* [0, 1), 24 random bits */
uint64_t rng_below(Rng *r, uint64_t n); /* uniform integer in [0, n), n >= 1, unbiased */
/* Fills out[0..n) with N(mean, std^2) draws (Box-Muller, float64 internally). */
void rng_normal(Rng *r, float *out, size_t n, float mean, float std);
/* Fisher-Yates shuffle of a uint64 array. */
void rng_shuffle_u64(Rng *r, uint64_t *a, size_t n);
/* Mixes several values into one seed (splitmix64 chain): derive per-(tensor, step, epoch) seeds. */
uint64_t rng_mix(uint64_t a, uint64_t b);

#endif

/* common/rng.c - see rng.h. */
#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void rng_seed(Rng *r, uint64_t seed) {
    uint64_t x = seed;
    r->s = splitmix64(&x);
    if (r->s == 0) r->s = 0x2545F4914F6CDD1Dull; /* xorshift state must be non-zero */
}

uint64_t rng_u64(Rng *r) {
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

uint32_t rng_u32(Rng *r) { return (uint32_t)(rng_u64(r) >> 32); }

float rng_uniform(Rng *r) { return (float)(rng_u64(r) >> 40) / 16777216.0f; }

uint64_t rng_below(Rng *r, uint64_t n) {
    /* rejection sampling on the top of the range keeps it unbiased */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rng_u64(r); while (x >= limit);
    return x % n;
}

void rng_normal(Rng *r, float *out, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(rng_u64(r) >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
        double u2 = (double)(rng_u64(r) >> 11) / 9007199254740992.0;
        double rad = sqrt(-2.0 * log(u1));
        out[i] = (float)(mean + std * rad * cos(2.0 * M_PI * u2));
        if (i + 1 < n) out[i + 1] = (float)(mean + std * rad * sin(2.0 * M_PI * u2));
    }
}

void rng_shuffle_u64(Rng *r, uint64_t *a, size_t n) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_below(r, i);
        uint64_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

uint64_t rng_mix(uint64_t a, uint64_t b) {
    uint64_t x = a ^ (b * 0x9E3779B97F4A7C15ull);
    splitmix64(&x);
    return splitmix64(&x);
}

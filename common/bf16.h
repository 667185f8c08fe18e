/*
 * common/bf16.h - bfloat16 (1 sign, 8 exponent, 7 mantissa bits: the upper half of an IEEE fp32) on the host, as
 * uint16 bit patterns. Used by SCAPE's reduced-precision payload (SCAPE.md section 7), whose device twin in
 * cuda/scape.cuh calls these same functions in device code, so host and device round bit for bit alike (on finite
 * inputs they also equal CUDA's __float2bfloat16_rn).
 * Not for: arrays of model weights (train_gpt.c's model files keep their own truncating converter, as llm.c's).
 */
#ifndef COMMON_BF16_H
#define COMMON_BF16_H

#include <stdint.h>
#include <string.h>

/* the same two functions in device code (cuda/scape.cuh) and in the CPU emulation of it */
#if defined(__CUDACC__) || defined(CUDA_EMU)
#define BF16_HD __host__ __device__
#else
#define BF16_HD
#endif

/* fp32 -> bf16, round to nearest, ties to even. A finite x beyond the largest bf16 (about 3.39e38) becomes inf,
 * as in IEEE rounding; a NaN stays a (quiet) NaN. */
BF16_HD static inline uint16_t bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 -> fp32, exact. */
BF16_HD static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

#endif

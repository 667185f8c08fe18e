/*
 * cuda/common.cuh - what every CUDA file of the runtime shares: error checks, the activation/parameter type
 * floatX (bf16, or fp32 under PRECISION=FP32), bf16 stochastic rounding, and small launch helpers.
 * Header-only (llm.c style) so each kernel test in dev/cuda compiles exactly the code train_gpt.cu runs.
 * Not for: kernels (cuda/<layer>.cuh), cuBLAS(Lt) setup (cuda/matmul.cuh), communication.
 */
#ifndef CUDA_COMMON_CUH
#define CUDA_COMMON_CUH

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

/* One line naming the failing call and its place, then exit(1): the project's fatal() convention. */
static inline void cuda_check_(cudaError_t err, const char *what, const char *file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "error: CUDA: %s failed at %s:%d: %s\n", what, file, line, cudaGetErrorString(err));
        exit(1);
    }
}
#define cudaCheck(call) cuda_check_((call), #call, __FILE__, __LINE__)
/* after a kernel launch: catches bad launch configurations immediately */
#define cudaCheckLaunch() cuda_check_(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* floatX: storage type of activations, gradients and the parameter copy used by the matmuls. fp32 master
 * weights and optimizer state are always float. PRECISION=FP32 (make) defines ENABLE_FP32 for tight checks
 * against the CPU trainer. */
#ifdef ENABLE_FP32
typedef float floatX;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif

static __host__ __device__ inline float to_float(float x) { return x; }
static __device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> static __device__ inline T from_float(float x);
template <> __device__ inline float from_float<float>(float x) { return x; }
template <> __device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

static inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

/* A 32-bit integer hash (the finaliser of MurmurHash3 applied to a mix of the inputs): reproducible random bits
 * per (index, seed) without RNG state, so stochastic rounding gives the same result on every run and rank. */
static __host__ __device__ inline uint32_t hash_u32(uint32_t idx, uint32_t seed) {
    uint32_t h = idx * 0x9E3779B1u ^ seed;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

/* Seed for one tensor at one step, so the rounding noise differs between tensors and steps but is reproducible
 * (and the same on every rank, which keeps replicated bf16 copies identical). */
static inline uint32_t sr_seed(uint64_t base_seed, int step, int tensor) {
    return hash_u32((uint32_t)tensor * 0x27D4EB2Fu + (uint32_t)step, (uint32_t)base_seed ^ (uint32_t)(base_seed >> 32));
}

/* Stochastic rounding fp32 -> bf16 (Gupta et al., arXiv 1502.02551): rounds up in magnitude with probability
 * equal to the dropped fraction, so E[round(x)] = x and small optimizer updates are not lost. Adding 16 random
 * bits below the kept mantissa and truncating does exactly that on the sign-magnitude encoding. Inf and NaN are
 * rounded to nearest instead (adding bits could turn Inf into NaN). rnd: 32 random bits. */
static __device__ inline __nv_bfloat16 bf16_stochastic_round(float x, uint32_t rnd) {
    uint32_t bits = __float_as_uint(x);
    if ((bits & 0x7F800000u) == 0x7F800000u) return __float2bfloat16_rn(x);
    bits += rnd & 0xFFFFu;
    bits &= 0xFFFF0000u;
    return __float2bfloat16_rn(__uint_as_float(bits)); /* exact: low 16 bits are zero */
}
static __device__ inline void store_rounded(float *dst, float x, uint32_t rnd) { *dst = x; }
static __device__ inline void store_rounded(__nv_bfloat16 *dst, float x, uint32_t rnd) {
    *dst = bf16_stochastic_round(x, rnd);
}

/* Warp-level sums and maxima (all lanes get the result); fixed butterfly order, hence deterministic. */
static __device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}
static __device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

/* Exits with one line if no CUDA device is usable: GPU tests must fail, never pass, on a machine without one. */
/* Why no device is usable, as one phrase for an error line: cudaGetDeviceCount's error, with the versions and the
 * fix when the driver is older than the runtime this program was built with (the CUDA 13 runtime needs a driver
 * of the 580 series or newer; an older one fails every call with "CUDA driver version is insufficient").
 * Versions are CUDA's encoding, 1000 * major + 10 * minor. */
static inline const char *cuda_no_device_why(cudaError_t err, int ndev, char *buf, size_t n) {
    if (err == cudaSuccess && ndev == 0) return "0 devices";
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    if (err == cudaErrorInsufficientDriver && drv == 0)
        snprintf(buf, n, "%s: no NVIDIA driver is loaded (libcuda.so.1 not found, or no GPU); install the driver (the "
                 "CUDA %d.%d runtime needs the 580 series or newer)", cudaGetErrorString(err), rt / 1000, rt % 1000 / 10);
    else if (err == cudaErrorInsufficientDriver || (drv > 0 && rt > drv))
        snprintf(buf, n, "%s: the driver supports CUDA %d.%d, this build's runtime is CUDA %d.%d (CUDA 13 needs an "
                 "NVIDIA driver >= 580); update the driver, or build with an older toolkit (CUDA_HOME)",
                 cudaGetErrorString(err), drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    else snprintf(buf, n, "%s", cudaGetErrorString(err));
    return buf;
}

static inline void cuda_require_device(const char *who) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        char why[320];
        printf("FAIL %s: no CUDA device usable (%s); run on a machine with an NVIDIA GPU and driver\n", who,
               cuda_no_device_why(err, n, why, sizeof why));
        exit(1);
    }
}

#endif

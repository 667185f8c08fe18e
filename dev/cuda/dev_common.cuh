/*
 * dev/cuda/dev_common.cuh - helpers of the kernel test programs in dev/cuda: random inputs, host<->device copies
 * that convert to and from floatX, comparison against a CPU reference with printed figures, and timing.
 * Each program prints "ok <case>" / "FAIL <case>: ..." lines (test/run.sh counts them) plus "time <case> ..."
 * lines, and exits non-zero on any failure. Not for: the trainer.
 */
#ifndef DEV_CUDA_DEV_COMMON_CUH
#define DEV_CUDA_DEV_COMMON_CUH

#include <math.h>
#include <string.h>
#include "cuda/common.cuh"

static int dev_failures = 0;

/* uniform in [-scale, scale), from a fixed-seed xorshift so every run uses the same inputs */
static uint64_t dev_rng = 0x853C49E6748FEA9Bull;
static float dev_uniform(float scale) {
    dev_rng ^= dev_rng << 13;
    dev_rng ^= dev_rng >> 7;
    dev_rng ^= dev_rng << 17;
    return scale * (2.0f * (float)((dev_rng >> 40) / 16777216.0) - 1.0f);
}
static float *host_random(size_t n, float scale) {
    float *p = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = dev_uniform(scale);
    return p;
}

/* the value floatX actually holds, so CPU references see the same (rounded) inputs as the GPU */
static float round_to_floatX(float x) {
#ifdef ENABLE_FP32
    return x;
#else
    return __bfloat162float(__float2bfloat16_rn(x));
#endif
}
static void round_host(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = round_to_floatX(p[i]);
}

/* device floatX copy of host floats (rounded to nearest) */
static floatX *to_device(const float *h, size_t n) {
    floatX *tmp = (floatX *)malloc(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) {
#ifdef ENABLE_FP32
        tmp[i] = h[i];
#else
        tmp[i] = __float2bfloat16_rn(h[i]);
#endif
    }
    floatX *d;
    cudaCheck(cudaMalloc(&d, n * sizeof(floatX)));
    cudaCheck(cudaMemcpy(d, tmp, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}
static float *from_device(const floatX *d, size_t n) {
    floatX *tmp = (floatX *)malloc(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(tmp, d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    float *h = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = (float)tmp[i];
    free(tmp);
    return h;
}
static float *from_device_f32(const float *d, size_t n) {
    float *h = (float *)malloc(n * sizeof(float));
    cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* Tolerances of a floatX result against a float64/fp32 reference computed from the same rounded inputs:
 * bf16 keeps 8 significant bits, so one output rounding alone is up to 2^-9 relative. */
#ifdef ENABLE_FP32
#define TOL_REL 1e-4
#define TOL_ABS 1e-5
#else
#define TOL_REL 2e-2
#define TOL_ABS 2e-3
#endif

/* Checks |got - ref| <= atol + rtol |ref| everywhere; prints ok/FAIL with the worst element and the max errors. */
static int check_close(const char *name, const float *got, const float *ref, size_t n, double rtol, double atol) {
    double max_abs = 0, max_rel = 0;
    size_t worst = 0, bad = 0;
    double worst_excess = -1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        double lim = atol + rtol * fabs((double)ref[i]);
        if (!(d <= lim)) bad++; /* NaN counts as bad */
        if (d > max_abs || d != d) max_abs = d;
        if (ref[i] != 0 && d / fabs(ref[i]) > max_rel) max_rel = d / fabs(ref[i]);
        if (d - lim > worst_excess || d != d) { worst_excess = d - lim; worst = i; }
    }
    if (bad) {
        printf("FAIL %s: %zu of %zu elements outside rtol %g atol %g; worst [%zu] got %.8g expected %.8g; "
               "max abs err %.3g\n", name, bad, n, rtol, atol, worst, got[worst], ref[worst], max_abs);
        dev_failures++;
        return 0;
    }
    printf("ok %s (n=%zu, max abs err %.3g, max rel err %.3g)\n", name, n, max_abs, max_rel);
    return 1;
}
static int check_true(const char *name, int cond, const char *what) {
    if (!cond) {
        printf("FAIL %s: %s\n", name, what);
        dev_failures++;
        return 0;
    }
    printf("ok %s\n", name);
    return 1;
}

/* Bitwise equality of two float arrays (determinism checks); on failure prints how many elements differ, the
 * first one with both values and the largest difference. */
static int check_same(const char *name, const float *a, const float *b, size_t n) {
    size_t ndiff = 0, first = 0;
    double maxd = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (!ndiff) first = i;
            ndiff++;
            double d = fabs((double)a[i] - (double)b[i]);
            if (d > maxd || d != d) maxd = d;
        }
    if (ndiff) {
        printf("FAIL %s: %zu of %zu elements differ; first [%zu] %.9g vs %.9g; max difference %.3g\n", name, ndiff, n,
               first, a[first], b[first], maxd);
        dev_failures++;
        return 0;
    }
    printf("ok %s (n=%zu bitwise equal)\n", name, n);
    return 1;
}

/* milliseconds per call of fn(), averaged over reps after one warm-up call */
template <typename F> static float time_ms(F fn, int reps) {
    fn();
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    cudaCheck(cudaEventRecord(a));
    for (int i = 0; i < reps; i++) fn();
    cudaCheck(cudaEventRecord(b));
    cudaCheck(cudaEventSynchronize(b));
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, a, b));
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    return ms / reps;
}

#endif

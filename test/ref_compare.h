/*
 * test/ref_compare.h - comparing a regenerated PyTorch reference file with the committed one (test_gpt2.c,
 * test_llama.c). The references are float64 computations rounded to fp32 (plus a few float64 sums), and
 * PyTorch's float64 matrix products go through the BLAS, whose kernels (AVX2, AVX-512, ...) differ per CPU in
 * summation order by about 1e-16 relative; after the rounding to fp32 a value then differs by one fp32 ulp now
 * and then (up to 1.2e-7 of its tensor's max |x|). So a byte comparison fails on some CPUs. Instead every integer
 * field (header, tokens, kept rows) must be equal and every real one within REF_REGEN_RTOL of its tensor's max |x|
 * (a float64 scalar: of itself; a whole-tensor sum: of sqrt(n sumsq)). Measured here (AMD EPYC with AVX-512):
 * the file regenerated with OpenBLAS's own choice or OPENBLAS_CORETYPE=SkylakeX differs from the committed one
 * (made with AVX2 kernels) by 4e-16, only in float64 sums; a change of the reference script far smaller than any
 * real edit (layer-norm or RMSNorm eps x 1.01) moves the parameters after 10 steps by 1.7e-2 to 3.2e-2 of their
 * tensor's max, 10^4 times the tolerance. regen_comparison_flags_small_changes checks the comparison itself.
 */
#ifndef TEST_REF_COMPARE_H
#define TEST_REF_COMPARE_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#define REF_REGEN_RTOL 1e-6 /* about 8 fp32 ulps of a tensor's largest element */

typedef struct {
    double worst;   /* largest |a - b| / scale seen */
    char where[160]; /* the field and element of the worst difference */
    int int_diff;   /* an integer field differs (then where names it) */
} RefDiff;

/* Integer fields must be equal. */
static inline void ref_diff_ints(RefDiff *d, const char *what, const int *a, const int *b, size_t n) {
    for (size_t i = 0; i < n && !d->int_diff; i++)
        if (a[i] != b[i]) {
            d->int_diff = 1;
            snprintf(d->where, sizeof d->where, "%s[%zu] %d vs %d", what, i, a[i], b[i]);
        }
}

static inline void ref_note(RefDiff *d, double e, const char *what, size_t i, double a, double b) {
    if (d->int_diff || e <= d->worst) return; /* NaN compares false and so counts as the worst */
    d->worst = isnan(e) ? INFINITY : e;
    snprintf(d->where, sizeof d->where, "%s[%zu] %.9g vs %.9g", what, i, a, b);
}

/* fp32 tensor: errors relative to max |b|. */
static inline void ref_diff_floats(RefDiff *d, const char *what, const float *a, const float *b, size_t n) {
    double scale = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    if (scale == 0.0) scale = 1.0;
    for (size_t i = 0; i < n; i++) ref_note(d, fabs((double)a[i] - (double)b[i]) / scale, what, i, a[i], b[i]);
}

/* float64 scalars: each relative to itself. */
static inline void ref_diff_doubles(RefDiff *d, const char *what, const double *a, const double *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double s = fabs(b[i]) > 0 ? fabs(b[i]) : 1.0;
        ref_note(d, fabs(a[i] - b[i]) / s, what, i, a[i], b[i]);
    }
}

/* A float64 sum of n terms whose sum of squares is sumsq: relative to sqrt(n sumsq), the size of such a sum (a
 * gradient's sum cancels to near 0, so relative to itself it would be all noise). */
static inline void ref_diff_sum(RefDiff *d, const char *what, double a, double b, double n, double sumsq) {
    double s = sqrt(n * sumsq) > 0 ? sqrt(n * sumsq) : 1.0;
    ref_note(d, fabs(a - b) / s, what, 0, a, b);
}

/* 1 if the two files agree as above; else 0 with the reason in why. */
static inline int ref_diff_ok(const RefDiff *d, char *why, size_t cap) {
    if (d->int_diff) snprintf(why, cap, "integer field differs: %s", d->where);
    else if (!(d->worst <= REF_REGEN_RTOL))
        snprintf(why, cap, "worst difference %.3g of the tensor's max |x| (allowed %g) at %s", d->worst,
                 REF_REGEN_RTOL, d->where);
    else return 1;
    return 0;
}

#endif

/*
 * optim/optim.c - the dense optimizer updates of optim/optim.h (AdamW, AdamS) over a range of the flat buffer.
 * Float math per element; the bias corrections are computed once per call in double and cast, so every backend
 * can reproduce them exactly. OpenMP over elements, one slice at a time (weight decay is per slice).
 * Not for: SCAPE's sparse update (optim/scape.c), gradient clipping or learning-rate schedules (the loop).
 */
#include "optim/optim.h"

#include <math.h>

/* The part [*first, *last) of slice s that lies inside [lo, hi); returns 0 if empty. */
static int clip_slice(const ParamSlice *s, size_t lo, size_t hi, size_t *first, size_t *last) {
    *first = s->offset > lo ? s->offset : lo;
    *last = s->offset + s->numel < hi ? s->offset + s->numel : hi;
    return *first < *last;
}

/* The loops of adamw_update and adams_update. The _and_zero variants (zero_grads = 1) read each gradient times
 * grad_scale (the clip factor, 1 for none: g * 1 == g) and write 0 over it, which saves the trainer two passes over
 * P floats (scaling, clearing); the arithmetic is that of scaling first, bit for bit. */
static inline void adamw_impl(const ParamTable *tab, float *params, float *grads, float *m, float *v, size_t lo,
                              size_t hi, int t, float lr, const OptimConfig *cfg, int zero_grads, float grad_scale) {
    float b1 = cfg->beta1, b2 = cfg->beta2, eps = cfg->eps;
    float bc1 = (float)(1.0 - pow((double)cfg->beta1, t));
    float bc2 = (float)(1.0 - pow((double)cfg->beta2, t));
    #pragma omp parallel
    for (int k = 0; k < tab->n; k++) {
        const ParamSlice *s = &tab->slices[k];
        size_t first, last;
        if (!clip_slice(s, lo, hi, &first, &last)) continue; /* same decision on every thread */
        float wd = s->decay ? cfg->weight_decay : 0.0f;
        /* nowait: slices are disjoint, no thread reads what another writes */
        #pragma omp for schedule(static) nowait
        for (size_t i = first; i < last; i++) {
            float g = zero_grads ? grads[i] * grad_scale : grads[i];
            float mi = b1 * m[i] + (1.0f - b1) * g;
            float vi = b2 * v[i] + (1.0f - b2) * g * g;
            m[i] = mi;
            v[i] = vi;
            params[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * params[i]);
            if (zero_grads) grads[i] = 0.0f;
        }
    }
}

void adamw_update(const ParamTable *tab, float *params, const float *grads, float *m, float *v, size_t lo,
                  size_t hi, int t, float lr, const OptimConfig *cfg) {
    adamw_impl(tab, params, (float *)grads, m, v, lo, hi, t, lr, cfg, 0, 1.0f); /* never written: zero_grads = 0 */
}

void adamw_update_and_zero(const ParamTable *tab, float *params, float *grads, float *m, float *v, size_t lo,
                           size_t hi, int t, float lr, const OptimConfig *cfg, float grad_scale) {
    adamw_impl(tab, params, grads, m, v, lo, hi, t, lr, cfg, 1, grad_scale);
}

static inline void adams_impl(const ParamTable *tab, float *params, float *grads, float *m, size_t lo, size_t hi,
                              int t, float lr, const OptimConfig *cfg, int zero_grads, float grad_scale) {
    float b1 = cfg->beta1, b2 = cfg->beta2, eps = cfg->eps;
    float bc1 = (float)(1.0 - pow((double)cfg->beta1, t));
    float sqrt_bc2 = (float)sqrt(1.0 - pow((double)cfg->beta2, t));
    #pragma omp parallel
    for (int k = 0; k < tab->n; k++) {
        const ParamSlice *s = &tab->slices[k];
        size_t first, last;
        if (!clip_slice(s, lo, hi, &first, &last)) continue; /* same decision on every thread */
        float wd = s->decay ? cfg->weight_decay : 0.0f;
        #pragma omp for schedule(static) nowait
        for (size_t i = first; i < last; i++) {
            float g = zero_grads ? grads[i] * grad_scale : grads[i], mp = m[i];
            float nu = b2 * mp * mp + (1.0f - b2) * g * g; /* uses the PREVIOUS momentum (SCAPE.md section 1) */
            float mi = b1 * mp + (1.0f - b1) * g;
            m[i] = mi;
            params[i] -= lr * ((mi / bc1) / (sqrtf(nu) / sqrt_bc2 + eps) + wd * params[i]);
            if (zero_grads) grads[i] = 0.0f;
        }
    }
}

void adams_update(const ParamTable *tab, float *params, const float *grads, float *m, size_t lo, size_t hi,
                  int t, float lr, const OptimConfig *cfg) {
    adams_impl(tab, params, (float *)grads, m, lo, hi, t, lr, cfg, 0, 1.0f);
}

void adams_update_and_zero(const ParamTable *tab, float *params, float *grads, float *m, size_t lo, size_t hi,
                           int t, float lr, const OptimConfig *cfg, float grad_scale) {
    adams_impl(tab, params, grads, m, lo, hi, t, lr, cfg, 1, grad_scale);
}

/*
 * optim/optim.h - dense optimizer updates on the flat parameter buffer: AdamW and AdamS.
 * SCAPE (optim/scape.h) builds on the AdamS formulas here. Weight decay applies only to slices with decay = 1.
 * Not for: communication (comm/comm.h), learning-rate schedules (common/schedule.h).
 */
#ifndef SCAPE_OPTIM_H
#define SCAPE_OPTIM_H

#include <stddef.h>

#include "common/params.h"

/* The update rules (optim/rules.c lists their rows in this order), by the number a checkpoint records; a new rule's
 * number goes before OPT_COUNT, the number of rules. */
typedef enum { OPT_ADAMW = 0, OPT_ADAMS = 1, OPT_SCAPE = 2, OPT_TOPK_EF = 3, OPT_POWERSGD = 4,
               OPT_ONEBIT_ADAM = 5, OPT_DEMO = 6, OPT_DILOCO = 7,
               OPT_SPARSELOCO = 8, OPT_COUNT } OptimizerKind;

typedef struct {
    OptimizerKind kind;
    float beta1, beta2, eps, weight_decay;
} OptimConfig;

/* One AdamW step (Loshchilov & Hutter, arXiv 1711.05101, Algorithm 2, with Adam bias correction) on elements
 * [lo, hi) of the flat buffers: m, v first and second moments, t >= 1 the step number, lr this step's rate.
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr * ( (m/bc1) / (sqrt(v/bc2) + eps) + wd * p )  */
void adamw_update(const ParamTable *tab, float *params, const float *grads, float *m, float *v, size_t lo,
                  size_t hi, int t, float lr, const OptimConfig *cfg);

/* One AdamS step (Zhang, Wang, Chen, arXiv 2505.16363; SCAPE.md section 1) on [lo, hi): one state tensor m.
 *   nu = b2 m_{t-1}^2 + (1-b2) g^2;  m = b1 m + (1-b1) g;  p -= lr * ( (m/bc1) / (sqrt(nu)/sqrt(bc2) + eps) + wd p ) */
void adams_update(const ParamTable *tab, float *params, const float *grads, float *m, size_t lo, size_t hi,
                  int t, float lr, const OptimConfig *cfg);

/* The same steps on the gradient scaled by grad_scale (the clip factor; 1 for none), writing 0 over grads[lo, hi)
 * as they are read: two passes over the gradient fewer (scale, clear) for a caller that clips first and clears
 * after; params, m, v bit for bit as scaling grads in place, calling the functions above, then clearing them. */
void adamw_update_and_zero(const ParamTable *tab, float *params, float *grads, float *m, float *v, size_t lo,
                           size_t hi, int t, float lr, const OptimConfig *cfg, float grad_scale);
void adams_update_and_zero(const ParamTable *tab, float *params, float *grads, float *m, size_t lo, size_t hi,
                           int t, float lr, const OptimConfig *cfg, float grad_scale);

#endif

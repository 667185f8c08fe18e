/*
 * common/schedule.h - the learning-rate schedule: linear warm-up, then cosine decay to an absolute floor
 * (as in llm.c and nanoGPT; the cosine form is SGDR's, Loshchilov & Hutter, arXiv 1608.03983, eq. 5, one cycle).
 * Not for: SCAPE's density schedule (optim/dist.h, distopt_density).
 */
#ifndef COMMON_SCHEDULE_H
#define COMMON_SCHEDULE_H

typedef struct {
    float lr;       /* peak learning rate */
    float lr_floor; /* final learning rate (absolute, not a fraction of lr) */
    int warmup;     /* steps of linear warm-up */
    int steps;      /* total steps of the run */
} LrSchedule;

/* Learning rate for step t = 1..steps:
 *   t <= warmup:  lr * t / warmup
 *   otherwise:    p = (t - warmup) / (steps - warmup);  lr_floor + (lr - lr_floor) * (1 + cos(pi p)) / 2
 * so step warmup gets lr and step `steps` gets exactly lr_floor. t > steps returns lr_floor. Computed in double. */
float lr_at(const LrSchedule *s, int t);

#endif

/* common/schedule.c - see schedule.h. */
#include "schedule.h"

#include <math.h>

float lr_at(const LrSchedule *s, int t) {
    if (s->warmup > 0 && t <= s->warmup) return (float)((double)s->lr * t / s->warmup);
    if (t >= s->steps) return s->lr_floor;
    double p = (double)(t - s->warmup) / (double)(s->steps - s->warmup);
    return (float)(s->lr_floor + (s->lr - (double)s->lr_floor) * 0.5 * (1.0 + cos(M_PI * p)));
}

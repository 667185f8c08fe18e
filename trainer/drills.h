/*
 * trainer/drills.h - test-only fault injection for the non-finite-step drills (test/test_drills_nan.sh), read from
 * the environment once before anything is set up; deliberately not in --help. The loop asks it one question per
 * step (nan_injection_step) and one per checkpoint (NanInjection.ckpt_skipped).
 * SCAPE_TEST_INJECT_NAN=item[,item...], each item "N" or "loss:N" (N >= 1, a step number):
 *   N       rank 0's last backward of step N runs with loss scale NaN, so its whole local gradient is NaN and the
 *           all-reduce spreads it to every rank: the gradient-norm path (distopt_step skips);
 *   loss:N  rank 0's loss of step N is NaN before the loss all-reduce: the non-finite-loss path.
 * The variable's name says what it is for, so it is not set by accident; a malformed value is fatal.
 * SCAPE_TEST_CKPT_SKIPPED=1 lets the drill checkpoint a skipped step anyway (a run never does), so that it can show
 * by file comparison that the skipped step left params and optimizer state as they were.
 */
#ifndef TRAINER_DRILLS_H
#define TRAINER_DRILLS_H

typedef struct {
    int *grad_steps, *loss_steps;
    int n_grad, n_loss;
    int ckpt_skipped;
} NanInjection;

/* Reads SCAPE_TEST_INJECT_NAN and SCAPE_TEST_CKPT_SKIPPED into *inj (all zero when unset); fatal() on a malformed
 * value. Free with nan_injection_free. */
void nan_injection_parse(NanInjection *inj);
/* The drills' one call in step t, before the loss all-reduce: on rank 0 sets *loss to NaN when step t is a loss:N
 * item, and returns 1 when it is an N item (the last backward then runs with a NaN scale); else 0. */
int nan_injection_step(const NanInjection *inj, int rank, int t, double *loss);
void nan_injection_free(NanInjection *inj);

#endif

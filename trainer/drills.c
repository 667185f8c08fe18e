/* trainer/drills.c - see drills.h. Test-only: a run without the variables never injects anything. */
#include "trainer/drills.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

void nan_injection_parse(NanInjection *inj) {
    memset(inj, 0, sizeof *inj);
    const char *k = getenv("SCAPE_TEST_CKPT_SKIPPED");
    inj->ckpt_skipped = k && strcmp(k, "1") == 0;
    const char *v = getenv("SCAPE_TEST_INJECT_NAN");
    if (!v || !v[0]) return;
    size_t cap = strlen(v) / 2 + 1;
    inj->grad_steps = xmalloc(cap * sizeof(int), "NaN injection steps");
    inj->loss_steps = xmalloc(cap * sizeof(int), "NaN injection steps");
    const char *p = v;
    while (*p) {
        int is_loss = strncmp(p, "loss:", 5) == 0;
        if (is_loss) p += 5;
        char *end;
        long step = strtol(p, &end, 10);
        if (end == p || step < 1 || step > 2147483647L || (*end != ',' && *end != '\0'))
            fatal("SCAPE_TEST_INJECT_NAN=%s: expected step[,step...] with each item N or loss:N (N >= 1); unset it "
                  "outside the drill tests", v);
        if (is_loss) inj->loss_steps[inj->n_loss++] = (int)step;
        else inj->grad_steps[inj->n_grad++] = (int)step;
        p = *end == ',' ? end + 1 : end;
    }
}

static int nan_injection_at(const int *steps, int n, int t) {
    for (int i = 0; i < n; i++)
        if (steps[i] == t) return 1;
    return 0;
}

int nan_injection_step(const NanInjection *inj, int rank, int t, double *loss) {
    if (rank != 0) return 0;
    if (nan_injection_at(inj->loss_steps, inj->n_loss, t)) *loss = NAN;
    return nan_injection_at(inj->grad_steps, inj->n_grad, t);
}

void nan_injection_free(NanInjection *inj) {
    free(inj->grad_steps);
    free(inj->loss_steps);
}

/*
 * trainer/train_log.c - see train_log.h. What the loop prints (rank 0, stdout) and writes to <out>/log.jsonl: the
 * run's opening line and "start"/"resume" event, one line and one "train" event per step, "mask" events, and the
 * "stop" events of a run that ends early on non-finite steps.
 */
#include "trainer/train_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "comm/comm.h"
#include "optim/dist.h"
#include "trainer/ckpt_policy.h"
#include "trainer/train_rules.h"

void log_start(Run *r, int start_step) {
    const TrainConfig *c = &r->c;
    if (r->rank == 0) {
        if (r->resume_notes) fputs(r->resume_notes, stdout);
        printf("%s %s: %zu parameters | %d rank%s x %d thread%s | B=%d T=%d accum=%d -> %lld tokens/step | "
               "optimizer %s | steps %d | lr %g -> %g (warm-up %d)\n",
               r->fam->family, r->m->desc, r->m->table.total, r->world, r->world == 1 ? "" : "s", r->threads,
               r->threads == 1 ? "" : "s", c->B, c->T, r->accum, (long long)r->tokens_per_step, c->optimizer,
               c->steps, c->lr, c->lr_floor, c->warmup);
        if (c->warmup >= c->steps)
            printf("note: --warmup %d >= --steps %d, so the learning rate never reaches --lr %g\n", c->warmup,
                   c->steps, c->lr);
        /* the density reaches --density at step W + 1 (optim/scape.h scape_density) */
        int sparse = train_rule_sparse(c);
        if (sparse && c->density < c->density_start && c->density_dense + c->density_warmup >= c->steps)
            printf("note: %s--density-warmup %d >= --steps %d, so the density never reaches --density %g (it ends at "
                   "%.4g); shorten the warm-up or train longer\n", c->density_dense ? "--density-dense-steps + " : "",
                   c->density_dense + c->density_warmup, c->steps, c->density,
                   r->u->density(r->u, c->steps));
        /* settings that make a compressing rule its plain dense rule for the whole run */
        if (sparse && r->u->density(r->u, c->steps) >= 1.0)
            printf("note: the density is 1 at every step (--density %g, --density-start %g, --density-dense-steps %d, "
                   "--steps %d), so %s is dense %s for the whole run; lower --density\n", c->density,
                   c->density_start, c->density_dense, c->steps, c->optimizer,
                   train_rule_dense_as(c));
        train_rule_notes(c);
        if (strncmp(r->u->desc, "host", 4) != 0) printf("update: %s\n", r->u->desc);
        if (r->ckpt_path[0]) printf("resuming from %s at step %d\n", r->ckpt_path, start_step);
        fflush(stdout);
    }
    jlog_begin(r->log, r->ckpt_path[0] ? "resume" : "start");
    jlog_int(r->log, "step", start_step);
    jlog_str(r->log, "family", r->fam->family);
    jlog_str(r->log, "model", r->m->desc);
    jlog_int(r->log, "params", (int64_t)r->m->table.total);
    jlog_int(r->log, "world", r->world);
    jlog_int(r->log, "threads", r->threads);
    jlog_int(r->log, "B", c->B);
    jlog_int(r->log, "T", c->T);
    jlog_int(r->log, "accum", r->accum);
    jlog_int(r->log, "total_batch", r->tokens_per_step);
    jlog_str(r->log, "optimizer", c->optimizer);
    jlog_str(r->log, "update", r->u->desc);
    jlog_int(r->log, "steps", c->steps);
    jlog_float(r->log, "lr", c->lr);
    jlog_float(r->log, "lr_floor", c->lr_floor);
    jlog_int(r->log, "warmup", c->warmup);
    jlog_float(r->log, "weight_decay", c->weight_decay);
    jlog_num(r->log, "density", c->density);
    jlog_int(r->log, "seed", (int64_t)c->seed);
    if (r->ckpt_path[0]) jlog_str(r->log, "checkpoint", r->ckpt_path);
    jlog_end(r->log);
}

void log_step(Run *r, int t, const StepResult *s) {
    const TrainConfig *c = &r->c;
    const CommStats *cs = &s->comm;
    double tok_s = (double)r->tokens_per_step / s->secs;
    float density = r->u->density(r->u, t);
    if (r->rank == 0) {
        char mfu[32] = "n/a";
        if (c->peak_flops > 0)
            snprintf(mfu, sizeof mfu, "%.1f%%",
                     100.0 * r->m->flops_per_token * tok_s / ((double)c->peak_flops * r->world));
        printf("step %6d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s | MFU %s | comm %.2f MB",
               t, c->steps, s->loss, s->lr, s->grad_norm, 1e3 * s->secs, tok_s, mfu, cs->bytes_sent / 1e6);
        if (r->sparse_rule) printf(" | d %.4f", density);
        printf("\n");
        if (s->bad) {
            if (c->max_bad_steps > 0)
                printf("step %d: loss/grad norm is not finite; step skipped (%d of %d consecutive)\n", t, r->bad_run,
                       c->max_bad_steps);
            else
                printf("step %d: loss/grad norm is not finite; step skipped (%d consecutive)\n", t, r->bad_run);
        }
        xflush_stdout(); /* output that cannot be written stops the run within the step */
    }
    jlog_begin(r->log, "train");
    jlog_int(r->log, "step", t);
    jlog_num(r->log, "train_loss", s->loss);
    jlog_num(r->log, "lr", s->lr);
    jlog_num(r->log, "grad_norm", s->grad_norm);
    jlog_num(r->log, "ms", 1e3 * s->secs);
    jlog_num(r->log, "tok_per_s", tok_s);
    if (c->peak_flops > 0)
        jlog_num(r->log, "mfu", r->m->flops_per_token * tok_s / ((double)c->peak_flops * r->world));
    jlog_int(r->log, "comm_bytes_sent", (int64_t)cs->bytes_sent);
    jlog_int(r->log, "comm_bytes_recv", (int64_t)cs->bytes_recv);
    /* by collective: all-reduces (gradients, SCAPE's payload), reduce-scatters (ZeRO-1's gradients, SCAPE's
     * payload with ZeRO-1), all-gathers (SCAPE's masks, ZeRO-1's parameters, sharded SCAPE's m_t and p values,
     * topk-ef's pairs) and control (norms, flags, the loss); a coded SCAPE mask is counted when the next step
     * collects it */
    jlog_int(r->log, "comm_allreduce_bytes", (int64_t)cs->bytes_sent_kind[COMM_ALLREDUCE]);
    jlog_int(r->log, "comm_reduce_scatter_bytes", (int64_t)cs->bytes_sent_kind[COMM_REDUCE_SCATTER]);
    jlog_int(r->log, "comm_allgather_bytes", (int64_t)cs->bytes_sent_kind[COMM_ALLGATHER]);
    jlog_int(r->log, "comm_control_bytes", (int64_t)cs->bytes_sent_kind[COMM_CONTROL]);
    jlog_num(r->log, "comm_wait_ms", cs->wait_ms);
    jlog_num(r->log, "comm_busy_ms", cs->busy_ms); /* comm thread time in collectives (comm/comm.h) */
    jlog_num(r->log, "density", density);
    if (r->u->memory_bytes) jlog_int(r->log, "optim_state_bytes", (int64_t)r->u->memory_bytes(r->u));
    jlog_int(r->log, "skipped", s->bad);
    jlog_end(r->log);
    if (s->bad) {
        jlog_begin(r->log, "bad_step");
        jlog_int(r->log, "step", t);
        jlog_num(r->log, "train_loss", s->loss);
        jlog_num(r->log, "grad_norm", s->grad_norm);
        jlog_int(r->log, "consecutive", r->bad_run);
        jlog_int(r->log, "max_bad_steps", c->max_bad_steps);
        jlog_end(r->log);
    }
}

/* One "mask" event (optim/dist.h DistMaskStats) of step t, rank 0 only: per sparse tensor the Jaccard of
 * consecutive masks and the kept energy, first-moment (_m, SCAPE) and raw-gradient (_g), and their means. */
void log_mask_stats(Run *r, int t) {
    const DistMaskStats *st = r->u->mask_stats(r->u);
    if (!r->log || !st || st->step != t) return;
    const char **names = xmalloc((size_t)(st->n ? st->n : 1) * sizeof(char *), "mask event");
    char *buf = xmalloc((size_t)(st->n ? st->n : 1) * (PARAM_NAME_MAX + 16), "mask event");
    for (int i = 0; i < st->n; i++) {
        const ParamSlice *s = &r->m->table.slices[st->slice[i]];
        char *b = buf + (size_t)i * (PARAM_NAME_MAX + 16);
        if (s->layer >= 0) snprintf(b, PARAM_NAME_MAX + 16, "h%d.%s", s->layer, s->name);
        else snprintf(b, PARAM_NAME_MAX + 16, "%s", s->name);
        names[i] = b;
    }
    jlog_begin(r->log, "mask");
    jlog_int(r->log, "step", t);
    jlog_strs(r->log, "tensors", names, st->n);
    if (st->jaccard_m) {
        jlog_nums(r->log, "jaccard_m", st->jaccard_m, st->n);
        jlog_nums(r->log, "energy_m", st->energy_m, st->n);
        jlog_num(r->log, "mean_jaccard_m", st->mean_jaccard_m);
        jlog_num(r->log, "mean_energy_m", st->mean_energy_m);
    }
    jlog_nums(r->log, "jaccard_g", st->jaccard_g, st->n);
    jlog_nums(r->log, "energy_g", st->energy_g, st->n);
    jlog_num(r->log, "mean_jaccard_g", st->mean_jaccard_g);
    jlog_num(r->log, "mean_energy_g", st->mean_energy_g);
    jlog_end(r->log);
    free(names);
    free(buf);
}

int log_stop_bad_steps(Run *r, int t) {
    const TrainConfig *c = &r->c;
    /* params and optimizer state are still those of the last good step, but the checkpoints already on
     * disk are left exactly as they are: nothing is written or pruned on the way out */
    if (r->rank == 0) {
        fflush(stdout);
        fprintf(stderr, "error: step %d: %d consecutive steps with a non-finite loss or gradient norm "
                "(--max-bad-steps %d); stopped without a checkpoint, the newest complete one under %s is "
                "intact: lower --lr or check the data, then continue with --resume latest\n", t, r->bad_run,
                c->max_bad_steps, c->out);
        fflush(stderr);
    }
    jlog_begin(r->log, "stop");
    jlog_int(r->log, "step", t);
    jlog_str(r->log, "reason", "non-finite steps");
    jlog_int(r->log, "consecutive", r->bad_run);
    jlog_end(r->log);
    return 1;
}

int log_end_skipped(Run *r) {
    const TrainConfig *c = &r->c;
    if (r->rank == 0) {
        char newest[128];
        newest_complete(c->out, newest, sizeof newest);
        fflush(stdout);
        fprintf(stderr, "error: the run ended with %d skipped step%s (non-finite loss or gradient norm) and so "
                "without a checkpoint of step %d; %s: lower --lr or check the data\n", r->bad_run,
                r->bad_run == 1 ? "" : "s", c->steps, newest);
        fflush(stderr);
    }
    jlog_begin(r->log, "stop");
    jlog_int(r->log, "step", c->steps);
    jlog_str(r->log, "reason", "non-finite steps at the end");
    jlog_int(r->log, "consecutive", r->bad_run);
    jlog_end(r->log);
    return 1;
}

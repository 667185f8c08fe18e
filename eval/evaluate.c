/*
 * eval/evaluate.c - scoring of downstream tasks on a model's forward pass (definitions in eval/evaluate.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "eval/evaluate.h"
#include "common/util.h"

/* One (item, choice) row: its tokens and where the continuation's are scored. */
typedef struct {
    int item, choice;
    int32_t *toks; /* n tokens the model reads (whole[0 .. n)), the continuation's targets follow in tgt */
    int n;
    int32_t *tgt;  /* ncont continuation tokens: position n - ncont + k predicts tgt[k] */
    int ncont;
    double loglik;
    int greedy;    /* every continuation token was the argmax */
} Row;

/* Encodes the item's context and choice into row r as the harnesses do (eval/evaluate.h). Returns 1, or 0 with
 * why when the continuation cannot be scored in T positions. */
static int make_row(const Tokenizer *tok, const TaskItem *it, int choice, int T, Row *r, char *why, size_t cap) {
    const char *ctx = it->context, *cont = it->choices[choice];
    size_t nc = strlen(ctx), nx = strlen(cont);
    size_t sp = 0; /* whitespace that ends the context moves to the continuation */
    while (sp < nc && (ctx[nc - 1 - sp] == ' ' || ctx[nc - 1 - sp] == '\t' || ctx[nc - 1 - sp] == '\n')) sp++;
    nc -= sp;
    char *whole = xmalloc(nc + sp + nx + 1, "an item's text");
    memcpy(whole, ctx, nc + sp);
    memcpy(whole + nc + sp, cont, nx);
    whole[nc + sp + nx] = 0;
    int32_t *wids = NULL, *cids = NULL;
    size_t wcap = 0, ccap = 0;
    size_t nw = tokenizer_encode(tok, whole, nc + sp + nx, 0, &wids, &wcap);
    size_t nctx = nc ? tokenizer_encode(tok, whole, nc, 0, &cids, &ccap) : 0;
    free(whole);
    free(cids);
    int bos = tokenizer_bos(tok), eot = tokenizer_eot(tok);
    int prefix = bos != eot ? 1 : nctx == 0; /* a real BOS always; GPT-2's end-of-text for an empty context */
    if (nw <= nctx) {
        free(wids);
        snprintf(why, cap, "choice %d (\"%.40s\") encodes to no token after its context", choice, cont);
        return 0;
    }
    size_t ncont = nw - nctx;
    if (ncont >= (size_t)T) {
        free(wids);
        snprintf(why, cap, "choice %d is %zu tokens: longer than the %d a sequence of --seq %d can score; raise --seq "
                 "or drop the item", choice, ncont, T - 1, T);
        return 0;
    }
    /* all = [prefix] + whole; keep the last T + 1 */
    size_t nall = nw + (size_t)prefix, first = nall > (size_t)T + 1 ? nall - (size_t)T - 1 : 0;
    int32_t *all = xmalloc(nall * sizeof(int32_t), "an item's tokens");
    if (prefix) all[0] = bos != eot ? bos : eot;
    memcpy(all + prefix, wids, nw * sizeof(int32_t));
    free(wids);
    r->n = (int)(nall - first - 1);
    r->toks = xmalloc((size_t)r->n * sizeof(int32_t), "an item's tokens");
    memcpy(r->toks, all + first, (size_t)r->n * sizeof(int32_t));
    r->ncont = (int)ncont;
    r->tgt = xmalloc(ncont * sizeof(int32_t), "an item's targets");
    memcpy(r->tgt, all + nall - ncont, ncont * sizeof(int32_t));
    free(all);
    return 1;
}

/* log softmax over the first V logits at token tok, in double; *is_max: tok is the argmax (ties: the first) */
static double log_prob(const float *logits, int V, int tok, int *is_max) {
    float mx = logits[0];
    int am = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > mx) { mx = logits[v]; am = v; }
    double s = 1.0; /* the argmax's term, exp(0) */
    for (int v = 0; v < V; v++)
        if (v != am) s += exp((double)logits[v] - mx);
    *is_max = am == tok;
    return (double)logits[tok] - mx - log(s);
}

/* one JSON line of the dump: the row's identity and score, the texts it was built from and its tokens (what the
 * model read, then the last target) */
static void dump_row(FILE *dump, int step, const Task *t, const TaskItem *it, const Row *r) {
    json_t *ids = json_array();
    for (int i = 0; i < r->n; i++) json_array_append_new(ids, json_integer(r->toks[i]));
    json_array_append_new(ids, json_integer(r->tgt[r->ncont - 1]));
    json_t *ll = isfinite(r->loglik) ? json_real(r->loglik) : json_null(); /* JSON has no NaN */
    json_t *o = json_pack("{s:i, s:s, s:i, s:i, s:i, s:o, s:i, s:b, s:s, s:s, s:o}", "step", step, "task", t->name,
                          "line", it->line, "choice", r->choice, "label", it->label, "loglik", ll, "tokens", r->ncont,
                          "greedy", r->greedy, "context", it->context, "continuation", it->choices[r->choice], "ids",
                          ids);
    if (!o) fatal("eval dump: cannot encode the row of %s line %d as JSON", t->path, it->line);
    char *line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    fprintf(dump, "%s\n", line);
    free(line);
    json_decref(o);
}

static void free_rows(Row *rows, int n) {
    for (int k = 0; k < n; k++) { free(rows[k].toks); free(rows[k].tgt); }
    free(rows);
}

/* This rank's rows: every choice of each of its items (i % world == rank). An item that cannot be scored is an
 * error (returns 0 with err naming the file and line) or, with skip_bad, left out and counted in *skipped. */
static int build_rows(const Tokenizer *tok, const Task *t, const EvalOptions *o, Row **out, int *nout, int *skipped,
                      char *err, size_t cap) {
    int nrows = 0, rcap = 0;
    Row *rows = NULL;
    char why[256];
    *skipped = 0;
    for (int i = o->rank; i < t->n; i += o->world) {
        const TaskItem *it = &t->items[i];
        int first = nrows, ok = 1;
        for (int j = 0; j < it->nchoice && ok; j++) {
            if (nrows == rcap) {
                rcap = rcap ? 2 * rcap : 256;
                rows = xrealloc(rows, (size_t)rcap * sizeof(Row), "eval rows");
            }
            Row *r = &rows[nrows];
            memset(r, 0, sizeof *r);
            r->item = i;
            r->choice = j;
            if (make_row(tok, it, j, o->T, r, why, sizeof why)) nrows++;
            else ok = 0;
        }
        if (ok) continue;
        for (int k = first; k < nrows; k++) { free(rows[k].toks); free(rows[k].tgt); }
        nrows = first;
        if (!o->skip_bad) {
            snprintf(err, cap, "%s:%d: %s item: %s; or pass --eval-task-skip-bad to skip such items (they are "
                     "counted)", t->path, it->line, t->format, why);
            free_rows(rows, nrows);
            return 0;
        }
        (*skipped)++;
    }
    *out = rows;
    *nout = nrows;
    return 1;
}

int eval_check_task(const Tokenizer *tok, const Task *t, const EvalOptions *o, int *too_long, char *err, size_t cap) {
    Row *rows;
    int n;
    if (!build_rows(tok, t, o, &rows, &n, too_long, err, cap)) return 0;
    free_rows(rows, n);
    return 1;
}

/* The forward passes: B rows at a time, each row's continuation log-likelihood and greediness. Returns 0 when
 * *o->stop was set between two passes. */
static int score_rows(Model *m, const Tokenizer *tok, const Task *t, const EvalOptions *o, Row *rows, int nrows,
                      TaskScore *out) {
    int B = o->B, T = o->T, V = m->vocab_size, Vp = m->padded_vocab_size;
    int *in = xcalloc((size_t)B * T, sizeof(int), "eval inputs");
    double t0 = now_seconds(), last_note = t0;
    for (int r0 = 0; r0 < nrows; r0 += B) {
        if (o->stop && *o->stop) { free(in); return 0; }
        int nb = nrows - r0 < B ? nrows - r0 : B;
        for (int b = 0; b < B; b++)
            for (int p = 0; p < T; p++) {
                const Row *r = b < nb ? &rows[r0 + b] : NULL;
                in[(size_t)b * T + p] = r && p < r->n ? r->toks[p] : tokenizer_eot(tok);
            }
        m->forward(m, in, NULL, B, T);
        const float *logits = m->logits(m);
        for (int b = 0; b < nb; b++) {
            Row *r = &rows[r0 + b];
            r->loglik = 0;
            r->greedy = 1;
            for (int k = 0; k < r->ncont; k++) {
                int pos = r->n - r->ncont + k, is_max;
                r->loglik += log_prob(logits + ((size_t)b * T + pos) * Vp, V, r->tgt[k], &is_max);
                r->greedy &= is_max;
            }
            if (!isfinite(r->loglik)) r->greedy = 0; /* NaN logits make no token the argmax */
        }
        out->tokens += (double)B * T;
        if (o->progress && o->rank == 0 && now_seconds() - last_note > 10) {
            last_note = now_seconds();
            fprintf(o->progress, "eval %s: %d/%d rows on rank 0 (%.0f%%), %.0f s\n", t->name, r0 + nb, nrows,
                    100.0 * (r0 + nb) / nrows, last_note - t0);
            fflush(o->progress);
        }
    }
    free(in);
    return 1;
}

int eval_task(Model *m, const Tokenizer *tok, const Task *t, const EvalOptions *o, TaskScore *out, char *err,
              size_t cap) {
    double t0 = now_seconds();
    memset(out, 0, sizeof *out);
    if (tokenizer_vocab_size(tok) != m->vocab_size) {
        snprintf(err, cap, "eval task %s: the tokenizer has %d tokens, the model %d", t->name, tokenizer_vocab_size(tok),
                 m->vocab_size);
        return EVAL_FAILED;
    }
    Row *rows = NULL;
    int nrows = 0, skipped = 0;
    int built = build_rows(tok, t, o, &rows, &nrows, &skipped, err, cap);
    if (built && !score_rows(m, tok, t, o, rows, nrows, out)) {
        free_rows(rows, nrows);
        snprintf(err, cap, "eval task %s: stopped by a signal before it was scored", t->name);
        return EVAL_STOPPED;
    }
    /* per item: acc, acc_norm, or the last word's; an item with a non-finite loglik is counted wrong */
    double sums[8] = {0}; /* correct, correct_norm, items, loglik sum (last word), skipped, tokens, non-finite,
                           * ranks that failed */
    for (int a = 0; a < nrows;) {
        int i = rows[a].item, e = a, finite = 1;
        while (e < nrows && rows[e].item == i) finite &= isfinite(rows[e++].loglik);
        const TaskItem *it = &t->items[i];
        if (t->kind == TASK_LASTWORD) {
            sums[0] += rows[a].greedy;
            sums[3] += rows[a].loglik;
        } else if (finite) {
            int best = a, bestn = a;
            for (int k = a + 1; k < e; k++) {
                if (rows[k].loglik > rows[best].loglik) best = k;
                double nk = rows[k].loglik / (double)strlen(it->choices[rows[k].choice]);
                double nb = rows[bestn].loglik / (double)strlen(it->choices[rows[bestn].choice]);
                if (nk > nb) bestn = k;
            }
            sums[0] += rows[best].choice == it->label;
            sums[1] += rows[bestn].choice == it->label;
        }
        sums[2] += 1;
        sums[6] += !finite;
        if (o->dump)
            for (int k = a; k < e; k++) dump_row(o->dump, o->step, t, it, &rows[k]);
        a = e;
    }
    sums[4] = skipped;
    sums[5] = out->tokens;
    sums[7] = !built;
    free_rows(rows, nrows);
    if (o->reduce && o->world > 1) o->reduce(sums, 8); /* every rank, failed or not: no rank waits alone */
    if (sums[7] > 0) {
        if (built)
            snprintf(err, cap, "eval task %s: %.0f other rank%s could not score an item of %s (see %s error line)",
                     t->name, sums[7], sums[7] > 1 ? "s" : "", t->path, sums[7] > 1 ? "their" : "its");
        return EVAL_FAILED;
    }
    out->items = (int)sums[2];
    out->skipped = (int)sums[4] + t->skipped;
    out->tokens = sums[5];
    out->nonfinite = (int)sums[6];
    double n = sums[2] > 0 ? sums[2] : NAN;
    out->acc = sums[0] / n;
    out->acc_norm = t->kind == TASK_LASTWORD ? NAN : sums[1] / n;
    out->ppl = t->kind == TASK_LASTWORD ? exp(-sums[3] / n) : NAN;
    out->ms = 1e3 * (now_seconds() - t0);
    return EVAL_OK;
}

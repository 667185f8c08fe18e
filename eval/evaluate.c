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
static void dump_row(FILE *dump, const Task *t, const TaskItem *it, const Row *r) {
    json_t *ids = json_array();
    for (int i = 0; i < r->n; i++) json_array_append_new(ids, json_integer(r->toks[i]));
    json_array_append_new(ids, json_integer(r->tgt[r->ncont - 1]));
    json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:f, s:i, s:b, s:s, s:s, s:o}", "task", t->name, "line", it->line,
                          "choice", r->choice, "label", it->label, "loglik", r->loglik, "tokens", r->ncont, "greedy",
                          r->greedy, "context", it->context, "continuation", it->choices[r->choice], "ids", ids);
    if (!o) fatal("eval dump: cannot encode the row of %s line %d as JSON", t->path, it->line);
    char *line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    fprintf(dump, "%s\n", line);
    free(line);
    json_decref(o);
}

int eval_task(Model *m, const Tokenizer *tok, const Task *t, int B, int T, int rank, int world, EvalReduceFn reduce,
              int skip_bad, FILE *progress, FILE *dump, TaskScore *out, char *err, size_t cap) {
    double t0 = now_seconds();
    memset(out, 0, sizeof *out);
    int V = m->vocab_size, Vp = m->padded_vocab_size;
    if (tokenizer_vocab_size(tok) != V) {
        snprintf(err, cap, "eval task %s: the tokenizer has %d tokens, the model %d", t->name, tokenizer_vocab_size(tok), V);
        return 0;
    }
    /* this rank's rows, item by item */
    int nrows = 0, rcap = 0, skipped = 0;
    Row *rows = NULL;
    char why[256];
    for (int i = rank; i < t->n; i += world) {
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
            if (make_row(tok, it, j, T, r, why, sizeof why)) nrows++;
            else ok = 0;
        }
        if (!ok) {
            for (int k = first; k < nrows; k++) { free(rows[k].toks); free(rows[k].tgt); }
            nrows = first;
            if (!skip_bad) {
                snprintf(err, cap, "%s:%d: %s item: %s; or pass --eval-task-skip-bad to skip such items (they are "
                         "counted)", t->path, it->line, t->format, why);
                for (int k = 0; k < nrows; k++) { free(rows[k].toks); free(rows[k].tgt); }
                free(rows);
                return 0; /* on this rank; the caller ends the job (fatal) */
            }
            skipped++;
        }
    }
    /* forward passes of B rows */
    int *in = xcalloc((size_t)B * T, sizeof(int), "eval inputs");
    double last_note = t0;
    for (int r0 = 0; r0 < nrows; r0 += B) {
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
        }
        out->tokens += (double)B * T;
        if (progress && rank == 0 && now_seconds() - last_note > 10) {
            last_note = now_seconds();
            fprintf(progress, "eval %s: %d/%d rows on rank 0 (%.0f%%), %.0f s\n", t->name, r0 + nb, nrows,
                    100.0 * (r0 + nb) / nrows, last_note - t0);
            fflush(progress);
        }
    }
    free(in);
    /* per item: acc, acc_norm, or the last word's */
    double sums[6] = {0}; /* correct, correct_norm, items, loglik sum (last word), skipped, tokens */
    for (int a = 0; a < nrows;) {
        int i = rows[a].item, e = a;
        while (e < nrows && rows[e].item == i) e++;
        const TaskItem *it = &t->items[i];
        if (t->kind == TASK_LASTWORD) {
            sums[0] += rows[a].greedy;
            sums[3] += rows[a].loglik;
        } else {
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
        if (dump)
            for (int k = a; k < e; k++) dump_row(dump, t, it, &rows[k]);
        a = e;
    }
    sums[4] = skipped;
    sums[5] = out->tokens;
    for (int k = 0; k < nrows; k++) { free(rows[k].toks); free(rows[k].tgt); }
    free(rows);
    if (reduce && world > 1) reduce(sums, 6);
    out->items = (int)sums[2];
    out->skipped = (int)sums[4] + t->skipped;
    out->tokens = sums[5];
    double n = sums[2] > 0 ? sums[2] : NAN;
    out->acc = sums[0] / n;
    out->acc_norm = t->kind == TASK_LASTWORD ? NAN : sums[1] / n;
    out->ppl = t->kind == TASK_LASTWORD ? exp(-sums[3] / n) : NAN;
    out->ms = 1e3 * (now_seconds() - t0);
    return 1;
}

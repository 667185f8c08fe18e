/*
 * test/test_gpt2.c - checks train_gpt.c (and optim/optim.c) against the PyTorch float64 reference
 * test/ref/gpt2_ref.bin written by dev/ref/gpt2_ref.py, plus model files, specs and the backward contract.
 *
 * Usage: build/test_gpt2 DATA_DIR        run every case (DATA_DIR holds sotu/gpt2/sotu_val_000000.bin)
 *        build/test_gpt2 --write-init P  write the reference's initial weights (seed 1337, d2c32h4t32) to P
 * The regeneration case runs $PYTHON_REF (default /usr/bin/python3) on dev/ref/gpt2_ref.py.
 *
 * Tolerances (fp32 here vs float64 rounded to fp32 in the file), relative to the reference tensor's max |x|:
 *   loss and the 10 step losses 1e-5 of the loss; logits 1e-5; gradients 1e-5 per tensor (wte: its 256 kept rows,
 *   plus its whole-tensor sum of |x| within 1e-5 and sum of squares within 2e-5 relative);
 *   parameters after 10 AdamW / AdamS steps 1e-5 x max|ref| + 2e-3 x lr x steps (see run_steps for why).
 */
#define TESTING
#include "train_gpt.c"

#include <sys/wait.h>

#include "optim/optim.h"
#include "test/ref_compare.h"
#include "test/test.h"

#define REF_PATH "test/ref/gpt2_ref.bin"
#define REF_SPEC "d2c32h4t32"
#define REF_SEED 1337
#define REF_MAGIC 20240330

static const char *data_dir = "data";

/* ---------------------------------------------------------------------------------------------------------
 * Reading the reference file (format documented in dev/ref/gpt2_ref.py).
 * --------------------------------------------------------------------------------------------------------- */

typedef struct {
    float *t[16];            /* each tensor; wte holds only the K kept rows (K, C) */
    float wte_sumabs, wte_sumsq; /* over the whole (Vp, C) tensor */
} RefTensors;

typedef struct {
    int32_t h[32];
    double hp[8]; /* lr, beta1, beta2, eps, weight_decay */
    int L, C, NH, maxT, V, Vp, B, T, steps, K, offset;
    int *tokens; /* (B*T+1) */
    int *rows;   /* (K) */
    float loss;
    float *logits; /* (B*T, K) */
    RefTensors grads;
    float *losses[2]; /* AdamW, AdamS: (steps) */
    RefTensors after[2];
} Ref;

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = xfopen(path, "rb", "regenerate it with dev/ref/gpt2_ref.py (see test/test_gpt2.c)");
    int64_t sz = file_size(path);
    unsigned char *buf = xmalloc((size_t)sz, path);
    xfread(buf, (size_t)sz, f, path, "the whole file");
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

typedef struct { const unsigned char *p; size_t left; const char *path; } Cursor;

static const void *take(Cursor *c, size_t bytes) {
    if (bytes > c->left) fatal("%s: ends early; regenerate it with dev/ref/gpt2_ref.py", c->path);
    const void *r = c->p;
    c->p += bytes;
    c->left -= bytes;
    return r;
}

static void *take_copy(Cursor *c, size_t bytes) {
    void *dst = xmalloc(bytes, "reference tensor");
    memcpy(dst, take(c, bytes), bytes);
    return dst;
}

static void read_ref_tensors(Cursor *c, RefTensors *r, const ParamTable *tab, int K, int C) {
    const char *names[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                             "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    for (int i = 0; i < 16; i++) {
        int layer = (i >= 2 && i < 14) ? 0 : -1;
        const ParamSlice *s = &tab->slices[param_table_find(tab, names[i], layer)];
        size_t numel = layer == 0 ? s->numel * (size_t)(tab->num_buckets - 1) : s->numel; /* whole (L, ...) */
        if (i == 0) {
            r->t[0] = take_copy(c, (size_t)K * C * sizeof(float));
            memcpy(&r->wte_sumabs, take(c, 4), 4);
            memcpy(&r->wte_sumsq, take(c, 4), 4);
        } else {
            r->t[i] = take_copy(c, numel * sizeof(float));
        }
    }
}

static Ref load_ref(const char *path, const ParamTable *tab) {
    size_t n;
    unsigned char *buf = read_all(path, &n);
    Cursor c = {buf, n, path};
    Ref r;
    memcpy(r.h, take(&c, sizeof r.h), sizeof r.h);
    if (r.h[0] != REF_MAGIC || r.h[1] != 1) fatal("%s: not a version 1 GPT-2 reference file", path);
    memcpy(r.hp, take(&c, sizeof r.hp), sizeof r.hp);
    r.L = r.h[2]; r.C = r.h[3]; r.NH = r.h[4]; r.maxT = r.h[5]; r.V = r.h[6]; r.Vp = r.h[7];
    r.B = r.h[8]; r.T = r.h[9]; r.steps = r.h[10]; r.K = r.h[11]; r.offset = r.h[12];
    int BT = r.B * r.T;
    r.tokens = take_copy(&c, (size_t)(BT + 1) * 4);
    r.rows = take_copy(&c, (size_t)r.K * 4);
    memcpy(&r.loss, take(&c, 4), 4);
    r.logits = take_copy(&c, (size_t)BT * r.K * 4);
    read_ref_tensors(&c, &r.grads, tab, r.K, r.C);
    for (int o = 0; o < 2; o++) {
        r.losses[o] = take_copy(&c, (size_t)r.steps * 4);
        read_ref_tensors(&c, &r.after[o], tab, r.K, r.C);
    }
    if (c.left != 0) fatal("%s: %zu trailing bytes; regenerate it with dev/ref/gpt2_ref.py", path, c.left);
    free(buf);
    return r;
}

/* ---------------------------------------------------------------------------------------------------------
 * Comparison helpers: error relative to the reference tensor's max |x|, reported at the worst element.
 * --------------------------------------------------------------------------------------------------------- */

static double worst_rel = 0.0, worst_abs = 0.0; /* largest errors seen in the current case, printed as notes */

/* Passes if max_i |actual_i - expected_i| <= rtol * max_i |expected_i| + atol; on failure prints the worst. */
#define CHECK_CLOSE(what, actual, expected, n, rtol, atol)                                                      \
    do {                                                                                                     \
        size_t n_ = (n), wi_ = 0;                                                                            \
        double maxref_ = 0.0, maxerr_ = 0.0;                                                                 \
        for (size_t i_ = 0; i_ < n_; i_++) {                                                                 \
            double e_ = fabs((double)(expected)[i_]);                                                        \
            double d_ = fabs((double)(actual)[i_] - (double)(expected)[i_]);                                 \
            if (e_ > maxref_) maxref_ = e_;                                                                  \
            if (d_ > maxerr_ || d_ != d_) { maxerr_ = d_; wi_ = i_; }                                        \
        }                                                                                                    \
        double rel_ = maxref_ > 0 ? maxerr_ / maxref_ : maxerr_;                                             \
        if (rel_ > worst_rel || rel_ != rel_) worst_rel = rel_;                                              \
        if (maxerr_ > worst_abs) worst_abs = maxerr_;                                        \
        CHECK(maxerr_ <= (rtol) * maxref_ + (atol), "%s: worst element %zu expected %.9g actual %.9g (|err| %.3g " \
              "= %.3g x max|ref| %.3g; tolerance %.1g x max|ref| + %.1g)", what, wi_, (double)(expected)[wi_],   \
              (double)(actual)[wi_], maxerr_, rel_, maxref_, (double)(rtol), (double)(atol));                                                                   \
    } while (0)

static const char *tensor_names[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                       "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

/* Compares the flat buffer `buf` (params or grads of model m) with the reference tensors, tensor by tensor. */
static void check_tensors(const char *test_name_, const char *what, const Model *m, const float *buf,
                          const RefTensors *ref, const Ref *r, double rtol, double atol) {
    const ParamTable *tab = &m->table;
    char label[96];
    for (int i = 0; i < 16; i++) {
        int layer = (i >= 2 && i < 14) ? 0 : -1;
        const ParamSlice *s = &tab->slices[param_table_find(tab, tensor_names[i], layer)];
        const float *a = buf + s->offset;
        snprintf(label, sizeof label, "%s %s", what, tensor_names[i]);
        if (i == 0) {
            /* the kept rows, then whole-tensor sums in double: errors outside the rows still show in the sums */
            float *rows = xmalloc((size_t)r->K * r->C * sizeof(float), "wte rows");
            double sumabs = 0.0, sumsq = 0.0;
            for (int k = 0; k < r->K; k++) memcpy(rows + (size_t)k * r->C, a + (size_t)r->rows[k] * r->C, r->C * 4);
            for (size_t k = 0; k < s->numel; k++) {
                sumabs += fabs(a[k]);
                sumsq += (double)a[k] * a[k];
            }
            CHECK_CLOSE(label, rows, ref->t[0], (size_t)r->K * r->C, rtol, atol);
            /* per-element errors up to rtol * max|ref| + atol could add up over numel elements in the worst case;
             * in practice they are far smaller, so allow rtol relative (+ atol per element) on the whole sums */
            CHECK(fabs(sumabs - ref->wte_sumabs) <= rtol * ref->wte_sumabs + atol * s->numel,
                  "%s sum of |x| over all rows: expected %.9g actual %.9g", what, ref->wte_sumabs, sumabs);
            CHECK(fabs(sumsq - ref->wte_sumsq) <= 2 * rtol * ref->wte_sumsq + 2 * atol * sqrt(ref->wte_sumsq * s->numel),
                  "%s sum of squares over all rows: expected %.9g actual %.9g", what, ref->wte_sumsq, sumsq);
            free(rows);
        } else {
            size_t numel = layer == 0 ? s->numel * (size_t)r->L : s->numel;
            CHECK_CLOSE(label, a, ref->t[i], numel, rtol, atol);
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------
 * The reference model and batch.
 * --------------------------------------------------------------------------------------------------------- */

static Ref ref;
static int ref_loaded = 0;

static Model *ref_model(void) {
    return gpt2_family.create(REF_SPEC, NULL, REF_SEED, 2, 16);
}

static void get_ref(void) {
    if (ref_loaded) return;
    Model *m = ref_model();
    ref = load_ref(REF_PATH, &m->table);
    m->free(m);
    ref_loaded = 1;
}

static void ref_batch(int **inputs, int **targets) {
    int BT = ref.B * ref.T;
    *inputs = xmalloc(BT * sizeof(int), "inputs");
    *targets = xmalloc(BT * sizeof(int), "targets");
    for (int i = 0; i < BT; i++) {
        (*inputs)[i] = ref.tokens[i];
        (*targets)[i] = ref.tokens[i + 1];
    }
}

TEST(ref_file_matches_tiny_model) {
    get_ref();
    Model *m = ref_model();
    CHECK(ref.L == m->num_layers && ref.C == m->channels && ref.NH == m->num_heads && ref.maxT == m->max_seq_len,
          "reference L=%d C=%d NH=%d maxT=%d, model L=%d C=%d NH=%d maxT=%d", ref.L, ref.C, ref.NH, ref.maxT,
          m->num_layers, m->channels, m->num_heads, m->max_seq_len);
    CHECK(ref.V == 50257 && ref.Vp == 50304, "V=%d Vp=%d, expected 50257 and 50304", ref.V, ref.Vp);
    CHECK(ref.B == 2 && ref.T == 16 && ref.steps == 10, "B=%d T=%d steps=%d", ref.B, ref.T, ref.steps);
    m->free(m);
}

TEST(ref_tokens_are_the_validation_shard_window) {
    get_ref();
    char path[4096];
    snprintf(path, sizeof path, "%s/sotu/gpt2/sotu_val_000000.bin", data_dir);
    size_t n;
    unsigned char *buf = read_all(path, &n);
    int32_t h[256];
    memcpy(h, buf, sizeof h);
    CHECK(h[0] == 20240520 && h[1] == 1, "%s: magic %d version %d", path, h[0], h[1]);
    size_t need = 1024 + 2 * (size_t)(ref.offset + ref.B * ref.T + 1);
    CHECK(n >= need, "%s: %zu bytes, need %zu", path, n, need);
    if (n >= need) {
        int mismatches = 0, first = -1;
        for (int i = 0; i < ref.B * ref.T + 1; i++) {
            uint16_t tok;
            memcpy(&tok, buf + 1024 + 2 * (size_t)(ref.offset + i), 2);
            if (tok != ref.tokens[i] && mismatches++ == 0) first = i;
        }
        CHECK(mismatches == 0, "%d of %d tokens differ from %s at offset %d (first at %d)", mismatches,
              ref.B * ref.T + 1, path, ref.offset, first);
    }
    free(buf);
}

TEST(forward_matches_pytorch) {
    get_ref();
    Model *m = ref_model();
    int *in, *tg;
    ref_batch(&in, &tg);
    worst_rel = 0;
    float loss = m->forward(m, in, tg, ref.B, ref.T);
    CHECK(fabs(loss - ref.loss) <= 1e-5 * fabs(ref.loss), "loss expected %.9g actual %.9g", ref.loss, loss);
    int BT = ref.B * ref.T;
    float *sub = xmalloc((size_t)BT * ref.K * sizeof(float), "logits subset");
    const float *logits = m->logits(m);
    for (int n = 0; n < BT; n++)
        for (int k = 0; k < ref.K; k++) sub[(size_t)n * ref.K + k] = logits[(size_t)n * m->padded_vocab_size + ref.rows[k]];
    CHECK_CLOSE("logits", sub, ref.logits, (size_t)BT * ref.K, 1e-5, 0.0);
    printf("# forward: loss %.6f (ref %.6f), worst logits error %.2g of max|ref|\n", loss, ref.loss, worst_rel);
    free(sub);
    free(in);
    free(tg);
    m->free(m);
}

TEST(gradients_match_pytorch) {
    get_ref();
    Model *m = ref_model();
    int *in, *tg;
    ref_batch(&in, &tg);
    worst_rel = 0;
    m->forward(m, in, tg, ref.B, ref.T);
    m->backward(m, 1.0f, NULL, NULL);
    check_tensors(test_name_, "grad", m, m->grads, &ref.grads, &ref, 1e-5, 0.0);
    printf("# gradients: worst error %.2g of the tensor's max|ref|\n", worst_rel);
    free(in);
    free(tg);
    m->free(m);
}

/* 10 steps on the reference batch with the reference's hyper-parameters; opt 0 AdamW, 1 AdamS. */
static void run_steps(const char *test_name_, int opt) {
    get_ref();
    Model *m = ref_model();
    int *in, *tg;
    ref_batch(&in, &tg);
    size_t P = m->table.total;
    float *mom = xcalloc(P, sizeof(float), "m"), *var = xcalloc(P, sizeof(float), "v");
    OptimConfig cfg = {opt ? OPT_ADAMS : OPT_ADAMW, (float)ref.hp[1], (float)ref.hp[2], (float)ref.hp[3],
                       (float)ref.hp[4]};
    float *losses = xmalloc(ref.steps * sizeof(float), "losses");
    worst_rel = worst_abs = 0;
    for (int t = 1; t <= ref.steps; t++) {
        memset(m->grads, 0, P * sizeof(float));
        losses[t - 1] = m->forward(m, in, tg, ref.B, ref.T);
        m->backward(m, 1.0f, NULL, NULL);
        if (opt == 0) adamw_update(&m->table, m->params, m->grads, mom, var, 0, P, t, (float)ref.hp[0], &cfg);
        else adams_update(&m->table, m->params, m->grads, mom, 0, P, t, (float)ref.hp[0], &cfg);
    }
    for (int t = 0; t < ref.steps; t++)
        CHECK(fabs(losses[t] - ref.losses[opt][t]) <= 1e-5 * fabs(ref.losses[opt][t]),
              "loss at step %d expected %.9g actual %.9g", t + 1, ref.losses[opt][t], losses[t]);
    CHECK(losses[ref.steps - 1] < losses[0] - 0.1, "loss did not fall: %.4f -> %.4f", losses[0],
          losses[ref.steps - 1]);
    /* Adam-type updates are about lr per element whatever the gradient's size, so an element whose gradient is
     * tiny (or exactly 0 mathematically, like the key bias: softmax ignores a per-row shift) moves by an amount
     * decided by fp32 rounding noise. Allowed: 1e-5 x max|ref| + 2e-3 x lr x steps (2e-5 here; a wrong weight
     * decay alone would be 5e-5, a wrong bias correction ~1e-3; optim.c's formulas are checked tightly above). */
    double atol = 2e-3 * ref.hp[0] * ref.steps;
    check_tensors(test_name_, opt ? "adams params" : "adamw params", m, m->params, &ref.after[opt], &ref, 1e-5,
                  atol);
    printf("# %s: loss %.4f -> %.4f, worst parameter error %.2g (allowed 1e-5 x max|ref| + %.1g)\n",
           opt ? "AdamS" : "AdamW", losses[0], losses[ref.steps - 1], worst_abs, atol);
    free(mom);
    free(var);
    free(losses);
    free(in);
    free(tg);
    m->free(m);
}

TEST(adamw_10_steps_match_pytorch) { run_steps(test_name_, 0); }
TEST(adams_10_steps_match_pytorch) { run_steps(test_name_, 1); }

/* Runs a shell command, returns its exit status (or -1). */
static int run_cmd(const char *cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Every field of a against b (test/ref_compare.h): integers equal, reals within REF_REGEN_RTOL. */
static RefDiff ref_diff(const Ref *a, const Ref *b, const ParamTable *tab) {
    RefDiff d;
    memset(&d, 0, sizeof d);
    ref_diff_ints(&d, "header", a->h, b->h, 32);
    if (d.int_diff) return d;
    ref_diff_doubles(&d, "hyperparameters", a->hp, b->hp, 8);
    int BT = b->B * b->T;
    ref_diff_ints(&d, "tokens", a->tokens, b->tokens, (size_t)BT + 1);
    ref_diff_ints(&d, "rows", a->rows, b->rows, (size_t)b->K);
    ref_diff_floats(&d, "loss", &a->loss, &b->loss, 1);
    ref_diff_floats(&d, "logits", a->logits, b->logits, (size_t)BT * b->K);
    const char *names[16] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                             "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    const RefTensors *ta[3] = {&a->grads, &a->after[0], &a->after[1]}, *tb[3] = {&b->grads, &b->after[0], &b->after[1]};
    const char *part[3] = {"grad", "adamw", "adams"};
    for (int k = 0; k < 3; k++) {
        char what[64];
        for (int i = 0; i < 16; i++) {
            int layer = (i >= 2 && i < 14) ? 0 : -1;
            const ParamSlice *s = &tab->slices[param_table_find(tab, names[i], layer)];
            size_t numel = i == 0 ? (size_t)b->K * b->C : layer == 0 ? s->numel * (size_t)(tab->num_buckets - 1) : s->numel;
            snprintf(what, sizeof what, "%s %s", part[k], names[i]);
            ref_diff_floats(&d, what, ta[k]->t[i], tb[k]->t[i], numel);
        }
        snprintf(what, sizeof what, "%s wte sum |x|", part[k]);
        ref_diff_floats(&d, what, &ta[k]->wte_sumabs, &tb[k]->wte_sumabs, 1);
        snprintf(what, sizeof what, "%s wte sum x^2", part[k]);
        ref_diff_floats(&d, what, &ta[k]->wte_sumsq, &tb[k]->wte_sumsq, 1);
        if (k) {
            snprintf(what, sizeof what, "%s losses", part[k]);
            ref_diff_floats(&d, what, a->losses[k - 1], b->losses[k - 1], (size_t)b->steps);
        }
    }
    return d;
}

/* The regenerated reference agrees with the committed one (test/ref_compare.h says why not byte for byte). */
TEST(reference_regenerates_within_rounding) {
    const char *py = getenv("PYTHON_REF") ? getenv("PYTHON_REF") : "/usr/bin/python3";
    make_dirs("build/gpt2_test");
    Model *m = ref_model();
    m->save(m, "build/gpt2_test/ref_init.bin");
    get_ref();
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s dev/ref/gpt2_ref.py --model build/gpt2_test/ref_init.bin --shard %s/sotu/gpt2/sotu_val_000000.bin "
             "--offset %d --out build/gpt2_test/gpt2_ref.bin > build/gpt2_test/gpt2_ref.log 2>&1",
             py, data_dir, ref.offset);
    int rc = run_cmd(cmd);
    CHECK(rc == 0, "%s exited with %d (see build/gpt2_test/gpt2_ref.log)", cmd, rc);
    if (rc == 0) {
        Ref again = load_ref("build/gpt2_test/gpt2_ref.bin", &m->table);
        RefDiff d = ref_diff(&again, &ref, &m->table);
        char why[256];
        CHECK(ref_diff_ok(&d, why, sizeof why), "build/gpt2_test/gpt2_ref.bin vs " REF_PATH ": %s", why);
        printf("# regenerated reference: worst difference %.3g of the tensor's max |x| (allowed %g)\n", d.worst,
               REF_REGEN_RTOL);
    }
    m->free(m);
}

/* The comparison itself: equal files pass; one element moved by 1e-5 of its tensor's max, or one token changed,
 * fails (the smallest change of the reference script that matters moves far more; docs/failures.md). */
TEST(regen_comparison_flags_small_changes) {
    get_ref();
    Model *m = ref_model();
    char why[256];
    RefDiff d = ref_diff(&ref, &ref, &m->table);
    CHECK(ref_diff_ok(&d, why, sizeof why) && d.worst == 0.0, "a file against itself: %s", why);
    Ref b = load_ref(REF_PATH, &m->table);
    size_t n = (size_t)m->table.slices[param_table_find(&m->table, "fcw", 0)].numel;
    float mx = 0.0f;
    for (size_t i = 0; i < n; i++) mx = fmaxf(mx, fabsf(ref.after[1].t[10][i]));
    b.after[1].t[10][n / 2] += 1e-5f * mx;
    d = ref_diff(&b, &ref, &m->table);
    CHECK(!ref_diff_ok(&d, why, sizeof why) && strstr(d.where, "adams fcw"), "a 1e-5 change of adams fcw passed (%s)",
          d.where);
    b.after[1].t[10][n / 2] = ref.after[1].t[10][n / 2];
    b.tokens[3] ^= 1;
    d = ref_diff(&b, &ref, &m->table);
    CHECK(!ref_diff_ok(&d, why, sizeof why) && d.int_diff, "a changed token passed");
    m->free(m);
}

/* ---------------------------------------------------------------------------------------------------------
 * Model contract: buckets, accumulation, smaller T.
 * --------------------------------------------------------------------------------------------------------- */

typedef struct { int order[64]; int n; const Model *m; int grads_final_ok; float *snapshot; } BucketLog;

static void on_bucket(void *ctx, int b) {
    BucketLog *log = ctx;
    if (log->n < 64) log->order[log->n] = b;
    log->n++;
}

TEST(backward_reports_buckets_in_order_and_accumulates) {
    Model *m = gpt2_family.create("d3c32h2t16", NULL, 7, 2, 16);
    int in[32], tg[32];
    for (int i = 0; i < 32; i++) { in[i] = (i * 977) % 50257; tg[i] = (i * 131 + 5) % 50257; }
    BucketLog log = {.n = 0};
    m->forward(m, in, tg, 2, 16);
    m->backward(m, 1.0f, on_bucket, &log);
    CHECK(log.n == 4, "expected 4 bucket calls (L=3 layers + embeddings), got %d", log.n);
    for (int b = 0; b < 4 && b < log.n; b++) CHECK(log.order[b] == b, "call %d reported bucket %d", b, log.order[b]);
    /* every slice's bucket is in range and layer l maps to L-1-l */
    for (int i = 0; i < m->table.n; i++) {
        const ParamSlice *s = &m->table.slices[i];
        int want = s->layer < 0 ? 3 : 2 - s->layer;
        CHECK(s->bucket == want, "%s layer %d in bucket %d, expected %d", s->name, s->layer, s->bucket, want);
    }
    size_t P = m->table.total;
    float *g1 = xmalloc(P * sizeof(float), "g1");
    memcpy(g1, m->grads, P * sizeof(float));
    /* a second forward/backward with loss_scale 0.5 adds half the gradient again */
    m->forward(m, in, tg, 2, 16);
    m->backward(m, 0.5f, NULL, NULL);
    size_t bad = 0, wi = 0;
    double worst = 0, maxg = 0;
    for (size_t i = 0; i < P; i++) maxg = fmax(maxg, fabs(g1[i]));
    for (size_t i = 0; i < P; i++) {
        double d = fabs(m->grads[i] - 1.5 * g1[i]);
        if (d > worst) { worst = d; wi = i; }
        if (d > 1e-6 * maxg) bad++;
    }
    CHECK(bad == 0, "%zu gradients are not 1.5x the first backward's; worst at %zu expected %.9g actual %.9g", bad, wi,
          1.5 * g1[wi], m->grads[wi]);
    free(g1);
    m->free(m);
}

TEST(forward_with_shorter_sequence_matches_prefix) {
    Model *m = gpt2_family.create("d2c64h4t32", NULL, 3, 2, 32);
    int in[64];
    for (int i = 0; i < 64; i++) in[i] = (i * 7919 + 13) % 50257;
    m->forward(m, in, NULL, 2, 32);
    int Vp = m->padded_vocab_size;
    float *full = xmalloc((size_t)64 * Vp * sizeof(float), "logits");
    memcpy(full, m->logits(m), (size_t)64 * Vp * sizeof(float));
    /* B=1, T=8 on the second sequence's first 8 tokens: causal, so its logits equal those positions of the full
     * run */
    m->forward(m, in + 32, NULL, 1, 8);
    const float *l = m->logits(m);
    double worst = 0;
    for (int t = 0; t < 8; t++)
        for (int v = 0; v < 50257; v++)
            worst = fmax(worst, fabs(l[(size_t)t * Vp + v] - full[(size_t)(32 + t) * Vp + v]));
    CHECK(worst < 1e-5, "prefix logits differ by up to %.3g", worst);
    /* padded logits are zero (padded wte rows are zero) */
    double pad = 0;
    for (int v = 50257; v < Vp; v++) pad = fmax(pad, fabs(full[v]));
    CHECK(pad == 0, "padded logits reach %.3g, expected 0", pad);
    free(full);
    m->free(m);
}

/* ---------------------------------------------------------------------------------------------------------
 * Specs, sizes, FLOPs.
 * --------------------------------------------------------------------------------------------------------- */

TEST(standard_specs_have_llmc_sizes) {
    /* build only the tables (no activations) for the big ones */
    struct { const char *spec; int L, C, NH; size_t params; } cases[] = {
        {"d12", 12, 768, 12, 124475904}, /* llm.c's gpt2_124M with Vp = 50304 */
        {"d24", 24, 1024, 16, 0}, {"d36", 36, 1280, 20, 0}, {"d48", 48, 1600, 25, 0}, {"d6", 6, 384, 6, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        GPT2Config c = gpt2_parse_spec(cases[i].spec);
        CHECK(c.L == cases[i].L && c.C == cases[i].C && c.NH == cases[i].NH && c.maxT == 1024 && c.V == 50257 &&
                  c.Vp == 50304,
              "%s parsed to L=%d C=%d NH=%d maxT=%d", cases[i].spec, c.L, c.C, c.NH, c.maxT);
        ParamTable t;
        gpt2_build_table(&t, &c);
        size_t C = c.C, L = c.L;
        size_t want = 50304 * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C;
        CHECK(t.total == want, "%s: %zu parameters, expected %zu", cases[i].spec, t.total, want);
        if (cases[i].params) CHECK(t.total == cases[i].params, "%s: %zu parameters", cases[i].spec, t.total);
        CHECK(t.n == 4 + 12 * c.L && t.num_buckets == c.L + 1, "%s: %d entries, %d buckets", cases[i].spec, t.n,
              t.num_buckets);
        param_table_free(&t);
    }
    GPT2Config c = gpt2_parse_spec("d4c128h4t256");
    CHECK(c.L == 4 && c.C == 128 && c.NH == 4 && c.maxT == 256, "d4c128h4t256 -> L=%d C=%d NH=%d maxT=%d", c.L, c.C,
          c.NH, c.maxT);
    c = gpt2_parse_spec("d4c256");
    CHECK(c.NH == 4 && c.maxT == 1024, "d4c256 -> NH=%d maxT=%d (expected C/64 = 4 heads, maxT 1024)", c.NH, c.maxT);
}

TEST(flops_per_token_formula) {
    Model *m = gpt2_family.create("d2c64h2t32", NULL, 1, 1, 8);
    double C = 64, L = 2, T = 32, Vp = 50304;
    double nonemb = L * (12 * C * C + 13 * C) + 2 * C;
    double want = 6 * (nonemb + Vp * C) + 12 * L * C * T;
    CHECK(fabs(m->flops_per_token - want) < 0.5, "flops_per_token %.0f, expected %.0f", m->flops_per_token, want);
    m->free(m);
}

TEST(init_statistics_follow_gpt2) {
    Model *m = gpt2_family.create("d4c128h4t64", NULL, 42, 1, 8);
    const ParamTable *t = &m->table;
    for (int i = 0; i < t->n; i++) {
        const ParamSlice *s = &t->slices[i];
        const float *w = m->params + s->offset;
        size_t n = s->numel;
        if (strcmp(s->name, "wte") == 0) n = (size_t)50257 * 128;
        double sum = 0, sq = 0;
        for (size_t k = 0; k < n; k++) { sum += w[k]; sq += (double)w[k] * w[k]; }
        double mean = sum / n, sd = sqrt(sq / n - mean * mean);
        double want_sd = 0, want_mean = 0;
        if (!s->decay) want_mean = s->name[strlen(s->name) - 1] == 'w' ? 1.0 : 0.0;
        else if (!strcmp(s->name, "wpe")) want_sd = 0.01;
        else if (!strcmp(s->name, "attprojw") || !strcmp(s->name, "fcprojw")) want_sd = 0.02 / sqrt(8.0);
        else want_sd = 0.02;
        CHECK(fabs(mean - want_mean) < 0.002 + 4 * want_sd / sqrt((double)n) && fabs(sd - want_sd) < 0.05 * want_sd + 1e-12,
              "%s layer %d: mean %.5f sd %.5f, expected %.3f and %.5f", s->name, s->layer, mean, sd, want_mean, want_sd);
    }
    int wte = param_table_find(t, "wte", -1);
    double pad = 0;
    for (size_t k = (size_t)50257 * 128; k < t->slices[wte].numel; k++) pad = fmax(pad, fabs(m->params[k]));
    CHECK(pad == 0, "padded wte rows not zero (%.3g)", pad);
    /* the same seed gives the same weights; another seed does not */
    Model *m2 = gpt2_family.create("d4c128h4t64", NULL, 42, 1, 8), *m3 = gpt2_family.create("d4c128h4t64", NULL, 43, 1, 8);
    CHECK(memcmp(m->params, m2->params, t->total * 4) == 0, "seed 42 twice gave different weights");
    CHECK(memcmp(m->params, m3->params, t->total * 4) != 0, "seeds 42 and 43 gave identical weights");
    m->free(m);
    m2->free(m2);
    m3->free(m3);
}

TEST(fast_exp_and_tanh_match_libm) {
    double worst = 0, worst_x = 0;
    for (int i = 0; i <= 1000000; i++) {
        float x = -87.0f * i / 1000000.0f;
        double want = exp((double)x), rel = fabs(exp_f32(x) - want) / want;
        if (rel > worst) { worst = rel; worst_x = x; }
    }
    CHECK(worst < 2e-7, "exp_f32: relative error %.3g at x = %.9g", worst, worst_x);
    CHECK(exp_f32(-100.0f) == 0.0f && exp_f32(-1e30f) == 0.0f && exp_f32(0.0f) == 1.0f,
          "exp_f32(-100) = %g, exp_f32(-1e30) = %g, exp_f32(0) = %g", exp_f32(-100.0f), exp_f32(-1e30f), exp_f32(0.0f));
    CHECK(isnan(exp_f32(NAN)), "exp_f32(NaN) is not NaN");
    double worst_exp = worst;
    worst = 0;
    for (int i = 0; i <= 1000000; i++) {
        float u = -20.0f + 40.0f * i / 1000000.0f;
        double d = fabs(tanh_f32(u) - tanh((double)u));
        if (d > worst) { worst = d; worst_x = u; }
    }
    CHECK(worst < 3e-7, "tanh_f32: absolute error %.3g at u = %.9g", worst, worst_x);
    CHECK(tanh_f32(1e30f) == 1.0f && tanh_f32(-1e30f) == -1.0f, "tanh_f32(+-1e30) = %g, %g", tanh_f32(1e30f),
          tanh_f32(-1e30f));
    printf("# exp_f32 worst relative error %.2g on [-87, 0], tanh_f32 worst absolute error %.2g\n", worst_exp, worst);
}

/* ---------------------------------------------------------------------------------------------------------
 * Model files.
 * --------------------------------------------------------------------------------------------------------- */

TEST(model_file_round_trip) {
    make_dirs("build/gpt2_test");
    Model *m = gpt2_family.create("d2c64h2t32", NULL, 5, 1, 8);
    const char *path = "build/gpt2_test/roundtrip.bin";
    m->save(m, path);
    CHECK(!file_exists("build/gpt2_test/roundtrip.bin.tmp"), "temporary file left behind");
    CHECK(file_size(path) == (int64_t)(1024 + 4 * m->table.total), "file has %lld bytes", (long long)file_size(path));
    Model *r = gpt2_family.create("d12", path, 999, 1, 8); /* spec and seed ignored with a file */
    CHECK(r->table.total == m->table.total && r->num_layers == 2 && r->channels == 64 && r->num_heads == 2 &&
              r->max_seq_len == 32 && r->vocab_size == 50257 && r->padded_vocab_size == 50304,
          "loaded L=%d C=%d NH=%d maxT=%d", r->num_layers, r->channels, r->num_heads, r->max_seq_len);
    CHECK(r->table.total == m->table.total && memcmp(r->params, m->params, m->table.total * 4) == 0,
          "loaded parameters differ from the saved ones");
    /* header fields as llm.c writes them */
    FILE *f = xfopen(path, "rb", NULL);
    int32_t h[8];
    xfread(h, sizeof h, f, path, "header");
    fclose(f);
    CHECK(h[0] == 20240326 && h[1] == 3 && h[2] == 32 && h[3] == 50257 && h[4] == 2 && h[5] == 2 && h[6] == 64 &&
              h[7] == 50304,
          "header %d %d %d %d %d %d %d %d", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    /* a version 5 (bf16) file of the same weights loads as their bf16 truncation */
    const char *p5 = "build/gpt2_test/bf16.bin";
    f = xfopen(p5, "wb", NULL);
    int32_t hdr[256] = {20240326, 5, 32, 50257, 2, 2, 64, 50304};
    xfwrite(hdr, sizeof hdr, f, p5, "header");
    uint16_t *bf = xmalloc(m->table.total * 2, "bf16");
    for (size_t i = 0; i < m->table.total; i++) {
        uint32_t u;
        memcpy(&u, &m->params[i], 4);
        bf[i] = (uint16_t)(u >> 16);
    }
    xfwrite(bf, m->table.total * 2, f, p5, "bf16 params");
    fclose(f);
    Model *r5 = gpt2_family.create(NULL, p5, 0, 1, 8);
    size_t bad = 0;
    for (size_t i = 0; i < m->table.total; i++) {
        uint32_t u = (uint32_t)bf[i] << 16;
        float want;
        memcpy(&want, &u, 4);
        if (r5->params[i] != want) bad++;
    }
    CHECK(bad == 0, "%zu bf16 parameters loaded wrongly", bad);
    free(bf);
    r5->free(r5);
    r->free(r);
    m->free(m);
}

/* Runs create() on `path` in a child; returns its exit status and its stderr in err. */
static int load_in_child(const char *path, int T, char *err, size_t errcap) {
    int fd[2];
    if (pipe(fd) != 0) fatal("pipe failed");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        Model *m = path ? gpt2_family.create("d2c64h2t32", path, 1, 1, T) : gpt2_family.create("d2c64h2t32", NULL, 1, 1, T);
        (void)m;
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < errcap && (k = read(fd[0], err + n, errcap - 1 - n)) > 0) n += (size_t)k;
    err[n] = 0;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

TEST(bad_model_files_are_rejected_with_one_line) {
    make_dirs("build/gpt2_test");
    Model *m = gpt2_family.create("d2c64h2t32", NULL, 5, 1, 8);
    const char *good = "build/gpt2_test/good.bin";
    m->save(m, good);
    size_t n;
    unsigned char *bytes = read_all(good, &n);
    struct { const char *name, *want; int mutate; } cases[] = {
        {"build/gpt2_test/missing.bin", "cannot open", 0},
        {"build/gpt2_test/badmagic.bin", "bad magic", 1},
        {"build/gpt2_test/truncated.bin", "truncated", 2},
        {"build/gpt2_test/version.bin", "version", 3},
        {"build/gpt2_test/short.bin", "header", 4},
        {"build/gpt2_test/extra.bin", "bytes", 5},
    };
    unlink(cases[0].name);
    for (size_t i = 1; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *b = xmalloc(n + 4, "copy");
        memcpy(b, bytes, n);
        size_t len = n;
        int32_t v;
        switch (cases[i].mutate) {
        case 1: v = 12345; memcpy(b, &v, 4); break;
        case 2: len = n - 100; break;
        case 3: v = 2; memcpy(b + 4, &v, 4); break;
        case 4: len = 100; break;
        case 5: memset(b + n, 0, 4); len = n + 4; break;
        }
        FILE *f = xfopen(cases[i].name, "wb", NULL);
        xfwrite(b, len, f, cases[i].name, "test file");
        fclose(f);
        free(b);
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[4096];
        int rc = load_in_child(cases[i].name, 8, err, sizeof err);
        CHECK(rc == 1, "%s: exit status %d, expected 1", cases[i].name, rc);
        CHECK(count_lines(err) == 1 && strncmp(err, "error: ", 7) == 0, "%s: stderr is not one error line: %s",
              cases[i].name, err);
        CHECK(strstr(err, cases[i].name) && strstr(err, cases[i].want), "%s: message lacks the path or '%s': %s",
              cases[i].name, cases[i].want, err);
    }
    /* a sequence longer than the model's maximum, with the fix */
    char err[4096];
    int rc = load_in_child(NULL, 64, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "--seq 64 exceeds the model's maximum sequence length 32; use --seq <= 32"),
          "T > maxT: status %d, message: %s", rc, err);
    free(bytes);
    m->free(m);
}

/* ---------------------------------------------------------------------------------------------------------
 * Optimizers on their own: ranges compose, and match a float64 evaluation of optim.h's formulas.
 * --------------------------------------------------------------------------------------------------------- */

TEST(optimizer_updates_match_float64_formulas_and_split_ranges) {
    Model *mdl = gpt2_family.create("d1c32h2t8", NULL, 9, 1, 4);
    const ParamTable *tab = &mdl->table;
    size_t P = tab->total;
    Rng rng;
    rng_seed(&rng, 77);
    float *g = xmalloc(P * 4, "g"), *p0 = xmalloc(P * 4, "p0");
    rng_normal(&rng, g, P, 0.0f, 0.01f);
    rng_normal(&rng, p0, P, 0.0f, 0.1f);
    OptimConfig cfg = {OPT_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int opt = 0; opt < 2; opt++) {
        float *pa = xmalloc(P * 4, "pa"), *pb = xmalloc(P * 4, "pb");
        float *ma = xcalloc(P, 4, "ma"), *mb = xcalloc(P, 4, "mb"), *va = xcalloc(P, 4, "va"), *vb = xcalloc(P, 4, "vb");
        double *pd = xmalloc(P * 8, "pd"), *md = xcalloc(P, 8, "md"), *vd = xcalloc(P, 8, "vd");
        memcpy(pa, p0, P * 4);
        memcpy(pb, p0, P * 4);
        for (size_t i = 0; i < P; i++) pd[i] = p0[i];
        float lr = 3e-3f;
        for (int t = 1; t <= 3; t++) {
            size_t cut = P / 3 + 17; /* inside a slice */
            if (opt == 0) {
                adamw_update(tab, pa, g, ma, va, 0, P, t, lr, &cfg);
                adamw_update(tab, pb, g, mb, vb, cut, P, t, lr, &cfg);
                adamw_update(tab, pb, g, mb, vb, 0, cut, t, lr, &cfg);
            } else {
                adams_update(tab, pa, g, ma, 0, P, t, lr, &cfg);
                adams_update(tab, pb, g, mb, cut, P, t, lr, &cfg);
                adams_update(tab, pb, g, mb, 0, cut, t, lr, &cfg);
            }
            double bc1 = 1 - pow(0.9, t), bc2 = 1 - pow(0.95, t);
            for (int s = 0; s < tab->n; s++) {
                const ParamSlice *sl = &tab->slices[s];
                double wd = sl->decay ? 0.1 : 0.0;
                for (size_t i = sl->offset; i < sl->offset + sl->numel; i++) {
                    double gi = g[i], mp = md[i];
                    if (opt == 0) {
                        md[i] = 0.9 * mp + 0.1 * gi;
                        vd[i] = 0.95 * vd[i] + 0.05 * gi * gi;
                        pd[i] -= lr * ((md[i] / bc1) / (sqrt(vd[i] / bc2) + 1e-8) + wd * pd[i]);
                    } else {
                        double nu = 0.95 * mp * mp + 0.05 * gi * gi;
                        md[i] = 0.9 * mp + 0.1 * gi;
                        pd[i] -= lr * ((md[i] / bc1) / (sqrt(nu) / sqrt(bc2) + 1e-8) + wd * pd[i]);
                    }
                }
            }
        }
        CHECK(memcmp(pa, pb, P * 4) == 0 && memcmp(ma, mb, P * 4) == 0, "%s: split ranges differ from one call",
              opt ? "AdamS" : "AdamW");
        CHECK_CLOSE(opt ? "AdamS params" : "AdamW params", pa, pd, P, 1e-6, 0.0);
        free(pa); free(pb); free(ma); free(mb); free(va); free(vb); free(pd); free(md); free(vd);
    }
    /* step 1 of AdamS is lr * sign(g) (plus decay) where |g| >> eps */
    float p = 0.5f, m = 0.0f, gg = -0.3f;
    ParamTable one = {0};
    param_table_add(&one, "b", -1, 0, 0, 1, (size_t[]){1});
    adams_update(&one, &p, &gg, &m, 0, 1, 1, 0.01f, &cfg);
    CHECK(fabsf(p - 0.51f) < 1e-6f, "AdamS step 1: expected 0.51, got %.9g", p);
    param_table_free(&one);
    free(g);
    free(p0);
    mdl->free(mdl);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-init") == 0) {
        Model *m = ref_model();
        m->save(m, argv[2]);
        m->free(m);
        return 0;
    }
    if (argc == 2) data_dir = argv[1];
    else if (argc != 1) fatal("usage: %s [DATA_DIR] | --write-init PATH", argv[0]);
    RUN_TEST(standard_specs_have_llmc_sizes);
    RUN_TEST(flops_per_token_formula);
    RUN_TEST(init_statistics_follow_gpt2);
    RUN_TEST(fast_exp_and_tanh_match_libm);
    RUN_TEST(backward_reports_buckets_in_order_and_accumulates);
    RUN_TEST(forward_with_shorter_sequence_matches_prefix);
    RUN_TEST(model_file_round_trip);
    RUN_TEST(bad_model_files_are_rejected_with_one_line);
    RUN_TEST(optimizer_updates_match_float64_formulas_and_split_ranges);
    RUN_TEST(ref_file_matches_tiny_model);
    RUN_TEST(ref_tokens_are_the_validation_shard_window);
    RUN_TEST(forward_matches_pytorch);
    RUN_TEST(gradients_match_pytorch);
    RUN_TEST(adamw_10_steps_match_pytorch);
    RUN_TEST(adams_10_steps_match_pytorch);
    RUN_TEST(reference_regenerates_within_rounding);
    RUN_TEST(regen_comparison_flags_small_changes);
    TEST_EXIT();
}

/*
 * test/test_train_toy.c - a toy ModelFamily so the shared training loop (trainer/train.c) is tested on its own,
 * independently of GPT-2: a bigram model with L stacked tables,
 *     logits[b,t,:] = bias + sum_l W_l[inputs[b,t], :]         W_l (V,V), bias (V)
 * with a hand-written backward. Each W_l is its own gradient bucket (finished last layer first) and the bias is
 * the last bucket, like a transformer's embeddings. Everything is sequential C, so runs are bit-reproducible.
 *   build/test_train_toy [trainer options]        trains it (spec --model v<V>l<L>t<maxT>, default v32l2t64)
 *   build/test_train_toy mkdata <dir> <V>         writes <dir>/train.bin, val.bin (a learnable Markov chain over
 *                                                 V tokens) and bad.bin (ids up to V+9, for the vocabulary test)
 * Not for: anything but tests (test/test_train.sh drives it).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model.h"
#include "common/rng.h"
#include "trainer/train.h"
#include "common/util.h"
#include "dataloader/dataloader.h"

#define TOY_MAGIC 0x00544F59 /* "TOY" */

typedef struct {
    Model base;
    int V, L, maxT, Bmax, Tmax;
    float *logits; /* (B,T,V) */
    float *probs;  /* (B,T,V) softmax of the last forward with targets */
    int *inputs, *targets; /* (B,T) copies of the last forward's */
    int B, T;
} Toy;

static float *toy_w(Toy *m, float *base, int l) { return base + (size_t)l * m->V * m->V; }
static float *toy_b(Toy *m, float *base) { return base + (size_t)m->L * m->V * m->V; }

static float toy_forward(Model *mm, const int *inputs, const int *targets, int B, int T) {
    Toy *m = (Toy *)mm;
    int V = m->V;
    if ((size_t)B * T > (size_t)m->Bmax * m->Tmax) fatal("toy forward: B*T = %d*%d exceeds the allocation", B, T);
    m->B = B;
    m->T = T;
    double loss = 0.0;
    for (int i = 0; i < B * T; i++) {
        float *lg = m->logits + (size_t)i * V;
        memcpy(lg, toy_b(m, mm->params), (size_t)V * sizeof(float));
        for (int l = 0; l < m->L; l++) {
            const float *row = toy_w(m, mm->params, l) + (size_t)inputs[i] * V;
            for (int v = 0; v < V; v++) lg[v] += row[v];
        }
        m->inputs[i] = inputs[i];
        if (!targets) continue;
        m->targets[i] = targets[i];
        float mx = lg[0];
        for (int v = 1; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
        double sum = 0.0;
        float *p = m->probs + (size_t)i * V;
        for (int v = 0; v < V; v++) {
            p[v] = expf(lg[v] - mx);
            sum += p[v];
        }
        for (int v = 0; v < V; v++) p[v] = (float)(p[v] / sum);
        loss -= log(p[targets[i]] > 1e-30f ? p[targets[i]] : 1e-30f);
    }
    return targets ? (float)(loss / (B * T)) : 0.0f;
}

static void toy_backward(Model *mm, float loss_scale, BucketReadyFn on_bucket, void *ctx) {
    Toy *m = (Toy *)mm;
    int V = m->V, N = m->B * m->T;
    float s = loss_scale / (float)N;
    /* d loss / d logits = (p - onehot(target)) / N, the same for every table, so each bucket is one pass */
    for (int l = m->L - 1; l >= 0; l--) {
        float *gw = toy_w(m, mm->grads, l);
        for (int i = 0; i < N; i++) {
            const float *p = m->probs + (size_t)i * V;
            float *row = gw + (size_t)m->inputs[i] * V;
            for (int v = 0; v < V; v++) row[v] += s * (p[v] - (v == m->targets[i] ? 1.0f : 0.0f));
        }
        if (on_bucket) on_bucket(ctx, m->L - 1 - l);
    }
    float *gb = toy_b(m, mm->grads);
    for (int i = 0; i < N; i++) {
        const float *p = m->probs + (size_t)i * V;
        for (int v = 0; v < V; v++) gb[v] += s * (p[v] - (v == m->targets[i] ? 1.0f : 0.0f));
    }
    if (on_bucket) on_bucket(ctx, m->L);
}

static const float *toy_logits(const Model *mm) { return ((const Toy *)mm)->logits; }

static void toy_save(const Model *mm, const char *path) {
    const Toy *m = (const Toy *)mm;
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = xfopen(tmp, "wb", NULL);
    int32_t h[8] = {TOY_MAGIC, 1, m->V, m->L, m->maxT, 0, 0, 0};
    xfwrite(h, sizeof h, f, tmp, "toy header");
    xfwrite(mm->params, mm->table.total * sizeof(float), f, tmp, "toy parameters");
    fclose(f);
    if (rename(tmp, path) != 0) fatal("cannot rename %s to %s", tmp, path);
}

static void toy_free(Model *mm) {
    Toy *m = (Toy *)mm;
    param_table_free(&mm->table);
    free(mm->params);
    free(mm->grads);
    free(m->logits);
    free(m->probs);
    free(m->inputs);
    free(m->targets);
    free(m);
}

static Model *toy_create(const char *spec, const char *init_path, uint64_t seed, int B, int T) {
    int V, L, maxT;
    FILE *f = NULL;
    if (init_path) {
        f = xfopen(init_path, "rb", "pass a file written by the toy model");
        int32_t h[8];
        xfread(h, sizeof h, f, init_path, "toy header");
        if (h[0] != TOY_MAGIC || h[1] != 1) fatal("%s: not a toy model file", init_path);
        V = h[2], L = h[3], maxT = h[4];
    } else if (sscanf(spec, "v%dl%dt%d", &V, &L, &maxT) != 3 || V < 2 || L < 1 || maxT < 1) {
        fatal("--model %s: the toy model takes v<V>l<L>t<maxT>, e.g. v32l2t64", spec);
    }
    if (T > maxT) fatal("--seq %d exceeds the model's maximum sequence length %d; use --seq %d or less", T, maxT,
                        maxT);
    Toy *m = xcalloc(1, sizeof *m, "toy model");
    Model *mm = &m->base;
    m->V = V, m->L = L, m->maxT = maxT, m->Bmax = B, m->Tmax = T;
    for (int l = 0; l < L; l++) {
        size_t shape[2] = {(size_t)V, (size_t)V};
        param_table_add(&mm->table, "w", l, L - 1 - l, 1, 2, shape);
    }
    size_t bshape[1] = {(size_t)V};
    param_table_add(&mm->table, "bias", -1, L, 0, 1, bshape);
    mm->family = "toy";
    snprintf(mm->desc, sizeof mm->desc, "v%dl%dt%d", V, L, maxT);
    mm->params = xcalloc(mm->table.total, sizeof(float), "toy params");
    mm->grads = xcalloc(mm->table.total, sizeof(float), "toy grads");
    if (f) {
        xfread(mm->params, mm->table.total * sizeof(float), f, init_path, "toy parameters");
        fclose(f);
    } else {
        Rng r;
        rng_seed(&r, seed);
        rng_normal(&r, mm->params, (size_t)L * V * V, 0.0f, 0.02f);
    }
    m->logits = xcalloc((size_t)B * T * V, sizeof(float), "toy logits");
    m->probs = xcalloc((size_t)B * T * V, sizeof(float), "toy probs");
    m->inputs = xcalloc((size_t)B * T, sizeof(int), "toy inputs");
    m->targets = xcalloc((size_t)B * T, sizeof(int), "toy targets");
    mm->vocab_size = V;
    mm->padded_vocab_size = V;
    mm->max_seq_len = maxT;
    mm->num_layers = L;
    mm->channels = V;
    mm->num_heads = 1;
    mm->flops_per_token = 6.0 * (double)L * V;
    mm->forward = toy_forward;
    mm->backward = toy_backward;
    mm->logits = toy_logits;
    mm->save = toy_save;
    mm->free = toy_free;
    return mm;
}

static const ModelFamily toy_family = {
    .family = "toy",
    .tokenizer = NULL, /* samples print as token ids */
    .default_model = "v32l2t64",
    .model_help = "toy bigram model v<V>l<L>t<maxT>",
    .create = toy_create,
};

/* A Markov chain a model can learn: next = (3 * prev + 1 + noise) mod V, noise in {0, 1, 2}. */
static void write_chain(const char *path, size_t n, int V, uint64_t seed, int extra) {
    int32_t *tok = xmalloc(n * sizeof(int32_t), "toy tokens");
    Rng r;
    rng_seed(&r, seed);
    tok[0] = 0;
    for (size_t i = 1; i < n; i++) tok[i] = (int32_t)((3 * tok[i - 1] + 1 + (int)rng_below(&r, 3)) % V);
    if (extra) /* ids outside the model's vocabulary, often enough that every window holds one */
        for (size_t i = 25; i < n; i += 50) tok[i] = V + extra - 1;
    shard_write(path, tok, n, 2);
    free(tok);
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "mkdata") == 0) {
        if (argc != 4) fatal("usage: %s mkdata <dir> <V>", argv[0]);
        int V = atoi(argv[3]);
        char path[4400];
        make_dirs(argv[2]);
        snprintf(path, sizeof path, "%s/train.bin", argv[2]);
        write_chain(path, 20000, V, 1, 0);
        snprintf(path, sizeof path, "%s/val.bin", argv[2]);
        write_chain(path, 3000, V, 2, 0);
        snprintf(path, sizeof path, "%s/bad.bin", argv[2]);
        write_chain(path, 3000, V, 3, 10);
        return 0;
    }
    return train_main(argc, argv, &toy_family);
}

/*
 * test/gguf_ref.c - what this runtime says about a model, for test/test_gguf.sh to hold llama.cpp against:
 *   gguf_ref MODEL TOKENIZER DATA TEXTS PROMPT N OUT.json
 * MODEL a model file of train_gpt or train_llama; TOKENIZER gpt2|llama2|llama3 in the data cache DATA; TEXTS a file
 * of texts separated by lines holding only "\x1e" (each encoded without BOS/EOS, specials as plain text); PROMPT a
 * text encoded with the model's BOS first (GPT-2: <|endoftext|>), whose last position's logits (V of them) are
 * written, and from which N tokens are generated greedily (argmax, lowest id on ties; stopping after the
 * end-of-text token) by the CPU forward pass of the model file (train_gpt.c / train_llama.c); at every position of
 * the prompt, the TOPN most likely next tokens and their log-probabilities. Writes one JSON object:
 * {"texts": [[ids]...], "prompt": [ids], "logits": [V floats], "top": [[[id, log p] x TOPN] per position],
 *  "greedy": [ids]}.
 * Not a test by itself: test/test_gguf.mjs compares.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "models/gpt2_host.h"
#include "models/llama_host.h"
#include "tokenizer/tokenizer.h"

static void write_ids(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", ids[i]);
    fputc(']', f);
}

#define TOPN 16
/* the TOPN largest of V logits (ties to the lower id) with their log-softmax, as [[id, log p], ...] */
static void write_top(FILE *f, const float *lg, int V, int pos) {
    double mx = lg[0];
    for (int v = 1; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
    double se = exp((double)lg[0] - mx); /* >= exp(lg[0] - mx) > 0 */
    for (int v = 1; v < V; v++) se += exp((double)lg[v] - mx);
    double lse = mx + log(se);
    int top[TOPN];
    int k = 0;
    for (int v = 0; v < V; v++) {
        if (k < TOPN) top[k++] = v;
        else if (lg[v] > lg[top[TOPN - 1]]) top[TOPN - 1] = v;
        else continue;
        for (int i = k - 1; i > 0 && lg[top[i]] > lg[top[i - 1]]; i--) {
            int t = top[i];
            top[i] = top[i - 1];
            top[i - 1] = t;
        }
    }
    fprintf(f, "%s[", pos ? "," : "");
    for (int i = 0; i < k; i++) fprintf(f, "%s[%d,%.9g]", i ? "," : "", top[i], (double)lg[top[i]] - lse);
    fputc(']', f);
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: gguf_ref MODEL TOKENIZER DATA TEXTS PROMPT N OUT.json\n");
        return 2;
    }
    const char *model = argv[1], *kind = argv[2], *data = argv[3], *texts = argv[4], *prompt = argv[5], *out = argv[7];
    int ngen = atoi(argv[6]);
    FILE *mf = xfopen(model, "rb", "pass a model file");
    int32_t magic = 0;
    xfread(&magic, 4, mf, model, "magic");
    fclose(mf);
    int llama = magic == 20261129;
    /* sized for the longest sequence the greedy run evaluates */
    Tokenizer *tok = tokenizer_load(kind, data);
    int32_t *p = NULL;
    size_t cap = 0;
    size_t np = tokenizer_encode(tok, prompt, strlen(prompt), 0, &p, &cap);
    int T = (int)np + 1 + ngen;
    Model *m = llama ? llama_host_create(NULL, model, 0, 1, T) : gpt2_host_create(NULL, model, 0, 1, T);
    if (T > m->max_seq_len) fatal("prompt of %zu tokens plus %d generated exceeds the model's %d", np, ngen, m->max_seq_len);
    int32_t *seq = xmalloc((size_t)T * sizeof(int32_t), "sequence");
    seq[0] = tokenizer_bos(tok);
    memcpy(seq + 1, p, np * sizeof(int32_t));
    int n = (int)np + 1;

    FILE *f = xfopen(out, "w", "check the path");
    fprintf(f, "{\"texts\": [");
    size_t tlen;
    FILE *tf = xfopen(texts, "rb", "pass a texts file");
    fseek(tf, 0, SEEK_END);
    tlen = (size_t)ftell(tf);
    fseek(tf, 0, SEEK_SET);
    char *all = xmalloc(tlen + 1, "texts");
    xfread(all, tlen, tf, texts, "texts");
    fclose(tf);
    all[tlen] = 0;
    const char *sep = "\n\x1e\n";
    char *s = all;
    int first = 1;
    for (;;) {
        char *e = strstr(s, sep);
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int32_t *ids = NULL;
        size_t icap = 0, k = tokenizer_encode(tok, s, len, 0, &ids, &icap);
        if (!first) fputc(',', f);
        write_ids(f, ids, k);
        free(ids);
        first = 0;
        if (!e) break;
        s = e + strlen(sep);
    }
    fprintf(f, "], \"prompt\": ");
    write_ids(f, seq, (size_t)n);

    int *in = xmalloc((size_t)T * sizeof(int), "inputs");
    const int V = m->vocab_size, Vp = m->padded_vocab_size;
    int32_t *gen = xmalloc((size_t)(ngen > 0 ? ngen : 1) * sizeof(int32_t), "greedy");
    int ng = 0;
    for (int step = 0; step <= ngen; step++) {
        for (int i = 0; i < n; i++) in[i] = seq[i];
        m->forward(m, in, NULL, 1, n);
        const float *lg = m->logits(m) + (size_t)(n - 1) * Vp;
        if (step == 0) {
            fprintf(f, ", \"logits\": [");
            for (int v = 0; v < V; v++) fprintf(f, "%s%.9g", v ? "," : "", lg[v]);
            fprintf(f, "], \"top\": [");
            for (int pos = 0; pos < n; pos++) write_top(f, m->logits(m) + (size_t)pos * Vp, V, pos);
            fprintf(f, "]");
        }
        if (step == ngen) break;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (lg[v] > lg[best]) best = v;
        gen[ng++] = best;
        if (best == tokenizer_eot(tok)) break;
        seq[n++] = best;
    }
    fprintf(f, ", \"greedy\": ");
    write_ids(f, gen, (size_t)ng);
    fprintf(f, "}\n");
    if (fclose(f) != 0) fatal("cannot write %s", out);
    free(all);
    free(p);
    free(seq);
    free(in);
    free(gen);
    m->free(m);
    tokenizer_free(tok);
    return 0;
}

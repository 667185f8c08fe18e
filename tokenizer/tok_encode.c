/*
 * tokenizer/tok_encode.c - `tok encode`: stdin (any bytes) to token ids on one line, with --bos/--eos, special-token
 * text on request, and --bench N (the median tokens/s of N encodes, each with a freshly loaded tokenizer).
 * Not for: documents or shards (tok_shards.c), the tokenizer itself (bpe*.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tokenizer/tok.h"
#include "tokenizer/tokenizer.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}


int cmd_encode(int argc, char **argv) {
    char *data = "data", *special = NULL, *bench = NULL, *model = "gpt2", *bos = NULL, *eos = NULL;
    Opt opts[] = {
        {"model", "M", MODEL_HELP, &model},
        {"data", "DIR", DATA_HELP, &data},
        {"allow-special", NULL, "encode special-token text (<|endoftext|>, Llama 3's <|...|>) as its id", &special},
        {"bos", NULL, "start with the model's BOS id (tokenizer_bos: 50256, 1 or 128000)", &bos},
        {"eos", NULL, "end with the model's end-of-text id (tokenizer_eot: 50256, 2 or 128001)", &eos},
        {"bench", "N", "also time N encodes, each with a freshly loaded tokenizer (cold cache, load not timed), "
                       "and print the median tokens/s on stderr", &bench},
    };
    int first = parse_opts(argc, argv, "usage: tok encode [options] < text\nEncodes stdin (any bytes) to token ids "
                                       "on one line, separated by spaces.", opts, 6);
    check_model(model);
    if (first != argc) fatal("tok encode: unexpected argument '%s'; the text comes on stdin", argv[first]);
    int reps = bench ? (int)parse_long("bench", bench, 1, 1000) : 0;
    size_t len, cap = 0, n = 0;
    char *text = read_all(stdin, "stdin", &len);
    int32_t *ids = NULL;
    double *secs = xmalloc((size_t)(reps + 1) * sizeof(double), "timings");
    for (int r = 0; r <= reps; r++) { /* run 0 makes the output; runs 1..reps are timed */
        Tokenizer *tok = tokenizer_load(model, data);
        double t0 = now_seconds();
        n = tokenizer_encode(tok, text, len, special != NULL, &ids, &cap);
        secs[r] = now_seconds() - t0;
        if (r == 0 && (bos || eos)) {
            ids = xrealloc(ids, (n + 2) * sizeof(int32_t), "tok buffers");
            if (!ids) fatal("out of memory");
            if (bos) { memmove(ids + 1, ids, n * sizeof(int32_t)); ids[0] = tokenizer_bos(tok); n++; }
            if (eos) ids[n++] = tokenizer_eot(tok);
            cap = n;
        }
        tokenizer_free(tok);
    }
    if (reps) {
        qsort(secs + 1, (size_t)reps, sizeof(double), cmp_double);
        double med = secs[1 + reps / 2];
        fprintf(stderr, "tok encode: %zu bytes -> %zu tokens, median of %d: %.3f s, %.0f tokens/s, %.1f MB/s\n",
                len, n, reps, med, n / med, len / med / 1e6);
    }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    xflush_stdout();
    free(secs);
    free(ids);
    free(text);
    return 0;
}

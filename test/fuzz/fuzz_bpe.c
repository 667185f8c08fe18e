/*
 * test/fuzz/fuzz_bpe.c - the GPT-2 BPE encoder and decoder (tokenizer/bpe_encode.c, bpe.c) on arbitrary bytes, with
 * the vocabulary from the data cache ($FUZZ_DATA, default "data": run `make data` first).
 * Oracles: every id is in [0, vocab_size); decode(encode(x)) == x with and without special tokens; decoding
 * arbitrary ids (the input read as int32, out-of-range ones included) yields exactly the concatenation of
 * tokenizer_token_bytes of the valid ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/fuzz/fuzz.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static Tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *dir = getenv("FUZZ_DATA");
    tok = tokenizer_load("gpt2", dir && dir[0] ? dir : "data");
    return 0;
}

static void roundtrip(const uint8_t *data, size_t size, int allow_special) {
    int32_t *ids = NULL;
    size_t cap = 0, len = 0;
    size_t n = tokenizer_encode(tok, (const char *)data, size, allow_special, &ids, &cap);
    int V = tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) abort();
    if (n > size) abort(); /* every token covers at least one byte */
    char *back = tokenizer_decode(tok, ids, n, &len);
    if (len != size || memcmp(back, data, size) != 0) abort();
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_RUN(roundtrip(data, size, 0));
    FUZZ_RUN(roundtrip(data, size, 1));
    FUZZ_RUN({
        size_t n = size / 4, len = 0, want = 0;
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        memcpy(ids, data, n * 4);
        for (size_t i = 0; i < n; i++) {
            size_t l = 0;
            if (tokenizer_token_bytes(tok, ids[i], &l)) want += l;
        }
        char *out = tokenizer_decode(tok, ids, n, &len);
        if (len != want || out[len] != '\0') abort();
        free(out);
        free(ids);
    });
    return 0;
}

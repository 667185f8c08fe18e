/*
 * test/fuzz/fuzz_vocab.c - the GPT-2 vocabulary loader (tokenizer_load_gpt2: encoder.json and vocab.bpe).
 * Input: the encoder.json text, the separator "\n%%\n", then the vocab.bpe text (test/fuzz/fuzz.h, fuzz_split).
 * A vocabulary the loader accepts must give a working tokenizer: a fixed text (and the input itself) encodes
 * to ids in range and decodes back unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "test/fuzz/fuzz.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_roundtrip(const Tokenizer *t, const char *text, size_t n) {
    int32_t *ids = NULL;
    size_t cap = 0, len = 0;
    size_t m = tokenizer_encode(t, text, n, 1, &ids, &cap);
    for (size_t i = 0; i < m; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t)) abort();
    char *back = tokenizer_decode(t, ids, m, &len);
    if (len != n || memcmp(back, text, n) != 0) abort();
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *rest;
    size_t rest_n;
    size_t first = fuzz_split(data, size, &rest, &rest_n);
    const char *enc = fuzz_write_file(0, "encoder.json", data, first);
    const char *bpe = fuzz_write_file(1, "vocab.bpe", rest, rest_n);
    FUZZ_RUN({
        Tokenizer *t = tokenizer_load_gpt2(enc, bpe);
        static const char text[] = "Hello world, it's  a\ttest<|endoftext|> \xe2\x82\xac 123 \xff\xfe end";
        check_roundtrip(t, text, sizeof text - 1);
        check_roundtrip(t, (const char *)data, size);
        tokenizer_free(t);
    });
    return 0;
}

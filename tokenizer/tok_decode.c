/*
 * tokenizer/tok_decode.c - `tok decode`: token ids (decimal, separated by spaces, newlines or commas) on stdin to
 * their bytes on stdout; an id out of range or anything not an id is fatal() naming it.
 * Not for: shards (dataloader/ reads them), the tokenizer itself (bpe.c decodes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tokenizer/tok.h"
#include "tokenizer/tokenizer.h"

int cmd_decode(int argc, char **argv) {
    char *data = "data", *model = "gpt2";
    Opt opts[] = {{"model", "M", MODEL_HELP, &model}, {"data", "DIR", DATA_HELP, &data}};
    int first = parse_opts(argc, argv, "usage: tok decode [options] < ids\nDecodes token ids (separated by "
                                       "spaces, newlines or commas) on stdin to bytes on stdout.", opts, 2);
    if (first != argc) fatal("tok decode: unexpected argument '%s'; the ids come on stdin", argv[first]);
    check_model(model);
    Tokenizer *tok = tokenizer_load(model, data);
    size_t len, n = 0, cap = 1024;
    char *text = read_all(stdin, "stdin", &len);
    int32_t *ids = xmalloc(cap * sizeof(int32_t), "ids");
    for (char *p = text; p < text + len;) {
        if (one_of(" \t\r\n,[]", *p)) { p++; continue; }
        char *end;
        long v = strtol(p, &end, 10);
        if (end < text + len && *end == 0)
            fatal("tok decode: stdin: NUL byte at offset %zu; give decimal ids separated by spaces", (size_t)(end - text));
        if (end == p || (end < text + len && !one_of(" \t\r\n,[]", *end)))
            fatal("tok decode: stdin: '%.*s' is not a token id; give decimal ids separated by spaces",
                  (int)strcspn(p, " \t\r\n,[]"), p);
        if (v < 0 || v >= tokenizer_vocab_size(tok))
            fatal("tok decode: stdin: id %ld is out of range [0, %d)", v, tokenizer_vocab_size(tok));
        if (n == cap) ids = xrealloc(ids, (cap *= 2) * sizeof(int32_t), "tok buffers");
        ids[n++] = (int32_t)v;
        p = end;
    }
    size_t dl;
    char *out = tokenizer_decode(tok, ids, n, &dl);
    fwrite(out, 1, dl, stdout);
    xflush_stdout();
    free(out);
    free(ids);
    free(text);
    tokenizer_free(tok);
    return 0;
}

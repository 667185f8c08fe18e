/*
 * tokenizer/tokenizer.h - byte-level BPE tokenizers in C: encode UTF-8 (or any bytes) to token ids and back.
 * GPT-2 (r50k_base: 50257 tokens, <|endoftext|> = 50256) now; Llama 2 and Llama 3 later behind the same API.
 * Output is identical to OpenAI's GPT-2 tokenizer (checked against gpt-3-encoder and tiktoken test vectors).
 * Not for: shard files (dataloader/), sampling.
 */
#ifndef TOKENIZER_TOKENIZER_H
#define TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;

/* Loads GPT-2's vocabulary: encoder.json (token string -> id) and vocab.bpe (merges, in rank order).
 * fatal() naming the file and the fix (run `make data` / scripts/fetch_data.sh) if missing or malformed. */
Tokenizer *tokenizer_load_gpt2(const char *encoder_json, const char *vocab_bpe);
/* Loads a tokenizer by kind ("gpt2") from the data cache directory (e.g. "data"), i.e. data/gpt2/encoder.json. */
Tokenizer *tokenizer_load(const char *kind, const char *data_dir);
/* Frees the tokenizer and this thread's cache; other threads must be done with it (their per-thread caches
 * are freed when they exit). */
void tokenizer_free(Tokenizer *tok);

int tokenizer_vocab_size(const Tokenizer *tok); /* 50257 for GPT-2 */
int tokenizer_eot(const Tokenizer *tok);        /* end-of-text id, 50256 for GPT-2 */

/* Encodes len bytes (need not be valid UTF-8). allow_special != 0: the literal "<|endoftext|>" becomes the EOT
 * id; otherwise it is ordinary text. Stores the ids in (*ids)[0..n) (growing *cap with realloc; *ids may start NULL)
 * and returns n. Thread-safe for concurrent calls on one Tokenizer (per-thread cache).
 * Invalid UTF-8 (undefined for OpenAI's encoders, which take Unicode strings): each valid stretch is encoded
 * as it would be alone, and each run of invalid bytes between stretches is one BPE piece of its own. */
size_t tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, int allow_special, int32_t **ids,
                        size_t *cap);
/* The bytes of one token (not NUL-terminated); NULL and *len = 0 for an id out of range. */
const char *tokenizer_token_bytes(const Tokenizer *tok, int id, size_t *len);
/* Decodes n ids into a new malloc'd buffer of *len bytes (NUL-terminated for convenience). Ids out of range
 * are skipped. decode(encode(x)) == x for every byte string x. */
char *tokenizer_decode(const Tokenizer *tok, const int32_t *ids, size_t n, size_t *len);

#endif

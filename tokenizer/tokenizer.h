/*
 * tokenizer/tokenizer.h - BPE tokenizers in C: encode UTF-8 (or any bytes) to token ids and back.
 *   "gpt2"   r50k_base: 50257 tokens, <|endoftext|> = 50256. Equals OpenAI's tokenizer (tiktoken vectors,
 *            gpt-3-encoder).
 *   "bpe4k"  this project's own byte-level BPE, 4096 tokens (256 bytes, 3839 merges, <|endoftext|> = 4095), learned
 *            by `tok train --vocab 4096` from the default corpus's training split (`make data`), in GPT-2's files
 *            (data/bpe4k/encoder.json, vocab.bpe) and with GPT-2's pre-tokenizer: a small vocabulary for models
 *            whose parameters are mostly transformer blocks (docs/reproduction.md).
 *   "llama3" byte-level BPE, 128256 tokens: 128000 merge-built + 256 specials (<|begin_of_text|> = 128000,
 *            <|end_of_text|> = 128001, ...). Equals llama3-tokenizer-js 1.2.0 (see bpe_pretok.c for the few characters
 *            where that package's JavaScript regex differs from tiktoken's).
 *   "bpe"    a vocabulary learned by `tok train --out DIR` (any size, <|endoftext|> last), named by its folder:
 *            `tok --model DIR`, the trainers' and the exporter's --tokenizer DIR.
 *   "llama2" SentencePiece BPE, 32000 tokens (<unk> 0, <s> 1, </s> 2, byte fallback <0x00>..<0xFF> = 3..258).
 *            Equals llama-tokenizer-js 1.2.2.
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
/* Loads Llama's vocabulary from DIR/vocab.txt and DIR/merges.txt (written by tokenizer/extract_llama.mjs);
 * kind "llama2" or "llama3". fatal() naming the file and `make data` if missing or malformed. */
Tokenizer *tokenizer_load_llama(const char *kind, const char *dir);
/* Loads a tokenizer by kind ("gpt2", "bpe4k", "llama2", "llama3") from the data cache directory (e.g. "data"):
 * i.e. data/gpt2/encoder.json + vocab.bpe (data/bpe4k/ likewise), or data/llama3/vocab.txt + merges.txt; or, when
 * kind is the folder of a vocabulary learned by `tok train --out DIR` (its encoder.json and vocab.bpe, any size),
 * that vocabulary, of kind "bpe" (GPT-2's format and pre-tokenizer). fatal() on an unknown kind, and for bpe4k on
 * a vocabulary that is not 4096 tokens with <|endoftext|> last. */
Tokenizer *tokenizer_load(const char *kind, const char *data_dir);
/* 1 if kind names a folder holding encoder.json and vocab.bpe (a learned vocabulary), not one of the built-in
 * names. */
int tokenizer_is_dir(const char *kind);
/* The vocabulary's identity, recorded in every shard `tok shards` writes (dataloader.h): XXH3-64 of its two files'
 * bytes in turn (encoder.json then vocab.bpe; Llama's vocab.txt then merges.txt), kind and data_dir as for
 * tokenizer_load; never 0. Returns 0 when kind is unknown or a file cannot be read. */
uint64_t tokenizer_vocab_hash(const char *kind, const char *data_dir);
/* Frees the tokenizer and this thread's cache; other threads must be done with it (their per-thread caches
 * are freed when they exit). */
void tokenizer_free(Tokenizer *tok);

int tokenizer_vocab_size(const Tokenizer *tok); /* V: 50257 GPT-2, 4096 bpe4k, 32000 Llama 2, 128256 Llama 3 */
int tokenizer_eot(const Tokenizer *tok); /* end of text: 50256 GPT-2, 4095 bpe4k, 2 Llama 2 (</s>), 128001 Llama 3 */
/* The id that starts every document (what `tok shards` puts before each one): 1 Llama 2 (<s>), 128000 Llama 3
 * (<|begin_of_text|>), and for GPT-2 and bpe4k, which have no BOS, their EOT (50256, 4095), as llm.c does. */
int tokenizer_bos(const Tokenizer *tok);
const char *tokenizer_kind(const Tokenizer *tok); /* "gpt2", "bpe4k", "llama2", "llama3", or "bpe" (learned) */

/* Token id spelled as the vocabulary files spell it (the inverse of loading them), into out (room for 3 x its byte
 * length + 8): GPT-2 and Llama 3 in GPT-2's printable byte alphabet (encoder.json's bytes_to_unicode), their
 * special tokens as their text; Llama 2 as SentencePiece pieces (U+2581 for a space, <0xNN> byte tokens, <unk> <s>
 * </s>). Returns the length (not NUL-terminated); 0 for an id out of range. For exporters (export/export_gguf.c). */
size_t tokenizer_token_spelling(const Tokenizer *tok, int id, char *out);

/* The merge table in rank order (the order the merges apply): *merges gets a new malloc'd (n, 3) array of
 * (left id, right id, result id) rows; returns n (a pair listed twice in the vocabulary files counts once, at its
 * first rank). For exporters that write the vocabulary in another format (export/export_gguf.c). */
size_t tokenizer_merges(const Tokenizer *tok, int32_t **merges);

/* Encodes len bytes (need not be valid UTF-8); adds no BOS/EOS. allow_special != 0: a special token's literal
 * text ("<|endoftext|>"; Llama 3's 256 "<|...|>") becomes its id; otherwise it is ordinary text. Llama 2 has
 * no special text (as in SentencePiece and llama-tokenizer-js): allow_special is ignored. Stores the ids in (*ids)[0..n) (growing *cap with realloc; *ids may start NULL)
 * and returns n. Thread-safe for concurrent calls on one Tokenizer (per-thread cache).
 * Invalid UTF-8 (undefined for OpenAI's encoders, which take Unicode strings): each valid stretch is encoded
 * as it would be alone, and each run of invalid bytes between stretches is one BPE piece of its own. */
size_t tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, int allow_special, int32_t **ids,
                        size_t *cap);
/* The bytes of one token (not NUL-terminated); NULL and *len = 0 for an id out of range. */
const char *tokenizer_token_bytes(const Tokenizer *tok, int id, size_t *len);
/* Decodes n ids into a new malloc'd buffer of *len bytes (NUL-terminated for convenience). Ids out of range
 * are skipped; special tokens decode to their text. decode(encode(x)) == x for every byte string x, except
 * that Llama 2 decodes U+2581 as ' ' (SentencePiece's space marker). Llama 2, as llama-tokenizer-js: a leading
 * BOS is skipped and one leading space (the one the encoder prefixed) is removed. */
char *tokenizer_decode(const Tokenizer *tok, const int32_t *ids, size_t n, size_t *len);

#define BPE4K_VOCAB 4096 /* bpe4k's V */

/* The tokenizer a model's vocabulary size stands for when it is not its family's own (GPT-2's, Llama 2's):
 * BPE4K_VOCAB "bpe4k", 128256 "llama3"; NULL for any other V. */
static inline const char *tokenizer_kind_for_vocab(int V) {
    return V == BPE4K_VOCAB ? "bpe4k" : V == 128256 ? "llama3" : NULL;
}

/* Learning a byte-level BPE vocabulary (tokenizer/bpe_train.c; `tok train`): add all the text, train, write.
 * Sennrich et al. 2016, Algorithm 1, over bytes and GPT-2's pre-tokenizer pieces (Radford et al. 2019, sec. 2.2):
 * the most frequent adjacent pair (ties to the smaller (left id, right id)) is merged until vocab_size - 1
 * tokens, then <|endoftext|> is the last id. Deterministic: the same text gives the same files. */
typedef struct BpeTrainer BpeTrainer;
BpeTrainer *bpe_trainer_new(void);
/* Splits len bytes (any bytes; invalid UTF-8 as in encoding) into GPT-2 pre-tokenizer pieces and counts them. */
void bpe_trainer_add(BpeTrainer *bt, const char *text, size_t len);
size_t bpe_trainer_n_words(const BpeTrainer *bt);      /* distinct pieces counted so far */
int64_t bpe_trainer_text_bytes(const BpeTrainer *bt);  /* bytes counted so far */
/* Learns merges until the vocabulary holds vocab_size tokens (257..65536, with <|endoftext|>). fatal() with the
 * fix when no text was added or the text runs out of pairs before the vocabulary is full. */
void bpe_trainer_train(BpeTrainer *bt, int vocab_size);
int bpe_trainer_n_merges(const BpeTrainer *bt); /* after training: merges learned (vocab_size - 257 or more) */
/* Writes dir/encoder.json and dir/vocab.bpe in GPT-2's format (bytes in its printable alphabet, vocab.bpe with a
 * #version line), each through a temp file, fsync and rename; creates dir. fatal() naming the file on failure. */
void bpe_trainer_write(const BpeTrainer *bt, const char *dir);
/* Writes the counted pieces, one line each: "<count>\t<bytes as hex>" (for test/ref/bpe_train_ref.py). */
void bpe_trainer_write_words(const BpeTrainer *bt, const char *path);
void bpe_trainer_free(BpeTrainer *bt);

#endif

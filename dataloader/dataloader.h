/*
 * dataloader/dataloader.h - token shards: the file format, the writer, and the training/validation readers.
 *
 * Shard format (llm.c's, so its prepared data sets load unchanged): a header of 256 little-endian int32,
 *   header[0] = magic, header[1] = version, header[2] = number of tokens n,
 *   magic 20240520 version 1: n uint16 tokens (GPT-2),  magic 20240801 version 7: n uint32 tokens (Llama 2/3);
 *   header[3] = SHARD_TOKENIZER_MARK and header[4] = the tokenizer (1 gpt2, 2 llama2, 3 llama3, 4 bpe4k, 5 bpe: a
 *   vocabulary learned by `tok train`, whose folder is not recorded; the loader checks ids against V) in shards this
 *   runtime writes (`tok shards`), so a trainer can refuse data made for another vocabulary; llm.c's shards have
 *   zeros there and load as before (no tokenizer known);
 *   header[5], header[6] = the low and high 32 bits of the vocabulary's hash (tokenizer_vocab_hash: XXH3-64 of its
 *   two files), so two learned vocabularies of one size are told apart; 0 in both: none recorded (llm.c's shards,
 *   and shards of this runtime written before the field existed, which still load: only their kind is checked);
 * then exactly n tokens (file length = 1024 + n * token size, checked).
 *
 * A training window is B*T+1 consecutive tokens of one shard: inputs are the first B*T, targets the last B*T.
 * A shard of n tokens holds floor((n - 1) / (B*T)) non-overlapping windows. Training is distributed: in every
 * epoch all windows of all shards are put in one seeded order (shuffled or not), and rank r of N reads positions
 * r, r+N, r+2N, ... of it; every rank reads the same number of windows per epoch (floor(W / N)), so ranks stay
 * in lock step; the W mod N windows left at the end of an epoch's order are the only ones not read that epoch.
 * Not for: tokenizing text (tokenizer/), or deciding the batch size.
 */
#ifndef DATALOADER_DATALOADER_H
#define DATALOADER_DATALOADER_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_HEADER_INTS 256
#define SHARD_MAGIC_U16 20240520
#define SHARD_VERSION_U16 1
#define SHARD_MAGIC_U32 20240801
#define SHARD_VERSION_U32 7

#define SHARD_TOKENIZER_MARK 20261202

/* Writes a shard atomically (temp file in the same directory, fsync, rename): version 1 (uint16) if token_bytes
 * is 2, version 7 (uint32) if 4. tokens holds n ints; fatal() if an id does not fit the token size. */
void shard_write(const char *path, const int32_t *tokens, size_t n, int token_bytes);
/* The same, recording in the header which tokenizer ("gpt2", "llama2", "llama3", "bpe4k", "bpe"; NULL: none) made
 * the tokens (header int 3 = SHARD_TOKENIZER_MARK, int 4 = its code 1, 2, 3, 4, 5) and its vocabulary's hash
 * (ints 5, 6; 0: none). */
void shard_write_tokenizer(const char *path, const int32_t *tokens, size_t n, int token_bytes, const char *tokenizer,
                           uint64_t vocab_hash);
/* The vocabulary hash a shard records, or 0 when it records none. fatal() naming the file on a bad header. */
uint64_t shard_vocab_hash(const char *path);
/* Refuses (fatal(), naming the shard, both hashes and the fix) the first shard of spec (see shard_list) whose
 * recorded vocabulary hash differs from vocab_hash, the hash of the tokenizer `tokenizer` (a name or folder, for
 * the message). Shards without a hash pass, with one note on stderr for spec when some record their tokenizer but no
 * hash (written before the hash was recorded); vocab_hash 0 (the tokenizer's files are not at hand) checks nothing
 * and notes that once if the shards record a hash. notes 0: no note (ranks other than 0). */
void shard_check_vocab(const char *spec, uint64_t vocab_hash, const char *tokenizer, int notes);
/* The tokenizer a shard records ("gpt2", "llama2", "llama3", "bpe4k", "bpe"), or NULL when it records none (llm.c's shards, or
 * shards written before the field existed). fatal() naming the file on an unreadable header or an unknown code. */
const char *shard_tokenizer(const char *path);

/* Reads and validates a shard header; returns the token count and sets *token_bytes (2 or 4).
 * fatal() with the path and a fix for: missing file, bad magic, unknown version, length not matching n. */
int64_t shard_check_header(const char *path, int *token_bytes);

/* Reads a whole shard into a new int32 array (caller frees); validates like shard_check_header, and if
 * vocab_size > 0 fatal()s on the first token id >= vocab_size, naming the file and offset. */
int32_t *shard_read_all(const char *path, int64_t *n_tokens, int vocab_size);

/* Expands a shard specification into a sorted list of paths: a single file, a directory (every *.bin inside),
 * or a glob pattern. fatal() if nothing matches, or when spec names a file that is not a regular one (a pipe). Caller
 * frees with shard_list_free. */
char **shard_list(const char *spec, int *count);
void shard_list_free(char **paths, int count);

/* Saved position of a training loader: plain data, written into checkpoints as it is. */
typedef struct {
    uint64_t epoch;        /* epochs completed */
    uint64_t index;        /* windows this rank has read in the current epoch */
    uint64_t seed;         /* shuffle seed the loader was opened with */
    uint64_t num_windows;  /* W, to detect a changed data set or B*T on restore */
    int32_t rank, world;   /* the layout the position was saved under */
    uint64_t start;        /* position in the epoch's order where this epoch's reading began: 0, except after
                              a resume on a different world size (see dataloader_set_pos) */
} DataPos;

typedef struct DataLoader DataLoader;

/* Opens a training loader over `spec` (see shard_list) for rank r of `world`, windows of B*T+1 tokens.
 * shuffle != 0: per-epoch order from (seed, epoch); 0: shard order then window order. vocab_size > 0 makes
 * every batch check its token ids against it (the data/model vocabulary mismatch error names the shard).
 * fatal() if the data hold fewer windows than `world` ranks need for one step. */
DataLoader *dataloader_open(const char *spec, int B, int T, int rank, int world, uint64_t seed, int shuffle,
                            int vocab_size);
/* Fills inputs (B,T) and targets (B,T) with the next window; starts a new epoch when this one is used up. */
void dataloader_next(DataLoader *dl, int *inputs, int *targets);
uint64_t dataloader_num_windows(const DataLoader *dl);   /* W over all shards */
uint64_t dataloader_windows_per_epoch(const DataLoader *dl); /* floor(W / world): batches per rank per epoch */
int dataloader_token_bytes(const DataLoader *dl);
void dataloader_get_pos(const DataLoader *dl, DataPos *pos);
/* Restores a saved position; fatal() if the data set or B*T changed. The saved seed replaces the one the loader
 * was opened with, so the same batches follow. A different world size is accepted: the position then restarts
 * the saved epoch's order at the global window count already consumed (start = start + index * saved world),
 * and that epoch gives each rank floor((W - start) / world) windows. */
void dataloader_set_pos(DataLoader *dl, const DataPos *pos);
void dataloader_free(DataLoader *dl);

/* Validation: sequential, unshuffled windows of the validation shards, rank r reads windows r, r+N, ...;
 * max_batches (0 = all) bounds one pass. val_next returns 0 when the pass is done; val_reset starts over. */
typedef struct ValLoader ValLoader;
ValLoader *valloader_open(const char *spec, int B, int T, int rank, int world, int vocab_size);
/* Bounds every pass, the current one included, to at most max_batches per rank (0 = all windows). */
void valloader_set_max_batches(ValLoader *vl, uint64_t max_batches);
int valloader_next(ValLoader *vl, int *inputs, int *targets);
uint64_t valloader_num_batches(const ValLoader *vl); /* batches per rank in one pass */
void valloader_reset(ValLoader *vl);
void valloader_free(ValLoader *vl);

#endif

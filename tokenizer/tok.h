/*
 * tokenizer/tok.h - what the files of the `tok` program share:
 *   tok.c          main, the option-table parser, --model's check
 *   tok_encode.c   `tok encode`              tok_decode.c  `tok decode`
 *   tok_shards.c   `tok shards`              tok_train.c   `tok train`
 *   tok_docs.c     the inputs as documents: the walk of files and folders, the refusals of outputs among them,
 *                  the train/validation split, one document's text
 *   tok_jsonl.c    the string field of one .jsonl line
 *   tok_staging.c  a shard set replaced whole: the temp folder, the signals, the commit
 * Not for: anything outside tok (the tokenizers are tokenizer/tokenizer.h, the shard format dataloader/dataloader.h).
 */
#ifndef TOKENIZER_TOK_H
#define TOKENIZER_TOK_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

/* ---- options (tok.c): one table drives getopt_long and --help ---- */

typedef struct {
    const char *name, *metavar, *help; /* metavar NULL: a flag */
    char **value;                       /* where the argument (or "1" for a flag) goes */
} Opt;

#define MODEL_HELP "tokenizer: gpt2, bpe4k, llama2, llama3, or the folder of a vocabulary learned by `tok train --out DIR`"
#define DATA_HELP "data cache holding gpt2/, bpe4k/ (encoder.json, vocab.bpe) and llama2/, llama3/ (vocab.txt, merges.txt)"

/* Parses argv (argv[0] the command's name) with getopt_long from the table of n options, in order (no permutation,
 * so an error names the argument that caused it); moves the positional arguments (those before and after the
 * options, and all after "--") to the end of argv in their order and returns the index of the first. --help prints
 * usage and the table and exits 0. fatal() naming the argument on an unknown option or a missing value. */
int parse_opts(int argc, char **argv, const char *usage, const Opt *opts, int n);
/* The integer s of --flag in [lo, hi]; fatal() naming the flag otherwise. */
long parse_long(const char *flag, const char *s, long lo, long hi);
/* fatal() naming --model unless model is a tokenizer tokenizer_load knows. */
void check_model(const char *model);
/* Reads all of f (read_stream), NUL-terminated; fatal() naming name on a read error. */
char *read_all(FILE *f, const char *name, size_t *len);

/* strchr(set, c) that is false for c == 0 (strchr would find the terminator): NUL is never a separator */
static inline int one_of(const char *set, char c) { return c != 0 && strchr(set, c) != NULL; }

/* ---- the commands: argv[0] is the command's name; each returns the exit status ---- */

int cmd_encode(int argc, char **argv);
int cmd_decode(int argc, char **argv);
int cmd_shards(int argc, char **argv);
int cmd_train(int argc, char **argv);

/* ---- documents (tok_docs.c) ---- */

typedef struct {
    char *path;      /* the file it comes from */
    long line;       /* jsonl: 1-based line number; text files: 0 */
    size_t off, len; /* jsonl: the line's bytes in the file */
    char *name;      /* what the split hashes: base name, plus ":line" for jsonl */
    int is_val;
} Doc;

typedef struct {
    Doc *docs;
    size_t n, cap;
} DocList;

/* Every folder and file a walk of the inputs has met, by device and inode (an open-addressing set): each is read
 * once however many links lead to it, and a link back to a folder above ends nothing but that branch. */
typedef struct { dev_t dev; ino_t ino; } FileId;
typedef struct {
    FileId *ids; /* (cap) slots; ino 0 and dev 0 marks an empty one */
    size_t n, cap;
    size_t skipped; /* entries passed over, each with a note */
} Seen;

/* All n INPUTS (text files, folders of them at any depth, .jsonl files: one document a non-blank line) into docs,
 * in order, each folder's files sorted by path; each real folder and file is read once, with a note on stderr for
 * what is skipped. fatal() if they hold no document; the folders and files met are left in *seen. cmd: the command,
 * for messages. */
void add_inputs(DocList *docs, char **inputs, int n, Seen *seen, const char *cmd);
/* fatal() if --out is an input folder or lies inside one (the next run would read what is written there), or names
 * an input file. */
void refuse_out_in_inputs(const char *out, const Seen *seen);
/* fatal() unless tok train's --words-out names a file of its own: not an input document (it was written over), not
 * in an input folder, not the encoder.json or vocab.bpe of --out (the vocabulary would replace it), not a folder,
 * device or pipe. */
void refuse_words_out(const char *words, const char *out, const Seen *seen);
/* fatal() if an input document's file is one of the shards of this --name in --out, which the run replaces or
 * removes (`tok shards --out o --name s o/s_train_000000.bin`). */
void refuse_inputs_among_shards(const DocList *docs, const char *out, const char *prefix);
/* --val-percent: a number in [0, 100); fatal() otherwise. */
double parse_val_percent(const char *s);
/* Validation = the round(n * percent / 100) documents (at least one if percent > 0) with the smallest hashes
 * of their names (FNV-1a 64): marks them is_val and returns their count. fatal() if none is left to train on. */
size_t choose_val(DocList *l, double percent);
/* One document's text (a whole file, or a jsonl line's string field `field`) into a new buffer of *len bytes. */
char *doc_text(const Doc *d, const char *field, size_t *len);
void free_docs(DocList *l);

/* ---- one .jsonl line (tok_jsonl.c) ---- */

/* The text of a jsonl document: the string field `field` of line (d->len bytes, NUL-terminated), decoded to UTF-8
 * in a new buffer of *len bytes (never longer than the line); a lone surrogate becomes U+FFFD. fatal() naming
 * d->path and d->line if the line is not an object or the field is absent, not a string or malformed. */
char *jsonl_text(const Doc *d, const char *line, const char *field, size_t *len);

/* ---- a shard set replaced whole (tok_staging.c) ---- */

/* Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (old: the mask before, or NULL); a blocked signal waits
 * until unblocked (sigprocmask(SIG_SETMASK, old, NULL)). */
void block_stop_signals(sigset_t *old);
/* Creates --out if needed (an error or signal then removes it again, if empty) and a temp folder inside it for the
 * shards of this prefix, sets the fatal hook and starts the signal thread that remove the temp folder. Once per
 * process; the calling thread's stop signals stay blocked, and so are those of threads it starts after. */
void staging_begin(const char *out, const char *prefix);
/* Writes shard number i of split ("train" or "val") into the temp folder (shard_write_tokenizer: n tokens of
 * token_bytes bytes, the tokenizer's name and vocabulary hash in the header). Safe against the signal thread. */
void staging_write_shard(const char *split, int i, const int32_t *ids, size_t n, int token_bytes,
                         const char *tokenizer, uint64_t vocab_hash);
/* Moves the n_train + n_val new shards into --out, then removes the old set's shards of this prefix the new one
 * does not have, then the temp folder; fatal() before anything moves if a destination is a folder. */
void staging_commit(int n_train, int n_val);

#endif

/*
 * tokenizer/tok_shards.c - `tok shards`: documents (tok_docs.c) into llm.c token shards (dataloader/dataloader.h's
 * format). Every document is prefixed by the model's document start, tokenizer_bos(): GPT-2 EOT 50256 (uint16
 * shards, magic 20240520 v1, as llm.c), Llama 3 <|begin_of_text|> 128000 and Llama 2 <s> 1 (uint32 shards, magic
 * 20240801 v7, as llm.c's Llama 3 data; <s> because Llama 2 was trained with BOS per document); documents go to train
 * or validation by a hash of their name (the file's base name, plus ":line" for jsonl), so the split does not depend
 * on the order or number of threads; documents are encoded in parallel and written in input order, so the bytes of
 * every shard are the same for any --threads. A shard holds --shard-tokens tokens (the last one fewer); a document
 * may continue into the next shard, as in llm.c's fineweb.py. Every shard records the tokenizer and its
 * vocabulary's hash (dataloader.h). The set of one --name is replaced whole (tok_staging.c).
 * Not for: reading shards (dataloader/), the walk of the inputs (tok_docs.c).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "tokenizer/tok.h"
#include "tokenizer/tokenizer.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* parallel encoding, in-order writing */

typedef struct {
    int32_t *ids; /* the document start (tokenizer_bos) then the document's tokens */
    size_t n;
    int done;
} Result;

typedef struct {
    const Tokenizer *tok;
    DocList *docs;
    const char *field;
    Result *res;
    size_t next;     /* next document to hand out */
    size_t consumed; /* documents the writer has taken */
    size_t window;   /* how far encoding may run ahead of writing (bounds memory) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} Pool;

static void encode_doc(const Pool *pool, size_t i, Result *r) {
    size_t len;
    char *text = doc_text(&pool->docs->docs[i], pool->field, &len);
    int32_t *ids = NULL;
    size_t cap = 0;
    size_t n = tokenizer_encode(pool->tok, text, len, 0, &ids, &cap);
    ids = xrealloc(ids, (n + 1) * sizeof(int32_t), "tok buffers");
    memmove(ids + 1, ids, n * sizeof(int32_t));
    ids[0] = tokenizer_bos(pool->tok);
    r->ids = ids;
    r->n = n + 1;
    free(text);
}

static void *worker(void *arg) {
    Pool *pool = arg;
    for (;;) {
        pthread_mutex_lock(&pool->mu);
        while (pool->next < pool->docs->n && pool->next >= pool->consumed + pool->window)
            pthread_cond_wait(&pool->cv, &pool->mu);
        size_t i = pool->next;
        if (i >= pool->docs->n) { pthread_mutex_unlock(&pool->mu); return NULL; }
        pool->next++;
        pthread_mutex_unlock(&pool->mu);
        Result r;
        encode_doc(pool, i, &r);
        pthread_mutex_lock(&pool->mu);
        pool->res[i] = r;
        pool->res[i].done = 1;
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
}

/* Accumulates one split's tokens and writes a shard into the temp folder whenever shard_tokens are ready. */
typedef struct {
    const char *split;
    int32_t *buf;
    size_t n, shard_tokens, total;
    int files;
    int token_bytes; /* 2 (GPT-2) or 4 (Llama) */
    const char *tokenizer; /* recorded in every shard's header (dataloader.h) */
    uint64_t vocab_hash;   /* likewise */
} Writer;

static void writer_flush(Writer *w) {
    staging_write_shard(w->split, w->files++, w->buf, w->n, w->token_bytes, w->tokenizer, w->vocab_hash);
    w->n = 0;
}

static void writer_add(Writer *w, const int32_t *ids, size_t n) {
    while (n) {
        size_t take = w->shard_tokens - w->n < n ? w->shard_tokens - w->n : n;
        memcpy(w->buf + w->n, ids, take * sizeof(int32_t));
        w->n += take;
        w->total += take;
        ids += take;
        n -= take;
        if (w->n == w->shard_tokens) writer_flush(w);
    }
}

int cmd_shards(int argc, char **argv) {
    char *out = NULL, *name = "shard", *val_percent = "5", *shard_tokens = "100000000", *threads_s = NULL,
         *field = "text", *data = "data", *model = "gpt2";
    char threads_def[24];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(threads_def, sizeof threads_def, "%ld", ncpu > 0 ? ncpu : 1);
    threads_s = threads_def;
    Opt opts[] = {
        {"out", "DIR", "directory for the shards (created; the earlier PREFIX_* set there is replaced whole, "
                       "once the new one is complete: room for both is needed meanwhile)", &out},
        {"name", "PREFIX", "shard file prefix: PREFIX_train_000000.bin, PREFIX_val_000000.bin", &name},
        {"val-percent", "P", "share of documents for validation, chosen by a hash of the document name", &val_percent},
        {"shard-tokens", "N", "tokens per shard file (the last one of a split holds fewer)", &shard_tokens},
        {"threads", "N", "encoding threads (the default is the number of cores)", &threads_s},
        {"jsonl-field", "KEY", "string field holding the text in .jsonl inputs", &field},
        {"model", "M", MODEL_HELP, &model},
        {"data", "DIR", DATA_HELP, &data},
    };
    const int nopts = (int)(sizeof opts / sizeof *opts);
    const char *usage = "usage: tok shards --out DIR [options] INPUTS...\n"
                        "Encodes documents into llm.c shards, each document preceded by the model's document start:\n"
                        "gpt2: uint16 tokens, EOT 50256; bpe4k: uint16, EOT 4095; llama3: uint32, <|begin_of_text|>\n"
                        "128000; llama2: uint32, <s> 1. INPUTS: text files (one document each), directories of them,\n"
                        "or .jsonl files (one document per line).";
    int first = parse_opts(argc, argv, usage, opts, nopts);
    check_model(model);
    if (!out) fatal("tok shards: --out DIR is required; see `tok shards --help`");
    if (first == argc) fatal("tok shards: no INPUTS given; name text files, directories or .jsonl files");
    double percent = parse_val_percent(val_percent);
    size_t per_shard = (size_t)parse_long("shard-tokens", shard_tokens, 2, 2000000000L);
    int threads = (int)parse_long("threads", threads_s, 1, 256);
    if (strchr(name, '/') || !*name) fatal("--name: '%s' must be a plain file prefix without '/'", name);

    double t0 = now_seconds();
    DocList docs = {0};
    Seen seen = {0};
    add_inputs(&docs, argv + first, argc - first, &seen, "shards");
    refuse_out_in_inputs(out, &seen);
    refuse_inputs_among_shards(&docs, out, name);
    size_t n_val = choose_val(&docs, percent);
    Tokenizer *tok = tokenizer_load(model, data);
    /* llm.c's layouts: uint16 GPT-2 style, uint32 Llama and any vocabulary beyond 65536 tokens */
    int token_bytes = strncmp(model, "llama", 5) && tokenizer_vocab_size(tok) <= 65536 ? 2 : 4;
    const char *kind = tokenizer_kind(tok); /* recorded in each shard's header ("bpe" for a learned folder) */
    uint64_t vocab_hash = tokenizer_vocab_hash(model, data); /* likewise: tells learned vocabularies apart */
    if (!vocab_hash) fatal("tok shards: cannot read the vocabulary files of --model %s to hash them", model);
    staging_begin(out, name);

    Pool pool = {.tok = tok, .docs = &docs, .field = field, .window = (size_t)threads * 8 + 16};
    pool.res = xcalloc(docs.n, sizeof(Result), "results");
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    pthread_t *tids = xmalloc((size_t)threads * sizeof(pthread_t), "threads");
    for (int i = 0; i < threads; i++)
        if (pthread_create(&tids[i], NULL, worker, &pool) != 0) fatal("tok shards: cannot start thread %d", i);

    Writer wt = {"train", xmalloc(per_shard * sizeof(int32_t), "shard buffer"), 0, per_shard, 0, 0, token_bytes, kind,
                 vocab_hash};
    Writer wv = {"val", NULL, 0, per_shard, 0, 0, token_bytes, kind, vocab_hash};
    if (n_val) wv.buf = xmalloc(per_shard * sizeof(int32_t), "shard buffer");
    /* progress on a terminal only: a log gets the final count, and a failure's one error line stays one line */
    const int tty = isatty(STDERR_FILENO);
    double last = t0;
    for (size_t i = 0; i < docs.n; i++) {
        pthread_mutex_lock(&pool.mu);
        while (!pool.res[i].done) pthread_cond_wait(&pool.cv, &pool.mu);
        Result r = pool.res[i];
        pool.res[i].ids = NULL;
        pool.consumed = i + 1;
        pthread_cond_broadcast(&pool.cv);
        pthread_mutex_unlock(&pool.mu);
        writer_add(docs.docs[i].is_val ? &wv : &wt, r.ids, r.n);
        free(r.ids);
        double t = now_seconds();
        if (tty && t - last > 1.0) {
            fprintf(stderr, "\rtok shards: %zu/%zu documents, %zu tokens", i + 1, docs.n, wt.total + wv.total);
            last = t;
        }
    }
    fprintf(stderr, "%stok shards: %zu/%zu documents, %zu tokens\n", tty ? "\r" : "", docs.n, docs.n,
            wt.total + wv.total);
    for (int i = 0; i < threads; i++) pthread_join(tids[i], NULL);
    if (wt.n || wt.files == 0) writer_flush(&wt);
    if (n_val && (wv.n || wv.files == 0)) writer_flush(&wv);
    staging_commit(wt.files, wv.files);
    double secs = now_seconds() - t0;
    printf("tok shards: %zu documents (%zu val), %zu tokens (train %zu, val %zu) in %.2f s, %.0f tokens/s, "
           "%d threads; %d train + %d val shards in %s\n",
           docs.n, n_val, wt.total + wv.total, wt.total, wv.total, secs, (wt.total + wv.total) / secs, threads,
           wt.files, wv.files, out);
    xflush_stdout();

    free_docs(&docs);
    free(seen.ids);
    free(pool.res);
    free(tids);
    free(wt.buf);
    free(wv.buf);
    tokenizer_free(tok);
    return 0;
}

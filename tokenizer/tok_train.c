/*
 * tokenizer/tok_train.c - `tok train`: learns a byte-level BPE vocabulary (tokenizer/bpe_train.c) from the training
 * documents of the inputs (the same documents `tok shards` with the same --val-percent trains on) and writes it as
 * GPT-2's encoder.json and vocab.bpe; --words-out also writes the counted pieces for an independent check.
 * Not for: the merge learning itself (bpe_train.c), encoding (tok_shards.c).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"
#include "tokenizer/tok.h"
#include "tokenizer/tokenizer.h"

int cmd_train(int argc, char **argv) {
    char *out = NULL, *vocab_s = NULL, *val_percent = "5", *field = "text", *words = NULL;
    Opt opts[] = {
        {"vocab", "N", "vocabulary size V, 257..65536: 256 bytes, V - 257 merges, <|endoftext|> (required)", &vocab_s},
        {"out", "DIR", "directory for encoder.json and vocab.bpe (created)", &out},
        {"val-percent", "P", "share of documents held out as `tok shards --val-percent P` holds them out: the "
                             "merges are learned from the training documents only", &val_percent},
        {"jsonl-field", "KEY", "string field holding the text in .jsonl inputs", &field},
        {"words-out", "FILE", "also write the counted pieces (\"count<TAB>hex\" lines) for an independent trainer "
                              "to check against (test/ref/bpe_train_ref.py)", &words},
    };
    const int nopts = (int)(sizeof opts / sizeof *opts);
    const char *usage = "usage: tok train --vocab N --out DIR [options] INPUTS...\n"
                        "Learns a byte-level BPE vocabulary (GPT-2's pre-tokenizer, most frequent pair first) from the\n"
                        "training documents of INPUTS (as for tok shards) and writes it as GPT-2's encoder.json and\n"
                        "vocab.bpe. `make data` runs `tok train --vocab 4096` on the default corpus for bpe4k.";
    int first = parse_opts(argc, argv, usage, opts, nopts);
    if (!vocab_s) fatal("tok train: --vocab N is required (e.g. --vocab 4096); see `tok train --help`");
    int vocab = (int)parse_long("vocab", vocab_s, 257, 65536);
    if (!out) fatal("tok train: --out DIR is required; see `tok train --help`");
    if (first == argc) fatal("tok train: no INPUTS given; name text files, directories or .jsonl files");
    double percent = parse_val_percent(val_percent);

    double t0 = now_seconds();
    DocList docs = {0};
    Seen seen = {0};
    add_inputs(&docs, argv + first, argc - first, &seen, "train");
    refuse_out_in_inputs(out, &seen);
    if (words) refuse_words_out(words, out, &seen);
    size_t n_val = choose_val(&docs, percent);
    BpeTrainer *bt = bpe_trainer_new();
    for (size_t i = 0; i < docs.n; i++) {
        if (docs.docs[i].is_val) continue;
        size_t len;
        char *text = doc_text(&docs.docs[i], field, &len);
        bpe_trainer_add(bt, text, len);
        free(text);
    }
    if (bpe_trainer_text_bytes(bt) == 0)
        fatal("tok train: the training documents of the inputs are empty; give text to learn from");
    double t1 = now_seconds();
    /* --words-out is written only once the merges are learned: a training that fails (a --vocab the corpus cannot
     * reach) leaves no file behind. A signal waits until a file being written is in place (a few ms), so none is
     * left half-written. */
    bpe_trainer_train(bt, vocab);
    sigset_t old;
    block_stop_signals(&old);
    make_dirs_for("--out", out);
    if (words) bpe_trainer_write_words(bt, words);
    bpe_trainer_write(bt, out);
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("tok train: %zu training documents (%zu held out), %lld bytes, %zu distinct pieces; %d tokens (%d "
           "merges) in %.2f s (counting %.2f s); wrote %s/encoder.json and %s/vocab.bpe\n",
           docs.n - n_val, n_val, (long long)bpe_trainer_text_bytes(bt), bpe_trainer_n_words(bt), vocab,
           bpe_trainer_n_merges(bt), now_seconds() - t0, t1 - t0, out, out);
    xflush_stdout();
    free_docs(&docs);
    free(seen.ids);
    bpe_trainer_free(bt);
    return 0;
}

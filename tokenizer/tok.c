/*
 * tokenizer/tok.c - the `tok` program: encode / decode on stdin, `tok shards`, which turns text files, directories of
 * them, or .jsonl files into llm.c token shards (dataloader/dataloader.h's format), and `tok train`, which learns a
 * vocabulary. Every command takes --model gpt2|bpe4k|llama2|llama3 or the folder of a vocabulary learned by
 * `tok train --out DIR` (default gpt2).
 *
 *   tok encode [--model M] [--allow-special] [--bos] [--eos] [--data DIR]   stdin (any bytes) -> ids, one line
 *   tok decode [--model M] [--data DIR]          ids (whitespace or comma separated) on stdin -> bytes
 *   tok shards --out DIR [options] INPUTS...    see `tok shards --help`
 *   tok train --vocab N --out DIR [options] INPUTS...   learns a byte-level BPE from the training documents
 *
 * This file: main, the option-table parser every command uses, --model's check. Each command is a file of its own
 * (tok_encode.c, tok_decode.c, tok_shards.c, tok_train.c), beside the parts shards and train share (tok_docs.c,
 * tok_jsonl.c, tok_staging.c); tokenizer/tok.h lists them.
 * Not for: reading shards (dataloader/), training a model.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "tokenizer/tok.h"
#include "tokenizer/tokenizer.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* options: one table drives getopt_long and --help */

static void print_help(FILE *f, const char *usage, const Opt *opts, int n) {
    fprintf(f, "%s\n", usage);
    for (int i = 0; i < n; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].metavar ? " " : "",
                 opts[i].metavar ? opts[i].metavar : "");
        fprintf(f, "  %-22s %s%s%s%s\n", left, opts[i].help, *opts[i].value ? " (default " : "",
                *opts[i].value ? *opts[i].value : "", *opts[i].value ? ")" : "");
    }
    fprintf(f, "  %-22s %s\n", "--help", "show this help");
}

/* Parses argv with getopt_long from the table, in order (no permutation, so an error names the argument that caused
 * it); moves the positional arguments (those before and after the options, and all after "--") to the end of argv
 * in their order and returns the index of the first. fatal() naming the argument on an unknown option or a missing
 * value. */
int parse_opts(int argc, char **argv, const char *usage, const Opt *opts, int n) {
    struct option lo[32];
    for (int i = 0; i < n; i++) lo[i] = (struct option){opts[i].name, opts[i].metavar ? 1 : 0, NULL, 256 + i};
    lo[n] = (struct option){"help", 0, NULL, 'h'};
    lo[n + 1] = (struct option){0, 0, 0, 0};
    char **pos = xmalloc((size_t)argc * sizeof(char *), "arguments");
    int npos = 0;
    opterr = 0;
    optind = 1;
    for (;;) {
        int at = optind;
        int c = getopt_long(argc, argv, "-:h", lo, NULL);
        if (c == -1) break;
        if (c == 1) { pos[npos++] = optarg; continue; } /* a positional argument, in its place */
        if (c == 'h') { print_help(stdout, usage, opts, n); exit(0); }
        if (c == ':') fatal("tok %s: %s needs a value; see `tok %s --help`", argv[0], argv[at], argv[0]);
        if (c == '?')
            fatal("tok %s: unknown option '%s'; see `tok %s --help` (an input whose name starts with '-' goes after "
                  "`--`, or as ./%s)", argv[0], argv[at], argv[0], argv[at]);
        *opts[c - 256].value = opts[c - 256].metavar ? optarg : "1";
    }
    while (optind < argc) pos[npos++] = argv[optind++];
    for (int i = 0; i < npos; i++) argv[argc - npos + i] = pos[i];
    free(pos);
    return argc - npos;
}

long parse_long(const char *flag, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        fatal("--%s: '%s' is not an integer in [%ld, %ld]", flag, s, lo, hi);
    return v;
}

/* Reads all of f (read_stream), NUL-terminated; fatal() on a read error. */
char *read_all(FILE *f, const char *name, size_t *len) {
    char *buf = read_stream(f, len);
    if (!buf) fatal("cannot read %s: %s", name, strerror(errno));
    return buf;
}

void check_model(const char *model) {
    if (strcmp(model, "gpt2") && strcmp(model, "bpe4k") && strcmp(model, "llama2") && strcmp(model, "llama3") &&
        !tokenizer_is_dir(model))
        fatal("--model: '%s' is not a tokenizer; use gpt2, bpe4k, llama2, llama3 or the folder of a vocabulary "
              "learned by `tok train --out DIR` (holding encoder.json and vocab.bpe)", model);
}

int main(int argc, char **argv) {
    const char *usage = "usage: tok encode|decode|shards|train [options]  (tok COMMAND --help for each)";
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("%s\n", usage);
        return argc < 2;
    }
    if (!strcmp(argv[1], "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decode")) return cmd_decode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "shards")) return cmd_shards(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    fatal("tok: unknown command '%s'; use encode, decode, shards or train (tok --help)", argv[1]);
}

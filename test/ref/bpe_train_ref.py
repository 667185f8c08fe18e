#!/usr/bin/env python3
"""test/ref/bpe_train_ref.py WORDS VOCAB DIR - an independent check of `tok train` (tokenizer/bpe_train.c).

Learns byte-level BPE the plain way, from the piece counts `tok train --words-out WORDS` wrote ("count<TAB>hex"
lines: the pre-tokenizer is shared with encoding and checked against tiktoken elsewhere): every round recounts
all adjacent pairs over all pieces (weighted by their counts), merges the most frequent one (ties: the smaller
(left id, right id)) everywhere left to right, and gives a new byte string the next id; until VOCAB - 1 tokens,
then <|endoftext|>. Then reads DIR/encoder.json and DIR/vocab.bpe as GPT-2's files (bytes_to_unicode spelling)
and checks they hold exactly these merges in this order and these ids. Prints one ok/FAIL line; exit 1 on FAIL.
"""
import json
import sys
from collections import Counter


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train(words, vocab):
    tokens = [bytes([b]) for b in range(256)]
    index = {t: i for i, t in enumerate(tokens)}
    merges = []
    while len(tokens) < vocab - 1:
        pairs = Counter()
        for sym, count in words:
            for a, b in zip(sym, sym[1:]):
                pairs[(a, b)] += count
        if not pairs:
            raise SystemExit("FAIL reference: the corpus ran out of pairs")
        best = max(pairs.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))[0]
        cat = tokens[best[0]] + tokens[best[1]]
        if cat not in index:
            index[cat] = len(tokens)
            tokens.append(cat)
        m = index[cat]
        merges.append((tokens[best[0]], tokens[best[1]]))
        for w in words:
            sym, out, i = w[0], [], 0
            while i < len(sym):
                if i + 1 < len(sym) and sym[i] == best[0] and sym[i + 1] == best[1]:
                    out.append(m)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            w[0] = out
    return tokens + [b"<|endoftext|>"], merges


def main():
    words_path, vocab, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    words = []
    for line in open(words_path):
        count, hexs = line.rstrip("\n").split("\t")
        words.append([list(bytes.fromhex(hexs)), int(count)])
    tokens, merges = train(words, vocab)
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    unspell = lambda s: bytes(byte_of[c] for c in s)
    enc = json.load(open(f"{out_dir}/encoder.json", encoding="utf-8"))
    got_tokens = {i: (b"<|endoftext|>" if s == "<|endoftext|>" else unspell(s)) for s, i in enc.items()}
    lines = open(f"{out_dir}/vocab.bpe", encoding="utf-8").read().split("\n")
    got_merges = [tuple(unspell(x) for x in l.split(" ")) for l in lines[1:] if l]
    want_tokens = dict(enumerate(tokens))
    if got_merges != merges:
        k = next((i for i, (a, b) in enumerate(zip(got_merges, merges)) if a != b), min(len(got_merges), len(merges)))
        print(f"FAIL bpe_train_matches_reference: merge {k} differs: tok train "
              f"{got_merges[k] if k < len(got_merges) else None}, reference {merges[k] if k < len(merges) else None} "
              f"({len(got_merges)} vs {len(merges)} merges)")
        return 1
    if got_tokens != want_tokens:
        bad = sorted(i for i in set(got_tokens) | set(want_tokens) if got_tokens.get(i) != want_tokens.get(i))
        print(f"FAIL bpe_train_matches_reference: {len(bad)} ids differ, first {bad[0]}: tok train "
              f"{got_tokens.get(bad[0])}, reference {want_tokens.get(bad[0])}")
        return 1
    print(f"ok bpe_train_matches_reference: {len(merges)} merges, {len(tokens)} tokens from {len(words)} pieces")
    return 0


if __name__ == "__main__":
    sys.exit(main())

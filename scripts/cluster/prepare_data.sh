#!/usr/bin/env bash
# scripts/cluster/prepare_data.sh openwebtext|slimpajama OUT_DIR FILE.jsonl [FILE.jsonl ...] - turns JSON-lines dumps
# that you supply (one document per line, its text in the "text" field; set JSONL_FIELD otherwise) into llm.c token
# shards for the paper's runs: OpenWebText with the GPT-2 tokenizer (uint16) for GPT-345M, SlimPajama with the
# Llama 2 tokenizer (uint32) for Llama-500M. Run from any directory; needs ./tok (make tok) and the vocabularies
# (make data fetches GPT-2's and Llama's). 0.5% of the documents, chosen by a hash of their position, go to validation.
# Not for: downloading the corpora (they are not redistributed here), or deduplication/cleaning.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 3 ] || { echo "usage: $0 openwebtext|slimpajama OUT_DIR FILE.jsonl [FILE.jsonl ...]" >&2; exit 2; }
corpus=$1 out=$2; shift 2
case $corpus in
    openwebtext) model=gpt2 ;;
    slimpajama)  model=llama2 ;;
    *) echo "error: unknown corpus '$corpus'; use openwebtext (GPT-2 tokens) or slimpajama (Llama 2 tokens)" >&2; exit 2 ;;
esac
for f in "$@"; do [ -r "$f" ] || { echo "error: cannot read $f; pass JSON-lines files (one {\"text\": ...} per line)" >&2; exit 1; }; done
[ -x "$root/tok" ] || { echo "error: $root/tok not found; run 'make tok' in $root" >&2; exit 1; }
"$root/tok" shards --model "$model" --data "${DATA:-$root/data}" --out "$out" --name "$corpus" \
    --val-percent "${VAL_PERCENT:-0.5}" --jsonl-field "${JSONL_FIELD:-text}" -- "$@"
echo "shards in $out: train with --train '$out/${corpus}_train_*.bin' --val '$out/${corpus}_val_*.bin'"

#!/usr/bin/env bash
# test/test_tokenizer_node.sh DATA_DIR - compares the C encoders token by token with node running the fetched
# reference packages on a few hundred seeded random texts each (see test/test_tokenizer_node.js): gpt2 against
# gpt-3-encoder, bpe4k against gpt-3-encoder reading the learned data/bpe4k files, llama3 against
# llama3-tokenizer-js, llama2 against llama-tokenizer-js.
# Needs `make data` and build/test_tokenizer; prints "ok"/"FAIL" lines, exits non-zero on failure.
set -u
data="${1:-data}"
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
for model in gpt2 bpe4k llama3 llama2; do
    name="test_matches_${model}_node_vectors"
    command -v node >/dev/null || { echo "FAIL $name: node not found (scripts/install_deps.sh)"; rc=1; continue; }
    for seed in 20240520 7; do
        if ! node test/test_tokenizer_node.js "$data" "$tmp/vectors_$seed.txt" "$seed" "$model"; then
            echo "FAIL $name: node could not write vectors (seed $seed)"; rc=1; continue
        fi
        build/test_tokenizer "$data" --vectors "$tmp/vectors_$seed.txt" --model "$model" || rc=1
    done
done
exit $rc

#!/usr/bin/env bash
# test/test_tokenizer_node.sh DATA_DIR - compares the C GPT-2 encoder token by token with node running the
# fetched gpt-3-encoder package on a few hundred seeded random texts (see test/test_tokenizer_node.js).
# Needs `make data` and build/test_tokenizer; prints "ok"/"FAIL" lines, exits non-zero on failure.
set -u
data="${1:-data}"
cd "$(dirname "$0")/.."
command -v node >/dev/null || { echo "FAIL test_matches_gpt3_encoder_vectors: node not found (scripts/install_deps.sh)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
for seed in 20240520 7; do
    if ! node test/test_tokenizer_node.js "$data" "$tmp/vectors_$seed.txt" "$seed"; then
        echo "FAIL test_matches_gpt3_encoder_vectors: node could not write vectors (seed $seed)"; exit 1
    fi
    build/test_tokenizer "$data" --vectors "$tmp/vectors_$seed.txt" || rc=1
done
exit $rc

#!/usr/bin/env bash
# test/test_tokenizer_shards.sh DATA_DIR - tests `tok shards` (test/test_tokenizer_shards.py, run with
# Debian's /usr/bin/python3; standard library only). Needs `make data` and ./tok.
cd "$(dirname "$0")/.."
py=/usr/bin/python3
[ -x "$py" ] || py=python3
exec "$py" test/test_tokenizer_shards.py "${1:-data}"

#!/usr/bin/env bash
# test/test_tokenizer_train.sh DATA_DIR - tests `tok train` (tokenizer/bpe_train.c) from the outside: the merges
# equal an independent plain Python trainer's (test/ref/bpe_train_ref.py) on a corpus slice with invalid UTF-8;
# the files are the same bytes whatever the input order; only training documents are learned from; the
# learned files load as the bpe4k tokenizer and make tagged uint16 shards; and bad input (no text, --vocab out
# of range, a corpus too small, a bad --out) ends with one error line, a non-zero exit and no files.
# The encoder with the learned vocabulary is checked in build/test_tokenizer DATA --model bpe4k and against
# gpt-3-encoder in test_tokenizer_node.sh. A trainer refuses shards of another learned vocabulary of the same size
# (their recorded hash), and --words-out never writes through a link. Needs `make data`, ./tok and ./train_gpt;
# prints ok/FAIL lines.
set -u
data="${1:-data}"
cd "$(dirname "$0")/.."
TOK="${TOK:-./tok}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. test/lib.sh # failures=0, ok NAME, fail NAME WHY (the folder is the repository root)

# a slice of the corpus plus a document of invalid UTF-8, repeated letters and digits
mkdir -p "$tmp/corpus"
for y in 1790 1861 1862 1934; do
    cp "$data"/sotu/txt/${y}_*.txt "$tmp/corpus/" || fail corpus "no $data/sotu/txt/${y}_*.txt (run make data)"
done
printf 'aaaa aaa \xff\xfe\xff abab ab 1234567 \xe2\x82 \xc3\xa9t\xc3\xa9 aaaaaaa\n' > "$tmp/corpus/zz_odd.txt"

# 1. the same merges and ids as the plain reference trainer
if "$TOK" train --vocab 700 --val-percent 0 --out "$tmp/a" --words-out "$tmp/words.txt" "$tmp/corpus" > "$tmp/a.log" 2>&1; then
    "$py" test/ref/bpe_train_ref.py "$tmp/words.txt" 700 "$tmp/a" || failures=$((failures + 1))
else
    fail bpe_train_matches_reference "tok train failed: $(cat "$tmp/a.log")"
fi

# 2. deterministic: inputs in another order, given file by file, give the same bytes
files=$(ls "$tmp/corpus" | sort -r | sed "s|^|$tmp/corpus/|")
# shellcheck disable=SC2086
"$TOK" train --vocab 700 --val-percent 0 --out "$tmp/b" $files > /dev/null 2>&1
if cmp -s "$tmp/a/encoder.json" "$tmp/b/encoder.json" && cmp -s "$tmp/a/vocab.bpe" "$tmp/b/vocab.bpe"; then
    ok bpe_train_is_deterministic
else
    fail bpe_train_is_deterministic "the files differ when the inputs come in another order"
fi

# 3. held-out documents are not learned from: of two documents with disjoint alphabets, one is held out, and
#    only the other's letters form merges
mkdir -p "$tmp/two"
for i in $(seq 400); do printf 'qz qz qzq '; done > "$tmp/two/doc_one.txt"
for i in $(seq 400); do printf 'xy xy xyx '; done > "$tmp/two/doc_two.txt"
"$TOK" train --vocab 259 --val-percent 50 --out "$tmp/two_out" "$tmp/two" > /dev/null 2>&1
m=$(sed 1d "$tmp/two_out/vocab.bpe" 2>/dev/null)
if [ -n "$m" ] && ! { grep -q '[qz]' <<< "$m" && grep -q '[xy]' <<< "$m"; }; then
    ok bpe_train_learns_from_training_documents_only
else
    fail bpe_train_learns_from_training_documents_only "merges: $(tr '\n' '|' <<< "$m")"
fi

# 4. learned files load as bpe4k only at 4096 tokens; 4096 from the corpus slice round-trips and shards
mkdir -p "$tmp/d4k"
"$TOK" train --vocab 4096 --out "$tmp/d4k/bpe4k" "$tmp/corpus" > /dev/null 2>&1
text="$tmp/corpus/zz_odd.txt"
if "$TOK" encode --model bpe4k --data "$tmp/d4k" < "$text" | "$TOK" decode --model bpe4k --data "$tmp/d4k" | cmp -s - "$text"; then
    ok bpe4k_from_tok_train_round_trips
else
    fail bpe4k_from_tok_train_round_trips "encode | decode changed $text"
fi
mkdir -p "$tmp/d700"
cp -r "$tmp/a" "$tmp/d700/bpe4k"
out=$("$TOK" encode --model bpe4k --data "$tmp/d700" < "$text" 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(wc -l <<< "$out")" -eq 1 ] && grep -q "encoder.json: 700 tokens" <<< "$out"; then
    ok bpe4k_refuses_another_vocabulary_size
else
    fail bpe4k_refuses_another_vocabulary_size "rc $rc: $out"
fi
if "$TOK" shards --data "$tmp/d4k" --model bpe4k --out "$tmp/shards" --name s --val-percent 0 "$tmp/corpus" > /dev/null 2>&1 &&
    "$py" - "$tmp/shards/s_train_000000.bin" "$tmp/corpus" "$tmp/d4k" "$TOK" <<'EOF'
import os, struct, subprocess, sys
path, corpus, data, tok = sys.argv[1:]
raw = open(path, "rb").read()
h = struct.unpack("<256i", raw[:1024])
toks = list(struct.unpack(f"<{h[2]}H", raw[1024:]))
want = []
for f in sorted(os.listdir(corpus)):
    ids = subprocess.run([tok, "encode", "--model", "bpe4k", "--data", data], stdin=open(os.path.join(corpus, f), "rb"),
                         capture_output=True, check=True).stdout.split()
    want += [4095] + [int(x) for x in ids]
assert (h[0], h[1], h[3], h[4]) == (20240520, 1, 20261202, 4), f"header {h[:5]}"
assert toks == want, "tokens differ from EOT + tok encode of each document"
EOF
then
    ok bpe4k_shards_are_uint16_tagged_with_eot_per_document
else
    fail bpe4k_shards_are_uint16_tagged_with_eot_per_document "see above"
fi

# 4b. two learned vocabularies of one size: shards of one are refused by a trainer given the other, naming both
#     hashes; given their own (or a copy of it) the run trains
mkdir -p "$tmp/other"
cp "$data"/sotu/txt/185*.txt "$tmp/other/"
"$TOK" train --vocab 300 --val-percent 0 --out "$tmp/v300a" "$tmp/corpus" > /dev/null 2>&1
"$TOK" train --vocab 300 --val-percent 0 --out "$tmp/v300b" "$tmp/other" > /dev/null 2>&1
cp -r "$tmp/v300a" "$tmp/v300a_copy"
"$TOK" shards --model "$tmp/v300a" --out "$tmp/sh300" --name s --val-percent 10 "$tmp/corpus" > /dev/null 2>&1
gpt=(./train_gpt --model d1c16h2t32v300 --batch 2 --seq 32 --steps 1 --eval-every 0 --sample-every 0 --threads 1
     --train "$tmp/sh300/s_train_*.bin" --val "$tmp/sh300/s_val_*.bin")
"${gpt[@]}" --tokenizer "$tmp/v300b" --out "$tmp/run_b" > /dev/null 2> "$tmp/run_b.err"; st=$?
"${gpt[@]}" --tokenizer "$tmp/v300a_copy" --out "$tmp/run_a" > /dev/null 2> "$tmp/run_a.err"; st2=$?
ha=$("$py" -c 'import struct,sys; h=struct.unpack("<256I", open(sys.argv[1],"rb").read(1024)); print("%08x%08x" % (h[6], h[5]))' "$tmp/sh300/s_train_000000.bin")
if [ $st = 1 ] && grep -q "^error: .*s_train_000000.bin was made with a vocabulary of hash $ha, but the tokenizer $tmp/v300b has hash [0-9a-f]\{16\}" "$tmp/run_b.err" \
   && [ ! -e "$tmp/run_b/ckpt_1" ] && [ $st2 = 0 ] && [ -e "$tmp/run_a/ckpt_1" ]; then
    ok trainer_refuses_shards_of_another_learned_vocabulary_of_the_same_size
else
    fail trainer_refuses_shards_of_another_learned_vocabulary_of_the_same_size "status $st/$st2, hash $ha: $(cat "$tmp/run_b.err" "$tmp/run_a.err" | tail -3)"
fi

# 4c. --words-out through a link replaces the link, never the file it points to; the vocabulary pair is written
#     whole: no temp file left
echo "precious" > "$tmp/victim.txt"
ln -s "$tmp/victim.txt" "$tmp/words_link.txt"
"$TOK" train --vocab 260 --val-percent 0 --out "$tmp/wl" --words-out "$tmp/words_link.txt" "$tmp/corpus" > /dev/null 2>&1; st=$?
if [ $st = 0 ] && [ "$(cat "$tmp/victim.txt")" = precious ] && [ ! -L "$tmp/words_link.txt" ] && [ -s "$tmp/words_link.txt" ] \
   && [ "$(ls -A "$tmp/wl" | tr '\n' ' ')" = "encoder.json vocab.bpe " ]; then
    ok words_out_never_writes_through_a_link
else
    fail words_out_never_writes_through_a_link "status $st, victim '$(cat "$tmp/victim.txt")', out: $(ls -A "$tmp/wl")"
fi

# 4d. an output that is a pipe (or a device: /dev/full) is refused, not opened (a pipe without reader hung it) nor
#     replaced
mkfifo "$tmp/words_pipe"
timeout 20 "$TOK" train --vocab 260 --val-percent 0 --out "$tmp/wp" --words-out "$tmp/words_pipe" "$tmp/corpus" > /dev/null 2> "$tmp/wp.err"; st=$?
if [ $st = 1 ] && [ "$(wc -l < "$tmp/wp.err")" = 1 ] && grep -q "words_pipe exists and is not a regular file" "$tmp/wp.err" \
   && [ -p "$tmp/words_pipe" ] && [ ! -e "$tmp/wp" ]; then
    ok words_out_refuses_a_pipe
else
    fail words_out_refuses_a_pipe "status $st: $(cat "$tmp/wp.err")"
fi

# 5. bad input: one error line, non-zero exit, nothing written
expect_error() { # name, expected text, tok args...
    local name=$1 want=$2
    shift 2
    rm -rf "$tmp/bad"
    local out rc
    out=$("$TOK" "$@" 2>&1); rc=$?
    if [ $rc -eq 0 ]; then fail "$name" "exit 0: $out"; return; fi
    if [ "$(wc -l <<< "$out")" -ne 1 ] || ! grep -q -- "$want" <<< "$out"; then fail "$name" "message: $out"; return; fi
    if [ -e "$tmp/bad/encoder.json" ] || [ -e "$tmp/bad/vocab.bpe" ] || ls "$tmp/bad"/*.tmp.* > /dev/null 2>&1; then
        fail "$name" "left files in $tmp/bad"; return
    fi
    ok "$name"
}
mkdir -p "$tmp/empty" && : > "$tmp/empty/e.txt"
expect_error error_train_empty_corpus "documents of the inputs are empty" train --vocab 300 --val-percent 0 --out "$tmp/bad" "$tmp/empty"
expect_error error_train_vocab_below_257 "--vocab: '256' is not an integer in \[257, 65536\]" train --vocab 256 --out "$tmp/bad" "$tmp/corpus"
expect_error error_train_vocab_above_65536 "--vocab: '70000'" train --vocab 70000 --out "$tmp/bad" "$tmp/corpus"
expect_error error_train_vocab_missing "--vocab N is required" train --out "$tmp/bad" "$tmp/corpus"
printf 'ab ab' > "$tmp/tiny.txt"
expect_error error_train_corpus_too_small "allows only 259 tokens" train --vocab 300 --val-percent 0 --out "$tmp/bad" "$tmp/tiny.txt"
expect_error error_train_no_inputs "no INPUTS" train --vocab 300 --out "$tmp/bad"
# a training that fails leaves no --words-out behind (it was written before the merges were learned)
rm -f "$tmp/words_fail.txt"
expect_error error_train_failure_leaves_no_words_out "allows only 259 tokens" train --vocab 300 --val-percent 0 \
    --out "$tmp/bad" --words-out "$tmp/words_fail.txt" "$tmp/tiny.txt"
[ ! -e "$tmp/words_fail.txt" ] || fail error_train_failure_leaves_no_words_out "--words-out written though training failed"
# an --out naming an input file (here a .jsonl) is called an input, not a folder
printf '{"text": "ab ab ab"}\n' > "$tmp/in.jsonl"
expect_error error_train_out_names_an_input_file "--out $tmp/in.jsonl names an input: $tmp/in.jsonl is an input file" \
    train --vocab 260 --val-percent 0 --out "$tmp/in.jsonl" "$tmp/in.jsonl"
[ "$(cat "$tmp/in.jsonl")" = '{"text": "ab ab ab"}' ] || fail error_train_out_names_an_input_file "the input changed"
expect_error error_train_out_is_a_file "^error: --out $tmp/tiny.txt/x: cannot create directory $tmp/tiny.txt/x: Not a directory; choose a writable folder$" train --vocab 260 --val-percent 0 --out "$tmp/tiny.txt/x" "$tmp/corpus"

# --words-out never writes over an input document (it did: tok train's own training text), into an input folder, or
# onto the encoder.json / vocab.bpe of --out (the vocabulary replaced it, exit 0)
mkdir -p "$tmp/wi" && printf 'the words of one document\n' > "$tmp/wi/doc.txt" && cp "$tmp/wi/doc.txt" "$tmp/wi2.txt"
before=$(cat "$tmp/wi/doc.txt")
expect_error error_train_words_out_is_an_input "--words-out $tmp/wi/doc.txt is an input of this run" train --vocab 260 \
    --val-percent 0 --out "$tmp/bad" --words-out "$tmp/wi/doc.txt" "$tmp/wi"
[ "$(cat "$tmp/wi/doc.txt")" = "$before" ] || fail error_train_words_out_is_an_input "the input was written over"
expect_error error_train_words_out_in_an_input_folder "lies inside the input folder $tmp/wi" train --vocab 260 \
    --val-percent 0 --out "$tmp/bad" --words-out "$tmp/wi/words.txt" "$tmp/wi"
mkdir -p "$tmp/bad2"
expect_error error_train_words_out_is_a_vocabulary_file "is the vocab.bpe that --out $tmp/bad2 receives" train --vocab 260 \
    --val-percent 0 --out "$tmp/bad2" --words-out "$tmp/bad2/vocab.bpe" "$tmp/wi2.txt"
[ -z "$(ls -A "$tmp/bad2")" ] || fail error_train_words_out_is_a_vocabulary_file "files left in --out: $(ls "$tmp/bad2")"

exit $((failures > 0))

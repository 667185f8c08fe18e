#!/usr/bin/env bash
# test/test_tokenizer_shards.sh DATA_DIR - tests `tok shards`: test/test_tokenizer_shards.py (run with Debian's
# /usr/bin/python3; standard library only) for the format, tokens and split, then the cases below for what an
# adversary does: a rerun into the same --out that fails (a malformed last line) or is stopped by a signal leaves the
# earlier set whole with no temp file; shards record the vocabulary's hash; input folders with links to themselves are
# walked once with a note; --out inside an input folder is refused; a full stdout is an error; an input named like
# an option is named in the error, and scripts/cluster/prepare_data.sh takes it. Needs `make data` and ./tok.
cd "$(dirname "$0")/.."
data="${1:-data}"
TOK="${TOK:-./tok}"
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$py" test/test_tokenizer_shards.py "$data"
failures=$?
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }
# one "error:" line on stderr (file $1) that holds $2
one_error() { [ "$(wc -l < "$1")" -eq 1 ] && grep -q '^error: ' "$1" && grep -q -- "$2" "$1"; }
# name, size and checksum of every entry of a folder, hidden ones too
snapshot() { (cd "$1" && find . -mindepth 1 | LC_ALL=C sort | while read -r f; do echo "$f $(cksum < "$f" 2>/dev/null)"; done); }

mkdir -p "$tmp/a" "$tmp/b"
cp "$data"/sotu/txt/17*.txt "$tmp/a/"
cp "$data"/sotu/txt/18[0-4]*.txt "$tmp/b/"
"$TOK" shards --out "$tmp/out" --name s --val-percent 10 --shard-tokens 4000 --data "$data" "$tmp/a" > /dev/null 2>&1
before=$(snapshot "$tmp/out")

# symptom 3: a rerun of another corpus that fails on its last document leaves the earlier set as it was
printf '{"text": "fine"}\n{"text": "cut off' > "$tmp/bad_last.jsonl"
"$TOK" shards --out "$tmp/out" --name s --val-percent 10 --shard-tokens 4000 --threads 2 --data "$data" \
    "$tmp/b" "$tmp/bad_last.jsonl" > /dev/null 2> "$tmp/err3"
st=$?
if [ $st -ne 0 ] && one_error "$tmp/err3" "bad_last.jsonl:2" && [ "$(snapshot "$tmp/out")" = "$before" ] \
   && [ "$(echo "$before" | wc -l)" -ge 5 ]; then
    ok shards_rerun_that_fails_keeps_the_earlier_set_whole
else
    fail shards_rerun_that_fails_keeps_the_earlier_set_whole "status $st, $(cat "$tmp/err3"); $(diff <(echo "$before") <(snapshot "$tmp/out") | head -4)"
fi

# a rerun stopped by SIGTERM while it waits on its last input (a pipe) leaves the earlier set; status 143
mkfifo "$tmp/pipe.txt"
"$TOK" shards --out "$tmp/out" --name s --val-percent 10 --shard-tokens 4000 --threads 2 --data "$data" \
    "$tmp/b" "$tmp/pipe.txt" > /dev/null 2> "$tmp/err_sig" &
pid=$!
sleep 1.5
kill -TERM $pid
wait $pid
st=$?
if [ $st -eq 143 ] && [ "$(snapshot "$tmp/out")" = "$before" ] && grep -q "as they were" "$tmp/err_sig"; then
    ok shards_stopped_by_a_signal_keep_the_earlier_set
else
    fail shards_stopped_by_a_signal_keep_the_earlier_set "status $st, $(tail -1 "$tmp/err_sig"); $(diff <(echo "$before") <(snapshot "$tmp/out") | head -4)"
fi

# a rerun that succeeds replaces the whole set: fewer, bigger shards, the old extra ones gone (past a gap too: one of
# them removed by hand), no temp folder
rm -f "$tmp/out/s_train_000002.bin"
"$TOK" shards --out "$tmp/out" --name s --val-percent 10 --data "$data" "$tmp/b" > /dev/null 2>&1
left=$(ls -A "$tmp/out" | tr '\n' ' ')
if [ "$left" = "s_train_000000.bin s_val_000000.bin " ]; then ok shards_rerun_replaces_the_whole_set
else fail shards_rerun_replaces_the_whole_set "left: $left"; fi

# symptom 13: the vocabulary's hash in header ints 5, 6: the same for a copy of the vocabulary, another for another
hash() { "$py" -c 'import struct,sys; h=struct.unpack("<256I", open(sys.argv[1],"rb").read(1024)); print("%08x%08x" % (h[6], h[5]))' "$1"; }
mkdir -p "$tmp/d2/gpt2"
cp "$data"/gpt2/encoder.json "$data"/gpt2/vocab.bpe "$tmp/d2/gpt2/"
"$TOK" shards --out "$tmp/h1" --name s --val-percent 0 --data "$data" "$tmp/a" > /dev/null 2>&1
"$TOK" shards --out "$tmp/h2" --name s --val-percent 0 --data "$tmp/d2" "$tmp/a" > /dev/null 2>&1
"$TOK" shards --out "$tmp/h3" --name s --val-percent 0 --model bpe4k --data "$data" "$tmp/a" > /dev/null 2>&1
h1=$(hash "$tmp/h1/s_train_000000.bin") h2=$(hash "$tmp/h2/s_train_000000.bin") h3=$(hash "$tmp/h3/s_train_000000.bin")
if [ "$h1" != 0000000000000000 ] && [ "$h1" = "$h2" ] && [ -n "$h3" ] && [ "$h3" != "$h1" ] && [ "$h3" != 0000000000000000 ]; then
    ok shards_record_the_vocabulary_hash
else
    fail shards_record_the_vocabulary_hash "gpt2 $h1, its copy $h2, bpe4k $h3"
fi

# symptom 14: a folder holding a link to itself and two links that loop: each real folder and file read once
mkdir -p "$tmp/loop/sub"
cp "$tmp/a/1790"* "$tmp/a/1791"* "$tmp/loop/"
cp "$tmp/a/1792"* "$tmp/loop/sub/"
ln -s . "$tmp/loop/self"
ln -s ../sub "$tmp/loop/sub/again"
ln -s .. "$tmp/loop/sub/up"
ln -s "$tmp/loop/1790"* "$tmp/loop/sub/same.txt"
want=$(find "$tmp/loop" -type f | wc -l)
timeout 60 "$TOK" shards --out "$tmp/lo" --name s --val-percent 0 --data "$data" "$tmp/loop" > /dev/null 2> "$tmp/err14"
st=$?
timeout 60 "$TOK" train --vocab 300 --val-percent 0 --out "$tmp/lv" "$tmp/loop" > "$tmp/out14t" 2> "$tmp/err14t"
st2=$?
if [ $st = 0 ] && grep -q "tok shards: $want/$want documents" "$tmp/err14" && grep -q "skipping $tmp/loop/self: a folder already read" "$tmp/err14" \
   && grep -q "skipping $tmp/loop/sub/up:" "$tmp/err14" && grep -q "skipping $tmp/loop/sub/same.txt: the same file" "$tmp/err14" \
   && grep -q "4 entries of the inputs skipped" "$tmp/err14" && [ $st2 = 0 ] && grep -q "tok train: $want training documents" "$tmp/out14t"; then
    ok input_folders_with_links_to_themselves_are_walked_once
else
    fail input_folders_with_links_to_themselves_are_walked_once "status $st/$st2 (want $want documents): $(cat "$tmp/err14" "$tmp/out14t" | tr '\n' '|' | cut -c1-400)"
fi

# --out inside an input folder is refused before anything is written (the next run would read the shards as text),
# by tok train too; so is an input that is one of the shards the run replaces
"$TOK" shards --out "$tmp/a/shards" --name s --data "$data" "$tmp/a" > /dev/null 2> "$tmp/err_in"
st=$?
"$TOK" train --vocab 300 --out "$tmp/a/voc" "$tmp/a" > /dev/null 2> "$tmp/err_in2"
st2=$?
before=$(snapshot "$tmp/out")
"$TOK" shards --out "$tmp/out" --name s --val-percent 0 --data "$data" "$tmp/out/s_val_000000.bin" > /dev/null 2> "$tmp/err_in3"
st3=$?
if [ $st = 1 ] && one_error "$tmp/err_in" "lies inside the input folder" && [ ! -e "$tmp/a/shards" ] \
   && [ $st2 = 1 ] && one_error "$tmp/err_in2" "lies inside the input folder" && [ ! -e "$tmp/a/voc" ] \
   && [ $st3 = 1 ] && one_error "$tmp/err_in3" "is a shard of --name s" && [ "$(snapshot "$tmp/out")" = "$before" ]; then
    ok shards_refuse_an_out_inside_the_inputs
else
    fail shards_refuse_an_out_inside_the_inputs "status $st/$st2/$st3: $(cat "$tmp/err_in" "$tmp/err_in2" "$tmp/err_in3")"
fi

# --out naming an input file (a .jsonl) is refused as an input, not as "inside the input folder"
printf '{"text": "one document"}\n' > "$tmp/in.jsonl"
"$TOK" shards --out "$tmp/in.jsonl" --name s --val-percent 0 --data "$data" "$tmp/in.jsonl" > /dev/null 2> "$tmp/err_jl"
st=$?
if [ $st = 1 ] && one_error "$tmp/err_jl" "--out $tmp/in.jsonl names an input: $tmp/in.jsonl is an input file" \
   && [ "$(cat "$tmp/in.jsonl")" = '{"text": "one document"}' ]; then
    ok shards_refuse_an_out_naming_an_input_file
else
    fail shards_refuse_an_out_naming_an_input_file "status $st: $(cat "$tmp/err_jl")"
fi

# stdout on a full disk: an error, not a silent success
"$TOK" shards --out "$tmp/full" --name s --val-percent 0 --data "$data" "$tmp/a" > /dev/full 2> "$tmp/err_full"
st=$?
if [ $st = 1 ] && grep -q "^error: cannot write standard output" "$tmp/err_full"; then ok shards_report_a_full_stdout
else fail shards_report_a_full_stdout "status $st: $(tail -1 "$tmp/err_full")"; fi

data_abs=$(cd "$data" && pwd) # the data cache from another working folder (DATA may be relative or absolute)
# symptom 21b: an input whose name starts with '-': tok names that argument; prepare_data.sh passes it after --
"$TOK" shards --out "$tmp/x" --data "$data" "$tmp/a" -part1.jsonl > /dev/null 2> "$tmp/err_opt"
st=$?
mkdir -p "$tmp/cwd"
printf '{"text": "one document"}\n{"text": "and another"}\n' > "$tmp/cwd/-part1.jsonl"
(cd "$tmp/cwd" && DATA="$data_abs" "$OLDPWD/scripts/cluster/prepare_data.sh" openwebtext OUT -part1.jsonl) > "$tmp/out_pd" 2>&1
st2=$?
if [ $st = 1 ] && one_error "$tmp/err_opt" "unknown option '-part1.jsonl'" && [ $st2 = 0 ] \
   && [ -s "$tmp/cwd/OUT/openwebtext_train_000000.bin" ]; then
    ok an_input_named_like_an_option_is_named_and_prepare_data_takes_it
else
    fail an_input_named_like_an_option_is_named_and_prepare_data_takes_it "status $st/$st2: $(cat "$tmp/err_opt" "$tmp/out_pd" | tail -3)"
fi

# a wrong JSONL_FIELD: one error line however many encoding threads meet a bad line at once (each printed its own)
for i in $(seq 400); do printf '{"text": "document %d with some words"}\n' "$i"; done > "$tmp/many.jsonl"
lines=""
for _ in 1 2 3; do
    (cd "$tmp/cwd" && JSONL_FIELD=txt DATA="$data_abs" "$OLDPWD/scripts/cluster/prepare_data.sh" openwebtext OUT2 "$tmp/many.jsonl") > "$tmp/out_jf" 2>&1
    lines="$lines$? $(wc -l < "$tmp/out_jf") "
done
if [ "$lines" = "1 1 1 1 1 1 " ] && one_error "$tmp/out_jf" "many.jsonl:[0-9]*: no string field \"txt\""; then
    ok a_bad_jsonl_field_is_one_error_line_with_several_threads
else
    fail a_bad_jsonl_field_is_one_error_line_with_several_threads "status/lines: $lines: $(head -3 "$tmp/out_jf")"
fi

# a failed tok shards leaves no --out of its own making (the empty folder stayed); an --out that was there stays
mkdir -p "$tmp/had_out"
"$TOK" shards --out "$tmp/new_out" --data "$data" --jsonl-field txt "$tmp/many.jsonl" > /dev/null 2> "$tmp/err_no"; st=$?
"$TOK" shards --out "$tmp/had_out" --data "$data" --jsonl-field txt "$tmp/many.jsonl" > /dev/null 2> "$tmp/err_ho"; st2=$?
if [ $st = 1 ] && [ $st2 = 1 ] && [ ! -e "$tmp/new_out" ] && [ -d "$tmp/had_out" ] && [ -z "$(ls -A "$tmp/had_out")" ]; then
    ok a_failed_run_leaves_no_out_folder_of_its_own_making
else
    fail a_failed_run_leaves_no_out_folder_of_its_own_making "status $st/$st2: $(ls -d "$tmp/new_out" 2>&1; ls -A "$tmp/had_out")"
fi
exit $((failures > 0))

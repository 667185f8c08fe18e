#!/usr/bin/env bash
# test/test_netem_args.sh - scripts/netem_bench.sh refuses bad arguments and --runs files with one line and status 2
# before it needs root or starts anything: an option without its value, a non-numeric or zero --batch/--seq/--steps/
# --np, an empty or malformed --rates, a --model of the wrong form, an --out that is a file or whose runs.tsv is a
# symlink, and --runs files with a repeated name, shell syntax, a bench option or no run. Every call also names data
# that are not there, so that one passing its checks by mistake stops at the corpus check, before any namespace
# or timing. No root needed; about 2 s.
# Not for: the bench itself and its clean-up (test/test_reproduce_netem.sh, root and about a minute).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
fails=0
ok()   { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
guard=(--data "$tmp/no-data")
bad=""
# refused NAME WANT ARGS...: status 2, one line starting error: and holding WANT
refused() {
    local name=$1 want=$2 out rc
    shift 2
    out=$(scripts/netem_bench.sh "$@" 2>&1); rc=$?
    [ $rc = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && [[ $out == error:* && $out == *"$want"* ]] \
        || bad="$bad; $name: status $rc, '$(printf '%s' "$out" | head -2 | tr '\n' '|')'"
}
for opt in --rates --np --steps --model --batch --seq --data --out --runs; do
    refused "$opt without a value" "$opt needs a value" "${guard[@]}" "$opt"
done
refused "batch abc" "--batch 'abc'" "${guard[@]}" --batch abc
refused "seq 0" "--seq '0'" "${guard[@]}" --seq 0
refused "steps 1" "--steps 1" "${guard[@]}" --steps 1
refused "np x" "--np x" "${guard[@]}" --np x
refused "rates blank" "--rates is empty" "${guard[@]}" --rates " "
refused "rates typo" "'1gbt'" "${guard[@]}" --rates "unlimited 1gbt"
refused "model" "--model 'a b'" "${guard[@]}" --model "a b"
refused "unknown option" "unknown option '--rate'" "${guard[@]}" --rate 1gbit
echo x > "$tmp/file"
refused "out a file" "--out $tmp/file is no folder" "${guard[@]}" --out "$tmp/file"
mkdir "$tmp/o"; ln -s "$tmp/file" "$tmp/o/runs.tsv"
refused "out runs.tsv a symlink" "symlink" "${guard[@]}" --out "$tmp/o"
[ "$(cat "$tmp/file")" = x ] || bad="$bad; the symlink's target was written"
printf 'a\t--optimizer adams\na\t--optimizer scape\n' > "$tmp/r1"
refused "runs repeated name" "r1:2: run name 'a' is used twice" "${guard[@]}" --runs "$tmp/r1"
printf 'a\t--optimizer adams $(id)\n' > "$tmp/r2"
refused "runs shell syntax" "r2:1: the flags of 'a'" "${guard[@]}" --runs "$tmp/r2"
printf 'a\t--optimizer adams --steps=9\n' > "$tmp/r3"
refused "runs bench option" "r3:1: '--steps' is set by the bench" "${guard[@]}" --runs "$tmp/r3"
printf '# nothing\n\n' > "$tmp/r4"
refused "runs no run" "names no run" "${guard[@]}" --runs "$tmp/r4"
refused "runs missing" "is not a readable file" "${guard[@]}" --runs "$tmp/none"
[ -z "$bad" ] && ok netem_bad_arguments_refused_with_one_line || fail netem_bad_arguments_refused_with_one_line "${bad#; }"
exit $((fails > 0))

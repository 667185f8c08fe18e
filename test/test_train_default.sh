#!/usr/bin/env bash
# test/test_train_default.sh - scripts/train_default.sh (`make train`) never removes a run unasked: a second plain run
# into an OUT that holds one stops with one line naming RESUME=latest, FRESH=1 and OUT, and leaves its log and
# checkpoints as they were; RESUME=latest continues it, FRESH=1 starts over, and not while a run training there holds
# its lock; FRESH of the wrong form, or with RESUME, is refused; a run stopped by SIGINT says how to continue it.
# Tiny settings (GPT-2 d2c32h2, a few steps; about 20 s), run from another folder, as a user may.
# Not for: the trainer's own resume and lock (test/test_rundir.sh, test/test_train.sh).
set -u
repo=$(cd "$(dirname "$0")/.." && pwd) || exit 1
. "$repo/test/lib.sh" # failures=0, ok NAME, fail NAME WHY
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1
export MODEL=d2c32h2 BATCH=2 SEQ=32 STEPS=3 EVAL_EVERY=0 EVAL_BATCHES=1 SAMPLE_EVERY=0 OUT=$TMP/out
unset RESUME FRESH EXTRA RANKS
train() { "$repo/scripts/train_default.sh" > "$TMP/$1.out" 2> "$TMP/$1.err"; }
one_error_line() { [ "$(wc -l < "$1")" = 1 ] && grep -qE -- "$2" "$1"; }

train first
st=$?
[ $st = 0 ] && [ -d "$OUT/ckpt_3" ] && ok first_run_trains || fail first_run_trains "status $st: $(tail -3 "$TMP/first.err")"
cp "$OUT/log.jsonl" "$TMP/log_before"

train again
st=$?
if [ $st = 2 ] && one_error_line "$TMP/again.err" "^error: .*/out holds a run \(checkpoints up to step 3\); set RESUME=latest to continue it, FRESH=1 to start over" \
   && [ -d "$OUT/ckpt_3" ] && cmp -s "$OUT/log.jsonl" "$TMP/log_before"; then
    ok second_plain_run_keeps_the_first
else fail second_plain_run_keeps_the_first "status $st, ckpt_3 $([ -d "$OUT/ckpt_3" ] && echo kept || echo gone): $(cat "$TMP/again.err")"; fi

RESUME=latest STEPS=5 train resumed
st=$?
if [ $st = 0 ] && [ -d "$OUT/ckpt_5" ] && grep -q '"event": "start"' "$OUT/log.jsonl" \
   && [ "$(head -c "$(stat -c %s "$TMP/log_before")" "$OUT/log.jsonl" | cmp - "$TMP/log_before" && echo same)" = same ]; then
    ok resume_latest_continues_the_run
else fail resume_latest_continues_the_run "status $st: $(tail -3 "$TMP/resumed.err")"; fi

FRESH=x train fresh_typo
st=$?
FRESH=1 RESUME=latest train fresh_and_resume
st2=$?
if [ $st = 2 ] && one_error_line "$TMP/fresh_typo.err" "^error: FRESH='x' is neither 1" && [ $st2 = 2 ] \
   && one_error_line "$TMP/fresh_and_resume.err" "^error: FRESH=1 starts over and RESUME=latest continues" && [ -d "$OUT/ckpt_5" ]; then
    ok fresh_of_the_wrong_form_refused
else fail fresh_of_the_wrong_form_refused "status $st/$st2: $(cat "$TMP/fresh_typo.err" "$TMP/fresh_and_resume.err")"; fi

# a run training there holds OUT/.lock: FRESH=1 must not remove its files
exec 8>> "$OUT/.lock"
flock -n 8 || fail fresh_leaves_a_running_run_alone "could not take $OUT/.lock"
FRESH=1 train fresh_in_use 8>&-
st=$?
exec 8>&-
if [ $st = 1 ] && one_error_line "$TMP/fresh_in_use.err" "^error: .*/out is in use by a run training now" && [ -d "$OUT/ckpt_5" ]; then
    ok fresh_leaves_a_running_run_alone
else fail fresh_leaves_a_running_run_alone "status $st: $(cat "$TMP/fresh_in_use.err")"; fi

FRESH=1 train fresh
st=$?
if [ $st = 0 ] && grep -q "^note: starting over in .*/out (FRESH=1" "$TMP/fresh.out" && [ -d "$OUT/ckpt_3" ] \
   && [ ! -e "$OUT/ckpt_5" ] && [ "$(grep -c '"event": "start"' "$OUT/log.jsonl")" = 1 ]; then
    ok fresh_starts_over
else fail fresh_starts_over "status $st: $(tail -3 "$TMP/fresh.err")"; fi

# SIGINT (Ctrl-C) during a run: the trainer checkpoints and exits 130; the script names its own way to continue
OUT=$TMP/out2 STEPS=100000 "$repo/scripts/train_default.sh" > "$TMP/int.out" 2> "$TMP/int.err" &
script=$!
for _ in $(seq 300); do grep -q '"event": "train"' "$TMP/out2/log.jsonl" 2> /dev/null && break; sleep 0.1; done
pid=$(tr -dc 0-9 < "$TMP/out2/.lock" 2> /dev/null)
[ -n "$pid" ] && kill -INT "$pid"
wait "$script"
st=$?
if [ $st = 130 ] && grep -q "^note: continue with RESUME=latest make train" "$TMP/int.err" \
   && compgen -G "$TMP/out2/ckpt_*" > /dev/null; then
    ok interrupted_run_says_how_to_continue
else fail interrupted_run_says_how_to_continue "status $st, trainer pid '$pid': $(tail -3 "$TMP/int.err")"; fi

exit $((failures > 0))

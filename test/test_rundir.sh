#!/usr/bin/env bash
# test/test_rundir.sh TOY DATA - issue 34: no slip or fault damages a run directory. One case per symptom of the
# issue (numbered as there), each failing on the code before the fix:
#   1 --resume latest with checkpoints but none that verifies is refused, the trained model.bin left as it was;
#   2 a new run on an --out that holds another run's checkpoints is refused;
#   3 a roll-back (--resume <out>/ckpt_4 with another lr) makes the new branch the directory's line: latest, retention
#     and the resume a SIGTERM advises follow it, the old branch is kept under abandoned/;
#   4 export_gguf never writes over its input and refuses a checkpoint that does not verify;
#   5 retention through a linked-in checkpoint leaves its target's files (unit cases in test_train_units too);
#   6 a link planted at <out>/.lock or <out>/ckpt_N/model.bin.tmp (or a hard link at .lock or log.jsonl) never makes
#     the run write through it;
#   7 a run started with --init records its real model: a resume naming it is accepted, another model refused;
#   8 a prompt that is not UTF-8 comes back from the checkpoint exactly;
#   9 option checks on resume see the checkpoint's options (--density on a SCAPE run, --lr-floor under its lr),
#     --zero=0 turns ZeRO-1 off, other --train data are read from their start;
#  10 a run whose last steps were all skipped exits 1 and says there is no checkpoint;
#  11 a model that cannot fit is refused at once with one line (need and available);
#  12 two `make data` at once into one folder both succeed with the same files;
#  13 a vocabulary learned by `tok train --out DIR` is usable by tok, the trainers and the exporter; `tok shards`
#     reads subfolders.
# Issue 43 (lineage is decided first and changed last; --eval-only is read-only on the run directory), cases l<N>
# numbered as the issue's symptoms:
#   l4  a ckpt_<step> folder copied in from another run is not taken for --resume latest (two runs: refused);
#   l5  a checkpoint folder a retention left half-removed (no manifest) is removed by the next retention;
#   l6  --eval-only --resume <out>/ckpt_2 leaves the later checkpoints in place and latest where it was;
#   l7  a resume refused after the roll-back was decided (--batch, --total-batch) has moved nothing;
#   l8  a link planted at <out>/abandoned is refused before anything moves; one planted at <out>/ckpt_N of a new run
#       is moved aside, not left as a .rollback the next run calls malformed;
#   l10 --eval-only --resume latest with no checkpoint is refused, nothing written;
#   l11 --eval-only reports the manifest's step (trailing slash, renamed folder);
#   l18 --resume "", --verify-ckpt "" (and --train, --val, --data, --tokenizer, --eval-task, --eval-dump "") are usage
#       errors, not a training run with defaults;
#   l19 --eval-only runs on an --out that holds checkpoints (with --resume or --init).
# The toy bigram model (test/test_train_toy.c) keeps the loop cases fast; the GPT-2 trainer is used where the
# model matters (--init, memory, export, tokenizers), on data/sotu shards (make data).
set -u
TOY=${1:?usage: test/test_rundir.sh build/test_train_toy DATA}
DATA=${2:-data}
TMP=$(mktemp -d build/test_rundir.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib.sh" # failures=0, ok NAME, fail NAME WHY

"$TOY" mkdata "$TMP/data" 32 || { echo "FAIL mkdata: could not write toy shards"; exit 1; }
RUN=("$TOY" --model v32l2t64 --train "$TMP/data/train.bin" --val "$TMP/data/val.bin" --batch 4 --seq 16
     --steps 8 --warmup 2 --lr 5e-2 --lr-floor 1e-3 --eval-every 0 --sample-every 0 --threads 1)
# the lr a checkpoint's manifest records
ckpt_lr() { sed -E 's/.*"lr": "([^"]*)".*/\1/' "$1/manifest.json"; }
one_error_line() { [ "$(wc -l < "$1")" = 1 ] && grep -qE -- "$2" "$1"; }

# --- 1
"${RUN[@]}" --out "$TMP/s1" --ckpt-every 4 > /dev/null 2>&1
cp "$TMP/s1/ckpt_8/model.bin" "$TMP/s1_model_before"
printf '\x55' | dd of="$TMP/s1/ckpt_8/state_rank0.bin" bs=1 seek=300 conv=notrunc status=none
printf '\x55' | dd of="$TMP/s1/ckpt_4/state_rank0.bin" bs=1 seek=300 conv=notrunc status=none
"${RUN[@]}" --out "$TMP/s1" --resume latest --ckpt-every 1 > "$TMP/s1.out" 2> "$TMP/s1.err"
st=$?
if [ $st -ne 0 ] && one_error_line "$TMP/s1.err" "^error: --resume latest: no checkpoint under .*s1 verifies \(.*ckpt_8: state_rank0.bin fails its checksum.*ckpt_4: " \
   && cmp -s "$TMP/s1/ckpt_8/model.bin" "$TMP/s1_model_before" && ! grep -q '"event": "start"' <(tail -1 "$TMP/s1/log.jsonl"); then
    ok resume_latest_refuses_when_no_checkpoint_verifies
else fail resume_latest_refuses_when_no_checkpoint_verifies "status $st: $(cat "$TMP/s1.err")"; fi

# --- 2
"${RUN[@]}" --out "$TMP/s2" --ckpt-every 4 > /dev/null 2>&1
sum_before=$(cat "$TMP"/s2/ckpt_*/manifest.json | md5sum)
"${RUN[@]}" --out "$TMP/s2" --lr 1e-2 > "$TMP/s2.out" 2> "$TMP/s2.err"
st=$?
if [ $st -ne 0 ] && one_error_line "$TMP/s2.err" "^error: --out .*s2 holds the checkpoints of an earlier run \(newest .*ckpt_8\); continue it with --resume latest" \
   && [ "$(cat "$TMP"/s2/ckpt_*/manifest.json | md5sum)" = "$sum_before" ]; then ok new_run_refuses_an_out_with_checkpoints
else fail new_run_refuses_an_out_with_checkpoints "status $st: $(cat "$TMP/s2.err")"; fi
# a checkpoint of another directory may not be continued into it either (two runs would mix)
"${RUN[@]}" --out "$TMP/s1" --resume "$TMP/s2/ckpt_4" > "$TMP/s2b.out" 2> "$TMP/s2b.err"
st=$?
if [ $st -ne 0 ] && one_error_line "$TMP/s2b.err" "holds the checkpoints of another run .*would mix two runs"; then
    ok resume_of_another_directory_refuses_an_out_with_checkpoints
else fail resume_of_another_directory_refuses_an_out_with_checkpoints "status $st: $(cat "$TMP/s2b.err")"; fi

# --- 3: run A 0..8 (ckpt 4, 8); roll back to 4 with lr 2e-2, keep 2, stopped by SIGTERM-like early end at 6;
#     then --resume latest must continue the new branch (lr 2e-2), never the abandoned ckpt_8 (lr 5e-2)
"${RUN[@]}" --out "$TMP/s3" --ckpt-every 4 --keep-ckpts 0 > /dev/null 2>&1
"${RUN[@]}" --out "$TMP/s3" --resume "$TMP/s3/ckpt_4" --lr 2e-2 --steps 6 --ckpt-every 1 --keep-ckpts 2 \
    > "$TMP/s3.out" 2> "$TMP/s3.err"
left=$(cd "$TMP/s3" && ls -d ckpt_* | sort -t_ -k2 -n | tr '\n' ' ')
"$TOY" --out "$TMP/s3" --resume latest --steps 8 > "$TMP/s3b.out" 2> "$TMP/s3b.err" # as a SIGTERM advises
if [ "$left" = "ckpt_5 ckpt_6 " ] && grep -q "resuming from $TMP/s3/ckpt_6 at step 6" "$TMP/s3b.out" \
   && [ "$(ckpt_lr "$TMP/s3/ckpt_8")" = 0.0199999996 ] \
   && [ "$(ckpt_lr "$TMP/s3/abandoned/after_ckpt_4/ckpt_8")" = 0.0500000007 ] \
   && grep -q "later checkpoint of this --out (another branch) moved to $TMP/s3/abandoned/after_ckpt_4" "$TMP/s3.out"; then
    ok rollback_makes_the_new_branch_latest_and_keeps_the_old
else fail rollback_makes_the_new_branch_latest_and_keeps_the_old "left '$left'; $(cat "$TMP/s3.out" "$TMP/s3b.out" | grep -v '^step ' | head -5)"; fi

# --- 5: a linked-in checkpoint of another run: resumed from, never pruned through
"${RUN[@]}" --out "$TMP/s5src" --ckpt-every 4 > /dev/null 2>&1
mkdir -p "$TMP/s5"
ln -s "$(realpath "$TMP/s5src/ckpt_8")" "$TMP/s5/ckpt_8"
"${RUN[@]}" --out "$TMP/s5" --resume latest --steps 12 --ckpt-every 1 --keep-ckpts 1 > "$TMP/s5.out" 2>&1
if grep -q "resuming from $TMP/s5/ckpt_8 at step 8" "$TMP/s5.out" && [ -L "$TMP/s5/ckpt_8" ] \
   && "$TOY" --verify-ckpt "$TMP/s5src/ckpt_8" > /dev/null && [ -d "$TMP/s5/ckpt_12" ] && [ ! -e "$TMP/s5/ckpt_10" ]; then
    ok retention_never_deletes_through_a_linked_checkpoint
else fail retention_never_deletes_through_a_linked_checkpoint "$(ls -la "$TMP/s5" "$TMP/s5src/ckpt_8" 2>&1 | head -12)"; fi

# --- 6: planted links
mkdir -p "$TMP/s6"
echo precious > "$TMP/victim"
ln -s "$(realpath "$TMP/victim")" "$TMP/s6/.lock"
"${RUN[@]}" --out "$TMP/s6" > "$TMP/s6.out" 2> "$TMP/s6.err"
st=$?
if [ $st -ne 0 ] && one_error_line "$TMP/s6.err" "s6/.lock is a symbolic link" && [ "$(cat "$TMP/victim")" = precious ]; then
    ok planted_lock_link_is_refused
else fail planted_lock_link_is_refused "status $st, victim '$(cat "$TMP/victim")': $(cat "$TMP/s6.err")"; fi
rm "$TMP/s6/.lock"
mkdir -p "$TMP/s6/ckpt_8"
ln -s "$(realpath "$TMP/victim")" "$TMP/s6/ckpt_8/model.bin.tmp"
ln -s "$(realpath "$TMP/victim")" "$TMP/s6/ckpt_8/state_rank0.bin.tmp"
"${RUN[@]}" --out "$TMP/s6" > "$TMP/s6b.out" 2> "$TMP/s6b.err"
st=$?
if [ $st = 0 ] && [ "$(cat "$TMP/victim")" = precious ] && "$TOY" --verify-ckpt "$TMP/s6/ckpt_8" > /dev/null; then
    ok planted_temp_links_are_never_written_through
else fail planted_temp_links_are_never_written_through "status $st, victim '$(cat "$TMP/victim")': $(cat "$TMP/s6b.err")"; fi
# hard links planted at <out>/.lock and <out>/log.jsonl: the pid written into the lock, the log's lines appended and
# its partial last line cut changed the other file (the victims end without a newline, which the log open cut)
mkdir -p "$TMP/s6h"
printf 'precious' > "$TMP/victim_h1"; printf 'line\nprecious' > "$TMP/victim_h2"
ln "$TMP/victim_h1" "$TMP/s6h/.lock"
"${RUN[@]}" --out "$TMP/s6h" > /dev/null 2> "$TMP/s6h.err"
st=$?
rm "$TMP/s6h/.lock"
ln "$TMP/victim_h2" "$TMP/s6h/log.jsonl"
"${RUN[@]}" --out "$TMP/s6h" > /dev/null 2> "$TMP/s6h2.err"
st2=$?
if [ $st -ne 0 ] && one_error_line "$TMP/s6h.err" "s6h/.lock has 2 names \(a hard link of another file\)" \
   && [ $st2 -ne 0 ] && one_error_line "$TMP/s6h2.err" "s6h/log.jsonl has 2 names \(a hard link" \
   && [ "$(cat "$TMP/victim_h1")" = precious ] && [ "$(cat "$TMP/victim_h2")" = "$(printf 'line\nprecious')" ]; then
    ok planted_hard_links_are_never_written_through
else fail planted_hard_links_are_never_written_through "status $st/$st2, victims '$(cat "$TMP/victim_h1")' '$(cat "$TMP/victim_h2" | tr '\n' '|')': $(cat "$TMP/s6h.err" "$TMP/s6h2.err")"; fi

# --- 9: option checks after the checkpoint's options are in
"${RUN[@]}" --out "$TMP/s9" --optimizer scape --density 0.5 --density-start 1 --density-warmup 2 --lr 0.6 \
    --lr-floor 0.001 --zero --steps 4 > /dev/null 2>&1
"$TOY" --out "$TMP/s9" --resume latest --steps 6 --density 0.25 --lr-floor 0.5 --zero=0 > "$TMP/s9.out" 2> "$TMP/s9.err"
st=$?
if [ $st = 0 ] && grep -q "note: --density 0.25 applies from the resumed step on" "$TMP/s9.out" \
   && grep -q '"zero": "0"' "$TMP/s9/ckpt_6/manifest.json" && grep -q '"lr-floor": "0.5"' "$TMP/s9/ckpt_6/manifest.json"; then
    ok resume_checks_options_against_the_checkpoints_own
else fail resume_checks_options_against_the_checkpoints_own "status $st: $(cat "$TMP/s9.err") $(grep note "$TMP/s9.out")"; fi
"$TOY" --out "$TMP/s9" --resume latest --steps 8 --train "$TMP/data/val.bin" > "$TMP/s9b.out" 2> "$TMP/s9b.err"
st=$?
if [ $st = 0 ] && grep -q "note: the training data changed" "$TMP/s9b.out" && [ -d "$TMP/s9/ckpt_8" ]; then
    ok resume_with_other_training_data_reads_them_from_the_start
else fail resume_with_other_training_data_reads_them_from_the_start "status $st: $(cat "$TMP/s9b.err")"; fi

# a resume refused for an option prints its refusal only, not first a note that the option "applies from the resumed
# step on"; the notes of a resume that runs show floats as typed (0.01, not 0.00999999978)
"${RUN[@]}" --out "$TMP/s9n" --optimizer adamw --steps 2 > /dev/null 2>&1
"$TOY" --out "$TMP/s9n" --resume latest --steps 4 --lr 0.01 --mask-stats-every 2 > "$TMP/s9n.out" 2> "$TMP/s9n.err"
st=$?
"$TOY" --out "$TMP/s9n" --resume latest --steps 4 --lr 0.01 > "$TMP/s9n2.out" 2> "$TMP/s9n2.err"
st2=$?
if [ $st = 1 ] && one_error_line "$TMP/s9n.err" "^error: --mask-stats-every 2 logs the masks" \
   && ! grep -q "applies from the resumed step" "$TMP/s9n.out" && [ $st2 = 0 ] \
   && grep -qx "note: --lr 0.01 applies from the resumed step on (the checkpoint's run had 0.05)" "$TMP/s9n2.out"; then
    ok refused_resume_prints_no_applies_note
else fail refused_resume_prints_no_applies_note "status $st/$st2: $(cat "$TMP/s9n.err"; grep note "$TMP/s9n.out" "$TMP/s9n2.out")"; fi
# ... and doubles as typed too (--density 0.05, not 0.050000000000000003), while the manifest keeps the exact text
"${RUN[@]}" --out "$TMP/s9d" --optimizer scape --density 0.1 --density-start 0.5 --density-warmup 2 --steps 2 \
    > /dev/null 2>&1
"$TOY" --out "$TMP/s9d" --resume latest --steps 4 --density 0.05 --density-start 0.3 > "$TMP/s9d.out" 2> "$TMP/s9d.err"
st=$?
if [ $st = 0 ] && grep -qx "note: --density 0.05 applies from the resumed step on (the checkpoint's run had 0.1)" "$TMP/s9d.out" \
   && grep -qx "note: --density-start 0.3 applies from the resumed step on (the checkpoint's run had 0.5)" "$TMP/s9d.out" \
   && grep -q '"density": "0.050000000000000003"' "$TMP/s9d/ckpt_4/manifest.json"; then
    ok resume_notes_show_doubles_as_typed
else fail resume_notes_show_doubles_as_typed "status $st: $(cat "$TMP/s9d.err"; grep note "$TMP/s9d.out")"; fi

# --- 10: every step skipped, fewer than --max-bad-steps
SCAPE_TEST_INJECT_NAN=loss:1,loss:2,loss:3 "${RUN[@]}" --out "$TMP/s10" --steps 3 --max-bad-steps 5 \
    > "$TMP/s10.out" 2> "$TMP/s10.err"
st=$?
if [ $st = 1 ] && one_error_line "$TMP/s10.err" "^error: the run ended with 3 skipped steps .* without a checkpoint of step 3; there is no complete checkpoint" \
   && ! grep -q "is kept" "$TMP/s10.out" && [ ! -e "$TMP/s10/ckpt_3" ]; then ok all_skipped_run_exits_1_without_claiming_a_checkpoint
else fail all_skipped_run_exits_1_without_claiming_a_checkpoint "status $st: $(cat "$TMP/s10.err"; grep skipped "$TMP/s10.out")"; fi

# ---------------------------------------------------------------- issue 43: lineage (toy)
lsckpt() { (cd "$1" && ls -d ckpt_* 2> /dev/null | sort -t_ -k2 -n | tr '\n' ' '); }
# --- l4: run l4a's ckpt_6 copied into l4 (ckpt_2, ckpt_4)
"${RUN[@]}" --out "$TMP/l4a" --steps 6 --ckpt-every 2 --keep-ckpts 0 > /dev/null 2>&1
"${RUN[@]}" --out "$TMP/l4" --steps 4 --ckpt-every 2 --keep-ckpts 0 > /dev/null 2>&1
cp -r "$TMP/l4a/ckpt_6" "$TMP/l4/"
"${RUN[@]}" --out "$TMP/l4" --resume latest --ckpt-every 2 --keep-ckpts 2 > "$TMP/l4.out" 2> "$TMP/l4.err"
st=$?
if [ $st -ne 0 ] && one_error_line "$TMP/l4.err" "^error: --out .*l4 holds the checkpoints of two runs \(run [0-9a-f]{16}: ckpt_6; run [0-9a-f]{16}: ckpt_4, ckpt_2\)" \
   && [ "$(lsckpt "$TMP/l4")" = "ckpt_2 ckpt_4 ckpt_6 " ]; then ok copied_in_checkpoint_of_another_run_is_not_latest
else fail copied_in_checkpoint_of_another_run_is_not_latest "status $st, left '$(lsckpt "$TMP/l4")': $(cat "$TMP/l4.err")"; fi

# --- l5: ckpt_2 as a retention killed between its unlinks leaves it (manifest and model gone, state file left)
"${RUN[@]}" --out "$TMP/l5" --steps 4 --ckpt-every 2 --keep-ckpts 0 > /dev/null 2>&1
rm "$TMP/l5/ckpt_2/manifest.json" "$TMP/l5/ckpt_2/model.bin"
"${RUN[@]}" --out "$TMP/l5" --resume latest --steps 6 --ckpt-every 2 --keep-ckpts 0 > "$TMP/l5.out" 2>&1
st=$?
if [ $st = 0 ] && [ "$(lsckpt "$TMP/l5")" = "ckpt_4 ckpt_6 " ]; then ok half_removed_checkpoint_is_removed_by_the_next_retention
else fail half_removed_checkpoint_is_removed_by_the_next_retention "status $st, left '$(lsckpt "$TMP/l5")'"; fi

# --- l7: a roll-back to ckpt_2 decided, then the run refused: ckpt_4 stays where it was
"${RUN[@]}" --out "$TMP/l7" --steps 4 --ckpt-every 2 --keep-ckpts 0 > /dev/null 2>&1
"${RUN[@]}" --out "$TMP/l7" --resume "$TMP/l7/ckpt_2" --batch 8 > /dev/null 2> "$TMP/l7.err"
st=$?
"${RUN[@]}" --out "$TMP/l7" --resume "$TMP/l7/ckpt_2" --total-batch 100 > /dev/null 2> "$TMP/l7b.err"
st2=$?
if [ $st -ne 0 ] && one_error_line "$TMP/l7.err" "^error: --batch 8 contradicts the checkpoint" \
   && [ $st2 -ne 0 ] && one_error_line "$TMP/l7b.err" "^error: --total-batch 100 is not a multiple" \
   && [ "$(lsckpt "$TMP/l7")" = "ckpt_2 ckpt_4 " ] && [ ! -e "$TMP/l7/abandoned" ] && [ ! -e "$TMP/l7/.rollback" ]; then
    ok refused_resume_leaves_the_line_as_it_was
else fail refused_resume_leaves_the_line_as_it_was "status $st/$st2, left '$(lsckpt "$TMP/l7")': $(cat "$TMP/l7.err" "$TMP/l7b.err")"; fi

# --- a resume with nothing to do (--steps at or below the checkpoint's step, a typo for --steps 20) trains nothing
#     and so moves nothing: the later checkpoints stay the line, --resume latest still finds ckpt_4
"${RUN[@]}" --out "$TMP/l7" --resume "$TMP/l7/ckpt_2" --steps 2 > "$TMP/l7c.out" 2>&1
st=$?
if [ $st = 0 ] && grep -q "^checkpoint is at step 2, --steps 2: nothing to do" "$TMP/l7c.out" \
   && [ "$(lsckpt "$TMP/l7")" = "ckpt_2 ckpt_4 " ] && [ ! -e "$TMP/l7/abandoned" ] && [ ! -e "$TMP/l7/.rollback" ]; then
    ok resume_with_nothing_to_do_moves_nothing
else fail resume_with_nothing_to_do_moves_nothing "status $st, left '$(lsckpt "$TMP/l7")': $(grep -v '^step ' "$TMP/l7c.out" | tail -3)"; fi

# --- l8: <out>/abandoned planted as a link to a folder outside --out
"${RUN[@]}" --out "$TMP/l8" --steps 4 --ckpt-every 2 --keep-ckpts 0 > /dev/null 2>&1
mkdir -p "$TMP/l8elsewhere"
ln -s "$(realpath "$TMP/l8elsewhere")" "$TMP/l8/abandoned"
"${RUN[@]}" --out "$TMP/l8" --resume "$TMP/l8/ckpt_2" --steps 3 > /dev/null 2> "$TMP/l8.err"
st=$?
if [ $st -ne 0 ] && one_error_line "$TMP/l8.err" "^error: --out .*l8: .*l8/abandoned is a symbolic link or not a folder.*nothing was changed" \
   && [ "$(lsckpt "$TMP/l8")" = "ckpt_2 ckpt_4 " ] && [ -z "$(ls -A "$TMP/l8elsewhere")" ]; then
    ok planted_abandoned_link_is_refused_before_anything_moves
else fail planted_abandoned_link_is_refused_before_anything_moves "status $st, left '$(lsckpt "$TMP/l8")', elsewhere '$(ls -A "$TMP/l8elsewhere")': $(cat "$TMP/l8.err")"; fi

# --- a link planted at <out>/ckpt_N of a new run (to a folder that is no checkpoint): the run moves it aside as a link
#     (a run from step 0 rolls back to "step -1"), trains, and the next run resumes; the .rollback it writes said
#     step -1, which its own reader then called malformed, leaving the --out unusable until removed by hand
mkdir -p "$TMP/l9" "$TMP/l9target" && echo precious > "$TMP/l9target/keep"
ln -s "$(realpath "$TMP/l9target")" "$TMP/l9/ckpt_4"
"${RUN[@]}" --out "$TMP/l9" --steps 2 --ckpt-every 2 > "$TMP/l9.out" 2> "$TMP/l9.err"
st=$?
"${RUN[@]}" --out "$TMP/l9" --steps 3 --resume latest > "$TMP/l9b.out" 2> "$TMP/l9b.err"
st2=$?
if [ $st = 0 ] && [ $st2 = 0 ] && [ -L "$TMP/l9/abandoned/after_ckpt_-1/ckpt_4" ] && [ ! -e "$TMP/l9/.rollback" ] \
   && [ "$(cat "$TMP/l9target/keep")" = precious ] && [ "$(lsckpt "$TMP/l9")" = "ckpt_2 ckpt_3 " ]; then
    ok planted_checkpoint_link_in_a_new_out_is_moved_aside
else fail planted_checkpoint_link_in_a_new_out_is_moved_aside "status $st/$st2, left '$(lsckpt "$TMP/l9")': $(cat "$TMP/l9.err" "$TMP/l9b.err" | head -3)"; fi

# --- l18: an unset shell variable as the value
"$TOY" --verify-ckpt "" --out "$TMP/l18v" > /dev/null 2> "$TMP/l18.err" # (--out: a run it starts stays in TMP)
st=$?
"${RUN[@]}" --out "$TMP/l18" --resume "" > /dev/null 2> "$TMP/l18b.err"
st2=$?
if [ $st = 2 ] && one_error_line "$TMP/l18.err" "^error: --verify-ckpt was given an empty value" \
   && [ $st2 = 2 ] && one_error_line "$TMP/l18b.err" "^error: --resume was given an empty value" && [ ! -e "$TMP/l18" ] \
   && [ ! -e "$TMP/l18v" ]; then
    ok empty_resume_or_verify_ckpt_is_a_usage_error
else fail empty_resume_or_verify_ckpt_is_a_usage_error "status $st/$st2: $(cat "$TMP/l18.err" "$TMP/l18b.err")"; fi
# the same for the data and evaluation paths: `--train "$SHARDS"` with SHARDS unset trained on the default corpus,
# an empty --eval-task or --eval-dump scored or dumped nothing, all with status 0
bad=""
for flag in train val data tokenizer eval-task eval-dump; do
    rm -rf "$TMP/l18e"
    "${RUN[@]}" --out "$TMP/l18e" --"$flag" "" > /dev/null 2> "$TMP/l18e.err"
    st=$?
    { [ $st = 2 ] && one_error_line "$TMP/l18e.err" "^error: --$flag was given an empty value" && [ ! -e "$TMP/l18e" ]; } ||
        bad="$bad --$flag: status $st $(head -1 "$TMP/l18e.err");"
done
if [ -z "$bad" ]; then ok empty_data_or_eval_path_is_a_usage_error
else fail empty_data_or_eval_path_is_a_usage_error "$bad"; fi

# --- --out naming a file or a dangling link says what it is, not "cannot open X/.lock: Not a directory", and leaves
#     them as they were (a path through a file: test_train.sh error_out_cannot_be_created)
printf 'keep' > "$TMP/outfile"; ln -s "$TMP/nowhere" "$TMP/outlink"
"${RUN[@]}" --out "$TMP/outfile" > /dev/null 2> "$TMP/of1.err"; st1=$?
"${RUN[@]}" --out "$TMP/outlink" > /dev/null 2> "$TMP/of2.err"; st2=$?
if [ $st1 = 1 ] && one_error_line "$TMP/of1.err" "^error: --out $TMP/outfile is a file, not a folder; pass a folder" \
   && [ $st2 = 1 ] && one_error_line "$TMP/of2.err" "^error: --out $TMP/outlink is a symbolic link to nothing, not a folder; pass a folder" \
   && [ "$(cat "$TMP/outfile")" = keep ] && [ ! -e "$TMP/nowhere" ]; then
    ok out_that_is_a_file_or_dangling_link_is_named_as_such
else fail out_that_is_a_file_or_dangling_link_is_named_as_such "status $st1/$st2: $(cat "$TMP/of1.err" "$TMP/of2.err")"; fi

# ---------------------------------------------------------------- the GPT-2 trainer
GPT=(./train_gpt --batch 2 --seq 32 --eval-every 0 --sample-every 0 --threads 1 --data "$DATA")

# a --model spec that does not parse is a command-line error (status 2, as for the parser's own), one line, no --out
bad=""
for cmd in "./train_gpt --model d2x" "./train_gpt --model d3" "./train_gpt --model d2c96h5" "./train_llama --model l2x"; do
    # shellcheck disable=SC2086
    $cmd --data "$DATA" --threads 1 --out "$TMP/m_bad" > /dev/null 2> "$TMP/m_bad.err"
    st=$?
    { [ $st = 2 ] && one_error_line "$TMP/m_bad.err" "^error: --model '" && [ ! -e "$TMP/m_bad" ]; } \
        || bad="$bad; $cmd: status $st, $(cat "$TMP/m_bad.err")"
done
if [ -z "$bad" ]; then ok bad_model_spec_is_a_usage_error
else fail bad_model_spec_is_a_usage_error "${bad#; }"; fi

# --- 7: --init records the real model
"${GPT[@]}" --model d2c32h4t32v4096 --steps 1 --out "$TMP/s7init" > /dev/null 2>&1
"${GPT[@]}" --init "$TMP/s7init/ckpt_1/model.bin" --steps 2 --out "$TMP/s7" > /dev/null 2>&1
"${GPT[@]}" --resume latest --out "$TMP/s7" --model d2c32h4t32v4096 --steps 3 > "$TMP/s7.out" 2> "$TMP/s7.err"
st=$?
"${GPT[@]}" --resume latest --out "$TMP/s7" --model d2c64h4t32v4096 --steps 4 > /dev/null 2> "$TMP/s7b.err"
st2=$?
if [ $st = 0 ] && grep -q '"model": "d2c32h4t32v4096"' "$TMP/s7/ckpt_2/manifest.json" && [ $st2 -ne 0 ] \
   && one_error_line "$TMP/s7b.err" "^error: --model d2c64h4t32v4096 \(d2c64h4t32v4096\) contradicts the checkpoint .*whose model.bin is d2c32h4t32v4096"; then
    ok init_run_records_its_real_model
else fail init_run_records_its_real_model "status $st/$st2: $(cat "$TMP/s7.err" "$TMP/s7b.err")"; fi

# --- a Llama model given to train_gpt (--init, or --resume of a Llama run's checkpoint) names train_llama, as
#     train_llama names train_gpt for a GPT-2 file
/usr/bin/python3 -c 'import struct, sys; open(sys.argv[1], "wb").write(struct.pack("<i", 20261129) + bytes(2044))' \
    "$TMP/llama.bin"
"${GPT[@]}" --init "$TMP/llama.bin" --steps 1 --out "$TMP/sl" > /dev/null 2> "$TMP/sl.err"
st=$?
if [ $st = 1 ] && one_error_line "$TMP/sl.err" "^error: $TMP/llama.bin: bad magic 20261129 .*not a llm.c GPT-2 model file \(Llama files go to train_llama\)"; then
    ok llama_file_given_to_train_gpt_names_train_llama
else fail llama_file_given_to_train_gpt_names_train_llama "status $st: $(cat "$TMP/sl.err")"; fi

# --- 8: a prompt in Latin-1
"${GPT[@]}" --model d2c32h4t32v4096 --steps 1 --sample-every 1 --sample-tokens 2 --prompt $'caf\xe9 \xff' \
    --out "$TMP/s8" > /dev/null 2>&1
if grep -q '"prompt": {"hex": "636166e920ff"}' "$TMP/s8/ckpt_1/manifest.json" \
   && "${GPT[@]}" --resume latest --out "$TMP/s8" --steps 2 --sample-every 1 --sample-tokens 2 --prompt $'caf\xe9 \xff' \
      > "$TMP/s8.out" 2>&1 && ! grep -q "note: --prompt" "$TMP/s8.out"; then ok non_utf8_prompt_comes_back_exactly
else fail non_utf8_prompt_comes_back_exactly "$(grep -o '"prompt": [^,]*' "$TMP/s8/ckpt_1/manifest.json"; grep note "$TMP/s8.out")"; fi

# --- 11: a model that cannot fit
start=$(date +%s)
"${GPT[@]}" --model d48 --batch 512 --seq 1024 --steps 1 --out "$TMP/s11" > /dev/null 2> "$TMP/s11.err"
st=$?
secs=$(( $(date +%s) - start ))
# a limit below the need: an address-space limit (ulimit -v), or, for a sanitizer build (ASan reserves terabytes of
# address space, so it cannot start under one), the tests' stand-in for the available memory
if ldd ./train_gpt 2> /dev/null | grep -q libasan; then
    limit() { local kb=$1; shift; SCAPE_TEST_MEM_AVAILABLE=$((kb * 1024)) "$@"; }
    limit_src="SCAPE_TEST_MEM_AVAILABLE"
else
    limit() { local kb=$1; shift; ( ulimit -v "$kb"; exec "$@" ); }
    limit_src="the address-space limit"
fi
limit 1500000 "${GPT[@]}" --model d12 --batch 4 --seq 64 --steps 1 --out "$TMP/s11b" > /dev/null 2> "$TMP/s11b.err"
st2=$?
# the issue's case: Llama-1.8B (about 40 GiB with AdamW) where 20 GiB may be used; refused before any allocation
start=$(date +%s)
limit 20000000 ./train_llama --model 1.8b --batch 1 --seq 64 --steps 1 --threads 1 --data "$DATA" \
    --out "$TMP/s11c" > /dev/null 2> "$TMP/s11c.err"
st3=$?
secs3=$(( $(date +%s) - start ))
if [ $st = 1 ] && [ $secs -lt 20 ] && one_error_line "$TMP/s11.err" "^error: --model d48 \(1557[0-9]{6} parameters\) with --batch 512 --seq 1024 needs [0-9.]+ GiB per rank .* but [0-9.]+ GiB are available" \
   && [ $st2 = 1 ] && one_error_line "$TMP/s11b.err" "needs .* GiB are available \($limit_src" \
   && [ $st3 = 1 ] && [ $secs3 -lt 20 ] && one_error_line "$TMP/s11c.err" "^error: --model 1.8b .* needs [0-9.]+ GiB per rank"; then
    ok model_that_cannot_fit_is_refused_up_front
else fail model_that_cannot_fit_is_refused_up_front "status $st/$st2/$st3 in ${secs}s/${secs3}s: $(cat "$TMP/s11.err" "$TMP/s11b.err" "$TMP/s11c.err")"; fi

# --- l6, l10, l11, l19: --eval-only is read-only on the run directory (e: ckpt_2, ckpt_4)
EV=(./train_gpt --eval-only --threads 1 --data "$DATA" --eval-task "copa=test/eval/copa.jsonl")
"${GPT[@]}" --model d2c32h4t32v4096 --steps 4 --ckpt-every 2 --keep-ckpts 0 --out "$TMP/e" > /dev/null 2>&1
"${EV[@]}" --resume "$TMP/e/ckpt_2" --out "$TMP/e" > "$TMP/e6.out" 2>&1
st=$?
left=$(lsckpt "$TMP/e")
"${GPT[@]}" --resume latest --out "$TMP/e" --steps 5 > "$TMP/e6b.out" 2>&1
if [ $st = 0 ] && [ "$left" = "ckpt_2 ckpt_4 " ] && [ ! -e "$TMP/e/abandoned" ] \
   && grep -q "resuming from $TMP/e/ckpt_4 at step 4" "$TMP/e6b.out"; then ok eval_only_of_an_older_checkpoint_moves_nothing
else fail eval_only_of_an_older_checkpoint_moves_nothing "status $st, left '$left': $(grep -E 'error|resuming' "$TMP/e6.out" "$TMP/e6b.out")"; fi
"${EV[@]}" --init "$TMP/e/ckpt_4/model.bin" --batch 2 --seq 32 --out "$TMP/e" > "$TMP/e19.out" 2>&1
st=$?
if [ $st = 0 ] && grep -q '"event": "eval_task"' "$TMP/e/eval.jsonl" && [ "$(lsckpt "$TMP/e")" = "ckpt_2 ckpt_4 ckpt_5 " ]; then
    ok eval_only_runs_on_an_out_with_checkpoints
else fail eval_only_runs_on_an_out_with_checkpoints "status $st: $(grep error "$TMP/e19.out")"; fi
"${EV[@]}" --resume latest --out "$TMP/e_typo" > "$TMP/e10.out" 2> "$TMP/e10.err"
st=$?
if [ $st -ne 0 ] && one_error_line "$TMP/e10.err" "^error: --eval-only --resume latest: no checkpoint under .*e_typo to score" \
   && [ ! -e "$TMP/e_typo" ]; then ok eval_only_without_a_checkpoint_is_refused
else fail eval_only_without_a_checkpoint_is_refused "status $st: $(cat "$TMP/e10.err")"; fi
cp -r "$TMP/e/ckpt_4" "$TMP/e_best"
"${EV[@]}" --resume "$TMP/e/ckpt_4/" --out "$TMP/e11a" > /dev/null 2>&1
st=$?
"${EV[@]}" --resume "$TMP/e_best" --out "$TMP/e11b" > /dev/null 2>&1
st2=$?
if [ $st = 0 ] && [ $st2 = 0 ] && grep -q '"event": "eval_task".*"step": 4' "$TMP/e11a/eval.jsonl" \
   && grep -q '"event": "eval_task".*"step": 4' "$TMP/e11b/eval.jsonl"; then ok eval_only_reports_the_manifests_step
else fail eval_only_reports_the_manifests_step "status $st/$st2: $(cat "$TMP/e11a/eval.jsonl" "$TMP/e11b/eval.jsonl" 2>&1 | head -2)"; fi

# --- 4: the exporter
"${GPT[@]}" --model d2c32h4t32v4096 --steps 2 --ckpt-every 1 --out "$TMP/s4" > /dev/null 2>&1
cp "$TMP/s4/ckpt_2/model.bin" "$TMP/s4_model"
./export_gguf --model "$TMP/s4/ckpt_2/model.bin" --out "$TMP/s4/ckpt_2/model.bin" --data "$DATA" > /dev/null 2> "$TMP/s4.err"
st=$?
ln "$TMP/s4/ckpt_2/model.bin" "$TMP/s4_hardlink"
./export_gguf --model "$TMP/s4/ckpt_2" --out "$TMP/s4_hardlink" --data "$DATA" > /dev/null 2> "$TMP/s4b.err"
st2=$?
printf '\x55' | dd of="$TMP/s4/ckpt_1/model.bin" bs=1 seek=2000 conv=notrunc status=none
./export_gguf --model "$TMP/s4/ckpt_1/model.bin" --out "$TMP/s4.gguf" --data "$DATA" > /dev/null 2> "$TMP/s4c.err"
st3=$?
if [ $st = 1 ] && one_error_line "$TMP/s4.err" "^error: --out .* is the model file being exported" \
   && [ $st2 = 1 ] && one_error_line "$TMP/s4b.err" "is the model file being exported" \
   && [ $st3 = 1 ] && one_error_line "$TMP/s4c.err" "its checkpoint .*ckpt_1 does not verify \(model.bin fails its checksum" \
   && [ ! -e "$TMP/s4.gguf" ] && cmp -s "$TMP/s4/ckpt_2/model.bin" "$TMP/s4_model" \
   && ./export_gguf --model "$TMP/s4/ckpt_2" --out "$TMP/s4.gguf" --data "$DATA" > /dev/null 2>&1; then
    ok exporter_never_writes_over_its_input_nor_reads_a_damaged_checkpoint
else fail exporter_never_writes_over_its_input_nor_reads_a_damaged_checkpoint "status $st/$st2/$st3: $(cat "$TMP/s4.err" "$TMP/s4b.err" "$TMP/s4c.err")"; fi

# --- 13: a learned vocabulary end to end; subfolders read
mkdir -p "$TMP/txt/a/b"
cp "$DATA"/sotu/txt/179*.txt "$TMP/txt/"
cp "$DATA"/sotu/txt/180*.txt "$TMP/txt/a/"
cp "$DATA"/sotu/txt/181*.txt "$TMP/txt/a/b/"
want_docs=$(find "$TMP/txt" -type f | wc -l)
./tok train --vocab 600 --out "$TMP/voc" --val-percent 10 "$TMP/txt" > /dev/null 2> "$TMP/s13t.err"
./tok shards --model "$TMP/voc" --out "$TMP/vsh" --name v --val-percent 10 "$TMP/txt" > /dev/null 2> "$TMP/s13s.err"
text="Fellow-Citizens of the Senate"
back=$(printf '%s' "$text" | ./tok encode --model "$TMP/voc" | ./tok decode --model "$TMP/voc")
"${GPT[@]}" --model d2c32h4t32v600 --tokenizer "$TMP/voc" --train "$TMP/vsh/v_train_*.bin" --val "$TMP/vsh/v_val_*.bin" \
    --steps 2 --sample-every 2 --sample-tokens 4 --out "$TMP/s13" > "$TMP/s13.out" 2> "$TMP/s13.err"
st=$?
./export_gguf --model "$TMP/s13/ckpt_2" --tokenizer "$TMP/voc" --out "$TMP/s13.gguf" > /dev/null 2> "$TMP/s13e.err"
st2=$?
"${GPT[@]}" --model d2c32h4t32v4096 --train "$TMP/vsh/v_train_*.bin" --val "$TMP/vsh/v_val_*.bin" --steps 1 \
    --out "$TMP/s13x" > /dev/null 2> "$TMP/s13x.err"
st3=$?
if [ "$back" = "$text" ] && grep -q "tok shards: $want_docs/$want_docs documents" "$TMP/s13s.err" && [ $st = 0 ] \
   && grep -q '| sample: ' "$TMP/s13.out" && [ $st2 = 0 ] && [ -s "$TMP/s13.gguf" ] \
   && [ $st3 = 1 ] && grep -q "was tokenized for bpe" "$TMP/s13x.err"; then ok learned_vocabulary_works_end_to_end
else fail learned_vocabulary_works_end_to_end "back '$back', status $st/$st2/$st3: $(cat "$TMP/s13s.err" "$TMP/s13.err" "$TMP/s13e.err" "$TMP/s13x.err" | tail -5)"; fi

# --- 12: two `make data` at once into one fresh folder (the npm tarballs copied in: no network)
mkdir -p "$TMP/dd/npm"
cp "$DATA"/npm/*.tgz "$TMP/dd/npm/"
make -s data DATA="$TMP/dd" > "$TMP/dd1.log" 2>&1 &
p1=$!
make -s data DATA="$TMP/dd" > "$TMP/dd2.log" 2>&1 &
p2=$!
wait $p1; s1=$?
wait $p2; s2=$?
same=1
for f in sotu/gpt2/sotu_train_000000.bin sotu/gpt2/sotu_val_000000.bin bpe4k/encoder.json bpe4k/vocab.bpe \
         sotu/bpe4k/sotu_train_000000.bin; do
    cmp -s "$DATA/$f" "$TMP/dd/$f" || same=0
done
if [ $s1 = 0 ] && [ $s2 = 0 ] && [ $same = 1 ]; then ok make_data_twice_at_once
else fail make_data_twice_at_once "status $s1/$s2, same files $same: $(tail -n 3 "$TMP/dd1.log" "$TMP/dd2.log")"; fi

[ "$failures" -eq 0 ]

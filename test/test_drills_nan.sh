#!/usr/bin/env bash
# test/test_drills_nan.sh TRAIN_GPT DATA - non-finite step drill for the real trainer (trainer/train.c, hardening
# issue: "a NaN or Inf in the loss or gradient norm: the step is skipped with a message, and after a configurable
# number of consecutive bad steps the run stops with the last good checkpoint intact; resume after it").
# Faults come from the test-only SCAPE_TEST_INJECT_NAN (documented in trainer/drills.h): "N" makes rank 0's gradient
# of step N NaN, "loss:N" its loss. A tiny GPT-2 checkpoints every step, so each claim is an exact file comparison:
#   - a skipped step leaves model.bin and every rank's optimizer state (the state file after its header) identical
#     to the previous step's checkpoint, prints its one line, logs a bad_step event, and training goes on;
#   - --max-bad-steps M consecutive bad steps stop the run with status 1 and one error line, write no checkpoint of
#     the stopping step, and --resume latest then ends bit-identical to a run whose bad streak stayed shorter;
#   - on 2 ranks a fault on rank 0 alone is skipped by both ranks together.
# Prints ok/FAIL lines; exits non-zero on failure.
set -u
bin="${1:?usage: $0 TRAIN_GPT DATA}"; data="${2:?usage: $0 TRAIN_GPT DATA}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/drills_nan.XXXXXX")
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
steps=7
args=(--model d2c32h2t32 --data "$data" --seq 16 --batch 2 --steps $steps --warmup 2 --lr 3e-3 --eval-every 0
      --eval-batches 1 --sample-every 0 --threads 1 --shuffle 0 --ckpt-every 1 --keep-ckpts 0)
# a run never checkpoints a state reached through skipped steps; the drill asks for those checkpoints to compare them
export SCAPE_TEST_CKPT_SKIPPED=1
MPI=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 120 mpirun --allow-run-as-root --oversubscribe
     --bind-to none -np 2)

# same_state A B RANK: the optimizer blobs (state file minus its header, whose size is the u32 at byte 8) match
same_state() {
    local fa="$1/state_rank$3.bin" fb="$2/state_rank$3.bin" ha hb
    [ -f "$fa" ] && [ -f "$fb" ] || return 1
    ha=$(od -An -tu4 -j8 -N4 "$fa" | tr -d ' '); hb=$(od -An -tu4 -j8 -N4 "$fb" | tr -d ' ')
    [ -n "$ha" ] && [ "$ha" = "$hb" ] && [ "$(stat -c %s "$fa")" = "$(stat -c %s "$fb")" ] &&
        cmp -s -i "$ha" "$fa" "$fb"
}
# skipped_at NAME OUT STEP RANKS: checks of a run that skipped STEP (and not STEP-1)
skipped_at() {
    local name=$1 out=$2 s=$3 ranks=$4 prev=$(($3 - 1)) rk
    if ! cmp -s "$out/ckpt_$prev/model.bin" "$out/ckpt_$s/model.bin"; then
        fail "$name" "ckpt_$s/model.bin differs from ckpt_$prev/model.bin: the skipped step changed the params"
        return
    fi
    for rk in $(seq 0 $((ranks - 1))); do
        if ! same_state "$out/ckpt_$prev" "$out/ckpt_$s" "$rk"; then
            fail "$name" "state_rank$rk.bin of ckpt_$s differs from ckpt_$prev after its header: the skipped step" \
                " changed the optimizer state"
            return
        fi
    done
    if cmp -s "$out/ckpt_$s/model.bin" "$out/ckpt_$((s + 1))/model.bin"; then
        fail "$name" "ckpt_$((s + 1))/model.bin equals ckpt_$s: training did not go on after the skipped step"
        return
    fi
    ok "$name"
}

# --- an isolated bad gradient, then an isolated bad loss: skipped, reported, training continues
for kind in grad loss; do
    spec=3; [ $kind = loss ] && spec=loss:3
    out="$tmp/iso_$kind"
    if ! SCAPE_TEST_INJECT_NAN=$spec "$bin" "${args[@]}" --out "$out" > "$out.log" 2>&1; then
        fail "isolated_nan_${kind}_run_completes" "exit status non-zero: $(tail -3 "$out.log")"
        continue
    fi
    n=$(grep -c '^step 3: loss/grad norm is not finite; step skipped (1 of 5 consecutive)$' "$out.log")
    others=$(grep -c 'not finite' "$out.log")
    if [ "$n" = 1 ] && [ "$others" = 1 ] && grep -q '"event": "bad_step", "step": 3,' "$out/log.jsonl"; then
        ok "isolated_nan_${kind}_step_is_reported_once_and_logged"
    else
        fail "isolated_nan_${kind}_step_is_reported_once_and_logged" "$n skip lines for step 3, $others in all" \
            "(or no bad_step event in log.jsonl): $(grep 'not finite' "$out.log" | head -3)"
    fi
    skipped_at "isolated_nan_${kind}_step_leaves_params_and_optimizer_state_unchanged" "$out" 3 1
    if grep -E "^step +$steps/$steps \| loss [0-9]" "$out.log" > /dev/null; then ok "isolated_nan_${kind}_final_loss_finite"
    else fail "isolated_nan_${kind}_final_loss_finite" "$(grep "^step *$steps/" "$out.log")"; fi
done

# --- bad steps 3, 4, 5 with --max-bad-steps 3: stops at 5 with status 1, ckpt_4 (at a skipped step: the good
# state) is the newest complete one; --resume latest then matches a run with only steps 3, 4 bad
stop="$tmp/stop"
SCAPE_TEST_INJECT_NAN=3,4,5 "$bin" "${args[@]}" --max-bad-steps 3 --out "$stop" > "$stop.out" 2> "$stop.err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$(wc -l < "$stop.err")" = 1 ] &&
   grep -q '^error: step 5: 3 consecutive steps with a non-finite loss or gradient norm (--max-bad-steps 3)' "$stop.err"
then ok consecutive_bad_steps_stop_with_one_error_line
else fail consecutive_bad_steps_stop_with_one_error_line "status $rc, stderr: $(head -3 "$stop.err")"; fi
if [ ! -e "$stop/ckpt_5" ] && [ -f "$stop/ckpt_4/manifest.json" ] &&
   cmp -s "$stop/ckpt_2/model.bin" "$stop/ckpt_4/model.bin" && same_state "$stop/ckpt_2" "$stop/ckpt_4" 0; then
    ok stopped_run_wrote_no_checkpoint_of_the_stop_and_keeps_the_good_state
else
    fail stopped_run_wrote_no_checkpoint_of_the_stop_and_keeps_the_good_state \
        "$(ls "$stop" | tr '\n' ' '); ckpt_4 must be complete with ckpt_2's params and optimizer state"
fi
short="$tmp/short"
if ! SCAPE_TEST_INJECT_NAN=3,4 "$bin" "${args[@]}" --max-bad-steps 3 --out "$short" > "$short.log" 2>&1; then
    fail resume_after_stop_matches_shorter_streak "reference run failed: $(tail -3 "$short.log")"
elif ! "$bin" "${args[@]}" --max-bad-steps 3 --out "$stop" --resume latest > "$stop.resume.log" 2>&1; then
    fail resume_after_stop_matches_shorter_streak "resume failed: $(tail -3 "$stop.resume.log")"
elif ! grep -q "resuming from .*ckpt_4 at step 4" "$stop.resume.log"; then
    fail resume_after_stop_matches_shorter_streak "did not resume from ckpt_4: $(grep -m1 resum "$stop.resume.log")"
elif cmp -s "$short/ckpt_$steps/model.bin" "$stop/ckpt_$steps/model.bin" &&
     cmp -s "$short/ckpt_$steps/state_rank0.bin" "$stop/ckpt_$steps/state_rank0.bin"; then
    ok resume_after_stop_matches_shorter_streak
else
    fail resume_after_stop_matches_shorter_streak "ckpt_$steps differs from the run with bad steps 3,4 only"
fi

# --- --max-bad-steps 0 never stops
never="$tmp/never"
if SCAPE_TEST_INJECT_NAN=2,3,4,5,6 "$bin" "${args[@]}" --max-bad-steps 0 --out "$never" > "$never.log" 2>&1 &&
   grep -q '^step 6: loss/grad norm is not finite; step skipped (5 consecutive)$' "$never.log"; then
    ok max_bad_steps_0_never_stops
else
    fail max_bad_steps_0_never_stops "$(tail -3 "$never.log")"
fi

# --- 2 ranks: rank 0's bad gradient is skipped by both, reported once; a streak stops both with one error line
mpi="$tmp/mpi"
if ! SCAPE_TEST_INJECT_NAN=3 "${MPI[@]}" "$bin" "${args[@]}" --steps 4 --out "$mpi" > "$mpi.log" 2>&1; then
    fail two_ranks_skip_together "exit status non-zero: $(tail -3 "$mpi.log")"
else
    n=$(grep -c 'not finite; step skipped' "$mpi.log")
    if [ "$n" = 1 ]; then skipped_at two_ranks_skip_together "$mpi" 3 2
    else fail two_ranks_skip_together "$n skip lines, expected 1: $(grep 'not finite' "$mpi.log" | head -3)"; fi
fi
SCAPE_TEST_INJECT_NAN=2,3 "${MPI[@]}" "$bin" "${args[@]}" --steps 4 --max-bad-steps 2 --out "$mpi.stop" \
    > "$mpi.stop.out" 2> "$mpi.stop.err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$(grep -c '^error: step 3: 2 consecutive' "$mpi.stop.err")" = 1 ] &&
   [ ! -e "$mpi.stop/ckpt_3" ] && [ -f "$mpi.stop/ckpt_2/manifest.json" ]; then
    ok two_ranks_stop_together_with_one_error_line
else
    fail two_ranks_stop_together_with_one_error_line "status $rc, stderr: $(head -3 "$mpi.stop.err")"
fi

[ "$fails" -eq 0 ] && rm -rf "$tmp"
exit $((fails > 0))

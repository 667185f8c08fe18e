#!/usr/bin/env bash
# test/test_preempt.sh [TRAIN_GPT] [DATA] - preemption: SIGTERM mid-run makes the trainer finish the step in progress,
# write a checkpoint of it and exit 143 with one line saying so; `--resume latest` then continues to the same final
# model file and the same losses as a run never interrupted. On 1 rank (the signal to the trainer) and on 2 ranks
# (the signal to rank 1 alone, as a cluster may notify one node: both ranks stop after the same step). SIGHUP (a
# closed terminal) stops the same way, status 129, named on every rank. Two signals in a row end the process at once,
# with one error line saying how to continue. A stalled rank (SIGSTOP) ends the job through the watchdog
# (--comm-timeout).
# Prints "ok NAME" / "FAIL NAME: ..."; exits non-zero on any failure.
set -u
TRAIN=${1:-./train_gpt}
DATA=${2:-data}
TMP=$(mktemp -d build/test_preempt.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib.sh" # failures=0, ok NAME, fail NAME WHY
ARGS=(--model d2c32h2t32 --data "$DATA" --batch 2 --seq 16 --steps 40 --warmup 2 --lr 3e-3 --eval-every 0
      --sample-every 0 --threads 1 --shuffle 0 --ckpt-every 0 --optimizer scape --density 0.1 --density-warmup 5)
MPI=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none)

# wait_step LOG N: until LOG has a train event of step >= N (at most 30 s)
wait_step() {
    for _ in $(seq 1 300); do
        [ -f "$1" ] && grep -qE "\"event\": \"train\", \"step\": ([0-9]{3,}|[$2-9][0-9]*)[,}]" "$1" && return 0
        sleep 0.1
    done
    return 1
}
losses_after() { # LOG K: "step loss" of train events after step K, the last one logged per step
    /usr/bin/python3 -c '
import json, sys
v = {}
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e["event"] == "train" and e["step"] > int(sys.argv[2]): v[e["step"]] = e["train_loss"]
print(" ".join("%d:%r" % kv for kv in sorted(v.items())))' "$1" "$2"
}

# case NAME NP: uninterrupted run, interrupted run (SIGTERM to the last rank's process), resume, compare
preempt_case() {
    local name=$1 np=$2 launch=()
    [ "$np" -gt 1 ] && launch=("${MPI[@]}" -np "$np")
    "${launch[@]}" "$TRAIN" "${ARGS[@]}" --out "$TMP/$name.full" > "$TMP/$name.full.out" 2>&1 \
        || { fail "$name" "the uninterrupted run failed: $(tail -1 "$TMP/$name.full.out")"; return; }
    "${launch[@]}" "$TRAIN" "${ARGS[@]}" --out "$TMP/$name.cut" > "$TMP/$name.cut.out" 2>&1 &
    local job=$!
    if ! wait_step "$TMP/$name.cut/log.jsonl" 5; then kill -9 $job; fail "$name" "the run never reached step 5"; return; fi
    local victim=""
    for p in $(pgrep -f -- "--out $TMP/$name.cut"); do
        [ "$(cat /proc/$p/comm 2>/dev/null)" = "$(basename "$TRAIN")" ] && victim=$p # the last rank's process
    done
    kill -TERM "$victim"
    wait $job
    local st=$? k
    k=$(grep -oE '^stopped by SIGTERM after step [0-9]+' "$TMP/$name.cut.out" | grep -oE '[0-9]+$')
    if [ -z "$k" ] || [ "$(grep -c '^stopped by SIGTERM' "$TMP/$name.cut.out")" != 1 ] || [ ! -s "$TMP/$name.cut/ckpt_$k/manifest.json" ] \
       || { [ "$np" = 1 ] && [ "$st" != 143 ]; } || [ "$st" = 0 ]; then
        fail "$name" "status $st, stop line '$(grep -m1 -E 'stopped|error' "$TMP/$name.cut.out")', checkpoint ckpt_${k:-?}"
        return
    fi
    "${launch[@]}" "$TRAIN" "${ARGS[@]}" --out "$TMP/$name.cut" --resume latest > "$TMP/$name.res.out" 2>&1 \
        || { fail "$name" "resume failed: $(tail -1 "$TMP/$name.res.out")"; return; }
    if cmp -s "$TMP/$name.full/ckpt_40/model.bin" "$TMP/$name.cut/ckpt_40/model.bin" \
       && [ "$(losses_after "$TMP/$name.full/log.jsonl" "$k")" = "$(losses_after "$TMP/$name.cut/log.jsonl" "$k")" ]; then
        ok "$name (stopped after step $k, status $st, resumed to the same model and losses)"
    else fail "$name" "after resuming from step $k the final model or the losses differ from the uninterrupted run"; fi
}
preempt_case sigterm_checkpoints_and_resume_bit_identically_1_rank 1
preempt_case sigterm_to_one_rank_stops_all_ranks_2_ranks 2

# SIGHUP (the terminal or ssh session that started the run closed) is a stop like SIGTERM: a checkpoint of the step,
# one line, status 129 (it ended the run without a checkpoint). On 2 ranks it goes to rank 1 alone: rank 0, which got
# no signal, learns it from the vote and names it (two ranks' votes never read as another signal)
hup_case() { # NAME NP
    local name=$1 np=$2 launch=() victim="" k st
    [ "$np" -gt 1 ] && launch=("${MPI[@]}" -np "$np")
    "${launch[@]}" "$TRAIN" "${ARGS[@]}" --steps 100000 --out "$TMP/$name" > "$TMP/$name.out" 2>&1 &
    local job=$!
    if ! wait_step "$TMP/$name/log.jsonl" 2; then kill -9 $job; fail "$name" "the run never reached step 2"; return; fi
    for p in $(pgrep -f -- "--out $TMP/$name\$"); do
        [ "$(cat /proc/$p/comm 2>/dev/null)" = "$(basename "$TRAIN")" ] && victim=$p # the last rank's process
    done
    kill -HUP "$victim"
    wait $job
    st=$?
    k=$(grep -oE '^stopped by SIGHUP after step [0-9]+' "$TMP/$name.out" | grep -oE '[0-9]+$')
    if [ -n "$k" ] && [ "$(grep -c '^stopped by' "$TMP/$name.out")" = 1 ] && [ -s "$TMP/$name/ckpt_$k/manifest.json" ] \
       && { [ "$np" != 1 ] || [ "$st" = 129 ]; } && [ "$st" != 0 ]; then
        ok "$name (stopped after step $k, status $st)"
    else fail "$name" "status $st, stop line '$(grep -m1 -E 'stopped|error' "$TMP/$name.out")', checkpoint ckpt_${k:-?}"; fi
}
hup_case sighup_checkpoints_and_stops_1_rank 1
hup_case sighup_to_one_rank_stops_all_ranks_2_ranks 2

# two signals: the second ends the process at once, whatever the step is doing
"$TRAIN" "${ARGS[@]}" --steps 100000 --out "$TMP/twice" > "$TMP/twice.out" 2>&1 &
job=$!
if wait_step "$TMP/twice/log.jsonl" 2; then
    # both pending while it is stopped (two of one signal would merge into one); which one a thread of the process
    # takes first is the kernel's choice, so the note names the first and the exit status is the second's
    kill -STOP $job; kill -TERM $job; kill -INT $job; kill -CONT $job
    t0=$(date +%s); wait $job; st=$?; secs=$(( $(date +%s) - t0 ))
    first=$(grep -oE '^note: SIG(INT|TERM) received' "$TMP/twice.out" | grep -oE 'SIG[A-Z]+')
    # ... saying so: the first signal's note, then one error line with the way to continue
    if { { [ "$first" = SIGINT ] && [ "$st" = 143 ]; } || { [ "$first" = SIGTERM ] && [ "$st" = 130 ]; }; } && [ "$secs" -lt 10 ] \
       && [ "$(grep -c '^error' "$TMP/twice.out")" = 1 ] \
       && grep -qx "error: second signal: stopped at once, without a checkpoint of this step; continue from the newest checkpoint with --resume latest --out $TMP/twice" "$TMP/twice.out" \
       && grep -q "^note: $first received: stopping after this step with a checkpoint" "$TMP/twice.out"; then
        ok "second_signal_exits_at_once (status $st, ${secs}s)"
    else fail second_signal_exits_at_once "status $st after ${secs}s: $(grep -E '^(note: SIG|error)' "$TMP/twice.out")"; fi
else kill -9 $job; fail second_signal_exits_at_once "the run never reached step 2"; fi

# the watchdog: rank 1 stopped (SIGSTOP: alive but silent, as a hung node) ends the whole job within --comm-timeout
# plus its grace period, with one line from rank 0 naming rank 1 and the collective it waits on
"${MPI[@]}" -np 2 "$TRAIN" "${ARGS[@]}" --steps 100000 --comm-timeout 4 --out "$TMP/wd" > "$TMP/wd.out" 2>&1 &
job=$!
if wait_step "$TMP/wd/log.jsonl" 3; then
    victim=""
    for p in $(pgrep -f -- "--out $TMP/wd"); do
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
    done
    kill -STOP "$victim"
    t0=$(date +%s)
    for _ in $(seq 1 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    secs=$(( $(date +%s) - t0 ))
    kill -CONT "$victim" 2>/dev/null; kill -9 $job "$victim" 2>/dev/null; wait $job; st=$?
    if [ "$st" != 0 ] && [ "$secs" -le 20 ] \
       && grep -qE 'error: comm watchdog: rank 0 waited [0-9]+ s in .*; rank 1 did not reach it' "$TMP/wd.out"; then
        ok "watchdog_ends_the_job_when_a_rank_stalls (SIGSTOPped rank 1, job ended after ${secs}s, status $st)"
    else fail watchdog_ends_the_job_when_a_rank_stalls "status $st after ${secs}s: $(grep -m2 -E 'error|watchdog' "$TMP/wd.out")"; fi
else kill -9 $job; fail watchdog_ends_the_job_when_a_rank_stalls "the run never reached step 3"; fi

[ "$failures" -eq 0 ]

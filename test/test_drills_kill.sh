#!/usr/bin/env bash
# test/test_drills_kill.sh TRAIN_GPT DATA - SIGKILL drill for the real trainer: a tiny GPT-2 run that checkpoints
# every step (each checkpoint is fsync'ed, so a random kill often lands inside one) is killed at random moments,
# resumed with --resume latest each time, and must end bit-identical (ckpt_<last>/model.bin and
# state_rank0.bin) to an uninterrupted run: SCAPE.md section 8 and DESIGN.md "a checkpoint counts only once
# every rank's file is complete". Kills are only sent once a first complete checkpoint exists, so "latest"
# always has something to find (what a resume does with none is the training loop's business, tested there).
# Prints ok/FAIL lines; exits non-zero on failure.
set -u
bin="${1:?usage: $0 TRAIN_GPT DATA}"; data="${2:?usage: $0 TRAIN_GPT DATA}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/drills_kill.XXXXXX")
fails=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
steps=12
args=(--model d2c32h2t32 --data "$data" --seq 16 --batch 2 --steps $steps --warmup 2 --lr 3e-3 --eval-every 0
      --eval-batches 1 --sample-every 0 --threads 1 --shuffle 0 --ckpt-every 1 --keep-ckpts 2)
run() { "$bin" "${args[@]}" --out "$@"; } # run OUT [extra args...]

if ! run "$tmp/ref" > "$tmp/ref.log" 2>&1; then
    fail uninterrupted_reference_run "$(tail -3 "$tmp/ref.log")"
    rm -rf "$tmp"; exit 1
fi

RANDOM=4242 # the same kill times every run
for round in 1 2 3 4; do
    out="$tmp/k$round"
    kills=0; extra=()
    # up to 3 kills per round (a resumed run can be killed again), then a final uninterrupted resume
    for attempt in 1 2 3; do
        [ "$round" -le 2 ] && [ "$attempt" -gt 1 ] && break
        # started directly (not through a function) so that $! is the trainer itself, not a subshell
        "$bin" "${args[@]}" --out "$out" "${extra[@]}" > "$tmp/k$round.$attempt.log" 2>&1 &
        pid=$!
        # wait (at most 20 s) for a complete checkpoint beyond the ones present at the start of this attempt
        before=$(ls "$out"/ckpt_*/manifest.json 2>/dev/null | wc -l)
        for _ in $(seq 200); do
            now=$(ls "$out"/ckpt_*/manifest.json 2>/dev/null | wc -l)
            [ "$now" -gt "$before" ] || [ "$before" -gt 0 ] && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        sleep "0.$(printf '%03d' $((RANDOM % 1000)))"
        if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
        wait "$pid" 2>/dev/null
        extra=(--resume latest)
    done
    if ! run "$out" --resume latest > "$tmp/k$round.final.log" 2>&1; then
        fail "resume_after_sigkill_round_$round" "resume failed after $kills kill(s): $(tail -3 "$tmp/k$round.final.log")"
        continue
    fi
    last="ckpt_$steps"
    if cmp -s "$tmp/ref/$last/model.bin" "$out/$last/model.bin" &&
       cmp -s "$tmp/ref/$last/state_rank0.bin" "$out/$last/state_rank0.bin"; then
        ok "sigkill_round_${round}_${kills}_kills_then_resume_is_bit_identical"
    else
        fail "sigkill_round_${round}_${kills}_kills_then_resume_is_bit_identical" \
            "$last/model.bin or state_rank0.bin differ from the uninterrupted run (logs in $tmp)"
    fi
    # whatever the kills left, no temp file may be mistaken for a checkpoint file and every listed one is whole
    for m in "$out"/ckpt_*/manifest.json; do
        [ -f "$m" ] || continue
        d=$(dirname "$m")
        grep -o '"name": "[^"]*", "bytes": [0-9]*' "$m" | while IFS= read -r entry; do
            name=$(echo "$entry" | sed 's/"name": "\([^"]*\)".*/\1/'); bytes=${entry##* }
            [ "$(stat -c %s "$d/$name" 2>/dev/null)" = "$bytes" ] || echo "$d/$name"
        done
    done > "$tmp/bad.$round"
    if [ -s "$tmp/bad.$round" ]; then
        fail "round_${round}_manifests_match_files" "$(head -3 "$tmp/bad.$round")"
    fi
done
[ "$fails" -eq 0 ] && rm -rf "$tmp"
exit $((fails > 0))

#!/usr/bin/env bash
# test/test_eval_train.sh TRAINER DATA - downstream tasks in the trainer (issue 32): a short run with --eval-task
# logs one eval_task event per task at --eval-task-every and at the end (acc, acc_norm or ppl, items); --eval-only
# on its checkpoint prints the table with the same scores as the run's last events, on 1 and 2 ranks; a bad task
# file stops the run before its first step with one line naming the file and line (no checkpoint written);
# --eval-only without tasks or without a model is a usage error.
set -u
trainer=${1:-./train_gpt}; data=${2:-data}
failures=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }
TMP=$(mktemp -d build/test_eval_train.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
tasks="hellaswag=test/eval/hellaswag.jsonl,arc=test/eval/arc.jsonl,piqa=test/eval/piqa.jsonl,lambada=test/eval/lambada.txt"
tasks="$tasks,boolq=test/eval/boolq.jsonl,copa=test/eval/copa.jsonl,mmlu=test/eval/mmlu.jsonl,jsonl=test/eval/generic.jsonl"
base=(--model d2c64h4t128v4096 --data "$data" --batch 4 --seq 64 --eval-every 0 --sample-every 0 --threads 1)

"$trainer" "${base[@]}" --steps 6 --eval-task "$tasks" --eval-task-every 3 --out "$TMP/run" > "$TMP/run.out" 2>&1
st=$?
n=$(grep -c '"event": "eval_task"' "$TMP/run/log.jsonl" 2>/dev/null)
steps=$(grep '"event": "eval_task"' "$TMP/run/log.jsonl" 2>/dev/null | grep -o '"step": [0-9]*' | sort -u | tr '\n' ' ')
if [ $st = 0 ] && [ "$n" = 16 ] && [ "$steps" = '"step": 3 "step": 6 ' ]; then ok "eval_task_events_every_3_steps_and_at_the_end (16)"
else fail eval_task_events_every_3_steps_and_at_the_end "exit $st, $n events at steps $steps; $(tail -2 "$TMP/run.out")"; fi
/usr/bin/python3 - "$TMP/run/log.jsonl" > "$TMP/check.txt" <<'PY'
import json, math, sys
ev = [e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "eval_task" and e["step"] == 6]
items = {"hellaswag": 3, "arc": 2, "piqa": 2, "lambada": 3, "boolq": 2, "copa": 2, "mmlu": 2, "jsonl": 2}
bad = []
for e in ev:
    if e["items"] != items[e["task"]]: bad.append("%s: %d items" % (e["task"], e["items"]))
    if not 0 <= e["acc"] <= 1: bad.append("%s: acc %s" % (e["task"], e["acc"]))
    if e["task"] == "lambada":
        if not (e.get("ppl", 0) > 1 and "acc_norm" not in e): bad.append("lambada: ppl %s" % e.get("ppl"))
    elif not 0 <= e.get("acc_norm", -1) <= 1: bad.append("%s: acc_norm %s" % (e["task"], e.get("acc_norm")))
print("; ".join(bad) if bad else "good")
for e in sorted(ev, key=lambda e: e["task"]):
    print("SCORE %s %.4f" % (e["task"], e["acc"]))
PY
if [ "$(head -1 "$TMP/check.txt")" = good ]; then ok eval_task_events_hold_items_acc_acc_norm_ppl
else fail eval_task_events_hold_items_acc_acc_norm_ppl "$(head -1 "$TMP/check.txt")"; fi

# --eval-only on the checkpoint: the same accuracies (same model, same items), 1 and 2 ranks
want=$(grep '^SCORE' "$TMP/check.txt" | awk '{ print $2, $3 }')
for np in 1 2; do
    launch=(); [ $np = 2 ] && launch=("${MPI[@]}" -np 2)
    "${launch[@]}" "$trainer" --eval-only --resume "$TMP/run/ckpt_6" --data "$data" --threads 1 --eval-task "$tasks" \
        --out "$TMP/only$np" > "$TMP/only$np.out" 2>&1
    st=$?
    got=$(awk '/^task +format/ { t = 1; next } t && NF >= 5 { printf "%s %.4f\n", $1, $5 }' "$TMP/only$np.out" | sort)
    if [ $st = 0 ] && [ "$got" = "$want" ] && [ "$(grep -c '"event": "eval_task"' "$TMP/only$np/eval.jsonl" 2>/dev/null)" = 8 ]; then
        ok "eval_only_table_matches_the_run_on_${np}_rank"
    else fail "eval_only_table_matches_the_run_on_${np}_rank" "exit $st; table: $(echo $got); run: $(echo $want); $(tail -1 "$TMP/only$np.out")"; fi
done

# a bad item stops the run before any step, one line naming the file and line; nothing written
printf '{"context": "a", "choices": [" b", " c"], "label": 0}\n{"context": "a", "choices": [" b"], "label": 3}\n' > "$TMP/bad.jsonl"
"$trainer" "${base[@]}" --steps 3 --eval-task "jsonl=$TMP/bad.jsonl" --out "$TMP/badrun" > "$TMP/bad.out" 2>&1
st=$?
if [ $st = 1 ] && grep -q "^error: $TMP/bad.jsonl:2: jsonl item: label 3 is out of range" "$TMP/bad.out" &&
   [ "$(grep -c '^error' "$TMP/bad.out")" = 1 ] && ! ls "$TMP/badrun"/ckpt_* > /dev/null 2>&1 &&
   ! grep -q '^step *1/' "$TMP/bad.out"; then ok bad_task_item_stops_before_training
else fail bad_task_item_stops_before_training "exit $st: $(grep -m2 -E 'error|step' "$TMP/bad.out")"; fi
"$trainer" "${base[@]}" --steps 3 --eval-task "jsonl=$TMP/bad.jsonl" --eval-task-skip-bad --out "$TMP/skiprun" > "$TMP/skip.out" 2>&1
st=$?
if [ $st = 0 ] && grep -q '"items": 1, "skipped": 1' "$TMP/skiprun/log.jsonl"; then ok bad_task_item_skipped_and_counted
else fail bad_task_item_skipped_and_counted "exit $st: $(grep eval_task "$TMP/skiprun/log.jsonl" 2>/dev/null | head -1)"; fi

# usage errors
"$trainer" --eval-only --eval-task "$tasks" > "$TMP/u1.out" 2>&1; s1=$?
"$trainer" --eval-only --init "$TMP/run/ckpt_6/model.bin" > "$TMP/u2.out" 2>&1; s2=$?
"$trainer" --eval-task-every 5 > "$TMP/u3.out" 2>&1; s3=$?
if [ $s1 = 2 ] && grep -q -- "--init MODEL_FILE or --resume" "$TMP/u1.out" && [ $s2 = 2 ] && grep -q "give the tasks" "$TMP/u2.out" &&
   [ $s3 = 2 ] && grep -q -- "apply to --eval-task" "$TMP/u3.out"; then ok eval_options_usage_errors
else fail eval_options_usage_errors "exits $s1 $s2 $s3: $(cat "$TMP/u1.out" "$TMP/u2.out" "$TMP/u3.out" | tr '\n' ' ')"; fi
exit $((failures > 0))

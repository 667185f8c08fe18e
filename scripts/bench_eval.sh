#!/usr/bin/env bash
# scripts/bench_eval.sh [TRAINER] [MODEL] - the downstream-task evaluator's cost (issue 32): tokens per second of
# `--eval-only` on a HellaSwag-shaped task (ITEMS items of 4 choices, contexts and endings cut from the default
# corpus's validation text) against the training forward's (the validation pass of the same model, B and T: one
# forward per batch, no backward), measured side by side in one run, REPS times each, medians. Two figures for the
# evaluator: rows x T (what its forward passes read, padding included) and the rows' own tokens (the work a
# packed evaluator would do), so the padding's share is visible.
#   env: B (default 8), T (default 128), ITEMS (default 200), REPS (default 3), DATA (default data), THREADS (default 2)
# Prints one line per measurement and the ratios. Not for: accuracy (that is what --eval-task is for).
set -euo pipefail
cd "$(dirname "$0")/.."
TRAINER=${1:-./train_gpt}
MODEL=${2:-d4c128h4t128v4096}
B=${B:-8}; T=${T:-128}; ITEMS=${ITEMS:-200}; REPS=${REPS:-3}; DATA=${DATA:-data}; THREADS=${THREADS:-2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$TRAINER" ] || { echo "error: $TRAINER not built; run 'make'" >&2; exit 1; }
val=$(ls "$DATA"/sotu/txt/*.txt | sort | tail -5)
# the task: 4 endings per item, the true one the text's continuation, the others from elsewhere
/usr/bin/python3 - "$TMP/task.jsonl" "$ITEMS" $val <<'PY'
import json, random, sys
out, n, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
words = " ".join(open(f, encoding="utf-8", errors="replace").read() for f in files).split()
random.seed(7)
with open(out, "w") as f:
    for i in range(n):
        a = random.randrange(0, len(words) - 80)
        ctx, true = " ".join(words[a:a + 40]), " ".join(words[a + 40:a + 52])
        ends = [true] + [" ".join(words[b:b + 12]) for b in (random.randrange(0, len(words) - 12) for _ in range(3))]
        random.shuffle(ends)
        f.write(json.dumps({"ctx": ctx, "endings": ends, "label": ends.index(true)}) + "\n")
PY
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
# a model file: one step of training from the seeded initialisation (the cost does not depend on the weights)
"$TRAINER" --model "$MODEL" --data "$DATA" --batch "$B" --seq "$T" --steps 1 --eval-every 0 --sample-every 0 \
    --threads "$THREADS" --out "$TMP/m" > "$TMP/m.log" 2>&1 || { echo "error: $(tail -1 "$TMP/m.log")" >&2; exit 1; }
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $TRAINER $MODEL, B=$B T=$T, $THREADS threads"
fwd=(); ev=(); useful=()
for r in $(seq "$REPS"); do
    # the training forward: a validation pass of 20 batches from the checkpoint (forward only, as the evaluator)
    "$TRAINER" --resume "$TMP/m/ckpt_1" --data "$DATA" --steps 2 --eval-every 1 --eval-batches 20 --sample-every 0 \
        --threads "$THREADS" --ckpt-every 0 --out "$TMP/v$r" > "$TMP/v$r.log" 2>&1 || { echo "error: $(tail -1 "$TMP/v$r.log")" >&2; exit 1; }
    ms=$(grep -m1 'val loss' "$TMP/v$r.log" | sed -E 's/.*\(([0-9.]+) ms\/batch\).*/\1/')
    fwd+=("$(awk -v b="$B" -v t="$T" -v ms="$ms" 'BEGIN { printf "%.0f", b * t / (ms / 1e3) }')")
    "$TRAINER" --eval-only --resume "$TMP/m/ckpt_1" --data "$DATA" --threads "$THREADS" --eval-task "hellaswag=$TMP/task.jsonl" \
        --eval-dump "$TMP/d$r.jsonl" --out "$TMP/e$r" > "$TMP/e$r.log" 2>&1 || { echo "error: $(tail -1 "$TMP/e$r.log")" >&2; exit 1; }
    line=$(grep -m1 'eval hellaswag' "$TMP/e$r.log")
    ev+=("$(echo "$line" | sed -E 's/.*\(([0-9]+) tok\/s\).*/\1/')")
    ems=$(echo "$line" | sed -E 's/.*\| ([0-9]+) ms .*/\1/')
    real=$(/usr/bin/python3 -c 'import json, sys; print(sum(len(json.loads(l)["ids"]) - 1 for l in open(sys.argv[1])))' "$TMP/d$r.jsonl")
    useful+=("$(awk -v n="$real" -v ms="$ems" 'BEGIN { printf "%.0f", n / (ms / 1e3) }')")
    echo "rep $r: training forward ${fwd[-1]} tok/s; evaluator ${ev[-1]} tok/s of rows x T, ${useful[-1]} tok/s of the rows' own tokens ($real tokens in $((ITEMS * 4)) rows)"
done
f=$(printf '%s\n' "${fwd[@]}" | median); e=$(printf '%s\n' "${ev[@]}" | median); u=$(printf '%s\n' "${useful[@]}" | median)
echo "median: training forward $f tok/s; evaluator $e tok/s (x$(awk -v a="$e" -v b="$f" 'BEGIN { printf "%.2f", a / b }') of the forward), $u tok/s of real tokens (x$(awk -v a="$u" -v b="$f" 'BEGIN { printf "%.2f", a / b }'))"

#!/usr/bin/env bash
# scripts/train_default.sh - the quick start behind `make train`: trains the default GPT-2 on the default corpus
# (State of the Union addresses, prepared by `make data`) into out/default, prints the samples, and plots
# out/default/loss.png. Sized to learn visibly in about 10 minutes on 2 CPU cores. Every setting is a variable:
#   MODEL=d4c256 STEPS=300 scripts/train_default.sh      RANKS=2 (mpirun)      RESUME=latest (continue)
# A run already in OUT (a log or checkpoints) is never removed unasked: RESUME=latest continues it, FRESH=1 starts over
# (removing its log, checkpoints and plot), another OUT keeps both; without either the script stops with one line.
# Not for: paper-scale runs (see the other scripts/), or choosing data other than the default corpus.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-out/default}
# GPT-2, 8 layers, C=128, NH=4, maxT=1024 (8.2M parameters, 6.4M of them wte). Chosen for issue 18 with the faster
# step: at this width the lm_head (V=50257) costs most of a step, so 8 layers cost only 16% more per step than 4
# and learn more per step. Final validation loss over 20 batches of `train_gpt --model M --batch 8 --seq 128
# --steps N --lr 3e-3 --lr-floor 3e-4 --warmup 30 --eval-batches 20`: d8c128h4 1400 steps 5.427, d4c128h4 1600 steps
# 5.441, the former default d4c128h4 1000 steps 5.564. Median of steps 6-20 of the same run with --steps 20, 2 threads:
# 376 vs 325 ms, so about 9 minutes of training.
MODEL=${MODEL:-d8c128h4}
BATCH=${BATCH:-8}
SEQ=${SEQ:-128}
STEPS=${STEPS:-1400}
LR=${LR:-3e-3}
LR_FLOOR=${LR_FLOOR:-3e-4}
WARMUP=${WARMUP:-30}
OPTIMIZER=${OPTIMIZER:-adamw}
EVAL_EVERY=${EVAL_EVERY:-50}
EVAL_BATCHES=${EVAL_BATCHES:-4}
SAMPLE_EVERY=${SAMPLE_EVERY:-200}
SAMPLE_TOKENS=${SAMPLE_TOKENS:-48}
PROMPT=${PROMPT:-"The state of our Union is"}
RANKS=${RANKS:-1}
RESUME=${RESUME:-}
FRESH=${FRESH:-}
EXTRA=${EXTRA:-}                # any further trainer flags, e.g. EXTRA="--density 0.1 --optimizer scape"

case $FRESH in ''|0|1) ;; *) echo "error: FRESH='$FRESH' is neither 1 (start over) nor 0; unset it" >&2; exit 2 ;; esac
[ "$FRESH" != 1 ] || [ -z "$RESUME" ] \
    || { echo "error: FRESH=1 starts over and RESUME=$RESUME continues; give one of them" >&2; exit 2; }
[ -x ./train_gpt ] || make -s train_gpt
make -s data

held=0 # OUT holds a run: its log or checkpoints
if [ -z "$RESUME" ] && [ -d "$OUT" ] && { compgen -G "$OUT/ckpt_*" > /dev/null || [ -e "$OUT/log.jsonl" ]; }; then held=1; fi
if [ $held = 1 ] && [ "$FRESH" != 1 ]; then
    newest=$(cd "$OUT" && ls -d ckpt_* 2> /dev/null | sed 's/^ckpt_//' | sort -n | tail -n 1)
    echo "error: $OUT holds a run${newest:+ (checkpoints up to step $newest)}; set RESUME=latest to continue it," \
         "FRESH=1 to start over (removing it) or another OUT, e.g. RESUME=latest make train" >&2
    exit 2
fi
if [ $held = 1 ]; then
    # a run training there now keeps its files: the trainer holds OUT/.lock (flock) while it runs
    if [ -f "$OUT/.lock" ] && [ ! -L "$OUT/.lock" ] && ! flock -n "$OUT/.lock" true; then
        echo "error: $OUT is in use by a run training now (pid $(head -c 20 "$OUT/.lock" | tr -dc 0-9)); wait" \
             "for it or stop it, or set another OUT" >&2
        exit 1
    fi
    echo "note: starting over in $OUT (FRESH=1: removing its log, checkpoints and plot)"
    rm -rf "$OUT"/log.jsonl "$OUT"/ckpt_* "$OUT"/loss.png
fi
mkdir -p "$OUT"

launch=()
if [ "$RANKS" -gt 1 ]; then
    # Open MPI refuses root without --allow-run-as-root, and more ranks than cores without --oversubscribe
    launch=(mpirun --oversubscribe --bind-to none -np "$RANKS")
    [ "$(id -u)" = 0 ] && launch+=(--allow-run-as-root)
fi
# shellcheck disable=SC2086
"${launch[@]}" ./train_gpt --model "$MODEL" --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" --lr "$LR" \
    --lr-floor "$LR_FLOOR" --warmup "$WARMUP" --optimizer "$OPTIMIZER" --eval-every "$EVAL_EVERY" \
    --eval-batches "$EVAL_BATCHES" --sample-every "$SAMPLE_EVERY" --sample-tokens "$SAMPLE_TOKENS" \
    --prompt "$PROMPT" --ckpt-every 100 --keep-ckpts 2 --out "$OUT" ${RESUME:+--resume "$RESUME"} $EXTRA \
    || { status=$?
         # stopped by SIGINT/SIGTERM after a checkpoint: the trainer named its own flags; this is the script's way
         [ $status != 130 ] && [ $status != 143 ] || echo "note: continue with RESUME=latest make train" \
             "(or RESUME=latest scripts/train_default.sh with the same variables)" >&2
         exit $status; }

echo
echo "=== samples (prompt: \"$PROMPT\")"
/usr/bin/python3 - "$OUT/log.jsonl" <<'EOF'
import json, sys
n = 0
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o.get("event") == "sample":
        print("--- step %s:\n%s\n" % (o["step"], o["text"]))
        n += 1
if not n: print("(none: SAMPLE_EVERY=0 takes no samples)")
EOF
scripts/plot_loss.sh "$OUT/loss.png" "$OUT/log.jsonl"

#!/usr/bin/env bash
# scripts/study_regime.sh plan|run|tables [SIZE] - SCAPE's gap to dense AdamS against tokens per parameter (issue 42):
# tiny GPT-2 models trained long enough to reach the paper's regime (~150 tokens per parameter; the authors' GPT-345M
# runs: 100,000 steps of 0.5M tokens) on 2 cores, with the authors' GPT-345M optimizer settings and schedule
# fractions at every length (beta2 0.999, weight decay 0.01, clip 1, lr warm-up 5% and cosine to lr/15, density
# from 1.0 to d geometrically over 10% of the run, norms and biases sparsified).
#   plan    print SIZE's runs in the order `run` trains them, each marked done (a line in runs.tsv, committed ones
#           included) or not, with the cost left estimated from the finished runs' seconds per step
#   run     train SIZE's runs that runs.tsv lacks, in plan order; a run cut short (a session's end, a signal)
#           resumes from its newest checkpoint (every CKPT_EVERY steps) when `run` is started again
#   tables  docs/study/regime.md, regime_gap_<size>_<run>.dat and regime_gap.png from runs.tsv alone
#           (scripts/study_regime_tables.py)
# SIZE (default small):
#   small   d4c64h4t64v4096, 466,304 parameters (43% in the blocks), lengths 1,000 3,000 10,000 30,000 68,000 steps
#           (2.2 to 149 tokens per parameter);
#   medium  d7c112h4t64v4096, 1,530,032 parameters (70% in the blocks), lengths 1,000 3,000 10,000 30,000 (0.7 to 20).
# Both: 4 ranks, B 4, T 64 (1,024 tokens per step), the bpe4k State of the Union corpus (`make data`: 2,332,677
# training tokens, so 10,000 steps is 4.4 epochs), validation over EVAL_BATCHES (default 140) batches per rank at
# the end (the whole validation shard) and at 20 points along the run.
# Per SIZE, in this order (seeds 1-3 up to 10,000 steps, 1-2 beyond):
#   1. the lr probe: AdamS at PROBE_LRS (default 5e-4 1e-3 2e-3) at PROBE_STEPS (default 10,000), seed 1, into point
#      regime_probe_<spec>_steps<N>; the lowest final validation loss is the lr of every run below, every rule's
#      (as the paper uses AdamW's lr for SCAPE);
#   2. adams, scape_0.1, scape_0.01 at PROBE_STEPS, then at each shorter length, then at each longer one;
#   3. topk_ef_c0.008 at every length (topk-ef, the gradient-sparsification control, at constant density 0.008:
#      its mean bytes per step and rank are SCAPE 0.01's within 1% on the small model, 89 kB measured), and at
#      PROBE_STEPS the catchup variant (scape_<d>_catchup_a4) and SCAPE at half and twice the chosen lr
#      (scape_<d>_lr<lr>, seed 1: is SCAPE's lead an lr effect?);
#   4. at each length past PROBE_STEPS: dense AdamW at the chosen lr right after seed 1's AdamS (adamw, seed 1:
#      AdamS's second moment is built from the previous first moment, nu = beta2 m^2 + (1 - beta2) g^2, so with
#      beta2 0.999 and noisy gradients its step is close to lr times a sign on every coordinate; AdamW, whose v
#      averages g^2, tells whether the compressed rules beat dense training or only AdamS), and after seed 1 of the
#      four rules AdamS at half and twice the chosen lr (adams_lr<lr>, seed 1: the probe again where the run is
#      long, since compressed rules beating dense AdamS there would otherwise leave open whether AdamS's lr, chosen
#      at PROBE_STEPS, is what lost);
#   longer lengths come last since they cost the most (68,000 steps of the small model: ~45 minutes here).
# Every finished run appends one line to docs/study/runs.tsv: point (regime_<spec>_steps<N>), run, seed, final
# validation loss, wall seconds (all pieces), mean bytes sent per step and rank (steps 2..), mean train loss over
# the last 5% of steps, the lowest validation loss along the run, and the commit whose trainer ran it. The trainer
# is built from STUDY_COMMIT (pinned below) into OUT/build-<commit>/, so work on the code while the study runs
# cannot change its runs (STUDY_TRAINER=FILE runs that binary instead, its lines recording local-<sha1 of the file>:
# for trying the script outside a git checkout). ONLY="run ..." and SEEDS="s ..." restrict `run` to those runs and seeds.
# Run it under nice, alone (it takes both cores), e.g. `nice -n 10 scripts/study_regime.sh run small`.
# Not for: the undertrained length and batch studies (scripts/study_gap.sh), the paper-shaped comparison
# (scripts/reproduce_cpu.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: $0 plan|run|tables [small|medium]   (env: ONLY, SEEDS, OUT, DOC, DATA, STUDY_COMMIT, PROBE_LRS, EVAL_BATCHES)"
case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; echo "$usage"; exit 0 ;; esac
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "$usage" >&2; exit 2; }
mode=$1 size=${2:-small}
OUT=${OUT:-out/regime}
DOC=${DOC:-docs/study}
DATA=${DATA:-data}
STUDY_COMMIT=${STUDY_COMMIT:-7753401fc518f9699179ce385dc67cdb6efb52ff}
PROBE_LRS=${PROBE_LRS:-"5e-4 1e-3 2e-3"}
PROBE_STEPS=${PROBE_STEPS:-10000}
EVAL_BATCHES=${EVAL_BATCHES:-140}
EVAL_POINTS=${EVAL_POINTS:-20}
CKPT_EVERY=${CKPT_EVERY:-2000}
RANKS=${RANKS:-4}; B=${B:-4}; T=${T:-64}
TB=$((RANKS * B * T))
case $size in
    small)  SPEC=${SPEC:-d4c64h4t64v4096};  LENGTHS=${LENGTHS:-"1000 3000 10000 30000 68000"} ;;
    medium) SPEC=${SPEC:-d7c112h4t64v4096}; LENGTHS=${LENGTHS:-"1000 3000 10000 30000"} ;;
    *) echo "error: unknown size '$size' (small or medium); $usage" >&2; exit 2 ;;
esac
case $mode in plan|run|tables) ;; *) echo "error: unknown mode '$mode'; $usage" >&2; exit 2 ;; esac
runs_tsv=$DOC/runs.tsv
header='point\trun\tseed\tval_loss\tseconds\tbytes_per_step\ttrain_tail\tval_best\tcommit\n'
mkdir -p "$DOC"
[ -f "$runs_tsv" ] || printf "$header" > "$runs_tsv"

if [ "$mode" = tables ]; then exec /usr/bin/python3 scripts/study_regime_tables.py "$runs_tsv" "$DOC"; fi

# the update rule's flags from a run's name; DW: the density warm-up in steps
flags_of() {
    local run=${1%_lr*} dw=$2 sparse="--density-start 1 --density-warmup $2 --scape-exclude-norms 0"
    case $run in
        adams) echo "--optimizer adams" ;;
        adamw) echo "--optimizer adamw" ;;
        scape_0.1|scape_0.01) echo "--optimizer scape --density ${run#scape_} $sparse" ;;
        scape_0.1_catchup_a*|scape_0.01_catchup_a*) local d=${run#scape_}; d=${d%%_*}
            echo "--optimizer scape --density $d $sparse --scape-variant catchup --scape-variant-cap ${run##*_a}" ;;
        topk_ef_c*) echo "--optimizer topk-ef --density ${run#topk_ef_c} --scape-exclude-norms 0" ;;
        *) echo "error: unknown run '$1'" >&2; return 2 ;;
    esac
}
done_already() { awk -F'\t' -v p="$1" -v r="$2" -v s="$3" '$1 == p && $2 == r && $3 == s { f = 1 } END { exit !f }' "$runs_tsv"; }
val_of() { awk -F'\t' -v p="$1" -v r="$2" -v s="$3" '$1 == p && $2 == r && $3 == s { v = $4 } END { print v }' "$runs_tsv"; }
half() { awk -v x="$1" 'BEGIN { printf "%g", x / 2 }'; }
twice() { awk -v x="$1" 'BEGIN { printf "%g", x * 2 }'; }

probe_point=regime_probe_${SPEC}_steps$PROBE_STEPS
# the probe's choice: the lr of the lowest final validation loss, once every probe lr has finished; else empty
chosen_lr() {
    local best="" bv="" lr v
    for lr in $PROBE_LRS; do
        v=$(val_of "$probe_point" "adams_lr$lr" 1)
        [ -n "$v" ] || { echo ""; return; }
        if [ -z "$best" ] || awk -v a="$v" -v b="$bv" 'BEGIN { exit !(a < b) }'; then best=$lr bv=$v; fi
    done
    echo "$best"
}
# plan LR: one line per run, "point run seed steps lr", in training order (the probe's lines first)
plan() {
    local lr=$1 L run seed seeds d
    for lr_p in $PROBE_LRS; do printf '%s adams_lr%s 1 %s %s\n' "$probe_point" "$lr_p" "$PROBE_STEPS" "$lr_p"; done
    [ -n "$lr" ] || return 0
    local shorter longer
    shorter=$(printf '%s\n' $LENGTHS | awk -v p="$PROBE_STEPS" '$1 < p' | sort -n)
    longer=$(printf '%s\n' $LENGTHS | awk -v p="$PROBE_STEPS" '$1 > p' | sort -n)
    for L in $PROBE_STEPS $shorter $longer; do
        [[ " $LENGTHS " == *" $L "* ]] || continue
        seeds=$([ "$L" -le 10000 ] && echo "1 2 3" || echo "1 2")
        for seed in $seeds; do
            runs="adams scape_0.1 scape_0.01 topk_ef_c0.008"
            if [ "$seed" = 1 ] && [ "$L" -gt "$PROBE_STEPS" ]; then runs="adams adamw ${runs#adams }"; fi
            for run in $runs; do
                printf 'regime_%s_steps%s %s %s %s %s\n' "$SPEC" "$L" "$run" "$seed" "$L" "$lr"
            done
            if [ "$seed" = 1 ] && [ "$L" -gt "$PROBE_STEPS" ]; then
                for x in "$(half "$lr")" "$(twice "$lr")"; do
                    printf 'regime_%s_steps%s adams_lr%s 1 %s %s\n' "$SPEC" "$L" "$x" "$L" "$x"
                done
            fi
        done
        if [ "$L" = "$PROBE_STEPS" ]; then
            for seed in 1 2 3; do for d in 0.1 0.01; do
                printf 'regime_%s_steps%s scape_%s_catchup_a4 %s %s %s\n' "$SPEC" "$L" "$d" "$seed" "$L" "$lr"
            done; done
            for d in 0.1 0.01; do for x in "$(half "$lr")" "$(twice "$lr")"; do
                printf 'regime_%s_steps%s scape_%s_lr%s 1 %s %s\n' "$SPEC" "$L" "$d" "$x" "$L" "$x"
            done; done
        fi
    done
}

build_trainer() { # the trainer of STUDY_COMMIT, built once into OUT/build-<commit>; or STUDY_TRAINER as it is
    if [ -n "${STUDY_TRAINER:-}" ]; then
        [ -x "$STUDY_TRAINER" ] || { echo "error: STUDY_TRAINER=$STUDY_TRAINER is not an executable trainer" >&2; exit 1; }
        TRAINER=$STUDY_TRAINER COMMIT=local-$(sha1sum < "$STUDY_TRAINER" | cut -c1-12)
        return
    fi
    local sha
    sha=$(git rev-parse --verify -q "$STUDY_COMMIT^{commit}" 2> /dev/null) \
        || { echo "error: STUDY_COMMIT $STUDY_COMMIT is not a commit of this repository; fetch it or pin another" >&2; exit 1; }
    COMMIT=${sha:0:12}
    local dir=$OUT/build-$COMMIT
    TRAINER=$dir/train_gpt
    [ -x "$TRAINER" ] && return
    echo "== building train_gpt of $COMMIT into $dir" >&2
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    git archive "$sha" | tar -x -C "$dir.tmp"
    make -C "$dir.tmp" -j2 train_gpt > "$dir.tmp/build.log" 2>&1 \
        || { echo "error: building $COMMIT failed; see $dir.tmp/build.log" >&2; exit 1; }
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
}

# train POINT RUN SEED STEPS LR: one run (resumed from its newest checkpoint if one is there), its line appended
train() {
    local point=$1 run=$2 seed=$3 steps=$4 lr=$5
    local dir=$OUT/$point/$run/seed$seed dw warm floor evals flags
    dw=$(awk -v s="$steps" 'BEGIN { printf "%d", s * 0.1 + 0.5 }')
    warm=$(awk -v s="$steps" 'BEGIN { printf "%d", s * 0.05 + 0.5 }')
    floor=$(awk -v l="$lr" 'BEGIN { printf "%.6g", l / 15 }')
    evals=$((steps / EVAL_POINTS))
    flags=$(flags_of "$run" "$dw")
    mkdir -p "$dir"
    local launch=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
    [ "$RANKS" -gt 1 ] && launch+=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS")
    echo "== $point $run seed $seed: $steps steps, lr $lr, $(ls -d "$dir"/ckpt_* 2> /dev/null | sed 's/.*ckpt_//' | sort -n | tail -1 | sed 's/^/from step /;s/$/,/') at $(date -u +%H:%M:%S)" >&2
    local t0=$SECONDS
    # shellcheck disable=SC2086
    "${launch[@]}" "$TRAINER" --model "$SPEC" --data "$DATA" --batch "$B" --seq "$T" --total-batch "$TB" \
        --steps "$steps" --lr "$lr" --lr-floor "$floor" --warmup "$warm" --beta2 0.999 --weight-decay 0.01 --clip 1.0 \
        --eval-every "$evals" --eval-batches "$EVAL_BATCHES" --sample-every 0 --seed "$seed" --threads 1 \
        --ckpt-every "$CKPT_EVERY" --keep-ckpts 1 --resume latest $flags --out "$dir" >> "$dir.out" 2>&1 \
        || { echo $((SECONDS - t0)) >> "$dir.seconds"; echo "error: the run failed or was stopped; see $dir.out:" >&2
             tail -n 3 "$dir.out" >&2; exit 1; }
    echo $((SECONDS - t0)) >> "$dir.seconds"
    /usr/bin/python3 - "$dir/log.jsonl" "$dir.seconds" "$point" "$run" "$seed" "$steps" "$COMMIT" >> "$runs_tsv" <<'EOF'
import json, sys
path, secs_path, point, run, seed, steps, commit = sys.argv[1:8]
steps = int(steps)
train, val = {}, {}   # the last record of each step wins: a resumed piece repeats the steps after its checkpoint
for line in open(path):
    try: o = json.loads(line)
    except ValueError: continue   # a line cut by a stop
    if o.get("event") == "train": train[o["step"]] = o
    if o.get("event") == "val": val[o["step"]] = o["val_loss"]
if steps not in val: sys.exit(f"{path}: no validation at step {steps}")
missing = [s for s in range(1, steps + 1) if s not in train]
if missing: sys.exit(f"{path}: {len(missing)} train steps missing (first {missing[0]})")
sent = [train[s]["comm_bytes_sent"] for s in range(2, steps + 1)]
tail = [train[s]["train_loss"] for s in range(steps - max(1, steps // 20) + 1, steps + 1)]
secs = sum(int(l) for l in open(secs_path))
print(f"{point}\t{run}\t{seed}\t{val[steps]:.6f}\t{secs}\t{sum(sent) / len(sent):.0f}\t"
      f"{sum(tail) / len(tail):.6f}\t{min(val.values()):.6f}\t{commit}")
EOF
    rm -rf "$dir"/ckpt_* "$dir.seconds" # the table reads the log only
}

lr=$(chosen_lr)
if [ "$mode" = plan ]; then
    /usr/bin/python3 - "$runs_tsv" "$SPEC" "$lr" <<EOF
import sys, collections
tsv, spec, lr = sys.argv[1:4]
rows = [l.rstrip("\n").split("\t") for l in open(tsv)][1:]
done = {(r[0], r[1], r[2]): r for r in rows}
rate = [int(r[4]) / int(r[0].rsplit("_steps", 1)[1]) for r in rows if r[0].startswith("regime") and spec in r[0]]
per_step = sorted(rate)[len(rate) // 2] if rate else None
todo_s = 0
plan = """$(plan "$lr")""".split("\n")
for line in plan:
    point, run, seed, steps, lr_r = line.split()
    d = done.get((point, run, seed))
    if not d: todo_s += int(steps) * per_step if per_step else 0
    print("%-6s %-40s %-26s %s %7s %-6s %s" % ("done" if d else "todo", point, run, seed, steps, lr_r,
          "val %s (%s s)" % (d[3], d[4]) if d else ""))
if not lr: print("(the runs after the probe are planned once the probe has finished)")
print("to do: %s" % ("%.1f h at %.1f ms/step (median of finished runs)" % (todo_s / 3600, per_step * 1000) if per_step else "cost unknown until a run finishes"))
EOF
    exit 0
fi

# run: one study at a time per OUT (two would share runs.tsv and the cores)
mkdir -p "$OUT"
exec 9> "$OUT/.lock"
flock -n 9 || { echo "error: another study_regime.sh is running with OUT=$OUT; wait for it or stop it" >&2; exit 1; }
[ -f "$DATA/sotu/bpe4k/sotu_train_000000.bin" ] || { echo "error: no bpe4k corpus under $DATA; run make data" >&2; exit 1; }
build_trainer
trained=0
while :; do
    lr=$(chosen_lr)
    next=""
    while read -r point run seed steps lr_r; do
        [ -n "$point" ] || continue
        done_already "$point" "$run" "$seed" && continue
        [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" ${run%_lr*} "* ]] && [[ " $ONLY " != *" $run "* ]] && continue
        [ -n "${SEEDS:-}" ] && [[ " $SEEDS " != *" $seed "* ]] && continue
        next="$point $run $seed $steps $lr_r"; break
    done <<< "$(plan "$lr")"
    [ -n "$next" ] || break
    # shellcheck disable=SC2086
    train $next
    trained=$((trained + 1))
done
echo "== $trained runs trained; $(wc -l < "$runs_tsv") lines in $runs_tsv" >&2

#!/usr/bin/env bash
# scripts/reproduce_cpu.sh gpt|llama [CORPUS] - the SCAPE paper's optimizer comparison at CPU scale: one small model,
# RANKS data-parallel ranks (default 4), identical data, seed and schedule (linear warm-up, cosine decay) for AdamW,
# dense AdamS, SCAPE d=0.1 and SCAPE d=0.01 (SCAPE's geometric density warm-up from 1.0 over DW_FRAC of the run).
# topk-ef at d=0.01 (top-k of raw gradients with error feedback into AdamW) joins when the trainer offers it.
# Writes under OUT (default out/reproduce_<model>):
#   <run>/log.jsonl, <run>.out     each run's log and stdout
#   val_loss.png                   validation loss vs step (left) and vs training wall-clock (right), all runs
#   results.md                     the table below, also printed
# Table columns, all read from the logs (train events of steps 2.., step 1 bootstraps SCAPE's first mask):
#   final val loss   val_loss of the last "val" event
#   gap vs AdamS     final val loss minus dense AdamS's
#   bytes/step/rank  mean comm_bytes_sent over steps 2..; "at target d" is the last step's (warm-up finished)
#   ms/step          mean "ms" over steps 2..; train time = sum of "ms" over all steps (validation excluded)
# CORPUS: a directory of llm.c token shards (*train*.bin, *val*.bin; `./tok shards` makes them) in the model's
# tokenizer; default: the State of the Union corpus (`make data` for gpt, `make data-llama` for llama).
# ONLY="name ..." trains just those runs (the table still reads all); SKIP_TRAIN=1 only rebuilds table and plot.
# QUICK=1: a few steps of a tiny model on 2 ranks, same outputs (what test/test_reproduce.sh runs).
# Every setting is a variable: TRAINER RANKS STEPS MODEL_SPEC B T LR LR_FLOOR WARMUP DW_FRAC EVAL_EVERY EVAL_BATCHES SEED.
# Sized (default: 200 steps of a 3.3M-parameter model) so each run takes 5-6 minutes on 2 shared cores and the
# whole comparison well under 60; measured figures in docs/reproduction.md.
# Not for: cluster-scale runs (scripts/cluster/), or network-limited timing (scripts/netem_bench.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: $0 gpt|llama [CORPUS_DIR]   (env: QUICK=1 OUT=DIR RANKS=N STEPS=N ...)"
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "$usage" >&2; exit 2; }
family=$1
corpus=${2:-}
case $family in
    gpt)   trainer=./train_gpt;   tokdir=gpt2;   default_spec=d2c64h2t64;         quick_spec=d2c32h2t64 ;;
    llama) trainer=./train_llama; tokdir=llama2; default_spec=l2c64h2kv1f176t64;  quick_spec=l2c32h2kv1f96t64 ;;
    *) echo "error: unknown model family '$family'; $usage" >&2; exit 2 ;;
esac

if [ "${QUICK:-0}" = 1 ]; then
    RANKS=${RANKS:-2}; STEPS=${STEPS:-6}; MODEL_SPEC=${MODEL_SPEC:-$quick_spec}; B=${B:-2}; T=${T:-32}
    WARMUP=${WARMUP:-2}; EVAL_EVERY=${EVAL_EVERY:-3}; EVAL_BATCHES=${EVAL_BATCHES:-1}
else
    RANKS=${RANKS:-4}; STEPS=${STEPS:-200}; MODEL_SPEC=${MODEL_SPEC:-$default_spec}; B=${B:-4}; T=${T:-64}
    WARMUP=${WARMUP:-30}; EVAL_EVERY=${EVAL_EVERY:-20}; EVAL_BATCHES=${EVAL_BATCHES:-4}
fi
LR=${LR:-2e-3}
LR_FLOOR=${LR_FLOOR:-2e-4}
DW_FRAC=${DW_FRAC:-0.3}       # density warm-up as a fraction of the run (the paper: 8-10k of its steps)
SEED=${SEED:-1337}
OUT=${OUT:-out/reproduce_$family}
DATA=${DATA:-data}

trainer=${TRAINER:-$trainer}   # e.g. a CUDA build of the same family
[ "$STEPS" -ge 2 ] 2>/dev/null || { echo "error: STEPS=$STEPS must be an integer >= 2 (step 1 is not measured)" >&2; exit 2; }
[ "$RANKS" -ge 1 ] 2>/dev/null || { echo "error: RANKS=$RANKS must be an integer >= 1" >&2; exit 2; }
dw_steps=$(awk -v s="$STEPS" -v f="$DW_FRAC" 'BEGIN { if (f < 0 || f > 1) exit 1; printf "%d", s * f + 0.5 }') \
    || { echo "error: DW_FRAC=$DW_FRAC must be a fraction in [0, 1]" >&2; exit 2; }
[ -x "$trainer" ] || { echo "error: $trainer not found; run 'make ${trainer#./}' first" >&2; exit 1; }
command -v gnuplot > /dev/null || { echo "error: gnuplot not found; run 'make deps' (Debian package gnuplot-nox)" >&2; exit 1; }

data_args=()
if [ -n "$corpus" ]; then
    [ -d "$corpus" ] || { echo "error: corpus '$corpus' is not a directory; pass a directory of *train*.bin and *val*.bin shards" >&2; exit 1; }
    compgen -G "$corpus/*train*.bin" > /dev/null || { echo "error: no *train*.bin shards in $corpus; make them with ./tok shards" >&2; exit 1; }
    compgen -G "$corpus/*val*.bin" > /dev/null || { echo "error: no *val*.bin shards in $corpus; make them with ./tok shards --val-percent 5" >&2; exit 1; }
    data_args=(--train "$corpus/*train*.bin" --val "$corpus/*val*.bin")
else
    compgen -G "$DATA/sotu/$tokdir/*train*.bin" > /dev/null \
        || { echo "error: no default corpus in $DATA/sotu/$tokdir; run 'make data$([ "$family" = llama ] && echo -llama)'" >&2; exit 1; }
    data_args=(--data "$DATA")
fi

# name:optimizer flags. Everything else is shared, so the runs differ only in the update rule.
runs=("adamw:--optimizer adamw"
      "adams:--optimizer adams"
      "scape_0.1:--optimizer scape --density 0.1 --density-start 1 --density-warmup $dw_steps"
      "scape_0.01:--optimizer scape --density 0.01 --density-start 1 --density-warmup $dw_steps")
# the top-k-with-error-feedback baseline joins when the trainer has it (same density schedule as SCAPE d=0.01)
help=$("$trainer" --help 2>&1 || true)   # (not piped into grep -q: under pipefail its early exit fails the pipe)
if [[ $help == *topk-ef* ]]; then
    runs+=("topk_ef_0.01:--optimizer topk-ef --density 0.01 --density-start 1 --density-warmup $dw_steps")
fi
# per-tensor mask stability (Jaccard of consecutive masks, kept energy) of the sparse runs, at each validation step
if [[ $help == *--mask-stats-every* ]]; then
    for i in "${!runs[@]}"; do
        case ${runs[$i]} in scape*|topk*) runs[$i]="${runs[$i]} --mask-stats-every $EVAL_EVERY" ;; esac
    done
fi
names=(); for cfg in "${runs[@]}"; do names+=("${cfg%%:*}"); done
common=("$trainer" --model "$MODEL_SPEC" "${data_args[@]}" --batch "$B" --seq "$T" --steps "$STEPS" --lr "$LR"
        --lr-floor "$LR_FLOOR" --warmup "$WARMUP" --eval-every "$EVAL_EVERY" --eval-batches "$EVAL_BATCHES"
        --sample-every 0 --seed "$SEED" --threads 1 --keep-ckpts 1)
launch=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
[ "$RANKS" -gt 1 ] && launch+=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS")

mkdir -p "$OUT"
echo "reproduce_cpu: $family $MODEL_SPEC, $RANKS ranks, B=$B T=$T, $STEPS steps, lr $LR -> $LR_FLOOR (warm-up $WARMUP), density warm-up $dw_steps steps, out $OUT" >&2
if [ -z "${SKIP_TRAIN:-}" ]; then
    for cfg in "${runs[@]}"; do
        name=${cfg%%:*}
        [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
        rm -rf "${OUT:?}/$name" "$OUT/$name.out"
        echo "== $name: ${cfg#*:}  ($(date -u +%H:%M:%S))" >&2
        # shellcheck disable=SC2086
        "${launch[@]}" "${common[@]}" ${cfg#*:} --out "$OUT/$name" > "$OUT/$name.out" 2>&1 \
            || { echo "error: the $name run failed; see $OUT/$name.out:" >&2; tail -3 "$OUT/$name.out" >&2; exit 1; }
    done
fi

# Table and plot data, from the logs only.
/usr/bin/python3 - "$OUT" "$family $MODEL_SPEC, $RANKS ranks, B=$B T=$T, $STEPS steps" "$dw_steps" "${names[@]}" <<'PYEOF'
import json, os, sys
out, title, warm, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
res = {}
for name in names:
    path = os.path.join(out, name, "log.jsonl")
    if not os.path.isfile(path):
        sys.exit("error: %s is missing; run without SKIP_TRAIN" % path)
    ev = [json.loads(l) for l in open(path) if l.strip()]
    train = {}
    for e in ev:  # last value per step wins (a resumed run may repeat steps)
        if e["event"] == "train": train[e["step"]] = e
    train = [train[s] for s in sorted(train)]
    vals = {}
    for e in ev:
        if e["event"] == "val": vals[e["step"]] = e["val_loss"]
    if not train or not vals:
        sys.exit("error: %s has no train or no val events; did the run finish?" % path)
    meas = [e for e in train if e["step"] >= 2] or train
    cum, t_at = 0.0, {0: 0.0}
    for e in train:
        cum += e["ms"]; t_at[e["step"]] = cum
    with open(os.path.join(out, name + ".val.dat"), "w") as f:
        for s in sorted(vals):
            f.write("%d %.6f %.3f\n" % (s, vals[s], t_at.get(s, cum) / 1e3))
    last_val = vals[max(vals)]
    res[name] = dict(val=last_val, bytes=sum(e["comm_bytes_sent"] for e in meas) / len(meas),
                     bytes_last=train[-1]["comm_bytes_sent"], ms=sum(e["ms"] for e in meas) / len(meas),
                     train_s=cum / 1e3, density=train[-1].get("density", 1.0))
ref = res["adams"]
lines = ["## SCAPE at CPU scale: %s" % title, "",
         "| run | final val loss | gap vs AdamS | bytes/step/rank (mean) | bytes/step/rank (at target d) | vs dense | ms/step (mean) | train time (s) |",
         "|---|---|---|---|---|---|---|---|"]
for name in names:
    r = res[name]
    lines.append("| %s | %.4f | %+.4f | %.0f | %.0f | %.1fx fewer | %.1f | %.1f |" % (
        name, r["val"], r["val"] - ref["val"], r["bytes"], r["bytes_last"],
        ref["bytes_last"] / r["bytes_last"] if r["bytes_last"] else float("inf"), r["ms"], r["train_s"]))
stab = []
for name in names:  # "mask" events (scape/dist.h DistMaskStats): means over the logged steps after the warm-up
    ev = [json.loads(l) for l in open(os.path.join(out, name, "log.jsonl")) if l.strip()]
    mk = [e for e in ev if e["event"] == "mask" and e["step"] > warm]
    if not mk: continue
    def avg(key):
        v = [e[key] for e in mk if isinstance(e.get(key), (int, float))]
        return "%.4f" % (sum(v) / len(v)) if v else "n/a"
    stab.append("| %s | %d | %s | %s | %s | %s |" % (name, len(mk), avg("mean_jaccard_m"), avg("mean_energy_m"),
                                                   avg("mean_jaccard_g"), avg("mean_energy_g")))
if stab:
    lines += ["", "Mask stability after the density warm-up (step > %d), numel-weighted means over sparse tensors, "
              "averaged over the logged steps: Jaccard of consecutive masks and share of squared mass kept; _m: "
              "SCAPE's first-moment mask, _g: top-k of the raw gradient (topk-ef: its selection)." % warm, "",
              "| run | logged steps | jaccard_m | energy_m | jaccard_g | energy_g |", "|---|---|---|---|---|---|"] + stab
lines += ["", "Means over train steps 2..N of each log.jsonl (step 1 bootstraps); \"at target d\" is the last step's "
          "count; train time sums every step's ms (validation excluded)."]
text = "\n".join(lines) + "\n"
open(os.path.join(out, "results.md.tmp"), "w").write(text)
os.replace(os.path.join(out, "results.md.tmp"), os.path.join(out, "results.md"))
print(text)
PYEOF

plots_step=(); plots_time=(); i=1
for cfg in "${runs[@]}"; do
    name=${cfg%%:*}
    plots_step+=("'$OUT/$name.val.dat' using 1:2 with linespoints pt 7 ps 0.6 lw 1.5 lc $i title '$name'")
    plots_time+=("'$OUT/$name.val.dat' using 3:2 with linespoints pt 7 ps 0.6 lw 1.5 lc $i title '$name'")
    i=$((i + 1))
done
gnuplot <<GP
set terminal pngcairo size 1400,600 font ",11" noenhanced
set output '$OUT/val_loss.png.tmp'
set multiplot layout 1,2 title "validation loss: $family $MODEL_SPEC, $RANKS ranks, $STEPS steps"
set ylabel 'validation loss (nats/token)'
set grid
set key top right
set xlabel 'step'
plot $(IFS=,; echo "${plots_step[*]}")
set xlabel 'training wall-clock (s, sum of step times)'
plot $(IFS=,; echo "${plots_time[*]}")
unset multiplot
GP
mv "$OUT/val_loss.png.tmp" "$OUT/val_loss.png"
echo "wrote $OUT/val_loss.png and $OUT/results.md"

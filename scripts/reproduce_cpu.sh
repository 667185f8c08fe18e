#!/usr/bin/env bash
# scripts/reproduce_cpu.sh gpt|llama [CORPUS] - the SCAPE paper's optimizer comparison at CPU scale, shaped like the
# paper's: a model whose parameters are mostly transformer blocks (the bpe4k vocabulary, 4096 tokens, keeps the
# embeddings under 20%), RANKS data-parallel ranks (default 4), and for every seed in SEEDS and every run length in
# LENGTHS the same data, seed and lr schedule (linear warm-up over WARMUP_FRAC of the run, cosine decay) for:
#   adamw, adams (dense AdamS), scape_0.1, scape_0.01, topk_ef_0.01 (top-k of raw gradients with error feedback
#   into AdamW), with norm gains and biases sparsified too (--scape-exclude-norms 0, as the authors' convergence
#   scripts), and the ablation scape_0.01_xnorm (norms kept dense, this runtime's default) when ABLATION=1.
# SCAPE's and topk-ef's density warms up geometrically from 1.0 over DW_FRAC of each run (the paper's runs: 8,000-
# 10,000 warm-up steps; see docs/reproduction.md for the choice). Validation: EVAL_POINTS evaluations per run of
# EVAL_BATCHES batches per rank (default 50 x 4 x 128 x 4 ranks = 102,400 tokens).
# Writes under OUT (default out/reproduce_<family>):
#   steps_<N>/<run>/seed<S>/log.jsonl, .../seed<S>.out   each run's log and stdout
#   steps_<N>/<run>.val.dat                              step, mean, min, max validation loss over the seeds
#   val_loss_steps<N>.png                                validation loss vs step, a band (min..max over seeds) per run
#   results.md                                           the tables below, also printed
# Tables (all read from the logs; train events of steps 2.., step 1 bootstraps SCAPE's first mask): per length,
# final validation loss mean +- sample standard deviation and [min, max] over seeds, gap of the mean to AdamS's,
# bytes/step/rank (mean, and at the target density), ms/step, mask stability after the density warm-up; then the
# gap to AdamS at each length, and whether the paper's claim holds at the longest one.
# CORPUS: a directory of llm.c token shards (*train*.bin, *val*.bin) in the model's tokenizer; default: the State of
# the Union corpus in bpe4k (`make data`).
# ONLY="name ..." trains just those runs (the tables still read all; a run with no seed at a length is listed as "not
# run" there, one missing only some seeds is an error); SKIP_TRAIN=1 only rebuilds tables and plots.
# QUICK=1: a few steps of a tiny model on 2 ranks, 2 seeds, 2 lengths, same outputs (test/test_reproduce.sh).
# Every setting is a variable: TRAINER RANKS LENGTHS SEEDS MODEL_SPEC B T LR LR_FLOOR WARMUP_FRAC DW_FRAC EVAL_POINTS
# EVAL_BATCHES ABLATION; KEEP_CKPTS=1 keeps each run's final checkpoint (deleted by default). Cost of the default gpt recipe on this 2-core machine: docs/reproduction.md.
# `reproduce_cpu.sh study length|batch|probe|tables` runs the study of where the gap to AdamS closes (issue 29:
# run length and tokens per step with the authors' GPT settings), which is scripts/study_gap.sh (see its header).
# `reproduce_cpu.sh peers` runs SCAPE against DeMo, PowerSGD, 1-bit Adam and topk-ef at equal bytes per step (issue
# 33: settings matching SCAPE 0.1's and 0.01's bytes, 2k and 8k tokens per step, 3 seeds), which is
# `scripts/study_gap.sh peers` (see its header for the settings and their bytes).
# Not for: cluster-scale runs (scripts/cluster/), or network-limited timing (scripts/netem_bench.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = study ] && { shift; exec scripts/study_gap.sh "$@"; }
[ "${1:-}" = peers ] && [ $# = 1 ] && exec scripts/study_gap.sh peers

usage="usage: $0 gpt|llama [CORPUS_DIR] | study length|batch|probe|peers|tables | peers   (env: QUICK=1 OUT=DIR RANKS=N LENGTHS=\"N ...\" SEEDS=\"S ...\" ...)"
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "$usage" >&2; exit 2; }
family=$1
corpus=${2:-}
# GPT-2 d12c128: 2.9M parameters, 18.5% embeddings (wte 4096x128 + wpe); Llama l16c192: 8.1M, 19.5% (wte + lm_head)
case $family in
    gpt)   trainer=./train_gpt;   default_spec=d12c128h4t128v4096;     quick_spec=d2c32h2t64v4096 ;;
    llama) trainer=./train_llama; default_spec=l16c192h4kv2t128v4096;  quick_spec=l2c32h2kv1f96t64v4096 ;;
    *) echo "error: unknown model family '$family'; $usage" >&2; exit 2 ;;
esac
tokdir=bpe4k

if [ "${QUICK:-0}" = 1 ]; then
    RANKS=${RANKS:-2}; LENGTHS=${LENGTHS:-"6 4"}; SEEDS=${SEEDS:-"1 2"}; MODEL_SPEC=${MODEL_SPEC:-$quick_spec}
    B=${B:-2}; T=${T:-32}; EVAL_POINTS=${EVAL_POINTS:-2}; EVAL_BATCHES=${EVAL_BATCHES:-1}
else
    RANKS=${RANKS:-4}; LENGTHS=${LENGTHS:-"1000 300"}; SEEDS=${SEEDS:-"1 2 3"}; MODEL_SPEC=${MODEL_SPEC:-$default_spec}
    B=${B:-4}; T=${T:-128}; EVAL_POINTS=${EVAL_POINTS:-5}; EVAL_BATCHES=${EVAL_BATCHES:-50}
fi
LR=${LR:-1e-3}
LR_FLOOR=${LR_FLOOR:-1e-4}
WARMUP_FRAC=${WARMUP_FRAC:-0.05}
DW_FRAC=${DW_FRAC:-0.3}
ABLATION=${ABLATION:-1}
OUT=${OUT:-out/reproduce_$family}
DATA=${DATA:-data}

trainer=${TRAINER:-$trainer}   # e.g. a CUDA build of the same family
for n in $LENGTHS; do
    [ "$n" -ge 2 ] 2>/dev/null || { echo "error: LENGTHS has '$n'; each run length must be an integer >= 2 (step 1 is not measured)" >&2; exit 2; }
done
[ -n "$LENGTHS" ] || { echo "error: LENGTHS is empty; give run lengths in steps, e.g. LENGTHS=\"800 250\"" >&2; exit 2; }
for s in $SEEDS; do
    [ "$s" -ge 0 ] 2>/dev/null || { echo "error: SEEDS has '$s'; seeds are non-negative integers" >&2; exit 2; }
done
[ -n "$SEEDS" ] || { echo "error: SEEDS is empty; give at least one seed, e.g. SEEDS=\"1 2 3\"" >&2; exit 2; }
[ "$RANKS" -ge 1 ] 2>/dev/null || { echo "error: RANKS=$RANKS must be an integer >= 1" >&2; exit 2; }
[ "$EVAL_POINTS" -ge 1 ] 2>/dev/null || { echo "error: EVAL_POINTS=$EVAL_POINTS must be an integer >= 1" >&2; exit 2; }
for f in "DW_FRAC=$DW_FRAC" "WARMUP_FRAC=$WARMUP_FRAC"; do
    awk -v f="${f#*=}" 'BEGIN { exit !(f >= 0 && f <= 1) }' || { echo "error: $f must be a fraction in [0, 1]" >&2; exit 2; }
done
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
        || { echo "error: no default corpus in $DATA/sotu/$tokdir; run 'make data'" >&2; exit 1; }
    data_args=(--data "$DATA")
fi

# name:optimizer flags, with @DW@ for the density warm-up in steps. Everything else is shared, so the runs differ
# only in the update rule.
schedule="--density-start 1 --density-warmup @DW@"
sparse="$schedule --scape-exclude-norms 0"
runs=("adamw:--optimizer adamw"
      "adams:--optimizer adams"
      "scape_0.1:--optimizer scape --density 0.1 $sparse"
      "scape_0.01:--optimizer scape --density 0.01 $sparse")
help=$("$trainer" --help 2>&1 || true)   # (not piped into grep -q: under pipefail its early exit fails the pipe)
# the top-k-with-error-feedback baseline joins when the trainer has it (same density schedule as SCAPE d=0.01)
[[ $help == *topk-ef* ]] && runs+=("topk_ef_0.01:--optimizer topk-ef --density 0.01 $sparse")
[ "$ABLATION" = 1 ] && runs+=("scape_0.01_xnorm:--optimizer scape --density 0.01 $schedule --scape-exclude-norms 1")
names=(); for cfg in "${runs[@]}"; do names+=("${cfg%%:*}"); done
launch=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
[ "$RANKS" -gt 1 ] && launch+=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS")

mkdir -p "$OUT"
echo "reproduce_cpu: $family $MODEL_SPEC, $RANKS ranks, B=$B T=$T, lengths $LENGTHS, seeds $SEEDS, lr $LR -> $LR_FLOOR (warm-up $WARMUP_FRAC of the run), density warm-up $DW_FRAC of the run, out $OUT" >&2
if [ -z "${SKIP_TRAIN:-}" ]; then
    for steps in $LENGTHS; do
        dw=$(awk -v s="$steps" -v f="$DW_FRAC" 'BEGIN { printf "%d", s * f + 0.5 }')
        warm=$(awk -v s="$steps" -v f="$WARMUP_FRAC" 'BEGIN { printf "%d", s * f + 0.5 }')
        every=$(( steps / EVAL_POINTS > 0 ? steps / EVAL_POINTS : 1 ))
        for seed in $SEEDS; do
            for cfg in "${runs[@]}"; do
                name=${cfg%%:*}
                [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && continue
                dir="$OUT/steps_$steps/$name"
                rm -rf "${dir:?}/seed$seed" "$dir/seed$seed.out"
                mkdir -p "$dir"
                flags=${cfg#*:}; flags=${flags//@DW@/$dw}
                # per-tensor mask stability (Jaccard of consecutive masks, kept energy) of the sparse runs, at each
                # validation step
                [[ $help == *--mask-stats-every* ]] && [[ $name != adam* ]] && flags="$flags --mask-stats-every $every"
                echo "== steps $steps seed $seed $name: $flags  ($(date -u +%H:%M:%S))" >&2
                # shellcheck disable=SC2086
                "${launch[@]}" "$trainer" --model "$MODEL_SPEC" "${data_args[@]}" --batch "$B" --seq "$T" \
                    --steps "$steps" --lr "$LR" --lr-floor "$LR_FLOOR" --warmup "$warm" --eval-every "$every" \
                    --eval-batches "$EVAL_BATCHES" --sample-every 0 --seed "$seed" --threads 1 --keep-ckpts 1 \
                    --ckpt-every 0 $flags --out "$dir/seed$seed" > "$dir/seed$seed.out" 2>&1 \
                    || { echo "error: the run failed; see $dir/seed$seed.out:" >&2; tail -3 "$dir/seed$seed.out" >&2; exit 1; }
                # the tables read only the logs: drop the final checkpoint (56 MB for the gpt recipe's model, 2 GB
                # over its 36 runs) unless KEEP_CKPTS=1
                [ "${KEEP_CKPTS:-0}" = 1 ] || rm -rf "$dir/seed$seed"/ckpt_*
            done
        done
    done
fi

# Tables and plot data, from the logs only.
/usr/bin/python3 - "$OUT" "$family $MODEL_SPEC, $RANKS ranks, B=$B T=$T" "$DW_FRAC" "$LENGTHS" "$SEEDS" "${names[@]}" <<'PYEOF'
import json, math, os, sys
out, title, dw_frac, lengths, seeds, names = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
    sorted(int(x) for x in sys.argv[4].split()), sys.argv[5].split(), sys.argv[6:]

def load(path):
    if not os.path.isfile(path):
        sys.exit("error: %s is missing; run without SKIP_TRAIN" % path)
    ev = [json.loads(l) for l in open(path) if l.strip()]
    train, vals, val_tokens = {}, {}, 0
    for e in ev:  # last value per step wins (a resumed run may repeat steps)
        if e["event"] == "train": train[e["step"]] = e
        if e["event"] == "val": vals[e["step"]] = e["val_loss"]
    start = next(e for e in ev if e["event"] == "start")
    for e in ev:
        if e["event"] == "val": val_tokens = e["batches"] * start["B"] * start["T"]
    if not train or not vals:
        sys.exit("error: %s has no train or no val events; did the run finish?" % path)
    return [train[s] for s in sorted(train)], vals, val_tokens, [e for e in ev if e["event"] == "mask"]

def stats(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd, min(xs), max(xs)

lines = ["## SCAPE at CPU scale: %s, seeds %s" % (title, " ".join(seeds)), ""]
gap = {}  # (name, length) -> (mean gap, spread of the gap)
for L in lengths:
    warm = int(L * dw_frac + 0.5)
    res, curves = {}, {}
    for name in names:
        logs = [os.path.join(out, "steps_%d" % L, name, "seed" + sd, "log.jsonl") for sd in seeds]
        dat = os.path.join(out, "steps_%d" % L, name + ".val.dat")
        if name != "adams" and not any(os.path.isfile(p) for p in logs):
            if os.path.exists(dat): os.remove(dat)  # a run left out of this length (ONLY=...): "not run" below
            continue
        finals, bytes_mean, bytes_last, ms, mk, vtok = [], [], [], [], [], 0
        per_seed = []
        for sd in seeds:
            train, vals, vtok, masks = load(os.path.join(out, "steps_%d" % L, name, "seed" + sd, "log.jsonl"))
            meas = [e for e in train if e["step"] >= 2] or train
            finals.append(vals[max(vals)])
            bytes_mean.append(sum(e["comm_bytes_sent"] for e in meas) / len(meas))
            bytes_last.append(train[-1]["comm_bytes_sent"])
            ms.append(sum(e["ms"] for e in meas) / len(meas))
            mk += [e for e in masks if e["step"] > warm]
            per_seed.append(vals)
        common = sorted(set.intersection(*(set(v) for v in per_seed)))
        with open(dat, "w") as f:
            for s in common:
                xs = [v[s] for v in per_seed]
                f.write("%d %.6f %.6f %.6f\n" % (s, sum(xs) / len(xs), min(xs), max(xs)))
        res[name] = dict(final=finals, bytes=sum(bytes_mean) / len(bytes_mean), bytes_last=sum(bytes_last) / len(bytes_last),
                         ms=sum(ms) / len(ms), mask=mk, vtok=vtok)
    ref = res["adams"]
    rm = stats(ref["final"])[0]
    lines += ["### %d steps (density warm-up %d steps), %d seeds, final validation over %d tokens" % (L, warm, len(seeds), ref["vtok"]), "",
              "| run | final val loss: mean +- sd | [min, max] | gap vs AdamS (mean) | bytes/step/rank (mean) | bytes/step/rank (at target d) | vs dense | ms/step |",
              "|---|---|---|---|---|---|---|---|"]
    for name in names:
        if name not in res:
            lines.append("| %s | not run at this length | | | | | | |" % name)
            continue
        r = res[name]
        m, sd, lo, hi = stats(r["final"])
        # spread of the gap: the per-seed differences (same seed = same data order and initialization)
        diffs = [a - b for a, b in zip(r["final"], ref["final"])]
        gap[(name, L)] = (m - rm, stats(diffs)[1])
        lines.append("| %s | %.4f +- %.4f | [%.4f, %.4f] | %+.4f | %.0f | %.0f | %.1fx fewer | %.1f |" % (
            name, m, sd, lo, hi, m - rm, r["bytes"], r["bytes_last"],
            ref["bytes_last"] / r["bytes_last"] if r["bytes_last"] else float("inf"), r["ms"]))
    stab = []
    for name in names:  # "mask" events (optim/dist.h DistMaskStats): means over the logged steps after the warm-up
        if name not in res: continue
        mk = res[name]["mask"]
        if not mk: continue
        def avg(key):
            v = [e[key] for e in mk if isinstance(e.get(key), (int, float))]
            return "%.4f" % (sum(v) / len(v)) if v else "n/a"
        stab.append("| %s | %d | %s | %s | %s | %s |" % (name, len(mk), avg("mean_jaccard_m"), avg("mean_energy_m"),
                                                       avg("mean_jaccard_g"), avg("mean_energy_g")))
    if stab:
        lines += ["", "Mask stability after the density warm-up (step > %d), numel-weighted means over sparse tensors, "
                  "averaged over the logged steps of all seeds: Jaccard of consecutive masks and share of squared mass "
                  "kept; _m: SCAPE's first-moment mask, _g: top-k of the raw gradient (topk-ef: its selection)." % warm, "",
                  "| run | logged steps | jaccard_m | energy_m | jaccard_g | energy_g |", "|---|---|---|---|---|---|"] + stab
    lines.append("")
lines += ["### Gap to dense AdamS by run length (mean over seeds; +- the sample sd of the per-seed differences)", "",
          "| run | " + " | ".join("%d steps" % L for L in lengths) + " |", "|---|" + "---|" * len(lengths)]
for name in names:
    lines.append("| %s | " % name + " | ".join("%+.4f +- %.4f" % gap[(name, L)] if (name, L) in gap else "not run"
                                                for L in lengths) + " |")
Lmax = lengths[-1]
verdict = []
for name, target in (("scape_0.1", 0.02), ("scape_0.01", 0.04)):
    if (name, Lmax) in gap:
        g = gap[(name, Lmax)][0]
        verdict.append("%s: %+.4f at %d steps, target <= %+.2f: %s" % (name, g, Lmax, target,
                       "met" if g <= target else "not met, by %.4f" % (g - target)))
lines += ["", "The paper's claim at this scale (SCAPE 0.1 no worse than AdamS within +0.02, SCAPE 0.01 within +0.04): " +
          "; ".join(verdict) + ".", "",
          "Means over train steps 2..N of each log.jsonl (step 1 bootstraps); \"at target d\" is the last step's count."]
text = "\n".join(lines) + "\n"
open(os.path.join(out, "results.md.tmp"), "w").write(text)
os.replace(os.path.join(out, "results.md.tmp"), os.path.join(out, "results.md"))
print(text)
PYEOF

for steps in $LENGTHS; do
    plots=(); i=1
    for name in "${names[@]}"; do
        dat="$OUT/steps_$steps/$name.val.dat"
        [ -f "$dat" ] || { i=$((i + 1)); continue; }   # not run at this length
        plots+=("'$dat' using 1:3:4 with filledcurves fs transparent solid 0.2 noborder lc $i notitle")
        plots+=("'$dat' using 1:2 with linespoints pt 7 ps 0.6 lw 1.5 lc $i title '$name'")
        i=$((i + 1))
    done
    gnuplot <<GP
set terminal pngcairo size 1000,650 font ",11" noenhanced
set output '$OUT/val_loss_steps$steps.png.tmp'
set title "validation loss, $family $MODEL_SPEC, $RANKS ranks, $steps steps: mean (line) and min..max (band) over seeds $SEEDS"
set ylabel 'validation loss (nats/token)'
set xlabel 'step'
set grid
set key top right
plot $(IFS=,; echo "${plots[*]}")
GP
    mv "$OUT/val_loss_steps$steps.png.tmp" "$OUT/val_loss_steps$steps.png"
done
echo "wrote $OUT/results.md and $(for s in $LENGTHS; do printf '%s ' "$OUT/val_loss_steps$s.png"; done)"

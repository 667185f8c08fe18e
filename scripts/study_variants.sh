#!/usr/bin/env bash
# scripts/study_variants.sh run|tables - issue 31: SCAPE's same-bytes variants (--scape-variant; formulas in
# optim/dist_scape.c) beside faithful SCAPE, dense AdamS and topk-ef on the CPU reproduction recipe of
# scripts/reproduce_cpu.sh gpt (d12c128h4t128v4096, bpe4k corpus, 4 ranks, B 4, T 128, lr 1e-3 cosine to 1e-4 with
# 5% warm-up, the trainer's beta2 0.95 and weight decay 0.1, clip 1.0, density 1 -> d over 30% of the run, norms and
# biases sparsified), STEPS steps (default 1000), SEEDS (default 1 2 3).
#   run     trains RUNS (default: adams, scape_0.1, scape_0.01, topk_ef_0.01 and each variant at d 0.1 and 0.01 with
#           its default parameter); a run name says its rule:
#             adams | topk_ef_<d> | scape_<d> | scape_<d>_catchup_a<A> | scape_<d>_tensornu_a<A> | scape_<d>_rdecay_<rho>
#           (A: --scape-variant-cap, rho: --scape-residual-decay). Every finished run appends one line to
#           docs/study/variants.tsv: steps, run, seed, final validation loss, wall seconds, mean bytes sent per step
#           and rank (steps 2..) and at the target density (after the warm-up), the RMS displacement of the
#           parameters from their initial values over wte and over the rest (the mechanism: docs/reproduction.md
#           6.3), and the mean kept energy of the first-moment mask after the warm-up (energy_m, rank 0's c). A run
#           already there is not trained again (ONLY="run ...", SEEDS, STEPS split the work across sessions).
#   tables  docs/study/variants.md (the table: gap to AdamS paired by seed, mean +- sd [min, max], bytes, displacement
#           relative to AdamS's, energy), docs/study/variants_gap_steps<N>.dat (the plot's data) and
#           variants_gap_steps<N>.png (each run's gap with its seed range, the issue's +0.02 / +0.04 goals marked),
#           from the tsv.
# The logs stay under OUT (default out/variants); the final checkpoints are deleted once measured. Run it under
# nice, alone (it takes both cores); a 1,000-step run costs 6-9 minutes here.
# Not for: the length and batch study of issue 29 (scripts/study_gap.sh), the paper-shaped comparison
# (scripts/reproduce_cpu.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: $0 run|tables   (env: STEPS, SEEDS, RUNS, ONLY, OUT, TRAINER)"
[ $# = 1 ] || { echo "$usage" >&2; exit 2; }
mode=$1
OUT=${OUT:-out/variants}
DOC=${DOC:-docs/study}
DATA=${DATA:-data}
TRAINER=${TRAINER:-./train_gpt}
MODEL_SPEC=${MODEL_SPEC:-d12c128h4t128v4096}
RANKS=${RANKS:-4}; B=${B:-4}; T=${T:-128}
LR=${LR:-1e-3}; LR_FLOOR=${LR_FLOOR:-1e-4}
STEPS=${STEPS:-1000}
SEEDS=${SEEDS:-"1 2 3"}
EVAL_BATCHES=${EVAL_BATCHES:-50}
RUNS=${RUNS:-"adams scape_0.1 scape_0.01 topk_ef_0.01 scape_0.1_catchup_a4 scape_0.01_catchup_a4 scape_0.1_tensornu_a4 scape_0.01_tensornu_a4 scape_0.1_rdecay_0.9 scape_0.01_rdecay_0.9"}
mkdir -p "$DOC"
tsv=$DOC/variants.tsv
[ -f "$tsv" ] || printf 'steps\trun\tseed\tval_loss\tseconds\tbytes_per_step\tbytes_at_target\tdisp_wte\tdisp_rest\tenergy_m\n' > "$tsv"

flags_of() { # RUN DW: the update rule's flags from the run's name
    local run=$1 dw=$2 sparse="--density-start 1 --density-warmup $2 --scape-exclude-norms 0" d rest
    case $run in
        adams) echo "--optimizer adams"; return ;;
        topk_ef_*) echo "--optimizer topk-ef --density ${run#topk_ef_} $sparse"; return ;;
        scape_*) ;;
        *) echo "error: unknown run '$run'" >&2; exit 2 ;;
    esac
    rest=${run#scape_}; d=${rest%%_*}; rest=${rest#"$d"}; rest=${rest#_}
    case $rest in
        "") echo "--optimizer scape --density $d $sparse" ;;
        catchup_a*) echo "--optimizer scape --density $d $sparse --scape-variant catchup --scape-variant-cap ${rest#catchup_a}" ;;
        tensornu_a*) echo "--optimizer scape --density $d $sparse --scape-variant tensor-nu --scape-variant-cap ${rest#tensornu_a}" ;;
        rdecay_*) echo "--optimizer scape --density $d $sparse --scape-variant residual-decay --scape-residual-decay ${rest#rdecay_}" ;;
        *) echo "error: unknown run '$run'" >&2; exit 2 ;;
    esac
}
done_already() { awk -F'\t' -v p="$1" -v r="$2" -v s="$3" '$1 == p && $2 == r && $3 == s { f = 1 } END { exit !f }' "$tsv"; }
launch=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
[ "$RANKS" -gt 1 ] && launch+=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS")

# the initial parameters of a seed (one step at lr 0: the update moves nothing), for the displacement
init_of() {
    local seed=$1 dir=$OUT/init/seed$1
    if ! compgen -G "$dir/ckpt_*/model.bin" > /dev/null; then
        rm -rf "$dir"; mkdir -p "$(dirname "$dir")"
        env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$TRAINER" --model "$MODEL_SPEC" --data "$DATA" --batch 1 --seq "$T" \
            --steps 1 --lr 0 --lr-floor 0 --weight-decay 0 --eval-every 0 --sample-every 0 --seed "$seed" --threads 1 \
            --out "$dir" > "$dir.out" 2>&1 || { echo "error: the init run failed; see $dir.out" >&2; exit 1; }
    fi
    echo "$dir"
}

train() { # RUN SEED
    local run=$1 seed=$2 steps=$STEPS dir=$OUT/steps_$STEPS/$1/seed$2 dw warm init
    if done_already "$steps" "$run" "$seed"; then echo "== $steps $run seed $seed: in $tsv already" >&2; return; fi
    [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $run "* ]] && return
    dw=$(awk -v s="$steps" 'BEGIN { printf "%d", s * 0.3 + 0.5 }')
    warm=$(awk -v s="$steps" 'BEGIN { printf "%d", s * 0.05 + 0.5 }')
    local flags every=$((steps / 5 > 0 ? steps / 5 : 1)) stats=""
    flags=$(flags_of "$run" "$dw")
    [[ $run != adams ]] && stats="--mask-stats-every $every"
    init=$(init_of "$seed")
    rm -rf "$dir"; mkdir -p "$(dirname "$dir")"
    echo "== $steps $run seed $seed: $flags ($(date -u +%H:%M:%S))" >&2
    local t0=$SECONDS
    # shellcheck disable=SC2086
    "${launch[@]}" "$TRAINER" --model "$MODEL_SPEC" --data "$DATA" --batch "$B" --seq "$T" --steps "$steps" \
        --lr "$LR" --lr-floor "$LR_FLOOR" --warmup "$warm" --eval-every "$every" --eval-batches "$EVAL_BATCHES" \
        --sample-every 0 --seed "$seed" --threads 1 --keep-ckpts 1 --ckpt-every 0 $flags $stats --out "$dir" \
        > "$dir.out" 2>&1 || { echo "error: the run failed; see $dir.out:" >&2; tail -n 3 "$dir.out" >&2; exit 1; }
    local secs=$((SECONDS - t0))
    /usr/bin/python3 - "$dir" "$init" "$steps" "$run" "$seed" "$secs" "$dw" >> "$tsv" <<'EOF'
import json, sys
d, init, steps, run, seed, secs, dw = sys.argv[1:8]
steps, dw = int(steps), int(dw)
val, sent, target, energy = None, [], [], []
for line in open(d + "/log.jsonl"):
    o = json.loads(line)
    if o["event"] == "val" and o["step"] == steps: val = o["val_loss"]
    if o["event"] == "train" and o["step"] >= 2:
        sent.append(o["comm_bytes_sent"])
        if o["step"] > dw: target.append(o["comm_bytes_sent"])
    if o["event"] == "mask" and o["step"] > dw and "mean_energy_m" in o: energy.append(o["mean_energy_m"])
if val is None: sys.exit(f"{d}: no validation at step {steps}")
sys.path.insert(0, "dev")
from scape_displacement import displacement  # noqa: E402  (RMS of theta_final - theta_0 by group)
dw_, _, _, dr_, _, _ = displacement(init, d)
e = "%.4f" % (sum(energy) / len(energy)) if energy else "nan"
print(f"{steps}\t{run}\t{seed}\t{val:.6f}\t{secs}\t{sum(sent) / len(sent):.0f}\t{sum(target) / max(1, len(target)):.0f}\t"
      f"{dw_:.4e}\t{dr_:.4e}\t{e}")
EOF
    rm -rf "$dir"/ckpt_*
}

case $mode in
run) for seed in $SEEDS; do for run in $RUNS; do train "$run" "$seed"; done; done ;;
tables) ;;
*) echo "$usage" >&2; exit 2 ;;
esac

/usr/bin/python3 - "$tsv" "$DOC" <<'PYEOF'
import collections, glob, math, os, sys
tsv, doc = sys.argv[1:3]
rows = [l.rstrip("\n").split("\t") for l in open(tsv)][1:]
for old in glob.glob(os.path.join(doc, "variants_gap_steps*.dat")): os.remove(old)  # rewritten below, whole
by = collections.defaultdict(lambda: collections.defaultdict(dict))  # steps -> run -> seed -> row
for r in rows:
    by[int(r[0])][r[1]][int(r[2])] = dict(val=float(r[3]), secs=int(r[4]), bytes=float(r[5]), bt=float(r[6]),
                                          dw=float(r[7]), dr=float(r[8]), em=float(r[9]))
def stats(xs):
    m = sum(xs) / len(xs)
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan"))
def order(run):
    base = ["adams", "topk_ef_0.1", "topk_ef_0.01", "scape_0.1", "scape_0.01"]
    if run in base: return (0, base.index(run), run)
    return (1, run.split("_")[1] != "0.1", run)
lines = ["# SCAPE's same-bytes variants at CPU scale (issue 31; scripts/study_variants.sh)", "",
         "The CPU reproduction recipe (scripts/reproduce_cpu.sh gpt): GPT-2 d12c128h4t128v4096, bpe4k corpus, 4 ranks, "
         "2,048 tokens per step, lr 1e-3 cosine to 1e-4 (5% warm-up), beta2 0.95, weight decay 0.1, clip 1.0, density "
         "1 -> d over 30% of the run, norms and biases sparsified. Gap = final validation loss minus AdamS's, paired "
         "by seed, mean +- sample sd [min, max]. Bytes: mean sent per step and rank over the run and after the density "
         "warm-up. Displacement: RMS of theta_final - theta_0 over wte and over the rest, relative to AdamS's (same "
         "seed). energy_m: kept energy of the first-moment mask after the warm-up (rank 0's c). Cost: wall seconds "
         "of the run's seeds on this 2-core machine.", ""]
for steps in sorted(by):
    runs = sorted(by[steps], key=order)
    a = by[steps].get("adams", {})
    lines += ["## %d steps" % steps, "",
              "| run | val loss | gap to AdamS | seeds | bytes/step/rank (mean, at d) | displacement wte, rest (x AdamS) | energy_m | cost (s) |",
              "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        x = by[steps][run]
        v = stats([x[s]["val"] for s in x])
        common = sorted(set(a) & set(x))
        g = [x[s]["val"] - a[s]["val"] for s in common]
        gap = ""
        if common and run != "adams":
            gm, gs = stats(g)
            gap = "%+.3f +- %.3f [%+.3f, %+.3f]" % (gm, gs, min(g), max(g))
            path = os.path.join(doc, "variants_gap_steps%d.dat" % steps)
            new = not os.path.exists(path)
            with open(path, "a") as f:
                if new: f.write("# run\tgap_mean\tgap_sd\tgap_min\tgap_max\tbytes_at_target\n")
                f.write("%s\t%.6f\t%.6f\t%.6f\t%.6f\t%.0f\n" % (run, gm, gs if len(g) > 1 else 0.0, min(g), max(g),
                                                              stats([x[s]["bt"] for s in x])[0]))
        disp = ""
        if common:
            rw = stats([x[s]["dw"] / a[s]["dw"] for s in common])[0]
            rr = stats([x[s]["dr"] / a[s]["dr"] for s in common])[0]
            disp = "%.2f, %.2f" % (rw, rr)
        em = [x[s]["em"] for s in x if not math.isnan(x[s]["em"])]
        lines.append("| %s | %.4f +- %.4f | %s | %d | %.0f, %.0f | %s | %s | %d |" % (
            run, v[0], v[1] if len(x) > 1 else float("nan"), gap, len(x), stats([x[s]["bytes"] for s in x])[0],
            stats([x[s]["bt"] for s in x])[0], disp, "%.3f" % stats(em)[0] if em else "", sum(x[s]["secs"] for s in x)))
    lines.append("")
open(os.path.join(doc, "variants.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
command -v gnuplot > /dev/null || exit 0
for dat in "$DOC"/variants_gap_steps*.dat; do
    [ -f "$dat" ] || continue
    n=${dat##*variants_gap_steps}; n=${n%.dat}
    {
        echo "set terminal pngcairo size 1000,520 noenhanced; set output '${dat%.dat}.png'"
        echo "set title 'gap to dense AdamS after $n steps (mean, seed min..max), same bytes as faithful SCAPE at each d'"
        echo "set ylabel 'final val loss minus AdamS (nats)'; set yrange [0:*]; set xtics rotate by -30; set grid ytics"
        echo "set key outside top center horizontal; set bmargin 7; set offsets 0.5, 0.5, 0, 0"
        echo "plot '$dat' using 0:2:4:5:xtic(1) with yerrorbars pt 7 lc 'black' title 'gap', 0.02 with lines dt 2 title 'goal at d 0.1 (+0.02)', 0.04 with lines dt 3 title 'goal at d 0.01 (+0.04)'"
    } | gnuplot 2> /dev/null || echo "note: gnuplot could not draw ${dat%.dat}.png" >&2
done

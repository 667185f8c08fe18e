#!/usr/bin/env bash
# scripts/study_gap.sh length|batch|probe|tables - where SCAPE's gap to dense AdamS closes at CPU scale (issue 29
# part 2): the gap's mean and seed spread against
#   length  the run length with the authors' warm-up fractions (lr 5% and density 10% of the run, as their
#           5,000 / 10,000 of 100,000 steps), LENGTHS (default 200 400 800 2000: 10x) at 2,048 tokens per step;
#           adams, scape_0.1, scape_0.01 with 3 seeds up to 800 steps (runs under 15 minutes here) and 2 at 2000,
#           topk_ef_0.01 at the shortest and longest; all at LR (default 1e-3, the issue-15 probe's), not the 2k
#           probe's choice, so that every length shares one lr;
#   batch   tokens per optimizer step at BATCH_STEPS steps (default 100: a 32k-token run of 200 steps costs 20
#           minutes here): TOTAL_BATCHES (default 2048 8192 32768,
#           by --total-batch: accumulation over micro-batches), 2 seeds, adams, scape_0.1, scape_0.01, and the
#           authors'-residual ablation scape_0.01_dblres (--scape-double-residual-defect) at the smallest and
#           largest; each batch at the lr its probe chose (LR_<tokens>, default the probe's result in
#           docs/study/probe.tsv, else LR);
#   probe   one short lr probe per batch: adams at each of PROBE_LRS (default 5e-4 1e-3 2e-3 4e-3), seed 1,
#           BATCH_STEPS steps, at each of TOTAL_BATCHES; the lowest final validation loss is that batch's lr (the
#           study ran 5e-4..1.6e-2 at 2k, 2e-3..1.6e-2 at 8k and 4e-3..1.6e-2 at 32k, doubling: at 100 steps the
#           best lr of the default list was its largest, so the lists reach past it);
#   peers   issue 33: SCAPE against its peers at equal bytes, at PEER_BATCHES tokens per step (default 2048 8192),
#           BATCH_STEPS steps, SEEDS (default 1 2 3), each batch's lr: adams, scape_0.1, scape_0.01 and PEER_RUNS, whose
#           settings make their mean bytes per step and rank (steps 2.., 4 ranks) match SCAPE's (2.30 MB at d 0.1,
#           0.487 MB at d 0.01, measured in the batch study) within 10%, from each rule's byte formula:
#             topk_ef_c<d>  topk-ef at constant density d (no density warm-up: one at 1.0 would send 8 P (N-1));
#             powersgd_r<r> PowerSGD of rank r from step 1 (--powersgd-start 0);
#             onebit_f<F>   1-bit Adam with F AdamW steps (--onebit-freeze F);
#             demo_k<k>     DeMo with k coefficients per 64 x 64 block, at the lr its probe chose;
#           default: topk_ef_c0.033 powersgd_r13 onebit_f11 demo_k107 (d 0.1's bytes), topk_ef_c0.007 powersgd_r2
#           onebit_f1 demo_k20 (d 0.01's; 1-bit Adam cannot come down to them: its floor, 1 bit a parameter plus
#           scales, is 0.551 MB, +13%). DeMo's update is lr sign(.), which moves every coordinate by lr a step where
#           Adam's moves by less, so it gets its own lr probe first: demo_k107 at DEMO_PROBE_LRS (default 5e-4 1e-3
#           2e-3 4e-3: the study ran 1e-3..4e-3 first and 1e-3 won, so the list reaches below it), seed 1, the smallest
#           batch; the lowest final validation loss is DeMo's lr at every batch;
#   tables  docs/study/results.md (tables), gap_vs_steps.dat, gap_vs_batch.dat and study_gap.png (both gaps on
#           log axes, the paper's +0.02 / +0.04 marked), peers_tb<N>.dat and peers.png (final validation loss
#           against bytes per step, every method, one panel per batch), from docs/study/runs.tsv alone.
# The model and settings are the GPT recipe's (scripts/reproduce_cpu.sh: d12c128h4t128v4096, 2.9M parameters, 18.5%
# embeddings, bpe4k corpus, 4 ranks, B 4, T 128) with the authors' GPT-345M optimizer settings (beta2 0.999, weight
# decay 0.01, cosine to lr/15, clip 1.0; SCAPE's density 1.0 -> d geometrically, norms and biases sparsified).
# Every finished run appends one line to docs/study/runs.tsv (point, run, seed, final validation loss, seconds,
# mean bytes sent per step and rank), so the tables survive without out/: commit it as runs finish. A run already
# in runs.tsv is not trained again; ONLY="run ...", SEEDS, LENGTHS, TOTAL_BATCHES split the work across sessions.
# The logs stay under OUT (default out/study). Run it under nice, alone (it takes both cores).
# Not for: the paper-shaped comparison of all optimizers (scripts/reproduce_cpu.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: $0 length|batch|probe|peers|tables   (env: LENGTHS, TOTAL_BATCHES, BATCH_STEPS, SEEDS, ONLY, LR, PROBE_LRS, OUT)"
[ $# = 1 ] || { echo "$usage" >&2; exit 2; }
mode=$1
OUT=${OUT:-out/study}
DOC=${DOC:-docs/study}
DATA=${DATA:-data}
TRAINER=${TRAINER:-./train_gpt}
MODEL_SPEC=${MODEL_SPEC:-d12c128h4t128v4096}
RANKS=${RANKS:-4}; B=${B:-4}; T=${T:-128}
LR=${LR:-1e-3}
LENGTHS=${LENGTHS:-"200 400 800 2000"}
TOTAL_BATCHES=${TOTAL_BATCHES:-"2048 8192 32768"}
PEER_BATCHES=${PEER_BATCHES:-"2048 8192"}
PEER_RUNS=${PEER_RUNS:-"topk_ef_c0.033 powersgd_r13 onebit_f11 demo_k107 topk_ef_c0.007 powersgd_r2 onebit_f1 demo_k20"}
DEMO_PROBE_LRS=${DEMO_PROBE_LRS:-"5e-4 1e-3 2e-3 4e-3"}
BATCH_STEPS=${BATCH_STEPS:-100}
PROBE_LRS=${PROBE_LRS:-"5e-4 1e-3 2e-3 4e-3"}
EVAL_BATCHES=${EVAL_BATCHES:-50}
mkdir -p "$DOC"
runs_tsv=$DOC/runs.tsv
[ -f "$runs_tsv" ] || printf 'point\trun\tseed\tval_loss\tseconds\tbytes_per_step\ttrain_tail\tval_best\tcommit\n' > "$runs_tsv"

flags_of() { # the update rule's flags, with the density warm-up DW
    local dw=$2 sparse="--density-start 1 --density-warmup $2 --scape-exclude-norms 0"
    case $1 in
        adams|adams_lr*) echo "--optimizer adams" ;; # adams_lr<lr>: a probe run, the lr passed apart
        adamw) echo "--optimizer adamw" ;;
        scape_0.1) echo "--optimizer scape --density 0.1 $sparse" ;;
        scape_0.01) echo "--optimizer scape --density 0.01 $sparse" ;;
        scape_0.01_dblres) echo "--optimizer scape --density 0.01 $sparse --scape-double-residual-defect" ;;
        topk_ef_0.01) echo "--optimizer topk-ef --density 0.01 $sparse" ;;
        topk_ef_c*) echo "--optimizer topk-ef --density ${1#topk_ef_c} --scape-exclude-norms 0" ;;
        powersgd_r*) echo "--optimizer powersgd --powersgd-rank ${1#powersgd_r} --powersgd-start 0" ;;
        onebit_f*) echo "--optimizer onebit-adam --onebit-freeze ${1#onebit_f}" ;;
        demo_k*) local k=${1#demo_k}; echo "--optimizer demo --demo-topk ${k%%_*}" ;; # demo_k<k>_lr<lr>: a probe run
        *) echo "error: unknown run '$1'" >&2; exit 2 ;;
    esac
}
# the lr a batch's probe chose (lowest final validation loss in probe.tsv), else LR
lr_for() {
    local tb=$1 v
    v=$(eval echo "\${LR_$tb:-}")
    [ -n "$v" ] && { echo "$v"; return; }
    v=$(awk -F'\t' -v tb="$tb" '$1 == "probe_tb" tb { split($2, a, "_lr"); if (best == "" || $4 < bv) { bv = $4; best = a[2] } }
        END { print best }' "$runs_tsv" 2> /dev/null)
    echo "${v:-$LR}"
}
done_already() { awk -F'\t' -v p="$1" -v r="$2" -v s="$3" '$1 == p && $2 == r && $3 == s { f = 1 } END { exit !f }' "$runs_tsv"; }

# train POINT RUN SEED STEPS TOTAL_BATCH LR: one run, its line appended to runs.tsv
train() {
    local point=$1 run=$2 seed=$3 steps=$4 tb=$5 lr=$6
    if done_already "$point" "$run" "$seed"; then echo "== $point $run seed $seed: in $runs_tsv already" >&2; return; fi
    [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $run "* ]] && return
    local dw warm floor dir=$OUT/$point/$run/seed$seed
    dw=$(awk -v s="$steps" 'BEGIN { printf "%d", s * 0.1 + 0.5 }')
    warm=$(awk -v s="$steps" 'BEGIN { printf "%d", s * 0.05 + 0.5 }')
    floor=$(awk -v l="$lr" 'BEGIN { printf "%.6g", l / 15 }')
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    local launch=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
    [ "$RANKS" -gt 1 ] && launch+=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS")
    echo "== $point $run seed $seed: $steps steps, $tb tokens/step, lr $lr ($(date -u +%H:%M:%S))" >&2
    local t0=$SECONDS
    # shellcheck disable=SC2046
    "${launch[@]}" "$TRAINER" --model "$MODEL_SPEC" --data "$DATA" --batch "$B" --seq "$T" --total-batch "$tb" \
        --steps "$steps" --lr "$lr" --lr-floor "$floor" --warmup "$warm" --beta2 0.999 --weight-decay 0.01 --clip 1.0 \
        --eval-every "$steps" --eval-batches "$EVAL_BATCHES" --sample-every 0 --seed "$seed" --threads 1 \
        --ckpt-every 0 $(flags_of "$run" "$dw") --out "$dir" > "$dir.out" 2>&1 \
        || { echo "error: the run failed; see $dir.out:" >&2; tail -n 3 "$dir.out" >&2; exit 1; }
    local secs=$((SECONDS - t0))
    rm -rf "$dir"/ckpt_* # the table reads the log only
    /usr/bin/python3 - "$dir/log.jsonl" "$point" "$run" "$seed" "$secs" "$steps" >> "$runs_tsv" <<'EOF'
import json, sys
path, point, run, seed, secs, steps = sys.argv[1:7]
val, sent = None, []
for line in open(path):
    o = json.loads(line)
    if o["event"] == "val" and o["step"] == int(steps): val = o["val_loss"]
    if o["event"] == "train" and o["step"] >= 2: sent.append(o["comm_bytes_sent"])
if val is None: sys.exit(f"{path}: no validation at step {steps}")
print(f"{point}\t{run}\t{seed}\t{val:.6f}\t{secs}\t{sum(sent) / len(sent):.0f}")
EOF
}

case $mode in
length)
    lens=($LENGTHS)
    shortest=$(printf '%s\n' "${lens[@]}" | sort -n | head -1); longest=$(printf '%s\n' "${lens[@]}" | sort -n | tail -1)
    for L in "${lens[@]}"; do
        seeds=${SEEDS:-$([ "$L" -le 800 ] && echo "1 2 3" || echo "1 2")}
        names="adams scape_0.1 scape_0.01"
        { [ "$L" = "$shortest" ] || [ "$L" = "$longest" ]; } && names="$names topk_ef_0.01"
        for seed in $seeds; do for run in $names; do train "tb2048_steps$L" "$run" "$seed" "$L" 2048 "$LR"; done; done
    done ;;
batch)
    tbs=($TOTAL_BATCHES)
    smallest=$(printf '%s\n' "${tbs[@]}" | sort -n | head -1); largest=$(printf '%s\n' "${tbs[@]}" | sort -n | tail -1)
    for tb in "${tbs[@]}"; do
        names="adams scape_0.1 scape_0.01"
        { [ "$tb" = "$smallest" ] || [ "$tb" = "$largest" ]; } && names="$names scape_0.01_dblres"
        for seed in ${SEEDS:-1 2}; do
            for run in $names; do train "tb${tb}_steps$BATCH_STEPS" "$run" "$seed" "$BATCH_STEPS" "$tb" "$(lr_for "$tb")"; done
        done
    done ;;
peers)
    tbs=($PEER_BATCHES)
    smallest=$(printf '%s\n' "${tbs[@]}" | sort -n | head -1)
    for lr in $DEMO_PROBE_LRS; do train "demoprobe_tb$smallest" "demo_k107_lr$lr" 1 "$BATCH_STEPS" "$smallest" "$lr"; done
    demo_lr=$(awk -F'\t' -v p="demoprobe_tb$smallest" '$1 == p { split($2, a, "_lr"); if (best == "" || $4 < bv) { bv = $4; best = a[2] } }
        END { print best }' "$runs_tsv")
    [ -n "$demo_lr" ] || { echo "error: no DeMo lr probe in $runs_tsv (ONLY leaves it out?)" >&2; exit 1; }
    for tb in "${tbs[@]}"; do
        for seed in ${SEEDS:-1 2 3}; do
            for run in adams scape_0.1 scape_0.01 $PEER_RUNS; do
                lr=$(lr_for "$tb"); [[ $run == demo_* ]] && lr=$demo_lr
                train "tb${tb}_steps$BATCH_STEPS" "$run" "$seed" "$BATCH_STEPS" "$tb" "$lr"
            done
        done
    done ;;
probe)
    for tb in $TOTAL_BATCHES; do
        for lr in $PROBE_LRS; do train "probe_tb$tb" "adams_lr$lr" 1 "$BATCH_STEPS" "$tb" "$lr"; done
    done ;;
tables) ;;
*) echo "$usage" >&2; exit 2 ;;
esac

# tables and plot data from runs.tsv alone
/usr/bin/python3 - "$runs_tsv" "$DOC" "$BATCH_STEPS" "$MODEL_SPEC" <<'PYEOF'
import math, os, sys, collections
tsv, doc, batch_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [l.rstrip("\n").split("\t") for l in open(tsv)][1:]
by = collections.defaultdict(dict)   # point -> run -> seed -> (val, secs, bytes)
for p, r, s, v, secs, b in (row[:6] for row in rows if not row[0].startswith("regime")):  # regime: study_regime.sh's
    by[p].setdefault(r, {})[int(s)] = (float(v), int(secs), float(b))
def stats(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
    return m, sd
def gap(point, run, base="adams"):
    """mean and sample sd over seeds of (run - base), paired by seed; None without a common seed"""
    a, x = by[point].get(base, {}), by[point].get(run, {})
    common = sorted(set(a) & set(x))
    if not common: return None
    d = [x[s][0] - a[s][0] for s in common]
    m, sd = stats(d)
    return m, sd, min(d), max(d), len(common)
def point_of(p):
    tb, steps = p.split("_steps")
    return int(tb[2:]), int(steps)
lines = ["# SCAPE's gap to dense AdamS at CPU scale (issue 29; scripts/study_gap.sh)", "",
         "GPT-2 d12c128h4t128v4096 (2.9M parameters), bpe4k corpus, 4 ranks, the authors' GPT-345M optimizer settings "
         "(beta2 0.999, weight decay 0.01, cosine to lr/15, clip 1.0), lr warm-up 5% and density warm-up 10% of the run. "
         "Gap = final validation loss minus AdamS's, per seed (same seed: same data order and initialization), then mean "
         "+- sample sd [min, max] over seeds. Cost: wall seconds of all runs at the point on this 2-core machine.", ""]
studies = {"length": [], "batch": []}
for p in by:
    if p.startswith("probe") or p.startswith("demoprobe"): continue
    tb, steps = point_of(p)
    if tb == 2048: studies["length"].append(p)
    if steps == batch_steps: studies["batch"].append(p)
runs_order = ["scape_0.1", "scape_0.01", "topk_ef_0.01", "scape_0.01_dblres"]
dat = {}
for study, pts in studies.items():
    if not pts: continue
    key = (lambda p: point_of(p)[1]) if study == "length" else (lambda p: point_of(p)[0])
    pts.sort(key=key)
    lines += ["## Gap against %s" % ("steps at the target density (0.9 x run length)" if study == "length" else "tokens per optimizer step (%d steps)" % batch_steps), "",
              "| point | AdamS val loss | " + " | ".join(runs_order) + " | seeds | cost (s) |",
              "|---|---|" + "---|" * len(runs_order) + "---|---|"]
    for p in pts:
        a = [v[0] for v in by[p].get("adams", {}).values()]
        cells = []
        for r in runs_order:
            g = gap(p, r)
            cells.append("%+.3f +- %.3f [%+.3f, %+.3f]" % g[:4] if g else "")
            if g: dat.setdefault((study, r), []).append((key(p) * (0.9 if study == "length" else 1), g))
        mine = [x for r, x in by[p].items() if r == "adams" or r in runs_order]  # not the peers' runs at the point
        seeds = max(len(x) for x in mine)
        cost = sum(v[1] for x in mine for v in x.values())
        lines.append("| %s | %s | %s | %d | %d |" % (p, "%.4f +- %.4f" % stats(a) if a else "", " | ".join(cells), seeds, cost))
    lines.append("")
probes = sorted(p for p in by if p.startswith("probe"))
if probes:
    lines += ["## lr probes (AdamS, seed 1)", "", "| tokens/step | lr: final val loss |", "|---|---|"]
    for p in probes:
        items = sorted(((float(r.split("_lr")[1]), x[1][0]) for r, x in by[p].items()), key=lambda t: t[0])
        lines.append("| %s | %s |" % (p[8:], ", ".join("%g: %.4f" % t for t in items)))
    lines.append("")
# issue 33: every method at equal bytes, per batch point that has a peer's run
def family(r):
    for pre, f in (("adams", "adams"), ("scape_", "scape"), ("topk_ef_c", "topk-ef"), ("powersgd_", "powersgd"),
                   ("onebit_", "onebit-adam"), ("demo_", "demo")):
        if r.startswith(pre): return f
    return None
peer_pts = sorted((p for p in studies["batch"] if any(family(r) not in (None, "adams", "scape") for r in by[p])),
                  key=lambda p: point_of(p)[0])
peer_dat = {}
ln_v = math.log(float(sys.argv[4].rsplit("v", 1)[1]))  # the uniform guess's loss
level = {"scape_0.1": None, "scape_0.01": None}
for p in peer_pts:
    for r in level:
        if r in by[p]: level[r] = stats([v[2] for v in by[p][r].values()])[0]
    lines += ["## Equal bytes: SCAPE and its peers at %d tokens per step (%d steps; issue 33)" % (point_of(p)[0], batch_steps), "",
              "Bytes: mean sent per step and rank (steps 2..), and its ratio to the SCAPE run of the same level (the "
              "matched level is the nearer of d 0.1's and d 0.01's). Gap to AdamS and difference to that SCAPE run: "
              "final validation loss, paired by seed, mean +- sample sd [min, max] (negative: ahead of SCAPE).", "",
              "| run | bytes/step/rank | x SCAPE's | val loss | gap to AdamS | minus SCAPE's | seeds | cost (s) |",
              "|---|---|---|---|---|---|---|---|"]
    runs = [r for r in by[p] if family(r) and (family(r) != "scape" or r in level)]
    order = ["adams", "scape", "topk-ef", "powersgd", "onebit-adam", "demo"]
    runs.sort(key=lambda r: (-stats([v[2] for v in by[p][r].values()])[0] if r != "adams" else -1e30,
                             order.index(family(r))))
    for r in runs:
        x = by[p][r]
        b = stats([v[2] for v in x.values()])[0]
        v = [t[0] for t in x.values()]
        m, sd = stats(v)
        near = min((r2 for r2 in level if level[r2]), key=lambda r2: abs(math.log(b / level[r2])), default=None)
        ref = level[near] if near else None
        vs = gap(p, r, near) if near and r not in ("adams", near) and m <= ln_v else None
        g = gap(p, r) if r != "adams" else None
        if g and m > ln_v: g = None  # a diverged run has no meaningful gap
        lines.append("| %s | %.0f | %s | %.4f +- %.4f [%.4f, %.4f] | %s | %s | %d | %d |" % (
            r, b, "%.2f" % (b / ref) if ref and r != "adams" else "", m, sd, min(v), max(v),
            "%+.3f +- %.3f" % g[:2] if g else ("diverged (mean above ln V)" if m > ln_v else ""),
            "%+.3f +- %.3f [%+.3f, %+.3f]" % vs[:4] if vs else "", len(x), sum(t[1] for t in x.values())))
        peer_dat.setdefault((point_of(p)[0], family(r)), []).append((b, m, sd, min(v), max(v), len(x), r))
    lines.append("")
dprobes = sorted(p for p in by if p.startswith("demoprobe"))
if dprobes:
    lines += ["## DeMo lr probe (seed 1)", "", "| tokens/step | run: final val loss |", "|---|---|"]
    for p in dprobes:
        items = sorted(((float(r.split("_lr")[1]), r, x[1][0]) for r, x in by[p].items() if 1 in x))
        lines.append("| %s | %s |" % (p[len("demoprobe_tb"):], ", ".join("%s: %.4f" % t[1:] for t in items)))
    lines.append("")
open(os.path.join(doc, "results.md"), "w").write("\n".join(lines) + "\n")
import glob
for old in glob.glob(os.path.join(doc, "peers_tb*.dat")): os.remove(old)
for (tb, f), pts in peer_dat.items():
    with open(os.path.join(doc, "peers_tb%d_%s.dat" % (tb, f)), "w") as fh:
        fh.write("# bytes_per_step_rank val_mean val_sd val_min val_max seeds run\n")
        for t in sorted(pts): fh.write("%.0f %.6f %.6f %.6f %.6f %d %s\n" % t)
for old in glob.glob(os.path.join(doc, "gap_vs_*.dat")): os.remove(old)  # a series with no point now has no file
for (study, r), pts in dat.items():
    with open(os.path.join(doc, "gap_vs_%s_%s.dat" % ("steps" if study == "length" else "batch", r)), "w") as f:
        f.write("# x mean sd min max seeds\n")
        for x, g in pts: f.write("%g %.6f %.6f %.6f %.6f %d\n" % ((x,) + g))
print("\n".join(lines))
PYEOF
if command -v gnuplot > /dev/null && ls "$DOC"/gap_vs_*.dat > /dev/null 2>&1; then
    plots=()
    for which in steps batch; do
        cmd=""
        for f in "$DOC"/gap_vs_"${which}"_*.dat; do
            [ -f "$f" ] || continue
            r=${f##*/gap_vs_${which}_}; r=${r%.dat}
            cmd="$cmd${cmd:+, }'$f' using 1:2:4:5 with yerrorlines title '$r'"
        done
        [ -n "$cmd" ] && plots+=("set title 'gap to AdamS vs $([ $which = steps ] && echo 'steps at target density' || echo 'tokens per step')'; set xlabel '$([ $which = steps ] && echo 'steps at target density' || echo 'tokens per optimizer step')'; plot $cmd, 0.02 with lines dt 2 lc 'black' title 'paper +0.02 (d 0.1)', 0.04 with lines dt 3 lc 'black' title 'paper +0.04 (d 0.01)'")
    done
    {
        echo "set terminal pngcairo size 1200,500 noenhanced; set output '$DOC/study_gap.png'"
        echo "set logscale xy; set ylabel 'final val loss minus AdamS (nats, mean, seed min..max)'; set key top right"
        echo "set multiplot layout 1,${#plots[@]}"
        for p in "${plots[@]}"; do echo "$p"; done
        echo "unset multiplot"
    } | gnuplot 2> /dev/null || echo "note: gnuplot could not draw $DOC/study_gap.png" >&2
fi
if command -v gnuplot > /dev/null && ls "$DOC"/peers_tb*.dat > /dev/null 2>&1; then
    tbs=$(ls "$DOC"/peers_tb*.dat | sed 's/.*peers_tb\([0-9]*\)_.*/\1/' | sort -nu)
    # the y range of the runs that learned: a mean above ln V (the uniform guess's loss) diverged and stays off the plot
    vocab=${MODEL_SPEC##*v}
    yr=$(cat "$DOC"/peers_tb*.dat | awk -v v="$vocab" '!/^#/ && $2 < log(v) { if (n++ == 0 || $4 < lo) lo = $4; if ($5 > hi) hi = $5 }
        END { if (n) printf "[%.3f:%.3f]", lo - 0.05, hi + 0.05; else printf "[*:*]" }')
    {
        echo "set terminal pngcairo size 1200,500 noenhanced; set output '$DOC/peers.png'"
        echo "set logscale x; set xlabel 'bytes sent per step and rank (mean)'; set ylabel 'final val loss (mean, seed min..max)'"
        echo "set key top right; set yrange $yr; set multiplot layout 1,$(echo "$tbs" | wc -w)"
        for tb in $tbs; do
            cmd=""
            for f in "$DOC"/peers_tb"${tb}"_*.dat; do
                m=${f##*/peers_tb${tb}_}; m=${m%.dat}
                cmd="$cmd${cmd:+, }'$f' using 1:2:4:5 with yerrorlines pt 7 title '$m'"
            done
            echo "set title '$tb tokens per step, $BATCH_STEPS steps, 4 ranks'; plot $cmd"
        done
        echo "unset multiplot"
    } | gnuplot 2> /dev/null || echo "note: gnuplot could not draw $DOC/peers.png" >&2
fi

#!/usr/bin/env bash
# scripts/plot_eval.sh OUT.png LOG.jsonl [LOG.jsonl ...] - plots the downstream tasks' accuracy (acc as lines,
# acc_norm dashed; LAMBADA's acc) against step from the "eval_task" events of one or more training logs
# (--eval-task; <out>/log.jsonl) into one PNG with gnuplot; each series is titled by run directory and task, so
# `scripts/plot_eval.sh acc.png out/adams/log.jsonl out/scape/log.jsonl` compares runs.
# The last value logged for a (run, task, step) wins (a resumed run may repeat steps after its checkpoint).
# Not for: perplexities (printed and logged; their scale does not share an axis with accuracy) or loss
# (scripts/plot_loss.sh).
set -euo pipefail
. "$(dirname "$0")/plot_common.sh" # arguments, gnuplot, png, $tmp, plots=(), i=0, plot_log_name
for log in "$@"; do
    plot_log_name "$log"
    # one file per task: "step acc acc_norm" (acc_norm "nan" for a last-word task)
    /usr/bin/python3 - "$log" "$tmp/$i" <<'PY'
import json, math, sys
log, prefix = sys.argv[1], sys.argv[2]
by = {}
for line in open(log):
    try: e = json.loads(line)
    except ValueError: continue
    if e.get("event") != "eval_task": continue
    by.setdefault(e["task"], {})[e["step"]] = (e.get("acc"), e.get("acc_norm"))
for k, (task, steps) in enumerate(sorted(by.items())):
    with open("%s_%d.dat" % (prefix, k), "w") as f:
        f.write("# %s\n" % task)
        for s in sorted(steps):
            a, n = steps[s]
            f.write("%d %s %s\n" % (s, "nan" if a is None else repr(a), "nan" if n is None else repr(n)))
PY
    found=0
    for dat in "$tmp/${i}"_*.dat; do
        [ -e "$dat" ] || continue
        found=1
        task=$(head -1 "$dat" | sed 's/^# //')
        ntask=$(( ${ntask:-0} + 1 )); c=$ntask
        plots+=("'$dat' using 1:2 with linespoints pt 7 ps 0.7 lc $c title '$name $task acc'")
        awk 'NR > 1 && $3 != "nan" { f = 1 } END { exit !f }' "$dat" && # a last-word task has no acc_norm
            plots+=("'$dat' using 1:3 with linespoints pt 6 ps 0.7 dt 2 lc $c title '$name $task acc\\_norm'")
    done
    [ $found = 1 ] || { echo "error: $log has no eval_task events; train with --eval-task FORMAT=FILE" >&2; exit 1; }
    i=$((i + 1))
done
plot_cmd=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 1000,600 font ",11"
set output '$png.tmp'
set xlabel 'step'
set ylabel 'accuracy'
set yrange [0:1]
set grid
set key outside right
set datafile missing 'nan'
plot $plot_cmd
GP
mv "$png.tmp" "$png"
echo "wrote $png"

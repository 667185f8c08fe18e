#!/usr/bin/env bash
# scripts/plot_loss.sh OUT.png LOG.jsonl [LOG.jsonl ...] - plots train loss (lines) and validation loss (points)
# against step from one or more training logs (<out>/log.jsonl) into one PNG with gnuplot; each run is titled by
# its directory name, so `scripts/plot_loss.sh cmp.png out/adamw/log.jsonl out/scape/log.jsonl` compares runs.
# A resumed run's log holds the steps after the checkpoint twice only if the run was interrupted between a
# checkpoint and a later step; the plot keeps the last value logged for each step.
# Not for: parsing anything but the "train" and "val" events the training loop writes.
set -euo pipefail
. "$(dirname "$0")/plot_common.sh" # arguments, gnuplot, png, $tmp, plots=(), i=0, plot_log_name
for log in "$@"; do
    plot_log_name "$log"
    # last value per step wins (a resumed run may repeat steps after its checkpoint)
    { grep '"event": "train"' "$log" || true; } | sed -nE 's/.*"step": ([0-9]+), "train_loss": ([^,}]+).*/\1 \2/p' \
        | awk '$2 != "null" { v[$1] = $2 } END { for (s in v) print s, v[s] }' | sort -n > "$tmp/train$i.dat"
    { grep '"event": "val"' "$log" || true; } | sed -nE 's/.*"step": ([0-9]+), "val_loss": ([^,}]+).*/\1 \2/p' \
        | awk '$2 != "null" { v[$1] = $2 } END { for (s in v) print s, v[s] }' | sort -n > "$tmp/val$i.dat"
    [ -s "$tmp/train$i.dat" ] || { echo "error: $log has no train events (the run stopped before its first step); nothing to plot" >&2; exit 1; }
    [ -s "$tmp/val$i.dat" ] || echo "note: $log has no val events (a run with --eval-every 0, or one stopped before its first evaluation); plotting its train loss only" >&2
    plots+=("'$tmp/train$i.dat' using 1:2 with lines lw 1.5 lc $((i + 1)) title '$name train'")
    [ -s "$tmp/val$i.dat" ] && plots+=("'$tmp/val$i.dat' using 1:2 with linespoints pt 7 ps 0.8 dt 2 lc $((i + 1)) title '$name val'")
    i=$((i + 1))
done
plot_cmd=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 1000,600 font ",11"
set output '$png.tmp'
set xlabel 'step'
set ylabel 'cross-entropy loss (nats/token)'
set grid
set key top right
plot $plot_cmd
GP
mv "$png.tmp" "$png"
echo "wrote $png"

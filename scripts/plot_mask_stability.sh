#!/usr/bin/env bash
# scripts/plot_mask_stability.sh OUT.png LOG.jsonl [LOG.jsonl ...] - plots, against step, the parameter-weighted
# mean Jaccard overlap of consecutive masks from the "mask" events of training logs written with
# --mask-stats-every N: for a SCAPE run the first-moment masks (mean_jaccard_m, solid) and the hypothetical
# raw-gradient masks (mean_jaccard_g, dashed); for a topk-ef run its raw-gradient (error-feedback) selections
# (mean_jaccard_g, dashed). Each run is titled by its directory name. The last value logged per step wins.
# Not for: per-tensor values (read the event's jaccard_m/jaccard_g arrays) or the kept-energy shares.
set -euo pipefail
. "$(dirname "$0")/plot_common.sh" # arguments, gnuplot, png, $tmp, plots=(), i=0, plot_log_name
for log in "$@"; do
    plot_log_name "$log"
    for k in m g; do
        { grep '"event": "mask"' "$log" || true; } | sed -nE "s/.*\"step\": ([0-9]+),.*\"mean_jaccard_$k\": ([^,}]+).*/\1 \2/p" \
            | awk '$2 != "null" { v[$1] = $2 } END { for (s in v) print s, v[s] }' | sort -n > "$tmp/$k$i.dat"
    done
    if ! [ -s "$tmp/m$i.dat" ] && ! [ -s "$tmp/g$i.dat" ]; then
        [ $# -gt 1 ] && echo "note: $log has no mask events with a Jaccard (train with --mask-stats-every N, N >= 1; a SCAPE or topk-ef run); left out" >&2
        continue
    fi
    [ -s "$tmp/m$i.dat" ] && plots+=("'$tmp/m$i.dat' using 1:2 with linespoints pt 7 ps 0.6 lw 1.5 lc $((i + 1)) title '$name first-moment mask'")
    [ -s "$tmp/g$i.dat" ] && plots+=("'$tmp/g$i.dat' using 1:2 with linespoints pt 6 ps 0.6 lw 1.5 dt 2 lc $((i + 1)) title '$name raw-gradient mask'")
    i=$((i + 1))
done
[ ${#plots[@]} -gt 0 ] || { echo "error: none of the logs has mask events with a Jaccard; train with --mask-stats-every N (N >= 1)" >&2; exit 1; }
plot_cmd=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 1000,600 font ",11"
set output '$png.tmp'
set xlabel 'step'
set ylabel 'Jaccard overlap of consecutive masks (parameter-weighted mean)'
set yrange [0:1.05]
set grid
set key bottom right
plot $plot_cmd
GP
mv "$png.tmp" "$png"
echo "wrote $png"

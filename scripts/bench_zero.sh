#!/usr/bin/env bash
# scripts/bench_zero.sh [DENSITY...] - SCAPE with ZeRO-1 (issue 17) against dense AdamS and unsharded SCAPE: the
# largest rank's optimizer-state bytes and the bytes each rank sends per step, for GPT-2 d12 and Llama 500m at
# N = 1, 2, 4, 8 (computed from the trainers' slice and owner tables), then measured with optim/dist.c on a small
# GPT-2-shaped table under mpirun at N = 1, 2, 4, 8, each beside the same formula (ratio 1.000 = as computed).
# DENSITY: SCAPE's target densities (default 0.1 0.01). Formulas: optim/bench_zero.c's header. Not a test.
set -eu
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- 0.1 0.01
for d in "$@"; do
    awk -v d="$d" 'BEGIN { exit !(d > 0 && d <= 1) }' ||
        { echo "error: density '$d' is outside (0, 1]; e.g. scripts/bench_zero.sh 0.1 0.01" >&2; exit 2; }
done
make -s build/bench_zero
build/bench_zero computed "$@"
for d in "$@"; do
    for n in 1 2 4 8; do
        echo
        env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" build/bench_zero measured "$d"
    done
done

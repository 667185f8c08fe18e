#!/usr/bin/env bash
# dev/cuda/emu/drop_wait.sh FILE LINE TEST [ARGS...] - how the emulator's stream orders catch a missing wait:
# deletes the first line of FILE that equals LINE exactly (leading spaces included), rebuilds build/emu/fp32/TEST,
# runs it with EMU_STREAMS=sync, defer and reverse, prints the checks passed / failed in each, and puts FILE back
# (also when interrupted). RANKS=2 runs it under mpirun -np 2; EMU_DEVICES passes through (2 for the NCCL paths).
# Example (the residual-offload upload's wait; defer fails 5 of test_scape_updater's 16 checks, sync none):
#   dev/cuda/emu/drop_wait.sh cuda/dist_scape.cuh \
#       '        cudaCheck(cudaStreamWaitEvent(s, u->ev_stage_ready[i], 0));' test_scape_updater
set -u
[ $# -ge 3 ] || { echo "usage: $0 FILE LINE TEST [ARGS...]" >&2; exit 2; }
file=$1 line=$2 test=$3; shift 3
n=$(grep -nxF -m1 -- "$line" "$file" | cut -d: -f1)
[ -n "$n" ] || { echo "error: $file has no line equal to: $line" >&2; exit 2; }
backup=$(mktemp); cp "$file" "$backup"
restore() { cp "$backup" "$file"; rm -f "$backup"; }
trap restore EXIT INT TERM
sed -i "${n}d" "$file"
make "build/emu/fp32/$test" > /dev/null 2>&1 || { echo "error: build/emu/fp32/$test did not build without line $n" >&2; exit 1; }
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
run=("build/emu/fp32/$test" "$@")
[ "${RANKS:-1}" = 2 ] && run=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "${run[@]}")
out=$(mktemp)
for order in sync defer reverse; do
    EMU_STREAMS=$order timeout 900 "${run[@]}" > "$out" 2>&1
    echo "$file:$n removed, EMU_STREAMS=$order: exit $?, $(grep -c '^ok' "$out") passed, $(grep -c '^FAIL' "$out") failed"
done
rm -f "$out"
restore; trap - EXIT
make "build/emu/fp32/$test" > /dev/null 2>&1

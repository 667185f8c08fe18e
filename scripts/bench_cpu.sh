#!/usr/bin/env bash
# scripts/bench_cpu.sh [THREADS] - CPU throughput of the GPT-2 trainer (train_gpt.c): tokens/s and MFU of a training
# step (forward + backward + AdamW) for d12 at B=4, T=64 and T=256, with the SGEMM peak measured on this machine
# printed beside them, and a per-layer time breakdown. THREADS (default 2) sets OMP_NUM_THREADS. On a shared,
# loaded machine add OMP_WAIT_POLICY=passive (spinning threads lose their time slices) or use 1 thread.
# Not a test: the numbers depend on the machine and its load (printed first).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
make -s build/bench_gpt2
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
for T in 64 256; do
    echo
    OMP_NUM_THREADS=$threads build/bench_gpt2 d12 4 "$T" 3
done

#!/usr/bin/env bash
# scripts/bench_cpu.sh [THREADS] [STEPS] - CPU throughput of the GPT-2 trainer (train_gpt.c), in one run:
#   1. the kernels (dev/bench_gpt2.c): tokens/s and MFU of a training step (forward + backward + AdamW) for d12 at
#      B=4, T=64 and T=256 and for the default model (d4c128h4) at B=8, T=128, each against the SGEMM rate measured
#      in the same process, with a per-layer time breakdown;
#   2. the trainer itself (train_gpt, the host update, 1 rank) at the same shapes on the default corpus: the median
#      ms per step over steps 3..STEPS (default 12) as log.jsonl records them, tokens/s, and that median against the
#      kernels' step of part 1 (the loop's own cost: data, gradient norm, update, logging).
# THREADS (default 2) sets OMP_NUM_THREADS. Not a test: the numbers depend on the machine and its load (printed
# first); on a shared machine run it twice and compare.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
steps=${2:-12}
make -s build/bench_gpt2 train_gpt
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "BLAS: $(ldd build/bench_gpt2 | grep -o '/[^ ]*libopenblas[^ ]*')"
declare -A kernel_ms
for shape in "d12 4 64" "d12 4 256" "d4c128h4 8 128"; do
    echo
    out=$(OMP_NUM_THREADS=$threads build/bench_gpt2 $shape 3)
    echo "$out"
    kernel_ms[$shape]=$(echo "$out" | sed -n 's/^step (median of [0-9]*): \([0-9.]*\) ms.*/\1/p')
done
echo
echo "trainer (train_gpt, 1 rank, $threads threads, median of steps 3..$steps):"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for shape in "d12 4 64" "d12 4 256" "d4c128h4 8 128"; do
    read -r model B T <<< "$shape"
    if ! OMP_NUM_THREADS=$threads ./train_gpt --model "$model" --batch "$B" --seq "$T" --steps "$steps" --eval-every 0 \
         --sample-every 0 --out "$tmp/$model.$T" --threads "$threads" --keep-ckpts 1 > "$tmp/out" 2>&1; then
        echo "  $model B=$B T=$T: train_gpt failed: $(tail -1 "$tmp/out")"; continue
    fi
    /usr/bin/python3 - "$tmp/$model.$T/log.jsonl" "$model" "$B" "$T" "${kernel_ms[$shape]}" <<'PY'
import json, statistics, sys
path, model, B, T, kern = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5] or "nan")
ms = [e["ms"] for e in map(json.loads, open(path)) if e["event"] == "train" and e["step"] >= 3]
med = statistics.median(ms)
print(f"  {model} B={B} T={T}: {med:.1f} ms per step (range {min(ms):.1f}-{max(ms):.1f}), {B * T / med * 1e3:.0f} tok/s, "
      f"{med / kern:.2f}x the kernels' step")
PY
done

#!/usr/bin/env bash
# scripts/cluster/gpt345m.sh - the paper's GPT-345M run (SCAPE, arXiv 2607.01678): 24 layers, C 1024, 16 heads,
# T 1024, global batch 512 sequences (524,288 tokens per step), lr 1.5e-4 with cosine decay to 1e-5 after 5,000
# warm-up steps, weight decay 0.01, gradient clip 1.0, on OpenWebText (scripts/cluster/prepare_data.sh openwebtext).
# SCAPE's density warms up geometrically from 1.0 over DENSITY_WARMUP steps (the paper: 8,000-10,000).
# Variables: DATA_DIR (shards, required), STEPS (run length, required: choose it for your budget), RANKS (default 32),
# MICRO_BATCH (sequences per rank per micro-step, default 8; accumulation makes up the rest), OPTIMIZER adamw|adams|scape
# (default scape), DENSITY (0.1 or 0.01; default 0.01), DENSITY_WARMUP (default 8000), HOSTFILE, OUT, TRAINER
# (default ./train_gpt, the CPU trainer; point it at the CUDA build on GPUs), DRY_RUN=1 (print the command only).
# Betas and eps are the trainer's defaults (0.9, 0.95, 1e-8): the issue does not restate the paper's for GPT-345M.
# Not run in CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/cluster/common.sh
RANKS=${RANKS:-32}; MICRO_BATCH=${MICRO_BATCH:-8}; OPTIMIZER=${OPTIMIZER:-scape}; DENSITY=${DENSITY:-0.01}
DENSITY_WARMUP=${DENSITY_WARMUP:-8000}; TRAINER=${TRAINER:-./train_gpt}
SUFFIX=; [ "$OPTIMIZER" = scape ] && SUFFIX=_$DENSITY
need DATA_DIR STEPS
OUT=${OUT:-out/gpt345m_${OPTIMIZER}${SUFFIX}}
# shellcheck disable=SC2046
launch "$TRAINER" --model d24c1024h16t1024 --train "$DATA_DIR/*train*.bin" --val "$DATA_DIR/*val*.bin" \
    --seq 1024 --batch "$MICRO_BATCH" --total-batch $((512 * 1024)) --steps "$STEPS" \
    --lr 1.5e-4 --lr-floor 1e-5 --warmup 5000 --weight-decay 0.01 --clip 1.0 $(optimizer_flags) \
    --eval-every 1000 --eval-batches 20 --sample-every 0 --ckpt-every 1000 --keep-ckpts 2 --out "$OUT" \
    ${RESUME:+--resume "$RESUME"}

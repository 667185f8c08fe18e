#!/usr/bin/env bash
# scripts/cluster/llama500m.sh - the SCAPE paper's Llama-500M run (arXiv 2607.01678) with the settings of the
# authors' scripts (mz687/SCAPE_SC26, slurm_scripts/vista/scape/llama*/d_*/scape_*.sh; docs/reproduction.md section
# 1.4 lists each setting, its flag there and ours): L16 C1536 F4096 NH16 NKV8 (train_llama's "500m"), T 4096, 1024
# sequences per step (4,194,304 tokens), 100,000 steps, lr 3e-4 with 2,000 warm-up steps and cosine decay to 3e-5,
# betas 0.9 / 0.95, eps 1e-8, weight decay 0.1, clip 1.0 on the reconstructed gradient (--move-clip-grad-to-reducer;
# this runtime clips g_hat), on SlimPajama (scripts/cluster/prepare_data.sh slimpajama). SCAPE: at d 0.1, 2,000
# steps at density 1 (--topk-adams-start-iter 2000), then 1.0 -> 0.1 over 8,000, norms and biases sparsified; at
# d 0.01, 1.0 -> 0.01 over 10,000 from step 0. The dense baselines (OPTIMIZER=adamw or adams) take the same schedule.
# Required: DATA_DIR (shards). Optional: OPTIMIZER adamw|adams|scape (default scape), DENSITY 0.1|0.01 (default
# 0.01), RANKS (default 64), MICRO_BATCH (default 4), and to depart from the recipe STEPS, WARMUP, DENSITY_DENSE,
# DENSITY_WARMUP, EXCLUDE_NORMS; HOSTFILE, OUT, RESUME, TRAINER (default ./train_llama), DRY_RUN=1.
# Not run in CI (DRY_RUN is: test/test_reproduce.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/cluster/common.sh
RANKS=${RANKS:-64}; MICRO_BATCH=${MICRO_BATCH:-4}; OPTIMIZER=${OPTIMIZER:-scape}; DENSITY=${DENSITY:-0.01}
TRAINER=${TRAINER:-./train_llama}
check_density
STEPS=${STEPS:-100000}; WARMUP=${WARMUP:-2000}
if [ "$DENSITY" = 0.1 ]; then DENSITY_DENSE=${DENSITY_DENSE:-2000}; DENSITY_WARMUP=${DENSITY_WARMUP:-8000}
else DENSITY_DENSE=${DENSITY_DENSE:-0}; DENSITY_WARMUP=${DENSITY_WARMUP:-10000}; fi
# d 0.1 sparsifies norms and biases (its script passes --no-topk-adams-use-exclude-from-topk); the d 0.01 script
# could not be re-read in the session that wrote this, so it follows d 0.1's (docs/reproduction.md 1.4)
EXCLUDE_NORMS=${EXCLUDE_NORMS:-0}
SUFFIX=; [ "$OPTIMIZER" = scape ] && SUFFIX=_$DENSITY
need DATA_DIR
OUT=${OUT:-out/llama500m_${OPTIMIZER}${SUFFIX}}
# shellcheck disable=SC2046
RANKS=${SLURM_NTASKS:-$RANKS}
launch "$TRAINER" --model 500mt4096 --train "$DATA_DIR/*train*.bin" --val "$DATA_DIR/*val*.bin" \
    --seq 4096 --batch "$MICRO_BATCH" --total-batch $((1024 * 4096)) --steps "$STEPS" \
    --lr 3e-4 --lr-floor 3e-5 --warmup "$WARMUP" --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --clip 1.0 \
    $(optimizer_flags) --eval-every 1000 --eval-batches 20 --sample-every 0 --ckpt-every 1000 --keep-ckpts 2 \
    --out "$OUT" ${RESUME:+--resume "$RESUME"}

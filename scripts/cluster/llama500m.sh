#!/usr/bin/env bash
# scripts/cluster/llama500m.sh - the SCAPE paper's Llama-500M run (arXiv 2607.01678) with the settings of the
# authors' scripts (mz687/SCAPE_SC26, slurm_scripts/vista/scape/llama*/d_*/scape_*.sh; docs/reproduction.md section
# 1.4 lists each setting, its flag there and ours): L16 C1536 F4096 NH16 NKV8 (train_llama's "500m"), T 4096, 1024
# sequences per step (4,194,304 tokens), 100,000 steps, lr 3e-4 with 2,000 warm-up steps and cosine decay to 3e-5,
# betas 0.9 / 0.95, eps 1e-8, weight decay 0.1, clip 1.0 on the reconstructed gradient (--move-clip-grad-to-reducer;
# this runtime clips g_hat), on SlimPajama (scripts/cluster/prepare_data.sh slimpajama). SCAPE: at d 0.1, 2,000
# steps at density 1 (--topk-adams-start-iter 2000), then 1.0 -> 0.1 over 8,000, norms and biases sparsified; at
# d 0.01, 1.0 -> 0.01 over 10,000 from step 0. The dense baselines (OPTIMIZER=adamw or adams) take the same schedule,
# and so do the peers: topk-ef with SCAPE's density schedule, powersgd, onebit-adam and demo with their own settings
# at the trainer's defaults (EXTRA changes them).
# Required: DATA_DIR (shards). Optional: OPTIMIZER adamw|adams|scape|topk-ef|powersgd|onebit-adam|demo|diloco|sparseloco (default
# scape), DENSITY 0.1|0.01 (default 0.01; scape and topk-ef, ignored by the others), LOCO_H (diloco, sparseloco:
# inner steps per outer step, default 500 / 30; checkpoints then at the multiple of it at or above 1,000 steps, so
# each resumes on any number of ranks), LOCO_MASK own|shared (sparseloco, default own), RANKS (default SLURM_NTASKS in an allocation, else 64), MICRO_BATCH (default 4), and
# to depart from the recipe STEPS, WARMUP, DENSITY_DENSE, DENSITY_WARMUP, EXCLUDE_NORMS; HOSTFILE, OUT (default
# out/llama500m_<optimizer>[_<density>] in the repository), RESUME, TRAINER (default the repository's train_llama),
# EXTRA, DRY_RUN=1. Run it from any folder: relative paths are relative to that folder. A value it cannot use stops
# it with one line, status 2, before anything starts.
# Not run in CI (DRY_RUN is: test/test_reproduce.sh).
set -euo pipefail
# the repository (the defaults of TRAINER and OUT are in it); not found when sbatch ran a spool copy of this file
if ! ROOT=$(cd "$(dirname "$0")/../.." 2> /dev/null && pwd) || [ ! -f "$ROOT/scripts/cluster/common.sh" ]; then
    echo "error: $0 is not in the repository (sbatch runs a copy of a script); submit scripts/cluster/slurm.sbatch with RECIPE=llama500m instead" >&2
    exit 2
fi
. "$ROOT/scripts/cluster/common.sh"
ranks_default 64; MICRO_BATCH=${MICRO_BATCH:-4}; OPTIMIZER=${OPTIMIZER:-scape}
TRAINER=${TRAINER:-$ROOT/train_llama}
check_rule
STEPS=${STEPS:-100000}; WARMUP=${WARMUP:-2000}
if [ "${DENSITY:-}" = 0.1 ]; then DENSITY_DENSE=${DENSITY_DENSE:-2000}; DENSITY_WARMUP=${DENSITY_WARMUP:-8000}
else DENSITY_DENSE=${DENSITY_DENSE:-0}; DENSITY_WARMUP=${DENSITY_WARMUP:-10000}; fi
# d 0.1 sparsifies norms and biases (its script passes --no-topk-adams-use-exclude-from-topk); the d 0.01 script
# could not be re-read in the session that wrote this, so it follows d 0.1's (docs/reproduction.md 1.4)
EXCLUDE_NORMS=${EXCLUDE_NORMS:-0}
SUFFIX=; if sparse_rule; then SUFFIX=_$DENSITY; fi
need DATA_DIR
check_recipe
OUT=${OUT:-$ROOT/out/llama500m_${OPTIMIZER}${SUFFIX}}
optimizer_flags
ckpt_every 1000
launch "$TRAINER" --model 500mt4096 --train "$DATA_DIR/*train*.bin" --val "$DATA_DIR/*val*.bin" \
    --seq 4096 --batch "$MICRO_BATCH" --total-batch $((1024 * 4096)) --steps "$STEPS" \
    --lr 3e-4 --lr-floor 3e-5 --warmup "$WARMUP" --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --clip 1.0 \
    "${OPT_FLAGS[@]}" --eval-every 1000 --eval-batches 20 --sample-every 0 --ckpt-every "$CKPT_EVERY" --keep-ckpts 2 \
    --out "$OUT" ${RESUME:+--resume "$RESUME"}

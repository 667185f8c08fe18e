#!/usr/bin/env bash
# scripts/cluster/gpt345m.sh - the SCAPE paper's GPT-345M run (arXiv 2607.01678) with the settings of the authors'
# scripts (mz687/SCAPE_SC26, slurm_scripts/vista/scape/gpt*/d_*/scape_*.sh; docs/reproduction.md section 1.4 lists
# each setting, its flag there and ours): 24 layers, C 1024, 16 heads, T 1024, 512 sequences per step (524,288
# tokens), 100,000 steps, lr 1.5e-4 with 5,000 warm-up steps and cosine decay to 1e-5, betas 0.9 / 0.999 (their
# scripts give no --adam-beta2, so Megatron's default), eps 1e-8, weight decay 0.01, clip 1.0, on OpenWebText
# (scripts/cluster/prepare_data.sh openwebtext). SCAPE (both densities): density 1.0 -> DENSITY over 10,000 steps
# from step 0; norm gains and biases sparsified at d 0.01 (--no-topk-adams-use-exclude-from-topk). The dense
# baselines (OPTIMIZER=adamw or adams) take the same schedule, and so do the peers: topk-ef with SCAPE's density
# schedule, powersgd, onebit-adam and demo with their own settings at the trainer's defaults (EXTRA changes them).
# Required: DATA_DIR (shards). Optional: OPTIMIZER adamw|adams|scape|topk-ef|powersgd|onebit-adam|demo|diloco|sparseloco (default
# scape), DENSITY 0.1|0.01 (default 0.01; scape and topk-ef, ignored by the others), LOCO_H (diloco, sparseloco:
# inner steps per outer step, default 500 / 30; checkpoints then at the multiple of it at or above 1,000 steps, so
# each resumes on any number of ranks), LOCO_MASK own|shared (sparseloco, default own), RANKS (default SLURM_NTASKS in an allocation, else 32), MICRO_BATCH (sequences per
# rank per micro-step, default 8; accumulation makes up the rest), and to depart from the recipe STEPS, WARMUP,
# DENSITY_DENSE, DENSITY_WARMUP, EXCLUDE_NORMS; HOSTFILE, OUT (default out/gpt345m_<optimizer>[_<density>] in the
# repository), RESUME (latest: continue), TRAINER (default the repository's train_gpt; the CUDA build on GPUs), EXTRA
# (trainer flags, last), DRY_RUN=1 (print the command; 0 or unset: run it). Run it from any folder: relative paths
# are relative to that folder. A value it cannot use stops it with one line, status 2, before anything starts.
# Not run in CI (DRY_RUN is: test/test_reproduce.sh).
set -euo pipefail
# the repository (the defaults of TRAINER and OUT are in it); not found when sbatch ran a spool copy of this file
if ! ROOT=$(cd "$(dirname "$0")/../.." 2> /dev/null && pwd) || [ ! -f "$ROOT/scripts/cluster/common.sh" ]; then
    echo "error: $0 is not in the repository (sbatch runs a copy of a script); submit scripts/cluster/slurm.sbatch with RECIPE=gpt345m instead" >&2
    exit 2
fi
. "$ROOT/scripts/cluster/common.sh"
ranks_default 32; MICRO_BATCH=${MICRO_BATCH:-8}; OPTIMIZER=${OPTIMIZER:-scape}
TRAINER=${TRAINER:-$ROOT/train_gpt}
check_rule
STEPS=${STEPS:-100000}; WARMUP=${WARMUP:-5000}
DENSITY_DENSE=${DENSITY_DENSE:-0}; DENSITY_WARMUP=${DENSITY_WARMUP:-10000}
# d 0.01 sparsifies norms and biases (its script passes --no-topk-adams-use-exclude-from-topk); the d 0.1 script
# could not be re-read in the session that wrote this, so it follows d 0.01's (docs/reproduction.md 1.4)
EXCLUDE_NORMS=${EXCLUDE_NORMS:-0}
SUFFIX=; if sparse_rule; then SUFFIX=_$DENSITY; fi
need DATA_DIR
check_recipe
OUT=${OUT:-$ROOT/out/gpt345m_${OPTIMIZER}${SUFFIX}}
optimizer_flags
ckpt_every 1000
launch "$TRAINER" --model d24c1024h16t1024 --train "$DATA_DIR/*train*.bin" --val "$DATA_DIR/*val*.bin" \
    --seq 1024 --batch "$MICRO_BATCH" --total-batch $((512 * 1024)) --steps "$STEPS" \
    --lr 1.5e-4 --lr-floor 1e-5 --warmup "$WARMUP" --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0.01 \
    --clip 1.0 "${OPT_FLAGS[@]}" \
    --eval-every 1000 --eval-batches 20 --sample-every 0 --ckpt-every "$CKPT_EVERY" --keep-ckpts 2 --out "$OUT" \
    ${RESUME:+--resume "$RESUME"}

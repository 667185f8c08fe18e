# shellcheck shell=bash
# scripts/study_settings.sh - sourced by scripts/study_regime.sh and scripts/study_frontier.sh: the settings their runs
# share, each overridable from the environment. Their lines share docs/study/runs.tsv and its points, so a run of one
# study stands for the other's only while both train with these: the output folder of the tables (DOC), the data
# (DATA), the AdamS lr probe (PROBE_LRS at PROBE_STEPS steps), validation (EVAL_BATCHES batches per rank at
# EVAL_POINTS points), checkpoints every CKPT_EVERY steps, RANKS ranks of B x T tokens (TB per step).
DOC=${DOC:-docs/study}
DATA=${DATA:-data}
PROBE_LRS=${PROBE_LRS:-"5e-4 1e-3 2e-3"}
PROBE_STEPS=${PROBE_STEPS:-10000}
EVAL_BATCHES=${EVAL_BATCHES:-140}
EVAL_POINTS=${EVAL_POINTS:-20}
CKPT_EVERY=${CKPT_EVERY:-2000}
RANKS=${RANKS:-4}; B=${B:-4}; T=${T:-64}
TB=$((RANKS * B * T))

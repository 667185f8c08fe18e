# shellcheck shell=bash
# scripts/study_settings.sh - sourced by scripts/study_regime.sh and scripts/study_frontier.sh: the settings their runs
# share, each overridable from the environment. Their lines share docs/study/runs.tsv and its points, so a run of one
# study stands for the other's only while both train with these: the output folder of the tables (DOC), the data
# (DATA), the AdamS lr probe (PROBE_LRS at PROBE_STEPS steps), validation (EVAL_BATCHES batches per rank at
# EVAL_POINTS points), checkpoints every CKPT_EVERY steps (0: none), RANKS ranks of B x T tokens (TB per step).
# A value of the wrong form exits 2 with one line naming the variable, before anything is read or written.
DOC=${DOC:-docs/study}
DATA=${DATA:-data}
PROBE_LRS=${PROBE_LRS:-"5e-4 1e-3 2e-3"}
PROBE_STEPS=${PROBE_STEPS:-10000}
EVAL_BATCHES=${EVAL_BATCHES:-140}
EVAL_POINTS=${EVAL_POINTS:-20}
CKPT_EVERY=${CKPT_EVERY:-2000}
RANKS=${RANKS:-4}; B=${B:-4}; T=${T:-64}
for _v in PROBE_STEPS EVAL_BATCHES EVAL_POINTS RANKS B T; do
    [[ ${!_v} =~ ^[1-9][0-9]{0,8}$ ]] || { echo "error: $_v='${!_v}' is no positive integer; unset it for the study's value" >&2; exit 2; }
done
[[ $CKPT_EVERY =~ ^[0-9]{1,9}$ ]] \
    || { echo "error: CKPT_EVERY='$CKPT_EVERY' is no number of steps (0: no checkpoints); unset it for the study's 2000" >&2; exit 2; }
[ -n "${PROBE_LRS// /}" ] || { echo "error: PROBE_LRS is empty; give the probe's learning rates, e.g. PROBE_LRS=\"5e-4 1e-3 2e-3\"" >&2; exit 2; }
for _v in $PROBE_LRS; do
    [[ $_v =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] && awk -v x="$_v" 'BEGIN { exit !(x > 0) }' \
        || { echo "error: PROBE_LRS: '$_v' is no positive learning rate (e.g. 1e-3)" >&2; exit 2; }
done
unset _v
TB=$((RANKS * B * T))

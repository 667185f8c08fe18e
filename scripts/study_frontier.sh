#!/usr/bin/env bash
# scripts/study_frontier.sh plan|run|tables|flags - the loss-against-bytes frontier of every update rule (issue 45):
# final validation loss against the mean bytes each rank sends per step, every rule at three or more settings, on the
# regime study's small model at two of its lengths (scripts/study_regime.sh: the same settings, points and runs.tsv).
#   plan    print the runs in the order `run` trains them (ONLY and SEEDS restrict both), each marked done (a line
#           in runs.tsv, committed ones and the regime study's included) or not, with the cost left estimated from the
#           finished runs (each run name at its own median seconds per step where one has finished)
#   run     train the runs that runs.tsv lacks, in plan order; a run cut short (a session's end, a signal) resumes
#           from its newest checkpoint (every CKPT_EVERY steps) when `run` is started again
#   tables  docs/study/frontier.md and frontier.png from runs.tsv alone (scripts/study_frontier_tables.py)
#   flags RUN [STEPS]  print the trainer flags of a run name (at STEPS steps, default 1,000), or refuse the name
# Model and settings: the regime study's small model d4c64h4t64v4096 (466,304 parameters), 4 ranks, B 4, T 64 (1,024
# tokens per step), the bpe4k State of the Union corpus, the authors' GPT-345M optimizer settings and schedule
# fractions (beta2 0.999, weight decay 0.01, clip 1, lr warm-up 5% and cosine to lr/15; SCAPE's density from 1 to d
# over 10% of the run, which is also PowerSGD's dense start), every run at the lr the regime study's AdamS probe chose
# (read from runs.tsv: 1e-3), validation over EVAL_BATCHES (default 140) batches per rank, the whole shard.
# Points regime_d4c64h4t64v4096_steps1000 and _steps10000 (2.2 and 22 tokens per parameter), seeds 1-3, runs
# (SETTINGS; each name's flags in scripts/study_lib.sh's study_flags):
#   dense      adams adamw
#   SCAPE      scape_0.1 scape_0.03 scape_0.01 scape_0.003, and its catchup variant scape_0.1_catchup_a4
#              scape_0.01_catchup_a4 (norms and biases sparsified)
#   topk-ef    topk_ef_c0.08 topk_ef_c0.008 topk_ef_c0.0008 (constant density)
#   PowerSGD   powersgd_r1 powersgd_r4 powersgd_r16 (rank; dense for the first 10% of steps)
#   1-bit Adam onebit_adam_f0.05 onebit_adam_f0.15 onebit_adam_f0.3 (the fraction of steps before the freeze)
#   DeMo       demo_k4 demo_k16 demo_k64 (DCT coefficients per block and rank)
#   DiLoCo     diloco_h10 diloco_h30 diloco_h100 (inner AdamW steps per outer step)
#   SparseLoCo sparseloco_h10 sparseloco_h30 (each rank's own mask), sparseloco_shared_h10 sparseloco_shared_h30
#              (SCAPE's shared mask)
# Order: every setting at 1,000 steps (seeds 1-3, a seed's settings together), then 10,000 steps seed 1, then its
# seeds 2-3 (`plan` estimates the hours left).
# The regime study's lines at these points (adams, scape_0.1, scape_0.01, topk_ef_c0.008 at both lengths, the catchup
# variants at 10,000 steps; seeds 1-3) are this study's and are not run again. They come from its older trainer,
# commit 7753401fc518, whose update digests (dev/update_digest.sh: losses, model and optimizer state of short runs of
# every rule and path) are identical to this study's trainer's for every rule the two share; the tables name every
# commit they read. Each finished run appends one line to docs/study/runs.tsv in the regime study's format (point,
# run, seed, final validation loss, wall seconds, mean bytes sent per step and rank over steps 2.., mean train loss
# of the last 5% of steps, lowest validation loss, commit).
# The trainer is built from FRONTIER_COMMIT (pinned below; DiLoCo and SparseLoCo exist from 019dfd9 on) into
# OUT/build-<commit>/ (STUDY_TRAINER=FILE runs that binary instead, its lines recording local-<sha1 of the file>).
# ONLY="run ..." and SEEDS="s ..." restrict `run` to those runs and seeds; LR sets the lr where runs.tsv has no probe
# (a test's fresh runs.tsv; it must agree with the probe where there is one, as the runs share their points).
# Every setting of the environment and every regime line of runs.tsv is checked first: one of the wrong form is
# refused with one line naming it (and the file's line) before anything is written. `tables` writes each file
# whole into a temporary one and renames it into place (a symlink there is replaced, not followed).
# Run it under nice, alone per OUT (default out/frontier; the regime study's out/regime has its own lock, and two
# studies at once share the cores), e.g. `nice -n 10 scripts/study_frontier.sh run`.
# Not for: the regime study's lengths and lr controls (scripts/study_regime.sh), time to a target loss over a thin
# network (scripts/netem_bench.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: $0 plan|run|tables | $0 flags RUN [STEPS]   (env: ONLY, SEEDS, OUT, DOC, DATA, FRONTIER_COMMIT, LR, SETTINGS, LENGTHS, EVAL_BATCHES)"
case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; echo "$usage"; exit 0 ;; esac
# shellcheck source=scripts/study_lib.sh
source scripts/study_lib.sh
if [ "${1:-}" = flags ]; then
    [ $# -ge 2 ] && [ $# -le 3 ] || { echo "$usage" >&2; exit 2; }
    steps=${3:-1000}
    [[ $steps =~ $study_int ]] || { echo "error: flags: STEPS '$steps' is no positive integer" >&2; exit 2; }
    study_flags "$2" "$steps" || exit 2
    exit 0
fi
[ $# -ne 2 ] || case $2 in small|medium)
    echo "error: $0 takes no size: the frontier trains the regime study's small model (SPEC); drop '$2'" >&2; exit 2 ;; esac
[ $# -eq 1 ] || { echo "$usage" >&2; exit 2; }
mode=$1
case $mode in plan|run|tables) ;; *) echo "error: unknown mode '$mode'; $usage" >&2; exit 2 ;; esac
OUT=${OUT:-out/frontier}
FRONTIER_COMMIT=${FRONTIER_COMMIT:-68cd8c908aaa0462819c151407c70b616bb658ac}
# the settings both studies share (their lines share runs.tsv, so one place sets them)
source scripts/study_settings.sh
SPEC=${SPEC:-d4c64h4t64v4096}
LENGTHS=${LENGTHS:-"1000 10000"}
SETTINGS=${SETTINGS:-"adams adamw scape_0.1 scape_0.03 scape_0.01 scape_0.003 scape_0.1_catchup_a4 scape_0.01_catchup_a4
    topk_ef_c0.08 topk_ef_c0.008 topk_ef_c0.0008 powersgd_r1 powersgd_r4 powersgd_r16
    onebit_adam_f0.05 onebit_adam_f0.15 onebit_adam_f0.3 demo_k4 demo_k16 demo_k64 diloco_h10 diloco_h30 diloco_h100
    sparseloco_h10 sparseloco_h30 sparseloco_shared_h10 sparseloco_shared_h30"}
# shellcheck disable=SC2086
settings_words=" $(printf '%s ' $SETTINGS)" # one space around each name, for [[ == *" name "* ]]
if [ "$mode" = tables ]; then
    study_runs_tsv tables
    exec /usr/bin/python3 scripts/study_frontier_tables.py "$runs_tsv" "$DOC" --spec "$SPEC" --lengths "$LENGTHS" \
        --ranks "$RANKS" --batch "$B" --seq "$T"
fi

# every name and number the environment gives is checked before anything is written
study_check_spec
for x in $SETTINGS; do
    err=$(study_flags "$x" 1000 2>&1 > /dev/null) || { echo "error: SETTINGS: ${err#error: }" >&2; exit 2; }
done
[ -n "${SETTINGS// /}" ] || { echo "error: SETTINGS is empty; name the runs, or unset it for the study's 27" >&2; exit 2; }
# shellcheck disable=SC2086
study_check_filters SETTINGS $SETTINGS
study_runs_tsv "$mode"
[ "$mode" = plan ] || study_check_tsv

probe_point=regime_probe_${SPEC}_steps$PROBE_STEPS
# shellcheck disable=SC2086
probe_lr=$(probe_choice "$probe_point" $PROBE_LRS)
lr=$probe_lr
if [ -n "${LR:-}" ]; then
    [[ $LR =~ $study_num ]] || { echo "error: LR '$LR' is no learning rate (e.g. 1e-3)" >&2; exit 2; }
    if [ -n "$probe_lr" ] && ! awk -v a="$LR" -v b="$probe_lr" 'BEGIN { exit !(a == b) }'; then
        echo "error: LR=$LR differs from the regime probe's choice $probe_lr, whose runs share these points; unset LR" >&2; exit 2
    fi
    lr=$LR
fi

# plan LR: one line per run, "point run seed steps lr", in training order
plan() {
    local lr=$1 first rest L seed run
    read -r first rest <<< "$(printf '%s\n' $LENGTHS | sort -n | tr '\n' ' ')"
    for seed in 1 2 3; do for run in $SETTINGS; do
        printf 'regime_%s_steps%s %s %s %s %s\n' "$SPEC" "$first" "$run" "$seed" "$first" "$lr"
    done; done
    for L in $rest; do for run in $SETTINGS; do
        printf 'regime_%s_steps%s %s 1 %s %s\n' "$SPEC" "$L" "$run" "$L" "$lr"
    done; done
    for L in $rest; do for seed in 2 3; do for run in $SETTINGS; do
        printf 'regime_%s_steps%s %s %s %s %s\n' "$SPEC" "$L" "$run" "$seed" "$L" "$lr"
    done; done; done
}

if [ "$mode" = plan ]; then
    plan "${lr:--}" | study_filter | print_plan "$([ -n "$lr" ] || echo "(lr: the regime study's AdamS probe ($probe_point) has not finished; LR sets it)")" 1
    exit 0
fi

# run
[ -n "$lr" ] || { echo "error: runs.tsv has no finished lr probe at $probe_point (scripts/study_regime.sh run small trains it first); or set LR" >&2; exit 1; }
if [ -z "${STUDY_TRAINER:-}" ] && git rev-parse --verify -q "$FRONTIER_COMMIT^{commit}" > /dev/null \
    && [[ $settings_words == *" diloco_"* || $settings_words == *" sparseloco_"* ]] \
    && ! git merge-base --is-ancestor 019dfd9 "$FRONTIER_COMMIT" 2> /dev/null; then
    echo "error: FRONTIER_COMMIT $FRONTIER_COMMIT predates DiLoCo and SparseLoCo (019dfd9); pin a later commit" >&2; exit 1
fi
plan_now() { plan "$lr"; }
run_plan study_frontier.sh "$FRONTIER_COMMIT" FRONTIER_COMMIT plan_now

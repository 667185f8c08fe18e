#!/usr/bin/env bash
# scripts/study_regime.sh plan|run|tables [SIZE] - SCAPE's gap to dense AdamS against tokens per parameter (issue 42):
# tiny GPT-2 models trained long enough to reach the paper's regime (~150 tokens per parameter; the authors' GPT-345M
# runs: 100,000 steps of 0.5M tokens) on 2 cores, with the authors' GPT-345M optimizer settings and schedule
# fractions at every length (beta2 0.999, weight decay 0.01, clip 1, lr warm-up 5% and cosine to lr/15, density
# from 1.0 to d geometrically over 10% of the run, norms and biases sparsified).
#   plan    print SIZE's runs in the order `run` trains them (ONLY and SEEDS restrict both), each marked done (a line
#           in runs.tsv, committed ones included) or not, with the cost left estimated from the finished runs' seconds
#           per step
#   run     train SIZE's runs that runs.tsv lacks, in plan order; a run cut short (a session's end, a signal)
#           resumes from its newest checkpoint (every CKPT_EVERY steps) when `run` is started again
#   tables  docs/study/regime.md, regime_gap_<size>_<run>.dat and regime_gap.png from runs.tsv alone
#           (scripts/study_regime_tables.py)
# SIZE (default small):
#   small   d4c64h4t64v4096, 466,304 parameters (43% in the blocks), lengths 1,000 3,000 10,000 30,000 68,000 steps
#           (2.2 to 149 tokens per parameter);
#   medium  d7c112h4t64v4096, 1,530,032 parameters (70% in the blocks), lengths 1,000 3,000 10,000 30,000 (0.7 to 20);
#           the same rules at equal tokens per parameter, without the controls the small size answered (items 3's
#           catchup and SCAPE-lr runs and 4's AdamS lr runs) and with one seed past PROBE_STEPS (the small size's seed
#           spread there was +-0.003): about 10 hours here instead of 18-30.
# Both: 4 ranks, B 4, T 64 (1,024 tokens per step), the bpe4k State of the Union corpus (`make data`: 2,332,677
# training tokens, so 10,000 steps is 4.4 epochs), validation over EVAL_BATCHES (default 140) batches per rank at
# the end (the whole validation shard) and at 20 points along the run.
# Per SIZE, in this order (seeds 1-3 up to 10,000 steps, 1-2 beyond; medium: see above):
#   1. the lr probe: AdamS at PROBE_LRS (default 5e-4 1e-3 2e-3) at PROBE_STEPS (default 10,000), seed 1, into point
#      regime_probe_<spec>_steps<N>; the lowest final validation loss is the lr of every run below, every rule's
#      (as the paper uses AdamW's lr for SCAPE);
#   2. adams, scape_0.1, scape_0.01 at PROBE_STEPS, then at each shorter length, then at each longer one;
#   3. topk_ef_c0.008 at every length (topk-ef, the gradient-sparsification control, at constant density 0.008:
#      its mean bytes per step and rank are SCAPE 0.01's within 1% on the small model, 89 kB measured), and at
#      PROBE_STEPS the catchup variant (scape_<d>_catchup_a4) and SCAPE at half and twice the chosen lr
#      (scape_<d>_lr<lr>, seed 1: is SCAPE's lead an lr effect?);
#   4. at each length past PROBE_STEPS: dense AdamW at the chosen lr right after seed 1's AdamS (adamw, seed 1:
#      AdamS's second moment is built from the previous first moment, nu = beta2 m^2 + (1 - beta2) g^2, so with
#      beta2 0.999 and noisy gradients its step is close to lr times a sign on every coordinate; AdamW, whose v
#      averages g^2, tells whether the compressed rules beat dense training or only AdamS), and after seed 1 of the
#      four rules AdamS at half and twice the chosen lr (adams_lr<lr>, seed 1: the probe again where the run is
#      long, since compressed rules beating dense AdamS there would otherwise leave open whether AdamS's lr, chosen
#      at PROBE_STEPS, is what lost);
#   longer lengths come last since they cost the most (68,000 steps of the small model: ~45 minutes here).
# Every finished run appends one line to docs/study/runs.tsv: point (regime_<spec>_steps<N>), run, seed, final
# validation loss, wall seconds (all pieces), mean bytes sent per step and rank (steps 2..), mean train loss over
# the last 5% of steps, the lowest validation loss along the run, and the commit whose trainer ran it. The trainer
# is built from STUDY_COMMIT (pinned below) into OUT/build-<commit>/, so work on the code while the study runs
# cannot change its runs (STUDY_TRAINER=FILE runs that binary instead, its lines recording local-<sha1 of the file>:
# for trying the script outside a git checkout). ONLY="run ..." and SEEDS="s ..." restrict `run` to those runs and seeds.
# Every setting of the environment and every regime line of runs.tsv is checked first: one of the wrong form is
# refused with one line naming it (and the file's line) before anything is written. `tables` writes each file
# whole into a temporary one and renames it into place (a symlink there is replaced, not followed).
# Run it under nice, alone (it takes both cores), e.g. `nice -n 10 scripts/study_regime.sh run small`.
# Not for: the undertrained length and batch studies (scripts/study_gap.sh), the paper-shaped comparison
# (scripts/reproduce_cpu.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: $0 plan|run|tables [small|medium]   (env: ONLY, SEEDS, OUT, DOC, DATA, STUDY_COMMIT, PROBE_LRS, EVAL_BATCHES)"
case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; echo "$usage"; exit 0 ;; esac
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "$usage" >&2; exit 2; }
mode=$1 size=${2:-small}
OUT=${OUT:-out/regime}
STUDY_COMMIT=${STUDY_COMMIT:-7753401fc518f9699179ce385dc67cdb6efb52ff}
# the settings both studies share (their lines share runs.tsv, so one place sets them)
source scripts/study_settings.sh
case $size in
    small)  SPEC=${SPEC:-d4c64h4t64v4096};  LENGTHS=${LENGTHS:-"1000 3000 10000 30000 68000"}
            long_seeds="1 2" controls=1 ;;
    medium) SPEC=${SPEC:-d7c112h4t64v4096}; LENGTHS=${LENGTHS:-"1000 3000 10000 30000"}
            long_seeds=1 controls=0 ;;
    *) echo "error: unknown size '$size' (small or medium); $usage" >&2; exit 2 ;;
esac
case $mode in plan|run|tables) ;; *) echo "error: unknown mode '$mode'; $usage" >&2; exit 2 ;; esac
# shellcheck source=scripts/study_lib.sh
source scripts/study_lib.sh
if [ "$mode" = tables ]; then
    study_runs_tsv tables
    exec /usr/bin/python3 scripts/study_regime_tables.py "$runs_tsv" "$DOC"
fi
# every name and number the environment gives is checked before anything is written
study_check_spec
study_check_filters "the regime study's runs" adams adamw scape_0.1 scape_0.01 topk_ef_c0.008 \
    scape_0.1_catchup_a4 scape_0.01_catchup_a4
study_runs_tsv "$mode"
[ "$mode" = plan ] || study_check_tsv
half() { awk -v x="$1" 'BEGIN { printf "%g", x / 2 }'; }
twice() { awk -v x="$1" 'BEGIN { printf "%g", x * 2 }'; }

probe_point=regime_probe_${SPEC}_steps$PROBE_STEPS
# the probe's choice: the lr of the lowest final validation loss, once every probe lr has finished; else empty
# shellcheck disable=SC2086
chosen_lr() { probe_choice "$probe_point" $PROBE_LRS; }
# plan LR: one line per run, "point run seed steps lr", in training order (the probe's lines first)
plan() {
    local lr=$1 L run seed seeds d
    for lr_p in $PROBE_LRS; do printf '%s adams_lr%s 1 %s %s\n' "$probe_point" "$lr_p" "$PROBE_STEPS" "$lr_p"; done
    [ -n "$lr" ] || return 0
    local shorter longer
    shorter=$(printf '%s\n' $LENGTHS | awk -v p="$PROBE_STEPS" '$1 < p' | sort -n)
    longer=$(printf '%s\n' $LENGTHS | awk -v p="$PROBE_STEPS" '$1 > p' | sort -n)
    for L in $PROBE_STEPS $shorter $longer; do
        [[ " $LENGTHS " == *" $L "* ]] || continue
        seeds=$([ "$L" -le 10000 ] && echo "1 2 3" || echo "$long_seeds")
        for seed in $seeds; do
            runs="adams scape_0.1 scape_0.01 topk_ef_c0.008"
            if [ "$seed" = 1 ] && [ "$L" -gt "$PROBE_STEPS" ]; then runs="adams adamw ${runs#adams }"; fi
            for run in $runs; do
                printf 'regime_%s_steps%s %s %s %s %s\n' "$SPEC" "$L" "$run" "$seed" "$L" "$lr"
            done
            if [ "$seed" = 1 ] && [ "$L" -gt "$PROBE_STEPS" ] && [ "$controls" = 1 ]; then
                for x in "$(half "$lr")" "$(twice "$lr")"; do
                    printf 'regime_%s_steps%s adams_lr%s 1 %s %s\n' "$SPEC" "$L" "$x" "$L" "$x"
                done
            fi
        done
        if [ "$L" = "$PROBE_STEPS" ] && [ "$controls" = 1 ]; then
            for seed in 1 2 3; do for d in 0.1 0.01; do
                printf 'regime_%s_steps%s scape_%s_catchup_a4 %s %s %s\n' "$SPEC" "$L" "$d" "$seed" "$L" "$lr"
            done; done
            for d in 0.1 0.01; do for x in "$(half "$lr")" "$(twice "$lr")"; do
                printf 'regime_%s_steps%s scape_%s_lr%s 1 %s %s\n' "$SPEC" "$L" "$d" "$x" "$L" "$x"
            done; done
        fi
    done
}

if [ "$mode" = plan ]; then
    lr=$(chosen_lr)
    plan "$lr" | study_filter | print_plan "$([ -n "$lr" ] || echo "(the runs after the probe are planned once the probe has finished)")"
    exit 0
fi

# same_run POINT RUN SEED STEPS LR: AdamS at the probe's length, seed 1 and the chosen lr is the probe's run of that lr
# (the same flags, seed and pinned trainer: the small size's pair agrees to the last digit, 4.329022): its line is
# copied under the run's own name instead of training it again (half an hour of the medium size)
same_run() {
    local point=$1 run=$2 seed=$3 steps=$4 lr=$5 line
    [ "$point" = "regime_${SPEC}_steps$PROBE_STEPS" ] && [ "$run" = adams ] && [ "$seed" = 1 ] || return 1
    line=$(awk -F'\t' -v p="$probe_point" -v r="adams_lr$lr" -v c="$COMMIT" '$1 == p && $2 == r && $3 == 1 && $9 == c' \
           "$runs_tsv" | tail -n 1)
    [ -n "$line" ] || return 1
    printf '%s\t%s\t%s\n' "$point" "$run" "$(cut -f3- <<< "$line")" >> "$runs_tsv"
    echo "== $point $run seed 1: the probe's run adams_lr$lr (same flags, seed and trainer); its line copied" >&2
}

# run: one study at a time per OUT (two would share runs.tsv and the cores); the plan grows once the probe has finished
plan_now() { plan "$(chosen_lr)"; }
run_plan study_regime.sh "$STUDY_COMMIT" STUDY_COMMIT plan_now

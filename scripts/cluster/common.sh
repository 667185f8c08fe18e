# scripts/cluster/common.sh - sourced by the cluster recipes: checks the required variables and launches the trainer
# by srun inside a SLURM allocation (scripts/cluster/slurm.sbatch), else by mpirun on RANKS ranks (HOSTFILE for
# several nodes). Not for direct execution. Every check ends the recipe with one line naming the variable and the fix
# (status 2), before anything is launched; nothing here runs inside a command substitution, whose exit would not
# stop the recipe. A relative path in a variable (DATA_DIR, OUT, HOSTFILE, TRAINER, RESUME) is relative to the folder
# the recipe is run from (under sbatch: the folder sbatch was run from), never to the repository.
# shellcheck shell=bash
die() { echo "error: $*" >&2; exit 2; }
need() { for v in "$@"; do [ -n "${!v:-}" ] || die "set $v (see the header of $0)"; done; }
# every update rule of the trainer (trainer/train_options.c --optimizer); the recipes run each of them
RULES="adamw adams scape topk-ef powersgd onebit-adam demo diloco sparseloco"
# check_choice VAR CHOICE...: VAR's value is one of the choices (an empty choice "" allows it unset)
check_choice() {
    local v=$1 c; shift
    for c in "$@"; do [ "${!v:-}" = "$c" ] && return 0; done
    die "$v=${!v:-}; use one of: $(printf '%s ' "$@" | sed 's/^ *//; s/ $//; s/  */, /g')"
}
# check_uint MIN VAR...: each VAR is a whole number >= MIN (the recipes' step counts, ranks, batch)
check_uint() {
    local min=$1 v; shift
    for v in "$@"; do
        [[ "${!v}" =~ ^[0-9]{1,9}$ ]] && [ $((10#${!v})) -ge "$min" ] || die "$v=${!v}; use a whole number >= $min"
    done
}
# rel VALUE: " (relative to <this folder>)" when VALUE is a relative path, for the messages
rel() { case $1 in /*) ;; *) echo " (relative to $PWD)" ;; esac; }
sparse_rule() { [ "$OPTIMIZER" = scape ] || [ "$OPTIMIZER" = topk-ef ]; }
# the local-update rules (DiLoCo, SparseLoCo): LOCO_H inner steps per outer step, LOCO_MASK SparseLoCo's mask mode
loco_rule() { [ "$OPTIMIZER" = diloco ] || [ "$OPTIMIZER" = sparseloco ]; }
# check_rule: OPTIMIZER is a rule of the trainer, and for scape and topk-ef DENSITY is one with a schedule (the other
# rules ignore the density variables, so one job script may loop over every rule); called with the user's values,
# before the recipe's defaults
check_rule() {
    # shellcheck disable=SC2086
    check_choice OPTIMIZER $RULES
    if sparse_rule; then check_density; fi
}
# check_recipe: the other variables every recipe shares, once the recipe's defaults are set
check_recipe() {
    check_choice DRY_RUN "" 0 1
    check_choice LAUNCHER "" srun mpirun
    check_uint 1 RANKS MICRO_BATCH STEPS
    check_uint 0 WARMUP
    if sparse_rule; then
        check_uint 0 DENSITY_DENSE DENSITY_WARMUP
        check_choice EXCLUDE_NORMS 0 1
    fi
    if loco_rule; then
        # the trainer's defaults, the papers': DiLoCo's H 500, SparseLoCo's 30 with each rank's own mask
        if [ "$OPTIMIZER" = diloco ]; then LOCO_H=${LOCO_H:-500}; else LOCO_H=${LOCO_H:-30}; fi
        check_uint 1 LOCO_H
        LOCO_MASK=${LOCO_MASK:-own}
        check_choice LOCO_MASK own shared
    fi
}
# ckpt_every N: CKPT_EVERY, the recipe's checkpoint cadence N; for a local-update rule the multiple of LOCO_H at or
# above N, so every checkpoint is an outer step's (the ranks' parameters synchronized: it resumes on any number of
# ranks; one between outer steps resumes on its own number only)
ckpt_every() {
    CKPT_EVERY=$1
    if loco_rule; then CKPT_EVERY=$(( (($1 + 10#$LOCO_H - 1) / 10#$LOCO_H) * 10#$LOCO_H )); fi
}
# uses_srun: the launch goes through srun (LAUNCHER=srun, or unset inside a SLURM allocation)
uses_srun() { [ "${LAUNCHER:-}" = srun ] || { [ -z "${LAUNCHER:-}" ] && [ -n "${SLURM_JOB_ID:-}" ]; }; }
# ranks_default N: RANKS as given, else the allocation's task count (SLURM_NTASKS), else N. srun runs one rank per
# task of the allocation, so under it a RANKS other than SLURM_NTASKS is refused (it would be ignored); mpirun runs
# RANKS ranks, inside an allocation too
ranks_default() {
    if [ -n "${RANKS:-}" ] && [ -n "${SLURM_NTASKS:-}" ] && [ "$RANKS" != "$SLURM_NTASKS" ] && uses_srun; then
        die "RANKS=$RANKS but srun runs one rank per task of this allocation (SLURM_NTASKS=$SLURM_NTASKS); unset RANKS, allocate $RANKS tasks, or LAUNCHER=mpirun"
    fi
    RANKS=${RANKS:-${SLURM_NTASKS:-$1}}
}
# launch TRAINER ARGS...: under SLURM (inside an allocation: sbatch, salloc; or LAUNCHER=srun) by srun, one task
# per rank of the allocation, MPI wired by PMIx (Open MPI and SLURM both have it in Debian; no mpirun inside the
# job); otherwise by mpirun on RANKS ranks (HOSTFILE for several nodes). EXTRA (trainer flags) goes last, so it
# overrides the recipe's (options may repeat, the last wins).
launch() {
    local cmd
    if uses_srun; then
        cmd=(srun --mpi="${SRUN_MPI:-pmix}" --kill-on-bad-exit=1)
    else
        cmd=(mpirun -np "$RANKS" ${HOSTFILE:+--hostfile "$HOSTFILE"} --bind-to none)
    fi
    # shellcheck disable=SC2086
    set -- "$@" ${EXTRA:-}
    [ "${DRY_RUN:-0}" = 1 ] || check_launch "${cmd[0]}" "$1"
    echo "+ ${cmd[*]} $*" >&2
    [ "${DRY_RUN:-0}" = 1 ] && return 0
    "${cmd[@]}" "$@"
}
# check_launch LAUNCHER TRAINER: what a real launch needs on this machine (a dry run prints the command without it)
check_launch() {
    command -v "$1" > /dev/null || die "$1 not found; $([ "$1" = srun ] && echo "run this on a SLURM node with srun (slurm-wlm-client), or LAUNCHER=mpirun" || echo "install Open MPI (openmpi-bin), or run it under SLURM")"
    command -v "$2" > /dev/null || die "TRAINER=$2 is not an executable$(rel "$2"); run make in $ROOT (or make cuda for the GPU trainers), or set TRAINER"
    [ -d "$DATA_DIR" ] || die "DATA_DIR=$DATA_DIR is not a folder$(rel "$DATA_DIR"); make the shards with scripts/cluster/prepare_data.sh"
    compgen -G "$DATA_DIR/*train*.bin" > /dev/null || die "DATA_DIR=$DATA_DIR has no *train*.bin shards; make them with scripts/cluster/prepare_data.sh"
    compgen -G "$DATA_DIR/*val*.bin" > /dev/null || die "DATA_DIR=$DATA_DIR has no *val*.bin shards; make them with scripts/cluster/prepare_data.sh"
    [ -z "${HOSTFILE:-}" ] || [ "$1" != mpirun ] || [ -r "$HOSTFILE" ] || die "HOSTFILE=$HOSTFILE cannot be read$(rel "$HOSTFILE")"
}
# OPT_FLAGS, the rule's flags (an array, set in the recipe's own shell): SCAPE and topk-ef take DENSITY_DENSE steps at
# density 1.0, then a geometric warm-up from 1.0 over DENSITY_WARMUP steps to DENSITY, norm gains and biases
# sparsified too when EXCLUDE_NORMS=0 (the authors' --no-topk-adams-use-exclude-from-topk); the dense rules and the
# other peers (powersgd, onebit-adam, demo) take the trainer's defaults for their own settings (their papers'; set
# others through EXTRA, e.g. EXTRA="--powersgd-rank 4"); diloco and sparseloco take LOCO_H (and sparseloco LOCO_MASK),
# their other settings at the trainer's defaults.
optimizer_flags() {
    OPT_FLAGS=(--optimizer "$OPTIMIZER")
    if sparse_rule; then
        OPT_FLAGS+=(--density "$DENSITY" --density-start 1.0 --density-dense-steps "${DENSITY_DENSE:-0}"
                    --density-warmup "$DENSITY_WARMUP" --scape-exclude-norms "${EXCLUDE_NORMS:-1}")
    fi
    if [ "$OPTIMIZER" = diloco ]; then OPT_FLAGS+=(--diloco-h "$((10#$LOCO_H))"); fi
    if [ "$OPTIMIZER" = sparseloco ]; then OPT_FLAGS+=(--sparseloco-h "$((10#$LOCO_H))" --sparseloco-mask "$LOCO_MASK"); fi
}
# DENSITY (default 0.01) must be one the authors ran (their scripts differ per density), or come with its schedule
check_density() {
    DENSITY=${DENSITY:-0.01}
    case $DENSITY in
        0.1|0.01) ;;
        *) [ -n "${DENSITY_WARMUP:-}" ] || die "DENSITY=$DENSITY; the authors' recipes are for 0.1 and 0.01 (set the schedule variables yourself for others: DENSITY_DENSE, DENSITY_WARMUP, EXCLUDE_NORMS)"
           [[ "$DENSITY" =~ ^(0?\.[0-9]+|1(\.0*)?)$ ]] && [ "$DENSITY" != 0 ] || die "DENSITY=$DENSITY; use a fraction in (0, 1], e.g. 0.05" ;;
    esac
}

# scripts/cluster/common.sh - sourced by the cluster recipes: checks the required variables and launches the trainer
# by srun inside a SLURM allocation (scripts/cluster/slurm.sbatch), else by mpirun on RANKS ranks (HOSTFILE for
# several nodes). Not for direct execution.
# shellcheck shell=bash
need() { for v in "$@"; do [ -n "${!v:-}" ] || { echo "error: set $v (see the header of $0)" >&2; exit 2; }; done; }
# launch TRAINER ARGS...: under SLURM (inside an allocation: sbatch, salloc; or LAUNCHER=srun) by srun, one task
# per rank of the allocation, MPI wired by PMIx (Open MPI and SLURM both have it in Debian; no mpirun inside the
# job); otherwise by mpirun on RANKS ranks (HOSTFILE for several nodes). EXTRA (trainer flags) goes last, so it
# overrides the recipe's (options may repeat, the last wins).
launch() {
    local cmd
    if [ "${LAUNCHER:-}" = srun ] || { [ -z "${LAUNCHER:-}" ] && [ -n "${SLURM_JOB_ID:-}" ]; }; then
        cmd=(srun --mpi="${SRUN_MPI:-pmix}" --kill-on-bad-exit=1)
    else
        cmd=(mpirun -np "$RANKS" ${HOSTFILE:+--hostfile "$HOSTFILE"} --bind-to none)
    fi
    # shellcheck disable=SC2086
    set -- "$@" ${EXTRA:-}
    echo "+ ${cmd[*]} $*" >&2
    [ -n "${DRY_RUN:-}" ] && return 0
    "${cmd[@]}" "$@"
}
# SCAPE's flags for OPTIMIZER=scape: DENSITY_DENSE steps at density 1.0, then a geometric warm-up from 1.0 over
# DENSITY_WARMUP steps to DENSITY; norm gains and biases sparsified too when EXCLUDE_NORMS=0 (the authors'
# --no-topk-adams-use-exclude-from-topk)
optimizer_flags() {
    case $OPTIMIZER in
        adamw|adams) echo "--optimizer $OPTIMIZER" ;;
        scape) echo "--optimizer scape --density $DENSITY --density-start 1.0 --density-dense-steps ${DENSITY_DENSE:-0}" \
                    "--density-warmup $DENSITY_WARMUP --scape-exclude-norms ${EXCLUDE_NORMS:-1}" ;;
        *) echo "error: OPTIMIZER=$OPTIMIZER; use adamw, adams or scape" >&2; exit 2 ;;
    esac
}
# DENSITY must be one the authors ran (their scripts differ per density)
check_density() {
    case $DENSITY in
        0.1|0.01) ;;
        *) echo "error: DENSITY=$DENSITY; the authors' recipes are for 0.1 and 0.01 (set the schedule variables yourself for others: DENSITY_DENSE, DENSITY_WARMUP, EXCLUDE_NORMS)" >&2
           [ -n "${DENSITY_WARMUP:-}" ] || exit 2 ;;
    esac
}

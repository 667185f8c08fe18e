# scripts/cluster/common.sh - sourced by the cluster recipes: checks the required variables and launches the trainer
# on RANKS ranks with mpirun (HOSTFILE for several nodes). Not run in CI. Not for direct execution.
# shellcheck shell=bash
need() { for v in "$@"; do [ -n "${!v:-}" ] || { echo "error: set $v (see the header of $0)" >&2; exit 2; }; done; }
launch() {
    local mpi=(mpirun -np "$RANKS" ${HOSTFILE:+--hostfile "$HOSTFILE"} --bind-to none)
    echo "+ ${mpi[*]} $*" >&2
    [ -n "${DRY_RUN:-}" ] && return 0
    "${mpi[@]}" "$@"
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

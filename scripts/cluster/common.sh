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
# SCAPE's flags for OPTIMIZER=scape: density warm-up from 1.0 over DENSITY_WARMUP steps to DENSITY
optimizer_flags() {
    case $OPTIMIZER in
        adamw|adams) echo "--optimizer $OPTIMIZER" ;;
        scape) echo "--optimizer scape --density $DENSITY --density-start 1.0 --density-warmup $DENSITY_WARMUP" ;;
        *) echo "error: OPTIMIZER=$OPTIMIZER; use adamw, adams or scape" >&2; exit 2 ;;
    esac
}

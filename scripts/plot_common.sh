# scripts/plot_common.sh - the opening the plot scripts share (plot_loss.sh, plot_eval.sh, plot_mask_stability.sh),
# sourced with no arguments so that it reads and shifts the script's own: checks the arguments
# (OUT.png LOG.jsonl [LOG.jsonl ...]; usage and exit 2 otherwise) and that gnuplot is installed, takes the PNG's
# path into png (the logs stay in "$@"), makes a temp folder $tmp removed at exit, starts plots=() and i=0.
# plot_log_name LOG, at the top of the loop over the logs: one error line and exit 1 if LOG is missing or empty,
# else sets name to the run's directory name (each series' title).
# Not for: running alone (it exits the script that sources it on bad arguments).
if [ $# -lt 2 ]; then
    echo "usage: $0 OUT.png LOG.jsonl [LOG.jsonl ...]" >&2
    exit 2
fi
png=$1; shift
command -v gnuplot > /dev/null || { echo "error: gnuplot not found; run 'make deps' (Debian package gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plots=()
i=0
plot_log_name() {
    [ -s "$1" ] || { echo "error: $1 is missing or empty; pass the log.jsonl of a training run" >&2; exit 1; }
    name=$(basename "$(dirname "$1")")
}

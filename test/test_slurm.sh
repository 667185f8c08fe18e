#!/usr/bin/env bash
# test/test_slurm.sh DATA - the batch job on a real SLURM (issue 30): scripts/slurm_local.sh starts munged, slurmctld
# and slurmd for this one node from a scratch directory; scripts/cluster/slurm.sbatch (the gpt345m recipe with a tiny
# model through EXTRA, on the bpe4k shards of DATA) is submitted with sbatch and runs its 2 ranks by srun (PMIx):
#   slurm_job_trains_on_2_ranks_in_sync   the log says world 2, each task reports local rank 0 / 1 of 2 from MPI,
#                                         and the losses equal the same recipe under mpirun, bit for bit;
#   slurm_sbatch_from_another_folder_finds_the_repository  that job is submitted from a folder outside the
#                                         repository by the script's absolute path (SLURM runs a spool copy of it):
#                                         it finds the repository and writes its relative OUT under that folder;
#   slurm_time_limit_requeues_and_resumes --time=1 with --signal=TERM@59: SLURM's SIGTERM ahead of the limit makes
#                                         the trainer checkpoint and exit 143, the script requeues the job, it
#                                         continues with --resume latest; the end equals an uninterrupted run
#                                         (model.bin and the last losses). SLURM holds a requeued job for about
#                                         two minutes (its BeginTime); the test moves that to now
#                                         (scontrol update StartTime=now+10) instead of waiting.
# Stops the daemons it started, whatever happens. Needs slurm-wlm and munge (scripts/install_deps.sh).
set -u
DATA=${1:-data}
ROOT=$(pwd)
DATA=$(cd "$DATA" && pwd) # the jobs below run from other folders
TMP=$(mktemp -d "$ROOT/build/test_slurm.XXXXXX")
. "$(dirname "$0")/lib.sh" # failures=0, ok NAME, fail NAME WHY
cleanup() { scripts/slurm_local.sh stop "$TMP/slurm" > /dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT
[ -n "${KEEP_TMP:-}" ] && trap "scripts/slurm_local.sh stop $TMP/slurm" EXIT

for b in sbatch srun squeue scontrol slurmctld slurmd munged; do
    command -v $b > /dev/null || { echo "FAIL slurm_present: $b not found; run scripts/install_deps.sh (slurm-wlm, munge)"; exit 1; }
done
# ports of this run's own, so a cluster left by another run (or a system SLURM) is not in the way
export SLURM_LOCAL_CTLD_PORT=$((20000 + RANDOM % 20000)) SLURM_LOCAL_SLURMD_PORT
SLURM_LOCAL_SLURMD_PORT=$((SLURM_LOCAL_CTLD_PORT + 1))
if ! scripts/slurm_local.sh start "$TMP/slurm" > "$TMP/start.out" 2>&1; then
    echo "FAIL slurm_cluster_starts: $(cat "$TMP/start.out"; tail -n 5 "$TMP"/slurm/log/*.log 2>/dev/null)"; exit 1
fi
export SLURM_CONF=$TMP/slurm/slurm.conf
echo "ok slurm_cluster_starts ($(tail -n 1 "$TMP/start.out"))"

# the recipe, small: EXTRA's flags come last and win over the recipe's
SMALL="--model d2c64h2t64v4096 --seq 64 --batch 4 --total-batch 512 --warmup 10 --eval-every 0 --ckpt-every 0 --threads 1 --data $DATA"
train_rows() { grep '"event": "train"' "$1" | sed -E 's/.*"step": ([0-9]+), "train_loss": ([^,]+),.*/\1 \2/'; }
reference() { # reference OUT STEPS: the same recipe by mpirun on 2 ranks
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LAUNCHER=mpirun RANKS=2 RECIPE=gpt345m \
        DATA_DIR="$DATA/sotu/bpe4k" OUT="$1" EXTRA="$SMALL --steps $2" scripts/cluster/gpt345m.sh > "$1.out" 2>&1
}
job_state() { squeue -h -j "$1" -o '%T %r' 2> /dev/null; }

# --- a 2-task job trains in sync; submitted from another folder (OUT=a is that folder's)
mkdir -p "$TMP/sub"
(cd "$TMP/sub" && env RECIPE=gpt345m DATA_DIR="$DATA/sotu/bpe4k" OUT=a EXTRA="$SMALL --steps 30" \
    timeout 300 sbatch --wait --ntasks-per-node=2 --time=5 -o "$TMP/a.job" "$ROOT/scripts/cluster/slurm.sbatch") > "$TMP/a.sbatch" 2>&1
st=$?
if [ $st = 0 ] && grep -q "^slurm.sbatch: job [0-9]* .*, repository $ROOT$" "$TMP/a.job" && [ -s "$TMP/sub/a/log.jsonl" ]; then
    ok slurm_sbatch_from_another_folder_finds_the_repository
else fail slurm_sbatch_from_another_folder_finds_the_repository "sbatch status $st: $(cat "$TMP/a.sbatch"; grep -v '^step ' "$TMP/a.job" | tail -n 4)"; fi
ln -s sub/a "$TMP/a"
reference "$TMP/aref" 30
if [ $st = 0 ] && grep -q '"event": "start".*"world": 2' "$TMP/a/log.jsonl" \
   && grep -q "^placement: rank 0 on .*: local rank 0 of 2, 1 thread" "$TMP/a.job" \
   && grep -q "^placement: rank 1 on .*: local rank 1 of 2, 1 thread" "$TMP/a.job" \
   && grep -q '^+ srun --mpi=pmix' "$TMP/a.job" \
   && [ "$(train_rows "$TMP/a/log.jsonl" | wc -l)" = 30 ] \
   && diff <(train_rows "$TMP/a/log.jsonl") <(train_rows "$TMP/aref/log.jsonl") > /dev/null; then
    ok slurm_job_trains_on_2_ranks_in_sync
else fail slurm_job_trains_on_2_ranks_in_sync "sbatch status $st: $(cat "$TMP/a.sbatch"; grep -v '^step ' "$TMP/a.job" | tail -n 6)"; fi

# --- killed by its time limit (SIGTERM ahead of it), requeued, resumed: the end of an uninterrupted run
steps=3000
env RECIPE=gpt345m DATA_DIR="$DATA/sotu/bpe4k" OUT="$TMP/b" EXTRA="$SMALL --steps $steps" \
    sbatch --parsable --ntasks-per-node=2 --time=1 --signal=TERM@59 -o "$TMP/b.job" scripts/cluster/slurm.sbatch \
    > "$TMP/b.id" 2>&1
id=$(cut -d';' -f1 "$TMP/b.id")
reference "$TMP/bref" $steps & # meanwhile (deterministic whatever the load)
refpid=$!
start=$(date +%s)
nudged=0
while :; do
    s=$(job_state "$id")
    [ -z "$s" ] && break # finished (gone from the queue)
    # in 10 s, not at once: the previous run's step (same job and step id) must finish its clean-up first, or srun
    # finds its PMIx socket still there ("Address already in use")
    # once per requeue, in 10 s rather than at once: the previous run's step (same job and step id) must finish its
    # clean-up first, or srun finds its PMIx socket still there ("Address already in use")
    case $s in
        PENDING*BeginTime*) [ "$nudged" = 1 ] || scontrol update JobId="$id" StartTime=now+10 > /dev/null 2>&1; nudged=1 ;;
        RUNNING*) nudged=0 ;;
    esac
    [ $(( $(date +%s) - start )) -gt 900 ] && { scancel "$id"; break; }
    sleep 2
done
wait $refpid
restarts=$(grep -c '^slurm.sbatch: job .* (restart [1-9]' "$TMP/b.job")
state=$(sacct -n -j "$id" -o State 2> /dev/null | head -1 | tr -d ' ' || true)
if [ "$restarts" -ge 1 ] && grep -q "stopped by SIGTERM after step [0-9]* of $steps: checkpoint" "$TMP/b.job" \
   && grep -q "resuming from $TMP/b/ckpt_[0-9]* at step" "$TMP/b.job" && [ -f "$TMP/b/ckpt_$steps/model.bin" ] \
   && cmp -s "$TMP/b/ckpt_$steps/model.bin" "$TMP/bref/ckpt_$steps/model.bin" \
   && [ "$(train_rows "$TMP/b/log.jsonl" | tail -n 1)" = "$(train_rows "$TMP/bref/log.jsonl" | tail -n 1)" ]; then
    ok "slurm_time_limit_requeues_and_resumes ($restarts requeue$([ "$restarts" = 1 ] || echo s), $(( $(date +%s) - start )) s)"
else fail slurm_time_limit_requeues_and_resumes "restarts $restarts, state '$state': $(grep -v '^step ' "$TMP/b.job" | grep -v '^+ ' | tail -n 12)"; fi

[ "$failures" -eq 0 ]

#!/usr/bin/env bash
# test/test_cluster_recipes.sh - the cluster recipes (scripts/cluster/gpt345m.sh, llama500m.sh) are the authors'
# runs (issue 29; docs/reproduction.md 1.4): DRY_RUN=1 with only DATA_DIR (and OPTIMIZER / DENSITY) prints the
# command with each of the authors' settings for that model and density, and the trainer's parser accepts every
# flag of it (the command is run with --verify-ckpt on a folder without checkpoints: parsed, then exit 1); every rule
# of the trainer is run (the peers with their own defaults, the local-update rules with LOCO_H and LOCO_MASK and
# checkpoints at outer steps), and a value a recipe cannot use (a typo in any of its
# variables, missing data or trainer) stops it with one "error:" line and status 2 before anything is launched, also
# through slurm.sbatch; a recipe and slurm.sbatch work from any folder (a real 1-rank run of a tiny model, and
# slurm.sbatch as SLURM runs it: a copy in a spool folder; test/test_slurm.sh submits it with a real sbatch).
set -u
ROOT=$(pwd)
. "$(dirname "$0")/lib.sh" # failures=0, ok NAME, fail NAME WHY
TMP=$(mktemp -d "$ROOT/build/test_cluster.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# recipe density optimizer "flag value ..." : each flag must appear with exactly that value
# (a fifth argument: more variables, "VAR=value ...")
check() {
    local script=$1 density=DENSITY=$2 opt=$3 want=$4 vars=${5:-} name="cluster_${1}_${3}_${2}"
    [ "$2" = - ] && density=- name="cluster_${1}_${3}"
    [ -n "$vars" ] && name="${name}_$(echo "$vars" | tr ' =' '__')"
    local cmd
    # shellcheck disable=SC2086
    cmd=$(env DRY_RUN=1 DATA_DIR=/shards OPTIMIZER=$opt ${density#-} $vars "scripts/cluster/$script.sh" 2>&1)
    local st=$? bad=""
    set -- $want
    while [ $# -ge 2 ]; do
        [[ " $cmd " == *" $1 $2 "* ]] || bad="$bad $1 $2;"
        shift 2
    done
    if [ $st != 0 ] || [ -n "$bad" ]; then fail "$name" "status $st, missing:$bad in: $cmd"; return; fi
    # every flag parses: the trainer runs up to --verify-ckpt (exit 1, "no checkpoint there"), not a usage error (2)
    local argv=(${cmd#+ })
    while [ "${argv[0]}" != "${argv[0]#mpirun}" ] || [ "${argv[0]}" = -np ] || [[ "${argv[0]}" =~ ^[0-9]+$ ]] || [ "${argv[0]}" = --bind-to ] || [ "${argv[0]}" = none ]; do argv=("${argv[@]:1}"); done
    "${argv[@]}" --verify-ckpt "$TMP" > "$TMP/v.out" 2>&1
    st=$?
    if [ $st = 1 ] && grep -q "no checkpoint there" "$TMP/v.out"; then ok "$name"
    else fail "$name" "the trainer did not parse the recipe's flags (status $st): $(cat "$TMP/v.out")"; fi
}
gpt_common="--steps 100000 --total-batch 524288 --seq 1024 --lr 1.5e-4 --lr-floor 1e-5 --warmup 5000 --beta1 0.9 --beta2 0.999 --weight-decay 0.01 --clip 1.0"
llama_common="--steps 100000 --total-batch 4194304 --seq 4096 --lr 3e-4 --lr-floor 3e-5 --warmup 2000 --beta1 0.9 --beta2 0.95 --weight-decay 0.1 --clip 1.0"
check gpt345m 0.01 scape "$gpt_common --density 0.01 --density-dense-steps 0 --density-warmup 10000 --scape-exclude-norms 0"
check gpt345m 0.1 scape "$gpt_common --density 0.1 --density-dense-steps 0 --density-warmup 10000"
check gpt345m 0.01 adams "$gpt_common --optimizer adams"
check gpt345m 0.01 adamw "$gpt_common --optimizer adamw"
check llama500m 0.1 scape "$llama_common --density 0.1 --density-dense-steps 2000 --density-warmup 8000 --scape-exclude-norms 0"
check llama500m 0.01 scape "$llama_common --density 0.01 --density-dense-steps 0 --density-warmup 10000"
check llama500m 0.1 adams "$llama_common --optimizer adams"
# the peers: topk-ef with SCAPE's density schedule, the others with their own settings at the trainer's defaults
check gpt345m 0.01 topk-ef "$gpt_common --optimizer topk-ef --density 0.01 --density-dense-steps 0 --density-warmup 10000"
check llama500m 0.1 topk-ef "$llama_common --optimizer topk-ef --density 0.1 --density-dense-steps 2000 --density-warmup 8000"
for peer in powersgd onebit-adam demo; do
    check gpt345m - $peer "$gpt_common --optimizer $peer"
    check llama500m - $peer "$llama_common --optimizer $peer"
done
# the local-update rules: H (LOCO_H) at the papers' defaults, SparseLoCo's mask mode (LOCO_MASK), and checkpoints at
# outer steps (the multiple of H at or above the recipes' 1,000), which resume on any number of ranks
check gpt345m - diloco "$gpt_common --optimizer diloco --diloco-h 500 --ckpt-every 1000"
check llama500m - diloco "$llama_common --optimizer diloco --diloco-h 300 --ckpt-every 1200" "LOCO_H=300"
check gpt345m - sparseloco "$gpt_common --optimizer sparseloco --sparseloco-h 30 --sparseloco-mask own --ckpt-every 1020"
check llama500m - sparseloco "$llama_common --optimizer sparseloco --sparseloco-h 50 --sparseloco-mask shared --ckpt-every 1000" \
    "LOCO_H=050 LOCO_MASK=shared"
check gpt345m 0.01 adamw "$gpt_common --optimizer adamw --ckpt-every 1000" "LOCO_H=30"
# a density the authors did not run needs its schedule spelled out
if DRY_RUN=1 DATA_DIR=/shards DENSITY=0.05 scripts/cluster/llama500m.sh > "$TMP/d.out" 2>&1; then
    fail cluster_other_density_needs_a_schedule "DENSITY=0.05 without DENSITY_WARMUP was accepted"
elif grep -q "the authors' recipes are for 0.1 and 0.01" "$TMP/d.out"; then ok cluster_other_density_needs_a_schedule
else fail cluster_other_density_needs_a_schedule "$(cat "$TMP/d.out")"; fi

# refused NAME SCRIPT "VAR=value ..." "error: ..." : stops with status 2 and exactly that one line, launching nothing
refused() {
    local name=$1 script=$2 vars=$3 want=$4
    # shellcheck disable=SC2086
    (cd "$TMP/elsewhere" && env $vars "$script") > "$TMP/r.out" 2>&1
    local st=$? out
    out=$(grep -v '^slurm.sbatch: job ' "$TMP/r.out")
    if [ $st = 2 ] && [ "$out" = "$want" ]; then return 0; fi
    fail "$name" "$vars $script: status $st (want 2), printed '$out', want '$want'"; return 1
}
mkdir -p "$TMP/elsewhere"
ok_all=1
for script in "$ROOT/scripts/cluster/gpt345m.sh" "$ROOT/scripts/cluster/llama500m.sh" "$ROOT/scripts/cluster/slurm.sbatch"; do
    for v in OPTIMIZER=SCAPE OPTIMIZER=sgd OPTIMIZER=top-k; do
        want="error: $v; use one of: adamw, adams, scape, topk-ef, powersgd, onebit-adam, demo, diloco, sparseloco"
        refused cluster_unknown_optimizer_is_refused "$script" "DRY_RUN=1 DATA_DIR=/shards $v" "$want" || ok_all=0
    done
done
[ $ok_all = 1 ] && ok cluster_unknown_optimizer_is_refused

ok_all=1
G=$ROOT/scripts/cluster/gpt345m.sh
while IFS='|' read -r script vars want; do
    [ "$script" = L ] && script=$ROOT/scripts/cluster/llama500m.sh || script=$G
    refused cluster_bad_values_stop_with_one_line "$script" "$vars" "$want" || ok_all=0
done <<EOF2
G|DRY_RUN=1 DATA_DIR=/shards STEPS=1e5|error: STEPS=1e5; use a whole number >= 1
L|DRY_RUN=1 DATA_DIR=/shards RANKS=0|error: RANKS=0; use a whole number >= 1
G|DRY_RUN=1 DATA_DIR=/shards MICRO_BATCH=8x|error: MICRO_BATCH=8x; use a whole number >= 1
L|DRY_RUN=1 DATA_DIR=/shards WARMUP=-5|error: WARMUP=-5; use a whole number >= 0
G|DRY_RUN=1 DATA_DIR=/shards DENSITY_WARMUP=1O000|error: DENSITY_WARMUP=1O000; use a whole number >= 0
G|DRY_RUN=1 DATA_DIR=/shards EXCLUDE_NORMS=yes|error: EXCLUDE_NORMS=yes; use one of: 0, 1
L|DRY_RUN=1 DATA_DIR=/shards DENSITY=O.1 DENSITY_WARMUP=100|error: DENSITY=O.1; use a fraction in (0, 1], e.g. 0.05
G|DRY_RUN=yes DATA_DIR=/shards|error: DRY_RUN=yes; use one of: 0, 1
G|DRY_RUN=1 DATA_DIR=/shards LAUNCHER=slurm|error: LAUNCHER=slurm; use one of: srun, mpirun
G|DRY_RUN=1|error: set DATA_DIR (see the header of $G)
G|DRY_RUN=0 DATA_DIR=/nonexistent|error: DATA_DIR=/nonexistent is not a folder; make the shards with scripts/cluster/prepare_data.sh
L|DATA_DIR=.|error: DATA_DIR=. has no *train*.bin shards; make them with scripts/cluster/prepare_data.sh
G|DATA_DIR=$ROOT/data/sotu/bpe4k TRAINER=./train_gpt|error: TRAINER=./train_gpt is not an executable (relative to $TMP/elsewhere); run make in $ROOT (or make cuda for the GPU trainers), or set TRAINER
G|DATA_DIR=$ROOT/data/sotu/bpe4k LAUNCHER=mpirun HOSTFILE=hosts|error: HOSTFILE=hosts cannot be read (relative to $TMP/elsewhere)
L|DRY_RUN=1 DATA_DIR=/shards SLURM_JOB_ID=1 SLURM_NTASKS=8 RANKS=4|error: RANKS=4 but srun runs one rank per task of this allocation (SLURM_NTASKS=8); unset RANKS, allocate 4 tasks, or LAUNCHER=mpirun
G|DRY_RUN=1 DATA_DIR=/shards SLURM_NTASKS=abc LAUNCHER=mpirun|error: RANKS=abc; use a whole number >= 1
G|DRY_RUN=1 DATA_DIR=/shards OPTIMIZER=diloco LOCO_H=0|error: LOCO_H=0; use a whole number >= 1
L|DRY_RUN=1 DATA_DIR=/shards OPTIMIZER=sparseloco LOCO_H=3O|error: LOCO_H=3O; use a whole number >= 1
G|DRY_RUN=1 DATA_DIR=/shards OPTIMIZER=sparseloco LOCO_MASK=Shared|error: LOCO_MASK=Shared; use one of: own, shared
EOF2
[ $ok_all = 1 ] && ok cluster_bad_values_stop_with_one_line

# RANKS given with LAUNCHER=mpirun inside an allocation is the ranks mpirun runs (SLURM_NTASKS used to replace it
# silently); without RANKS the allocation's task count is the default
a=$(env DRY_RUN=1 DATA_DIR=/shards SLURM_NTASKS=8 LAUNCHER=mpirun RANKS=4 scripts/cluster/gpt345m.sh 2>&1)
b=$(env DRY_RUN=1 DATA_DIR=/shards SLURM_NTASKS=8 LAUNCHER=mpirun scripts/cluster/llama500m.sh 2>&1)
if [[ "$a" == "+ mpirun -np 4 "* ]] && [[ "$b" == "+ mpirun -np 8 "* ]]; then ok cluster_ranks_given_are_the_ranks_launched
else fail cluster_ranks_given_are_the_ranks_launched "${a:0:40} / ${b:0:40}"; fi

# slurm.sbatch as SLURM runs it: a copy in a spool folder, run in the folder it was submitted from (not the
# repository): it finds the repository from SCAPE_ROOT (squeue's record of the command is test_slurm.sh's), or says
# how in one line; RECIPE and RESUME typos stop it
# (squeue here is a stand-in that prints what the real one records as the job's command, FAKE_CMD)
mkdir -p "$TMP/spool" "$TMP/bin" && cp scripts/cluster/slurm.sbatch "$TMP/spool/slurm_script"
printf '#!/bin/sh\n[ -n "$FAKE_CMD" ] && echo "$FAKE_CMD"\n' > "$TMP/bin/squeue" && chmod +x "$TMP/bin/squeue"
spool=(env PATH="$TMP/bin:$PATH" SLURM_JOB_ID=999999 SLURM_SUBMIT_DIR="$TMP/elsewhere" DRY_RUN=1 DATA_DIR=/shards)
ok_all=1
for how in "SCAPE_ROOT=$ROOT" "FAKE_CMD=$ROOT/scripts/cluster/slurm.sbatch" "FAKE_CMD=../../../scripts/cluster/slurm.sbatch" ""; do
    (cd "$TMP/elsewhere" && "${spool[@]}" $how "$TMP/spool/slurm_script") > "$TMP/s.out" 2>&1
    st=$?
    if [ -n "$how" ]; then # found: the srun command of the repository's trainer
        if [ $st = 0 ] && grep -q "^+ srun --mpi=pmix --kill-on-bad-exit=1 $ROOT/train_gpt .* --resume latest$" "$TMP/s.out"; then continue; fi
    elif [ $st = 2 ] && [ "$(grep -c . "$TMP/s.out")" = 1 ] \
         && grep -q "^error: cannot find the repository (.*); submit with SCAPE_ROOT=/path/to/repo sbatch" "$TMP/s.out"; then continue
    fi
    ok_all=0; fail cluster_sbatch_copy_in_a_spool_folder_finds_the_repository "with '$how': status $st: $(cat "$TMP/s.out")"
done
refused cluster_sbatch_copy_in_a_spool_folder_finds_the_repository "$TMP/spool/slurm_script" \
    "SCAPE_ROOT=$TMP SLURM_JOB_ID=1 DATA_DIR=/shards" "error: SCAPE_ROOT=$TMP has no scripts/cluster/common.sh; set it to the repository's folder" || ok_all=0
refused cluster_sbatch_copy_in_a_spool_folder_finds_the_repository "$ROOT/scripts/cluster/slurm.sbatch" \
    "RECIPE=gpt354m DRY_RUN=1 DATA_DIR=/shards" "error: RECIPE=gpt354m; use gpt345m or llama500m" || ok_all=0
refused cluster_sbatch_copy_in_a_spool_folder_finds_the_repository "$ROOT/scripts/cluster/slurm.sbatch" \
    "RESUME=$TMP/ckpt_5 DRY_RUN=1 DATA_DIR=/shards" "error: RESUME=$TMP/ckpt_5; a job continues with --resume latest (its requeues must), so start it from that checkpoint by running the recipe once, or unset RESUME" || ok_all=0
[ $ok_all = 1 ] && ok cluster_sbatch_copy_in_a_spool_folder_finds_the_repository
# a recipe itself given to sbatch runs as a spool copy too, away from common.sh: it says what to submit
cp scripts/cluster/llama500m.sh "$TMP/spool/recipe_copy"
refused cluster_recipe_given_to_sbatch_names_slurm_sbatch "$TMP/spool/recipe_copy" "SLURM_JOB_ID=1 DATA_DIR=/shards" \
    "error: $TMP/spool/recipe_copy is not in the repository (sbatch runs a copy of a script); submit scripts/cluster/slurm.sbatch with RECIPE=llama500m instead" \
    && ok cluster_recipe_given_to_sbatch_names_slurm_sbatch

# a real run from another folder: relative DATA_DIR and OUT are that folder's, the trainer is the repository's
ln -s "$ROOT/data" "$TMP/elsewhere/shards"
(cd "$TMP/elsewhere" && env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 LAUNCHER=mpirun \
    RANKS=1 OPTIMIZER=topk-ef DENSITY=0.1 DATA_DIR=shards/sotu/bpe4k OUT=run \
    EXTRA="--model d2c32h2t32v4096 --seq 32 --batch 2 --total-batch 64 --steps 3 --warmup 1 --eval-every 0 --eval-batches 1 --ckpt-every 0 --threads 1 --data $ROOT/data" \
    timeout 120 "$ROOT/scripts/cluster/gpt345m.sh") > "$TMP/run.out" 2>&1
st=$?
if [ $st = 0 ] && [ "$(grep -c '"event": "train"' "$TMP/elsewhere/run/log.jsonl" 2>/dev/null)" = 3 ] \
   && [ -f "$TMP/elsewhere/run/ckpt_3/model.bin" ]; then ok cluster_recipe_runs_from_another_folder
else fail cluster_recipe_runs_from_another_folder "status $st: $(grep -v '^step ' "$TMP/run.out" | tail -n 5)"; fi
[ "$failures" -eq 0 ]

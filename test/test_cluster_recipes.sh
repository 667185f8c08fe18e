#!/usr/bin/env bash
# test/test_cluster_recipes.sh - the cluster recipes (scripts/cluster/gpt345m.sh, llama500m.sh) are the authors'
# runs (issue 29; docs/reproduction.md 1.4): DRY_RUN=1 with only DATA_DIR (and OPTIMIZER / DENSITY) prints the
# command with each of the authors' settings for that model and density, and the trainer's parser accepts every
# flag of it (the command is run with --verify-ckpt on a folder without checkpoints: parsed, then exit 1).
set -u
failures=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }
TMP=$(mktemp -d build/test_cluster.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# recipe density optimizer "flag value ..." : each flag must appear with exactly that value
check() {
    local script=$1 density=$2 opt=$3 want=$4 name="cluster_${1}_${3}_${2}"
    local cmd
    cmd=$(DRY_RUN=1 DATA_DIR=/shards OPTIMIZER=$opt DENSITY=$density "scripts/cluster/$script.sh" 2>&1)
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
# a density the authors did not run needs its schedule spelled out
if DRY_RUN=1 DATA_DIR=/shards DENSITY=0.05 scripts/cluster/llama500m.sh > "$TMP/d.out" 2>&1; then
    fail cluster_other_density_needs_a_schedule "DENSITY=0.05 without DENSITY_WARMUP was accepted"
elif grep -q "the authors' recipes are for 0.1 and 0.01" "$TMP/d.out"; then ok cluster_other_density_needs_a_schedule
else fail cluster_other_density_needs_a_schedule "$(cat "$TMP/d.out")"; fi
[ "$failures" -eq 0 ]

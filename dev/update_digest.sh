#!/usr/bin/env bash
# dev/update_digest.sh [TRAIN_GPT] [TRAIN_LLAMA] [DATA] - one line per run of a fixed set of short training runs
# through the host update, every rule and path it has: dense AdamW and AdamS (plain and ZeRO-1), SCAPE (fp32 and
# bf16 payload, plain and ZeRO-1, norms sparsified with clipping and mask statistics, coded masks, the dense phase,
# each same-bytes variant, the double-residual comparison), topk-ef, PowerSGD, 1-bit Adam and DeMo; Llama SCAPE and
# AdamW ZeRO-1; 1 and 2 ranks (3 for the ZeRO-1 and rule runs): the SHA-256 of every value its log.jsonl records for
# train, val and mask events except timings (losses, gradient norms, densities, bytes, Jaccards, energies), of its
# final model file and of every rank's optimizer state.
# Two builds whose outputs are identical ran the same arithmetic bit for bit: the check that a refactor of the
# update side (optim/, comm/, trainer/) changed no behaviour. Not a test (it proves nothing alone); compare two
# outputs:
#   git stash; make train_gpt train_llama; dev/update_digest.sh > /tmp/before.txt; git stash pop
#   make train_gpt train_llama; dev/update_digest.sh > /tmp/after.txt; diff /tmp/before.txt /tmp/after.txt
set -euo pipefail
GPT=${1:-./train_gpt}
LLAMA=${2:-./train_llama}
DATA=${3:-data}
TMP=$(mktemp -d /tmp/update_digest.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
MPI=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none)
COMMON=(--data "$DATA" --batch 2 --seq 32 --steps 8 --warmup 2 --lr 3e-3 --eval-every 4 --eval-batches 1
        --sample-every 0 --threads 1 --shuffle 0 --ckpt-every 8 --seed 7)
digest() { # NAME DIR: hashes of the losses, model file and state files
    local name=$1 dir=$2 ck
    ck=$(ls -d "$dir"/ckpt_* | sort -t_ -k2 -n | tail -1)
    local losses
    losses=$(/usr/bin/python3 -c '
import json, sys
TIMING = ("ms", "tok_per_s", "mfu", "comm_wait_ms", "time", "elapsed_s", "wall_s",
          "optim_state_bytes")  # timings, and memory held (a layout may change it, not the arithmetic)
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["event"] in ("train", "val", "mask"):
        print(json.dumps({k: v for k, v in e.items() if k not in TIMING and not k.endswith("_ms")}, sort_keys=True))
' "$dir/log.jsonl" | sha256sum | cut -c1-16)
    local states
    states=$(cat "$ck"/state_rank*.bin | sha256sum | cut -c1-16)
    printf '%-28s losses %s model %s state %s\n' "$name" "$losses" "$(sha256sum < "$ck/model.bin" | cut -c1-16)" "$states"
}
run() { # NAME NP TRAINER MODEL ARGS...
    local name=$1 np=$2 trainer=$3 model=$4; shift 4
    if ! "${MPI[@]}" -np "$np" "$trainer" --model "$model" "${COMMON[@]}" --out "$TMP/$name" "$@" > "$TMP/$name.out" 2>&1; then
        echo "$name: the run failed:" >&2; tail -5 "$TMP/$name.out" >&2; exit 1
    fi
    digest "$name" "$TMP/$name"
}
S=(--optimizer scape --density 0.1 --density-warmup 4)
for np in 1 2; do
    run gpt_adamw_n$np $np "$GPT" d2c64h2t64 --optimizer adamw
    run gpt_adamw_zero_n$np $np "$GPT" d2c64h2t64 --optimizer adamw --zero
    run gpt_adams_n$np $np "$GPT" d2c64h2t64 --optimizer adams
    run gpt_adams_zero_n$np $np "$GPT" d2c64h2t64 --optimizer adams --zero
    run gpt_scape_n$np $np "$GPT" d2c64h2t64 "${S[@]}"
    run gpt_scape_bf16_n$np $np "$GPT" d2c64h2t64 "${S[@]}" --scape-payload bf16
    run gpt_scape_zero_n$np $np "$GPT" d2c64h2t64 "${S[@]}" --zero
    run gpt_scape_zero_bf16_n$np $np "$GPT" d2c64h2t64 "${S[@]}" --zero --scape-payload bf16
    run gpt_scape_norms_n$np $np "$GPT" d2c64h2t64 "${S[@]}" --scape-exclude-norms 0 --mask-stats-every 1 --clip 0.5
    run gpt_scape_coded_n$np $np "$GPT" d2c64h2t64 "${S[@]}" --scape-mask-coding auto --density-dense-steps 2 \
        --density-start 0.5
    run gpt_scape_catchup_n$np $np "$GPT" d2c64h2t64 "${S[@]}" --scape-variant catchup --scape-variant-cap 4
    run gpt_scape_tensornu_n$np $np "$GPT" d2c64h2t64 "${S[@]}" --scape-variant tensor-nu
    run gpt_scape_rdecay_n$np $np "$GPT" d2c64h2t64 "${S[@]}" --scape-variant residual-decay --scape-residual-decay 0.5
    run gpt_scape_double_n$np $np "$GPT" d2c64h2t64 "${S[@]}" --scape-double-residual-defect
    run gpt_topk_ef_n$np $np "$GPT" d2c64h2t64 --optimizer topk-ef --density 0.1 --density-warmup 4 --mask-stats-every 1
    run gpt_powersgd_n$np $np "$GPT" d2c64h2t64 --optimizer powersgd --powersgd-rank 2 --powersgd-start 3
    run gpt_onebit_n$np $np "$GPT" d2c64h2t64 --optimizer onebit-adam --onebit-freeze 3
    run gpt_demo_n$np $np "$GPT" d2c64h2t64 --optimizer demo --demo-chunk 16 --demo-topk 4
    run llama_scape_n$np $np "$LLAMA" l2c64h4kv2v32000t64 "${S[@]}"
    run llama_adamw_zero_n$np $np "$LLAMA" l2c64h4kv2v32000t64 --optimizer adamw --zero
done
run gpt_scape_zero_n3 3 "$GPT" d2c64h2t64 "${S[@]}" --zero
run gpt_adamw_zero_n3 3 "$GPT" d2c64h2t64 --optimizer adamw --zero
run gpt_topk_ef_n3 3 "$GPT" d2c64h2t64 --optimizer topk-ef --density 0.1 --density-warmup 4
run gpt_powersgd_n3 3 "$GPT" d2c64h2t64 --optimizer powersgd --powersgd-rank 2 --powersgd-start 3
run gpt_onebit_n3 3 "$GPT" d2c64h2t64 --optimizer onebit-adam --onebit-freeze 3
run gpt_demo_n3 3 "$GPT" d2c64h2t64 --optimizer demo --demo-chunk 16 --demo-topk 4

#!/usr/bin/env bash
# test/test_train_mpi.sh TOY - multi-rank tests of the shared training loop with the toy model under mpirun:
# bit-identical resume on 2 ranks (AdamW and SCAPE at density 0.25, whose per-rank residuals and masks are in the
# checkpoint), gradient accumulation arithmetic, and resuming on a different world size (1 -> 2 and 2 -> 1 ranks,
# announced in one line). Prints "ok <name>"/"FAIL <name>: ..."; temp files under build/ are removed on exit.
set -u
TOY=${1:?usage: test/test_train_mpi.sh build/test_train_toy}
command -v mpirun > /dev/null || { echo "FAIL mpirun_present: mpirun not found; run 'make deps'"; exit 1; }
TMP=$(mktemp -d build/test_train_mpi.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
MPI=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none)
. "$(dirname "$0")/lib.sh" # failures=0, ok NAME, fail NAME WHY
train_rows() { grep '"event": "train"' "$1" | sed -E 's/.*"step": ([0-9]+), "train_loss": ([^,]+), "lr": ([^,]+), "grad_norm": ([^,]+),.*/\1 \2 \3 \4/'; }

"$TOY" mkdata "$TMP/data" 32 || { echo "FAIL mkdata: could not write toy shards"; exit 1; }
RUN=("$TOY" --model v32l2t64 --train "$TMP/data/train.bin" --val "$TMP/data/val.bin" --batch 4 --seq 16
     --steps 8 --warmup 2 --lr 5e-2 --eval-every 4 --eval-batches 4 --sample-every 0 --threads 1)

# resume_bitwise NAME FLAGS...: 2-rank run A (8 steps, ckpt at 4) vs 2-rank run B resumed from A's step 4
resume_bitwise() {
    local name=$1; shift
    "${MPI[@]}" -np 2 "${RUN[@]}" "$@" --out "$TMP/$name.a" --ckpt-every 4 --keep-ckpts 0 > "$TMP/$name.a.out" 2>&1 \
        || { fail "$name" "run A failed: $(tail -3 "$TMP/$name.a.out")"; return; }
    "${MPI[@]}" -np 2 "${RUN[@]}" "$@" --out "$TMP/$name.b" --resume "$TMP/$name.a/ckpt_4" > "$TMP/$name.b.out" 2>&1 \
        || { fail "$name" "resumed run failed: $(tail -3 "$TMP/$name.b.out")"; return; }
    local f
    for f in model.bin state_rank0.bin state_rank1.bin; do
        cmp -s "$TMP/$name.a/ckpt_8/$f" "$TMP/$name.b/ckpt_8/$f" || { fail "$name" "ckpt_8/$f differs after resume"; return; }
    done
    if ! diff <(train_rows "$TMP/$name.a/log.jsonl" | awk '$1 > 4') <(train_rows "$TMP/$name.b/log.jsonl") > /dev/null; then
        fail "$name" "losses after resume differ"; return
    fi
    ok "$name"
}
resume_bitwise resume_2_ranks_adamw_bitwise
resume_bitwise resume_2_ranks_scape_bitwise --optimizer scape --density 0.25 --density-start 1 --density-warmup 3
resume_bitwise resume_2_ranks_zero_bitwise --zero
# resumed at step 4, inside a dense phase that ends at step 5: the schedule continues across it bit for bit
resume_bitwise resume_2_ranks_scape_across_dense_phase_bitwise --optimizer scape --density 0.25 --density-start 1 \
    --density-dense-steps 5 --density-warmup 2

# gradient accumulation: 256 tokens = 4 x 16 x 2 ranks x accum 2
if "${MPI[@]}" -np 2 "${RUN[@]}" --out "$TMP/acc" --total-batch 256 > "$TMP/acc.out" 2>&1 \
   && grep -q "B=4 T=16 accum=2 -> 256 tokens/step" "$TMP/acc.out" && grep -q '"accum": 2' "$TMP/acc/log.jsonl"; then
    ok grad_accumulation_over_ranks
else fail grad_accumulation_over_ranks "$(grep -E 'accum|error' "$TMP/acc.out" | head -3)"; fi
"${MPI[@]}" -np 2 "${RUN[@]}" --out "$TMP/x" --total-batch 192 > "$TMP/x.out" 2>&1
if grep -q "error: --total-batch 192 is not a multiple of --batch 4 x --seq 16 x 2 ranks = 128 tokens; use a multiple such as 256" "$TMP/x.out"; then
    ok error_total_batch_arithmetic_2_ranks
else fail error_total_batch_arithmetic_2_ranks "$(head -3 "$TMP/x.out")"; fi

# world-size change: 1 -> 2 and 2 -> 1 ranks
"${RUN[@]}" --out "$TMP/w1" --ckpt-every 4 --keep-ckpts 0 > /dev/null 2>&1
if "${MPI[@]}" -np 2 "${RUN[@]}" --out "$TMP/w12" --resume "$TMP/w1/ckpt_4" > "$TMP/w12.out" 2>&1 \
   && grep -q "note: resuming a 1-rank checkpoint on 2 ranks" "$TMP/w12.out" && [ -s "$TMP/w12/ckpt_8/state_rank1.bin" ]; then
    ok resume_1_rank_checkpoint_on_2_ranks
else fail resume_1_rank_checkpoint_on_2_ranks "$(tail -3 "$TMP/w12.out")"; fi
if "${RUN[@]}" --out "$TMP/w21" --resume "$TMP/resume_2_ranks_scape_bitwise.a/ckpt_4" --optimizer scape \
       --density 0.25 --density-start 1 --density-warmup 3 > "$TMP/w21.out" 2>&1 \
   && grep -q "note: resuming a 2-rank checkpoint on 1 rank" "$TMP/w21.out" && [ -s "$TMP/w21/ckpt_8/model.bin" ]; then
    ok resume_2_rank_scape_checkpoint_on_1_rank
else fail resume_2_rank_scape_checkpoint_on_1_rank "$(tail -3 "$TMP/w21.out")"; fi

# --- issue 30: each rank's node-local rank and the threads default come from MPI (not from Open MPI's variables,
#     which are unset here as under srun): on this machine of C cores, N ranks are local ranks 0..N-1 of N with
#     max(1, C / N) threads each, one placement line per rank
cores=$(nproc)
for np in 2 4; do
    name=placement_from_mpi_${np}_ranks
    "${MPI[@]}" -np $np -x OMPI_COMM_WORLD_LOCAL_RANK=7 -x OMPI_COMM_WORLD_LOCAL_SIZE=9 \
        "$TOY" --model v32l2t64 --train "$TMP/data/train.bin" --val "$TMP/data/val.bin" --batch 4 --seq 16 --steps 1 \
        --eval-every 0 --sample-every 0 --out "$TMP/pl$np" > "$TMP/pl$np.out" 2>&1
    threads=$(( cores / np > 0 ? cores / np : 1 ))
    bad=""
    for r in $(seq 0 $((np - 1))); do
        grep -q "^placement: rank $r on $(hostname): local rank $r of $np, $threads thread" "$TMP/pl$np.out" || bad="$bad $r"
    done
    if [ -z "$bad" ] && [ "$(grep -c '^placement: ' "$TMP/pl$np.out")" = $np ]; then ok "$name"
    else fail "$name" "ranks$bad: $(grep placement "$TMP/pl$np.out" | head -4; tail -n 2 "$TMP/pl$np.out")"; fi
done

# --- a usage error under mpirun is one line, from rank 0, with status 2 (each rank used to print it: 3 lines at
#     3 ranks); a value that is another option ("--out --steps 8") is named as such, not as a stray "8"
for args in "--lr abc|--lr: 'abc' is not a number" "--out --steps 8|--out needs a value (the next argument is the option --steps)" \
            "--out |--out was given an empty value" "--density 0.5|--density 0.5 applies only to"; do
    name="usage_error_one_line_${args%%|*}"; name=${name// /_}
    read -ra extra <<< "${args%%|*}"
    [ "${args%%|*}" = "--out " ] && extra=(--out "")
    "${MPI[@]}" -np 3 "${RUN[@]}" "${extra[@]}" > "$TMP/usage.out" 2>&1
    st=$?
    if [ "$st" = 2 ] && [ "$(grep -c '^error: ' "$TMP/usage.out")" = 1 ] && grep -qF "error: ${args#*|}" "$TMP/usage.out"
    then ok "$name"
    else fail "$name" "status $st: $(grep '^error' "$TMP/usage.out" | head -4)"; fi
done

[ "$failures" -eq 0 ]

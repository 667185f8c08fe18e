#!/usr/bin/env bash
# test/test_loco.sh TOY - the local-update rules (issue 45), DiLoCo (optim/dist_diloco.c) first, through the whole training loop
# with the toy model under mpirun, H = 4 on 10 steps (outer steps at 4, 8 and the last step, 10): a 2-rank run resumed
# from a checkpoint between outer steps (step 5) ends bit-identical to the uninterrupted run (model file, both ranks'
# state files, the logged losses); the checkpoints' model file is the synchronized model (unchanged from step 4
# through 7, moved at 8); SCAPE_CHECK_SYNC passes; the logged bytes are 0 in every payload kind at inner steps and one
# all-reduce of P floats at outer steps, 2 * 4P (N-1)/N; a checkpoint of an outer step resumes on 1 rank, one between
# outer steps is refused in one line; other rule parameters than the checkpoint's are refused, another rule's as another
# rule's. Then SparseLoCo
# (optim/dist_sparseloco.c; chunks of 64, top-8) likewise: in sync, 0 bytes at inner steps and one all-gather at outer
# steps, resume between outer steps bitwise, an outer step's checkpoint on 1 rank; and with --sparseloco-mask shared
# (in sync, bytes, resume bitwise, an outer step's checkpoint on 3 ranks). Their options are rows of their rule files
# (optim/rule.h): --help lists them, another rule refuses them in one line; an H at or above --steps and a top-k at or
# above the chunk are noted.
# Prints "ok <name>"/"FAIL <name>: ..."; temp files under build/ are removed on exit.
set -u
TOY=${1:?usage: test/test_loco.sh build/test_train_toy}
command -v mpirun > /dev/null || { echo "FAIL mpirun_present: mpirun not found; run 'make deps'"; exit 1; }
mkdir -p build
TMP=$(mktemp -d build/test_loco.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
MPI=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none)
. "$(dirname "$0")/lib.sh" # failures=0, ok NAME, fail NAME WHY
train_rows() { grep '"event": "train"' "$1" | sed -E 's/.*"step": ([0-9]+), "train_loss": ([^,]+), "lr": ([^,]+), "grad_norm": ([^,]+),.*/\1 \2 \3 \4/'; }

"$TOY" mkdata "$TMP/data" 32 || { echo "FAIL mkdata: could not write toy shards"; exit 1; }
RUN=("$TOY" --model v32l2t64 --train "$TMP/data/train.bin" --val "$TMP/data/val.bin" --batch 4 --seq 16
     --steps 10 --warmup 2 --lr 5e-2 --eval-every 4 --eval-batches 4 --sample-every 0 --threads 1 --optimizer diloco --diloco-h 4)

# the options are the trainer's: in --help, refused with another rule in one line
help=$("$TOY" --help 2>&1)
if echo "$help" | grep -q -- "--diloco-h" && echo "$help" | grep -q -- "--sparseloco-mask"; then ok loco_options_in_help
else fail loco_options_in_help "--help lacks --diloco-h or --sparseloco-mask"; fi
if "$TOY" --model v32l2t64 --train "$TMP/data/train.bin" --diloco-h 10 --optimizer adamw > "$TMP/own.out" 2>&1; then
    fail diloco_option_refused_with_adamw "it ran"
elif [ "$(grep -c . "$TMP/own.out")" = 1 ] && grep -q "^error: --diloco-h applies to --optimizer diloco only" "$TMP/own.out"; then
    ok diloco_option_refused_with_adamw
else fail diloco_option_refused_with_adamw "$(head -3 "$TMP/own.out")"; fi

# settings that leave the rule with nothing to do are noted: H covering the whole run (one outer step, at the last),
# SparseLoCo's top-k taking every value of a chunk
"$TOY" --model v32l2t64 --train "$TMP/data/train.bin" --val "$TMP/data/val.bin" --batch 4 --seq 16 --steps 3 \
    --threads 1 --optimizer diloco --out "$TMP/n1" > "$TMP/n1.out" 2>&1
"$TOY" --model v32l2t64 --train "$TMP/data/train.bin" --val "$TMP/data/val.bin" --batch 4 --seq 16 --steps 3 \
    --threads 1 --optimizer sparseloco --sparseloco-h 2 --sparseloco-chunk 16 --sparseloco-topk 16 --out "$TMP/n2" > "$TMP/n2.out" 2>&1
if grep -q "^note: --diloco-h 500 >= --steps 3, so the ranks synchronize once, at the last step" "$TMP/n1.out" \
    && grep -q "^note: --sparseloco-topk 16 >= --sparseloco-chunk 16, so every value of every chunk is sent" "$TMP/n2.out" \
    && ! grep -q "sparseloco-h 2 >=" "$TMP/n2.out"; then
    ok loco_settings_without_effect_are_noted
else fail loco_settings_without_effect_are_noted "$(grep -h '^note\|^error' "$TMP/n1.out" "$TMP/n2.out")"; fi

# run A: 2 ranks, a checkpoint after every step, the sync check on
if SCAPE_CHECK_SYNC=1 "${MPI[@]}" -np 2 "${RUN[@]}" --out "$TMP/a" --ckpt-every 1 --keep-ckpts 0 > "$TMP/a.out" 2>&1 \
    && grep -q "^sync check: parameters and shared optimizer state identical on 2 ranks" "$TMP/a.out"; then
    ok diloco_2_ranks_end_in_sync
else fail diloco_2_ranks_end_in_sync "$(tail -3 "$TMP/a.out")"; fi

# the model file is the synchronized model: theta_prev of step 4 until the outer step of step 8
same=1
for s in 5 6 7; do cmp -s "$TMP/a/ckpt_4/model.bin" "$TMP/a/ckpt_$s/model.bin" || same=0; done
if [ $same = 1 ] && ! cmp -s "$TMP/a/ckpt_4/model.bin" "$TMP/a/ckpt_8/model.bin" \
    && ! cmp -s "$TMP/a/ckpt_5/state_rank0.bin" "$TMP/a/ckpt_5/state_rank1.bin"; then
    ok diloco_checkpoint_model_is_the_synchronized_model
else fail diloco_checkpoint_model_is_the_synchronized_model "model.bin changed between outer steps, or did not at one"; fi

# bytes: P = 2080 floats; inner steps 0 in every payload kind, outer steps (4, 8, 10) 2 * 4 * 2080 * 1/2 = 8320
bytes=$(grep '"event": "train"' "$TMP/a/log.jsonl" | sed -E 's/.*"step": ([0-9]+),.*"comm_allreduce_bytes": ([0-9]+), "comm_reduce_scatter_bytes": ([0-9]+), "comm_allgather_bytes": ([0-9]+),.*/\1 \2 \3 \4/' | tr '\n' ' ')
want="1 0 0 0 2 0 0 0 3 0 0 0 4 8320 0 0 5 0 0 0 6 0 0 0 7 0 0 0 8 8320 0 0 9 0 0 0 10 8320 0 0 "
if [ "$bytes" = "$want" ]; then ok diloco_bytes_zero_inner_and_one_allreduce_per_outer_step
else fail diloco_bytes_zero_inner_and_one_allreduce_per_outer_step "step allreduce reduce-scatter allgather: $bytes"; fi

# run B: resumed from step 5, between outer steps
if "${MPI[@]}" -np 2 "${RUN[@]}" --out "$TMP/b" --resume "$TMP/a/ckpt_5" > "$TMP/b.out" 2>&1; then
    diff_files=""
    for f in model.bin state_rank0.bin state_rank1.bin; do
        cmp -s "$TMP/a/ckpt_10/$f" "$TMP/b/ckpt_10/$f" || diff_files="$diff_files $f"
    done
    if [ -n "$diff_files" ]; then fail diloco_resume_between_outer_steps_bitwise "ckpt_10:$diff_files differ"
    elif ! diff <(train_rows "$TMP/a/log.jsonl" | awk '$1 > 5') <(train_rows "$TMP/b/log.jsonl") > /dev/null; then
        fail diloco_resume_between_outer_steps_bitwise "losses after resume differ"
    else ok diloco_resume_between_outer_steps_bitwise; fi
else fail diloco_resume_between_outer_steps_bitwise "resumed run failed: $(tail -3 "$TMP/b.out")"; fi

# another world: at an outer step (8) it resumes on 1 rank; between outer steps (5) it is refused in one line
if "${MPI[@]}" -np 1 "${RUN[@]}" --out "$TMP/c" --resume "$TMP/a/ckpt_8" > "$TMP/c.out" 2>&1 && [ -f "$TMP/c/ckpt_10/model.bin" ]; then
    ok diloco_outer_step_checkpoint_resumes_on_1_rank
else fail diloco_outer_step_checkpoint_resumes_on_1_rank "$(tail -3 "$TMP/c.out")"; fi
if "${MPI[@]}" -np 1 "${RUN[@]}" --out "$TMP/d" --resume "$TMP/a/ckpt_5" > "$TMP/d.out" 2>&1; then
    fail diloco_between_outer_steps_checkpoint_refused_on_1_rank "the resume ran"
elif [ "$(grep -c 'between outer steps' "$TMP/d.out")" = 1 ]; then
    ok diloco_between_outer_steps_checkpoint_refused_on_1_rank
else fail diloco_between_outer_steps_checkpoint_refused_on_1_rank "$(tail -3 "$TMP/d.out")"; fi

# other rule parameters than the checkpoint's are refused
if "${MPI[@]}" -np 2 "${RUN[@]}" --diloco-h 5 --out "$TMP/e" --resume "$TMP/a/ckpt_5" > "$TMP/e.out" 2>&1; then
    fail diloco_other_h_refused_on_resume "the resume ran"
elif grep -q -- "--diloco-h 5 contradicts the checkpoint .*--diloco-h 4" "$TMP/e.out"; then ok diloco_other_h_refused_on_resume
else fail diloco_other_h_refused_on_resume "$(tail -2 "$TMP/e.out")"; fi
# another rule's option on resume is refused as another rule's, not as contradicting a value the run never used
if "${MPI[@]}" -np 2 "$TOY" --sparseloco-h 4 --out "$TMP/e2" --resume "$TMP/a/ckpt_5" > "$TMP/e2.out" 2>&1; then
    fail diloco_resume_refuses_sparseloco_option_as_another_rules "the resume ran"
elif grep -q -- "^error: --sparseloco-h applies to --optimizer sparseloco only (this run has --optimizer diloco" "$TMP/e2.out" \
    && ! grep -q "contradicts\|applies from the resumed step" "$TMP/e2.out"; then
    ok diloco_resume_refuses_sparseloco_option_as_another_rules
else fail diloco_resume_refuses_sparseloco_option_as_another_rules "$(grep -v '^\[' "$TMP/e2.out" | head -2)"; fi

# SparseLoCo (optim/dist_sparseloco.c): H 4, chunks of 64 with top-8; the same loop, its per-rank error feedback in
# the state files
RUN_SL=("${RUN[@]/diloco/sparseloco}" --sparseloco-chunk 64 --sparseloco-topk 8)
if SCAPE_CHECK_SYNC=1 "${MPI[@]}" -np 2 "${RUN_SL[@]}" --out "$TMP/sa" --ckpt-every 1 --keep-ckpts 0 > "$TMP/sa.out" 2>&1 \
    && grep -q "^sync check: parameters and shared optimizer state identical on 2 ranks" "$TMP/sa.out"; then
    ok sparseloco_2_ranks_end_in_sync
else fail sparseloco_2_ranks_end_in_sync "$(tail -3 "$TMP/sa.out")"; fi
# bytes: 0 in every payload kind at inner steps; at outer steps (4, 8, 10) one all-gather, the same bytes each time
rows=$(grep '"event": "train"' "$TMP/sa/log.jsonl" | sed -E 's/.*"step": ([0-9]+),.*"comm_allreduce_bytes": ([0-9]+), "comm_reduce_scatter_bytes": ([0-9]+), "comm_allgather_bytes": ([0-9]+),.*/\1 \2 \3 \4/')
if [ "$(echo "$rows" | awk '($1 % 4 == 0 || $1 == 10) != ($4 > 0) || $2 != 0 || $3 != 0' | wc -l)" = 0 ] \
    && [ "$(echo "$rows" | awk '$4 > 0 {print $4}' | sort -u | wc -l)" = 1 ]; then
    ok sparseloco_bytes_zero_inner_and_one_allgather_per_outer_step
else fail sparseloco_bytes_zero_inner_and_one_allgather_per_outer_step "step allreduce reduce-scatter allgather: $(echo $rows)"; fi
if "${MPI[@]}" -np 2 "${RUN_SL[@]}" --out "$TMP/sb" --resume "$TMP/sa/ckpt_5" > "$TMP/sb.out" 2>&1; then
    diff_files=""
    for f in model.bin state_rank0.bin state_rank1.bin; do
        cmp -s "$TMP/sa/ckpt_10/$f" "$TMP/sb/ckpt_10/$f" || diff_files="$diff_files $f"
    done
    if [ -n "$diff_files" ]; then fail sparseloco_resume_between_outer_steps_bitwise "ckpt_10:$diff_files differ"
    elif ! diff <(train_rows "$TMP/sa/log.jsonl" | awk '$1 > 5') <(train_rows "$TMP/sb/log.jsonl") > /dev/null; then
        fail sparseloco_resume_between_outer_steps_bitwise "losses after resume differ"
    else ok sparseloco_resume_between_outer_steps_bitwise; fi
else fail sparseloco_resume_between_outer_steps_bitwise "resumed run failed: $(tail -3 "$TMP/sb.out")"; fi
if "${MPI[@]}" -np 1 "${RUN_SL[@]}" --out "$TMP/sc" --resume "$TMP/sa/ckpt_8" > "$TMP/sc.out" 2>&1 \
    && [ -f "$TMP/sc/ckpt_10/model.bin" ]; then
    ok sparseloco_outer_step_checkpoint_resumes_on_1_rank
else fail sparseloco_outer_step_checkpoint_resumes_on_1_rank "$(tail -3 "$TMP/sc.out")"; fi

# SparseLoCo with the shared mask: in sync (the mask hashed too), one all-reduce and one mask all-gather at outer steps
# (two all-gathers at the first), resume between outer steps bitwise, an outer step's checkpoint on 3 ranks (other
# owners choose the next masks)
RUN_SL+=(--sparseloco-mask shared)
if SCAPE_CHECK_SYNC=1 "${MPI[@]}" -np 2 "${RUN_SL[@]}" --out "$TMP/ma" --ckpt-every 1 --keep-ckpts 0 > "$TMP/ma.out" 2>&1 \
    && grep -q "^sync check: parameters and shared optimizer state identical on 2 ranks" "$TMP/ma.out"; then
    ok sparseloco_shared_mask_2_ranks_end_in_sync
else fail sparseloco_shared_mask_2_ranks_end_in_sync "$(tail -3 "$TMP/ma.out")"; fi
rows=$(grep '"event": "train"' "$TMP/ma/log.jsonl" | sed -E 's/.*"step": ([0-9]+),.*"comm_allreduce_bytes": ([0-9]+), "comm_reduce_scatter_bytes": ([0-9]+), "comm_allgather_bytes": ([0-9]+),.*/\1 \2 \3 \4/')
if [ "$(echo "$rows" | awk '($1 % 4 == 0 || $1 == 10) != ($2 > 0 && $4 > 0) || $3 != 0' | wc -l)" = 0 ] \
    && [ "$(echo "$rows" | awk '$1 > 4 && $2 > 0 {print $2, $4}' | sort -u | wc -l)" = 1 ]; then
    ok sparseloco_shared_mask_bytes_zero_inner_and_one_allreduce_per_outer_step
else fail sparseloco_shared_mask_bytes_zero_inner_and_one_allreduce_per_outer_step "$(echo $rows)"; fi
if "${MPI[@]}" -np 2 "${RUN_SL[@]}" --out "$TMP/mb" --resume "$TMP/ma/ckpt_6" > "$TMP/mb.out" 2>&1; then
    diff_files=""
    for f in model.bin state_rank0.bin state_rank1.bin; do
        cmp -s "$TMP/ma/ckpt_10/$f" "$TMP/mb/ckpt_10/$f" || diff_files="$diff_files $f"
    done
    if [ -n "$diff_files" ]; then fail sparseloco_shared_mask_resume_between_outer_steps_bitwise "ckpt_10:$diff_files differ"
    elif ! diff <(train_rows "$TMP/ma/log.jsonl" | awk '$1 > 6') <(train_rows "$TMP/mb/log.jsonl") > /dev/null; then
        fail sparseloco_shared_mask_resume_between_outer_steps_bitwise "losses after resume differ"
    else ok sparseloco_shared_mask_resume_between_outer_steps_bitwise; fi
else fail sparseloco_shared_mask_resume_between_outer_steps_bitwise "resumed run failed: $(tail -3 "$TMP/mb.out")"; fi
if SCAPE_CHECK_SYNC=1 "${MPI[@]}" -np 3 "${RUN_SL[@]}" --out "$TMP/mc" --resume "$TMP/ma/ckpt_8" > "$TMP/mc.out" 2>&1 \
    && grep -q "^sync check: parameters and shared optimizer state identical on 3 ranks" "$TMP/mc.out"; then
    ok sparseloco_shared_mask_outer_step_checkpoint_resumes_on_3_ranks
else fail sparseloco_shared_mask_outer_step_checkpoint_resumes_on_3_ranks "$(tail -3 "$TMP/mc.out")"; fi
exit $failures

#!/usr/bin/env bash
# test/test_rule_settings.sh TOY - settings of the compressing update rules (issue 43) through the shared training
# loop, on the toy bigram model (test/test_train_toy.c), one rank, a few seconds:
#   onebit_freeze_is_kept_by_a_resume_with_other_steps  --onebit-freeze 0 resolves to 15% of the run's --steps once,
#       at the start; a resume with another --steps keeps that step (the variance stays frozen), so its losses and
#       model equal a run never resumed that was given the original step;
#   <rule>_dense_for_the_whole_run_is_noted   a rule whose settings make it its plain dense rule for the whole run
#       says so in one "note:" line (PowerSGD's start or 1-bit Adam's freeze >= --steps, no PowerSGD matrix large
#       enough to compress, SCAPE / topk-ef at density 1 at every step), what it says is true (AdamW's losses, bit for
#       bit), and a run that does compress prints no such line.
set -u
TOY=${1:?usage: test/test_rule_settings.sh build/test_train_toy}
TMP=$(mktemp -d build/test_rule_settings.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib.sh" # failures=0, ok NAME, fail NAME WHY

"$TOY" mkdata "$TMP/data" 32 || { echo "FAIL mkdata: could not write toy shards"; exit 1; }
RUN=("$TOY" --model v32l2t64 --train "$TMP/data/train.bin" --val "$TMP/data/val.bin" --batch 4 --seq 16
     --warmup 5 --lr 5e-2 --lr-floor 1e-3 --eval-every 0 --eval-batches 1 --sample-every 0 --threads 1)
losses() { grep '"event": "train"' "$1/log.jsonl" | sed -E 's/.*"step": ([0-9]+), "train_loss": ([^,]+),.*/\1 \2/'; }

# --- 1-bit Adam's freeze step survives a resume with another --steps. --steps 20 resolves the freeze to step 3;
# resumed at step 4 with --steps 40 it would become 6 (steps 5 and 6 AdamW again, v updated). Steps 1..4 are in the
# warm-up, where the learning rate does not depend on --steps, so both runs below take the same first 4 steps.
O=("${RUN[@]}" --optimizer onebit-adam)
"${O[@]}" --steps 20 --ckpt-every 4 --keep-ckpts 0 --out "$TMP/o20" > "$TMP/o20.out" 2>&1
"${O[@]}" --steps 40 --resume "$TMP/o20/ckpt_4" --out "$TMP/o40r" > "$TMP/o40r.out" 2>&1
st=$?
"${O[@]}" --steps 40 --onebit-freeze 3 --out "$TMP/o40" > "$TMP/o40.out" 2>&1
if [ $st = 0 ] && [ -f "$TMP/o40/ckpt_40/model.bin" ] && cmp -s "$TMP/o40/ckpt_40/model.bin" "$TMP/o40r/ckpt_40/model.bin" \
   && [ "$(losses "$TMP/o40r" | tail -n 1)" = "$(losses "$TMP/o40" | tail -n 1)" ]; then
    ok onebit_freeze_is_kept_by_a_resume_with_other_steps
else
    fail onebit_freeze_is_kept_by_a_resume_with_other_steps "resumed with --steps 40 (status $st): last loss \
'$(losses "$TMP/o40r" | tail -n 1)', expected '$(losses "$TMP/o40" | tail -n 1)' (--onebit-freeze 3 from the start) \
$(grep -h 'error\|note' "$TMP/o40r.out" | head -n 3)"
fi

# dense_note NAME PATTERN DENSE_ARGS -- COMPRESSING_ARGS: the dense settings print exactly one note matching PATTERN
# and train AdamW's losses when ADAMW=1; the compressing ones print none
"${RUN[@]}" --steps 6 --optimizer adamw --out "$TMP/adamw" > "$TMP/adamw.out" 2>&1
dense_note() {
    local name=$1 pat=$2 adamw=$3; shift 3
    local dense=() comp=()
    while [ "$1" != -- ]; do dense+=("$1"); shift; done
    shift
    comp=("$@")
    "${RUN[@]}" --steps 6 "${dense[@]}" --out "$TMP/$name.d" > "$TMP/$name.d.out" 2>&1
    local st=$?
    "${RUN[@]}" --steps 6 "${comp[@]}" --out "$TMP/$name.c" > "$TMP/$name.c.out" 2>&1
    local st2=$?
    local n_d n_c
    n_d=$(grep -c "^note: .*$pat" "$TMP/$name.d.out")
    n_c=$(grep -c "^note: .*$pat" "$TMP/$name.c.out")
    if [ $st != 0 ] || [ $st2 != 0 ] || [ "$n_d" != 1 ] || [ "$n_c" != 0 ]; then
        fail "$name" "status $st/$st2, notes '$pat' $n_d (want 1) with ${dense[*]}, $n_c (want 0) with ${comp[*]}: \
$(grep -h '^note:\|^error' "$TMP/$name.d.out" "$TMP/$name.c.out" | head -n 4)"
    elif [ "$adamw" = 1 ] && [ "$(losses "$TMP/$name.d")" != "$(losses "$TMP/adamw")" ]; then
        fail "$name" "the note says AdamW bit for bit, but the losses differ from --optimizer adamw's"
    else ok "$name"; fi
}
dense_note powersgd_dense_for_the_whole_run_is_noted "--powersgd-start 1000 >= --steps 6, so PowerSGD never compresses" 1 \
    --optimizer powersgd -- --optimizer powersgd --powersgd-start 2
dense_note powersgd_without_a_compressible_matrix_is_noted "powersgd compresses no matrix at --powersgd-rank 64" 1 \
    --optimizer powersgd --powersgd-start 0 --powersgd-rank 64 -- --optimizer powersgd --powersgd-start 0
dense_note onebit_adam_dense_for_the_whole_run_is_noted "--onebit-freeze 6 >= --steps 6, so 1-bit Adam never freezes" 1 \
    --optimizer onebit-adam --onebit-freeze 6 -- --optimizer onebit-adam
dense_note topk_ef_dense_for_the_whole_run_is_noted "the density is 1 at every step .* so topk-ef is dense AdamW" 0 \
    --optimizer topk-ef -- --optimizer topk-ef --density 0.5
dense_note scape_dense_for_the_whole_run_is_noted "the density is 1 at every step .* so scape is dense AdamS" 0 \
    --optimizer scape --density 0.1 --density-dense-steps 6 -- --optimizer scape --density 0.1 --density-dense-steps 5
[ "$failures" -eq 0 ]

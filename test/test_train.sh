#!/usr/bin/env bash
# test/test_train.sh TOY - end-to-end tests of the shared training loop (trainer/train.c) driving the toy bigram
# model (test/test_train_toy.c): learning, log.jsonl keys, bit-identical resume, checkpoint selection and
# pruning, and the one-line errors for bad input. Each case prints "ok <name>" or "FAIL <name>: ...".
# Everything lives in a temp dir under build/ that is removed on exit. Runs in a few seconds on one core.
set -u
TOY=${1:?usage: test/test_train.sh build/test_train_toy}
TMP=$(mktemp -d build/test_train.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
. "$(dirname "$0")/lib.sh" # failures=0, ok NAME, fail NAME WHY

"$TOY" mkdata "$TMP/data" 32 || { echo "FAIL mkdata: could not write toy shards"; exit 1; }
RUN=("$TOY" --model v32l2t64 --train "$TMP/data/train.bin" --val "$TMP/data/val.bin" --batch 4 --seq 16
     --steps 12 --warmup 2 --lr 5e-2 --lr-floor 1e-3 --eval-every 3 --eval-batches 4 --sample-every 4
     --sample-tokens 8 --temperature 1 --top-k 8 --threads 1)

# train events as "step loss lr grad_norm" and val events as "step val_loss", the fields that must match
train_rows() { grep '"event": "train"' "$1" | sed -E 's/.*"step": ([0-9]+), "train_loss": ([^,]+), "lr": ([^,]+), "grad_norm": ([^,]+),.*/\1 \2 \3 \4/'; }
val_rows() { grep '"event": "val"' "$1" | sed -E 's/.*"step": ([0-9]+), "val_loss": ([^,]+),.*/\1 \2/'; }
after() { awk -v k="$1" '$1 > k'; }

# --- a plain run learns, and writes the log and a final checkpoint
if "${RUN[@]}" --out "$TMP/a" > "$TMP/a.out" 2> "$TMP/a.err"; then
    first=$(val_rows "$TMP/a/log.jsonl" | head -1 | cut -d' ' -f2)
    last=$(val_rows "$TMP/a/log.jsonl" | tail -1 | cut -d' ' -f2)
    if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.1) }'; then ok toy_run_learns
    else fail toy_run_learns "val loss went from $first to $last, expected a drop of more than 0.1"; fi
else
    fail toy_run_learns "trainer exited non-zero: $(cat "$TMP/a.err")"
fi

# --- log.jsonl: every line a JSON object with "event"; each event type has its keys
if /usr/bin/python3 - "$TMP/a/log.jsonl" > "$TMP/keys.txt" 2>&1 <<'EOF'
import json, sys
need = {
    "start": ["step", "model", "params", "world", "B", "T", "total_batch", "optimizer", "steps", "lr"],
    "train": ["step", "train_loss", "lr", "grad_norm", "ms", "tok_per_s", "comm_bytes_sent", "comm_bytes_recv",
              "comm_wait_ms", "comm_allreduce_bytes", "comm_reduce_scatter_bytes", "comm_allgather_bytes",
              "comm_control_bytes", "density"],
    "val": ["step", "val_loss"],
    "sample": ["step", "text"],
    "ckpt": ["step", "dir"],
}
seen = {}
for n, line in enumerate(open(sys.argv[1]), 1):
    o = json.loads(line)
    ev = o["event"]
    seen[ev] = seen.get(ev, 0) + 1
    for k in need.get(ev, []):
        if k not in o:
            sys.exit(f"line {n}: event {ev} lacks key {k}: {line.strip()}")
want = {"start": 1, "train": 12, "val": 5, "sample": 3, "ckpt": 1}
# the start event's settings as typed (--lr 5e-2 --lr-floor 1e-3), not as %.9g prints their floats
start = next(line for line in open(sys.argv[1]) if '"event": "start"' in line)
for text in ('"lr": 0.05,', '"lr_floor": 0.001,', '"weight_decay": 0.1,'):
    if text not in start:
        sys.exit(f"start event lacks {text}: {start.strip()}")
if seen != want:
    sys.exit(f"event counts {seen}, expected {want}")
EOF
then ok log_jsonl_has_every_key; else fail log_jsonl_has_every_key "$(cat "$TMP/keys.txt")"; fi

# stdout: one line per step with loss, lr, norm, ms, tok/s, MFU, comm MB
n=$(grep -cE '^step +[0-9]+/12 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| norm [0-9.]+ \| [0-9.]+ ms \| [0-9]+ tok/s \| MFU n/a \| comm [0-9.]+ MB$' "$TMP/a.out")
if [ "$n" = 12 ]; then ok stdout_one_line_per_step; else fail stdout_one_line_per_step "$n matching lines, expected 12"; fi

# --- resume: B saves at 4 and 8; C resumes B's step-4 checkpoint and must reproduce A bit for bit
"${RUN[@]}" --out "$TMP/b" --ckpt-every 4 --keep-ckpts 0 > "$TMP/b.out" 2>&1
"${RUN[@]}" --out "$TMP/c" --resume "$TMP/b/ckpt_4" > "$TMP/c.out" 2>&1
if [ -d "$TMP/c/ckpt_12" ] && diff <(train_rows "$TMP/a/log.jsonl" | after 4) <(train_rows "$TMP/c/log.jsonl") > "$TMP/d1" \
   && diff <(val_rows "$TMP/a/log.jsonl" | after 4) <(val_rows "$TMP/c/log.jsonl") >> "$TMP/d1" \
   && [ "$(train_rows "$TMP/c/log.jsonl" | wc -l)" = 8 ]; then
    ok resume_continues_with_identical_losses
else
    fail resume_continues_with_identical_losses "$(head -5 "$TMP/d1"; tail -3 "$TMP/c.out")"
fi
if cmp -s "$TMP/a/ckpt_12/model.bin" "$TMP/c/ckpt_12/model.bin" \
   && cmp -s "$TMP/a/ckpt_12/state_rank0.bin" "$TMP/c/ckpt_12/state_rank0.bin"; then
    ok resume_ends_with_identical_params_and_optimizer_state
else
    fail resume_ends_with_identical_params_and_optimizer_state "ckpt_12 model.bin/state_rank0.bin differ from the uninterrupted run"
fi
# samples are part of the state too (sampler RNG)
if diff <(grep '"event": "sample"' "$TMP/a/log.jsonl" | tail -2) <(grep '"event": "sample"' "$TMP/c/log.jsonl") > /dev/null; then
    ok resume_continues_sampler_rng
else
    fail resume_continues_sampler_rng "samples after resume differ from the uninterrupted run"
fi

# --- keep-ckpts: only the newest N complete checkpoints remain
"${RUN[@]}" --out "$TMP/k" --ckpt-every 2 --keep-ckpts 2 --eval-every 0 --sample-every 0 > "$TMP/k.out" 2>&1
left=$(cd "$TMP/k" && ls -d ckpt_* | sort -t_ -k2 -n | tr '\n' ' ')
if [ "$left" = "ckpt_10 ckpt_12 " ]; then ok keep_ckpts_prunes_older
else fail keep_ckpts_prunes_older "left: '$left', expected 'ckpt_10 ckpt_12 '"; fi

# --- resume latest: skips a checkpoint without manifest and one with a truncated state file
cp -r "$TMP/b" "$TMP/l"
"${RUN[@]}" --out "$TMP/l" --steps 16 --ckpt-every 4 --keep-ckpts 0 --resume latest > /dev/null 2>&1 # makes 12, 16
rm "$TMP/l/ckpt_16/manifest.json"
truncate -s -7 "$TMP/l/ckpt_12/state_rank0.bin"
"${RUN[@]}" --out "$TMP/l" --steps 16 --resume latest > "$TMP/l.out" 2> "$TMP/l.err"
if grep -q "resuming from $TMP/l/ckpt_8 at step 8" "$TMP/l.out" && grep -q "ckpt_16: no manifest" "$TMP/l.err" \
   && grep -q "ckpt_12: state_rank0.bin has .* bytes, manifest says" "$TMP/l.err"; then
    ok resume_latest_picks_newest_complete
else
    fail resume_latest_picks_newest_complete "$(head -3 "$TMP/l.out"; cat "$TMP/l.err")"
fi

# --- resume latest with nothing to resume starts from step 0 (so a restartable job script can always pass it)
if "${RUN[@]}" --out "$TMP/fresh" --steps 2 --resume latest > "$TMP/f.out" 2>&1 \
   && grep -q "no complete checkpoint under $TMP/fresh, starting from step 0" "$TMP/f.out" && [ -d "$TMP/fresh/ckpt_2" ]; then
    ok resume_latest_without_checkpoint_starts_fresh
else fail resume_latest_without_checkpoint_starts_fresh "$(tail -3 "$TMP/f.out")"; fi

# --- one-line errors with non-zero exit status. expect_error NAME STATUS PATTERN ARGS...
expect_error() {
    local name=$1 want=$2 pat=$3; shift 3
    "$@" > "$TMP/e.out" 2> "$TMP/e.err"
    local st=$? lines; lines=$(wc -l < "$TMP/e.err")
    if [ "$want" = any ] && [ $st -ne 0 ] || [ "$st" = "$want" ]; then :; else
        fail "$name" "exit status $st, expected $want; stderr: $(cat "$TMP/e.err")"; return; fi
    if [ "$lines" != 1 ] || ! grep -qE -- "$pat" "$TMP/e.err"; then
        fail "$name" "expected one stderr line matching '$pat', got $lines: $(cat "$TMP/e.err")"; return; fi
    ok "$name"
}
expect_error error_total_batch_arithmetic any \
    'error: --total-batch 100 is not a multiple of --batch 4 x --seq 16 x 1 rank = 64 tokens' \
    "${RUN[@]}" --out "$TMP/x" --total-batch 100
expect_error error_seq_above_model_maximum any 'error: --seq 128 exceeds the model.s maximum sequence length 64' \
    "${RUN[@]}" --out "$TMP/x" --seq 128
expect_error error_unknown_option 2 '^error: unknown option --bogus; see --help$' "${RUN[@]}" --bogus 3
expect_error error_value_out_of_range 2 '^error: --lr: 5 is out of range \[0, 1\]$' "${RUN[@]}" --lr 5
expect_error error_malformed_value 2 "^error: --steps: 'ten' is not an integer$" "${RUN[@]}" --steps ten
expect_error error_bad_choice 2 "^error: --optimizer: 'sgd' is not one of adamw\|adams\|scape\|topk-ef\|powersgd\|onebit-adam\|demo\|diloco\|sparseloco$" \
    "${RUN[@]}" --optimizer sgd
# the default corpus is prepared by the trainer's own Makefile (beside the program), never by the Makefile of the
# folder it is run from (another project's `make data`); the toy, in build/, has none and says so
mkdir -p "$TMP/elsewhere"
printf 'data:\n\ttouch ran-a-foreign-make\n' > "$TMP/elsewhere/Makefile"
expect_error default_corpus_never_runs_the_make_of_the_current_folder any \
    '^error: the default corpus is missing under data/ and this program has no Makefile beside it' \
    sh -c 'cd "$1" && shift && exec "$@"' - "$TMP/elsewhere" "$(realpath "$TOY")" --model v32l2t64 --batch 4 --seq 16 \
    --steps 2 --threads 1 --out "$(realpath "$TMP")/x"
[ -e "$TMP/elsewhere/ran-a-foreign-make" ] && fail default_corpus_never_runs_the_make_of_the_current_folder \
    "the Makefile of the folder the trainer was run from ran"

# the switches the runtime reads from the environment take 1 or 0: SCAPE_CHECK_SYNC=yes skipped the check it asks for
# without a word, and SCAPE_COMM_SPIN=off turned spinning on
expect_error error_env_switch_not_0_or_1 any '^error: SCAPE_CHECK_SYNC=yes: set it to 1 \(check that' \
    env SCAPE_CHECK_SYNC=yes "${RUN[@]}" --out "$TMP/x"
expect_error error_env_switch_off_is_not_on any '^error: SCAPE_COMM_SPIN=off: set it to 1' \
    env SCAPE_COMM_SPIN=off "${RUN[@]}" --out "$TMP/x"
# the drill SCAPE_TEST_CORRUPT_MASK=R (test_scape_gpt2.sh) names a rank: junk read as rank 0, so did an empty value,
# and rank 0 then sent a damaged mask; junk is refused before --out is touched, empty is off
expect_error error_corrupt_mask_drill_junk any '^error: SCAPE_TEST_CORRUPT_MASK=junk: expected a rank in 0\.\.0' \
    env SCAPE_TEST_CORRUPT_MASK=junk "${RUN[@]}" --out "$TMP/cm" --optimizer scape --density 0.1 --steps 4
[ -e "$TMP/cm" ] && fail error_corrupt_mask_drill_junk "--out $TMP/cm was created"
if env SCAPE_TEST_CORRUPT_MASK= "${RUN[@]}" --out "$TMP/cm_empty" --optimizer scape --density 0.1 --steps 4 \
        > "$TMP/cm_empty.out" 2>&1; then ok corrupt_mask_drill_empty_is_off
else fail corrupt_mask_drill_empty_is_off "$(grep -m1 error "$TMP/cm_empty.out")"; fi
# an --out that cannot be made names the flag and the fix (it said only "cannot create directory X: <reason>")
: > "$TMP/a_file"
expect_error error_out_cannot_be_created any \
    "^error: --out $TMP/a_file/run: cannot create directory $TMP/a_file/run: Not a directory; choose a writable folder\$" \
    "${RUN[@]}" --out "$TMP/a_file/run"
expect_error error_lr_floor_above_lr 2 '^error: --lr-floor 0.5 is above --lr 0.1' "${RUN[@]}" --lr 0.1 --lr-floor 0.5
expect_error error_density_without_scape 2 '^error: --density 0.1 applies only to --optimizer scape' \
    "${RUN[@]}" --density 0.1
expect_error error_double_residual_needs_scape any "error: --scape-double-residual-defect reproduces the authors' SCAPE reducer: it needs --optimizer scape without --zero" \
    "${RUN[@]}" --out "$TMP/x" --scape-double-residual-defect
# --- a SCAPE variant (issue 31) through the trainer: catchup's checkpoint carries its age, so a resume from step 4
# reproduces the uninterrupted run's step-12 state bit for bit; resuming it as another variant is refused
VRUN=("${RUN[@]}" --optimizer scape --density 0.1 --density-warmup 3 --scape-exclude-norms 0 --scape-variant catchup
      --scape-variant-cap 6 --sample-every 0)
"${VRUN[@]}" --out "$TMP/va" > "$TMP/va.out" 2>&1
"${VRUN[@]}" --out "$TMP/vb" --ckpt-every 4 --keep-ckpts 0 > "$TMP/vb.out" 2>&1
"${VRUN[@]}" --out "$TMP/vc" --resume "$TMP/vb/ckpt_4" > "$TMP/vc.out" 2>&1
if [ -f "$TMP/va/ckpt_12/model.bin" ] && cmp -s "$TMP/va/ckpt_12/model.bin" "$TMP/vc/ckpt_12/model.bin" \
   && cmp -s "$TMP/va/ckpt_12/state_rank0.bin" "$TMP/vc/ckpt_12/state_rank0.bin" \
   && ! cmp -s "$TMP/va/ckpt_12/model.bin" "$TMP/a/ckpt_12/model.bin"; then
    ok scape_variant_catchup_resumes_bit_identically
else
    fail scape_variant_catchup_resumes_bit_identically "ckpt_12 differs from the uninterrupted catchup run: $(tail -2 "$TMP/vc.out")"
fi
expect_error error_resume_other_variant any "scape-variant.*tensor-nu.*catchup|scape-variant.*catchup.*tensor-nu" \
    "${RUN[@]}" --out "$TMP/vd" --optimizer scape --density 0.1 --scape-variant tensor-nu --resume "$TMP/vb/ckpt_4"
expect_error error_variant_needs_scape any "error: --scape-variant catchup changes SCAPE's update: it needs --optimizer scape" \
    "${RUN[@]}" --out "$TMP/x" --scape-variant catchup
expect_error error_variant_cap_without_its_variant any "error: --scape-variant-cap applies to --scape-variant catchup or tensor-nu only \\(this run has --optimizer scape, --scape-variant residual-decay\\)" \
    "${RUN[@]}" --out "$TMP/x" --optimizer scape --density 0.5 --scape-variant residual-decay --scape-variant-cap 8

# --- PowerSGD (issue 33) through the trainer: compression from step 3, a resume from step 4 reproduces step 12 bit for
# bit (e, AdamW's m and v and the warm-started Q are in the checkpoint), and ZeRO-1 is refused
PRUN=("${RUN[@]}" --optimizer powersgd --powersgd-start 2 --powersgd-rank 2 --powersgd-min-compression 1 --sample-every 0)
"${PRUN[@]}" --out "$TMP/pa" > "$TMP/pa.out" 2>&1
"${PRUN[@]}" --out "$TMP/pb" --ckpt-every 4 --keep-ckpts 0 > "$TMP/pb.out" 2>&1
"${PRUN[@]}" --out "$TMP/pc" --resume "$TMP/pb/ckpt_4" > "$TMP/pc.out" 2>&1
if [ -f "$TMP/pa/ckpt_12/model.bin" ] && cmp -s "$TMP/pa/ckpt_12/model.bin" "$TMP/pc/ckpt_12/model.bin" \
   && cmp -s "$TMP/pa/ckpt_12/state_rank0.bin" "$TMP/pc/ckpt_12/state_rank0.bin" \
   && ! cmp -s "$TMP/pa/ckpt_12/model.bin" "$TMP/a/ckpt_12/model.bin"; then
    ok powersgd_resumes_bit_identically
else
    fail powersgd_resumes_bit_identically "ckpt_12 differs from the uninterrupted PowerSGD run: $(tail -2 "$TMP/pc.out")"
fi
# the SCAPE variant is named only where the option needs one
expect_error error_powersgd_flag_without_powersgd any "error: --powersgd-rank applies to --optimizer powersgd only \\(this run has --optimizer adamw\\); name it" \
    "${RUN[@]}" --out "$TMP/x" --powersgd-rank 4
expect_error error_powersgd_zero any "error: --zero 1 applies to adamw, adams and scape; drop --zero for powersgd" \
    "${RUN[@]}" --out "$TMP/x" --optimizer powersgd --zero

# --- 1-bit Adam (issue 33): compression from step 4, a resume from step 6 (worker and server errors, m, the frozen v
# in the checkpoint) reproduces step 12 bit for bit; --onebit-freeze without the rule and ZeRO-1 are refused
ORUN=("${RUN[@]}" --optimizer onebit-adam --onebit-freeze 3 --sample-every 0)
"${ORUN[@]}" --out "$TMP/oa" > "$TMP/oa.out" 2>&1
"${ORUN[@]}" --out "$TMP/ob" --ckpt-every 6 --keep-ckpts 0 > "$TMP/ob.out" 2>&1
"${ORUN[@]}" --out "$TMP/oc" --resume "$TMP/ob/ckpt_6" > "$TMP/oc.out" 2>&1
if [ -f "$TMP/oa/ckpt_12/model.bin" ] && cmp -s "$TMP/oa/ckpt_12/model.bin" "$TMP/oc/ckpt_12/model.bin" \
   && cmp -s "$TMP/oa/ckpt_12/state_rank0.bin" "$TMP/oc/ckpt_12/state_rank0.bin" \
   && ! cmp -s "$TMP/oa/ckpt_12/model.bin" "$TMP/a/ckpt_12/model.bin"; then
    ok onebit_adam_resumes_bit_identically
else
    fail onebit_adam_resumes_bit_identically "ckpt_12 differs from the uninterrupted 1-bit Adam run: $(tail -2 "$TMP/oc.out")"
fi
expect_error error_onebit_flag_without_onebit any "error: --onebit-freeze applies to --optimizer onebit-adam only" \
    "${RUN[@]}" --out "$TMP/x" --onebit-freeze 4
expect_error error_onebit_zero any "error: --zero 1 applies to adamw, adams and scape; drop --zero for onebit-adam" \
    "${RUN[@]}" --out "$TMP/x" --optimizer onebit-adam --zero

# --- DeMo (issue 33): a resume from step 5 (each rank's momentum in the checkpoint) reproduces step 12 bit for bit;
# a changed --demo-topk on resume and --demo-topk without the rule are refused
DRUN=("${RUN[@]}" --optimizer demo --demo-chunk 16 --demo-topk 4 --sample-every 0)
"${DRUN[@]}" --out "$TMP/da" > "$TMP/da.out" 2>&1
"${DRUN[@]}" --out "$TMP/db" --ckpt-every 5 --keep-ckpts 0 > "$TMP/db.out" 2>&1
"${DRUN[@]}" --out "$TMP/dc" --resume "$TMP/db/ckpt_5" > "$TMP/dc.out" 2>&1
if [ -f "$TMP/da/ckpt_12/model.bin" ] && cmp -s "$TMP/da/ckpt_12/model.bin" "$TMP/dc/ckpt_12/model.bin" \
   && cmp -s "$TMP/da/ckpt_12/state_rank0.bin" "$TMP/dc/ckpt_12/state_rank0.bin" \
   && ! cmp -s "$TMP/da/ckpt_12/model.bin" "$TMP/a/ckpt_12/model.bin"; then
    ok demo_resumes_bit_identically
else
    fail demo_resumes_bit_identically "ckpt_12 differs from the uninterrupted DeMo run: $(tail -2 "$TMP/dc.out")"
fi
expect_error error_demo_topk_changed_on_resume any "demo-topk" \
    "${RUN[@]}" --optimizer demo --demo-chunk 16 --demo-topk 8 --sample-every 0 --out "$TMP/dd" --resume "$TMP/db/ckpt_5"
expect_error error_mask_stats_without_masks 2 "error: --mask-stats-every 3 logs the masks of --optimizer scape or topk-ef, and adams keeps none" \
    "${RUN[@]}" --out "$TMP/x" --optimizer adams --mask-stats-every 3
expect_error error_demo_flag_without_demo any "error: --demo-topk applies to --optimizer demo only" \
    "${RUN[@]}" --out "$TMP/x" --demo-topk 4

expect_error error_vocab_mismatch any 'bad.bin' "${RUN[@]}" --out "$TMP/x" --train "$TMP/data/bad.bin"
expect_error error_missing_train_data any "error: --train $TMP/nothere.*make data" \
    "${RUN[@]}" --out "$TMP/x" --train "$TMP/nothere*.bin"
expect_error error_resume_missing_dir any "error: --resume $TMP/b/ckpt_99: no such checkpoint directory" \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_99"
# a run's --out folder or a checkpoint's file given to --resume says what it is and what to pass, not "no manifest"
expect_error error_resume_of_run_folder any "^error: --resume $TMP/b: is a run's --out folder \(it holds ckpt_<step> folders\), not one checkpoint; pass --resume latest --out $TMP/b, or --resume $TMP/b/ckpt_<step>$" \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b"
expect_error error_resume_of_file any "^error: --resume $TMP/b/ckpt_4/model.bin: is a file, not a checkpoint folder; pass the ckpt_<step> folder that holds it" \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_4/model.bin"
rm "$TMP/b/ckpt_8/manifest.json"
expect_error error_resume_incomplete any "error: --resume $TMP/b/ckpt_8: damaged or incomplete checkpoint \(no manifest" \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_8"
expect_error error_resume_other_batch any "error: --batch 8 contradicts the checkpoint $TMP/b/ckpt_4, whose run has --batch 4"  \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_4" --batch 8
expect_error error_resume_other_optimizer any '--optimizer adams contradicts the checkpoint .*, whose run has --optimizer adamw' \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_4" --optimizer adams
expect_error error_resume_other_model any '--model v32l3t64 contradicts the checkpoint .*, whose run has --model v32l2t64' \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_4" --model v32l3t64
cp -r "$TMP/b/ckpt_4" "$TMP/b/ckpt_5"
printf '\x55' | dd of="$TMP/b/ckpt_5/state_rank0.bin" bs=1 seek=300 conv=notrunc status=none
expect_error error_resume_corrupt_state any 'ckpt_5: damaged or incomplete checkpoint \(state_rank0.bin fails its checksum' \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_5"
if [ -e "$TMP/x/log.jsonl" ] && grep -q '"event": "train"' "$TMP/x/log.jsonl"; then
    fail errors_leave_nothing_half_written "a failed run logged training steps"
else ok errors_leave_nothing_half_written; fi
# a run refused before it starts leaves no --out it made (it used to leave the folder with its .lock), and an --out
# that was there keeps what it held
"${RUN[@]}" --out "$TMP/made/a/b" --resume "$TMP/b/ckpt_99" > /dev/null 2>&1
mkdir -p "$TMP/kept" && echo mine > "$TMP/kept/notes.txt"
"${RUN[@]}" --out "$TMP/kept" --resume "$TMP/b/ckpt_99" > /dev/null 2>&1
"${RUN[@]}" --out "$TMP/made2" --train "$TMP/nothere*.bin" > /dev/null 2>&1
if [ ! -e "$TMP/made" ] && [ ! -e "$TMP/made2" ] && [ "$(cat "$TMP/kept/notes.txt")" = mine ]; then
    ok refused_run_leaves_no_out_folder
else fail refused_run_leaves_no_out_folder "left: $(find "$TMP/made" "$TMP/made2" 2>/dev/null | tr "\n" " ") kept: $(ls -A "$TMP/kept" | tr "\n" " ")"; fi
# ... however --out is spelled: a trailing '/' ("runs/x/", as the shell completes it) or a ".." left the folders above
# the last one ("runs"), the cleanup walking up a string that named no folder it had made
"${RUN[@]}" --out "$TMP/made3/a/b/" --resume "$TMP/b/ckpt_99" > /dev/null 2>&1
"${RUN[@]}" --out "$TMP/made4//c/../d" --resume "$TMP/b/ckpt_99" > /dev/null 2>&1
if [ ! -e "$TMP/made3" ] && [ ! -e "$TMP/made4" ]; then ok refused_run_leaves_no_out_folder_however_spelled
else fail refused_run_leaves_no_out_folder_however_spelled "left: $(find "$TMP/made3" "$TMP/made4" 2>/dev/null | tr "\n" " ")"; fi
# ... and a run refused because another run holds --out leaves that run's lock and folder alone, even when this run
# made a folder on the way there ("new/../held": it removed the holder's .lock and folder, so a third run could start)
mkdir -p "$TMP/held" && : > "$TMP/held/.lock"
flock "$TMP/held/.lock" sleep 30 & holder=$!
for _ in $(seq 1 50); do flock -n "$TMP/held/.lock" true || break; sleep 0.1; done
"${RUN[@]}" --out "$TMP/new/../held" > "$TMP/held.out" 2>&1
st=$?
if [ "$st" = 1 ] && grep -q "is in use by another run" "$TMP/held.out" && [ -e "$TMP/held/.lock" ] && [ ! -e "$TMP/new" ] \
   && ! flock -n "$TMP/held/.lock" true; then
    ok refused_run_leaves_the_holders_lock
else fail refused_run_leaves_the_holders_lock "status $st: $(head -1 "$TMP/held.out"); left: $(ls -A "$TMP/held" "$TMP/new" 2>&1 | tr "\n" " ")"; fi
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null

# --- scripts/plot_loss.sh turns logs into one PNG (two runs compared)
if scripts/plot_loss.sh "$TMP/loss.png" "$TMP/a/log.jsonl" "$TMP/c/log.jsonl" > "$TMP/p.out" 2>&1 \
   && [ "$(head -c 8 "$TMP/loss.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
    ok plot_loss_writes_png
else fail plot_loss_writes_png "$(cat "$TMP/p.out")"; fi

# --- --help: exit 0, every option of the table (checked in C by test_train_units) appears here too
if "$TOY" --help > "$TMP/h.out" 2>&1 && grep -q -- '--resume S' "$TMP/h.out" && grep -q -- '--scape-exclude-norms N' "$TMP/h.out"; then
    ok help_exits_zero
else fail help_exits_zero "$(head -3 "$TMP/h.out")"; fi
# one default per option (an option whose help states its default gets no "[default none]"), whole-number ranges
if grep -- '--train S' "$TMP/h.out" | grep -q '(default <data>' && ! grep -- '--train S' "$TMP/h.out" | grep -q 'default none' &&
   grep -- '--seed N' "$TMP/h.out" | grep -q 'range 0\.\.18446744073709551615\]'; then
    ok help_states_each_default_once_and_whole_ranges
else fail help_states_each_default_once_and_whole_ranges "$(grep -E -- '--(train|seed) ' "$TMP/h.out")"; fi

# --- a dense phase (--density-dense-steps S, the authors' --topk-adams-start-iter): d_start through step S + 1, then
#     the geometric warm-up: S 3, W 2, d 0.25 logs densities 1 1 1 1 0.5 0.25
"${RUN[@]}" --out "$TMP/dp" --steps 6 --optimizer scape --density 0.25 --density-dense-steps 3 --density-warmup 2 \
    --eval-every 0 --sample-every 0 > "$TMP/dp.out" 2>&1
got=$(grep '"event": "train"' "$TMP/dp/log.jsonl" | sed -E 's/.*"density": ([^,]+),.*/\1/' | tr '\n' ' ')
if [ "$got" = "1 1 1 1 0.5 0.25 " ]; then ok dense_phase_then_warmup_densities
else fail dense_phase_then_warmup_densities "densities '$got', expected '1 1 1 1 0.5 0.25 '"; fi

# --- a density warm-up longer than the run says so in one line (it would never reach --density); a shorter one does not
if "${RUN[@]}" --out "$TMP/dw" --optimizer scape --density 0.1 --density-warmup 50 > "$TMP/dw.out" 2>&1 \
   && [ "$(grep -c '^note: --density-warmup 50 >= --steps 12, so the density never reaches --density 0.1' "$TMP/dw.out")" = 1 ] \
   && "${RUN[@]}" --out "$TMP/dw2" --optimizer scape --density 0.1 --density-warmup 5 > "$TMP/dw2.out" 2>&1 \
   && ! grep -q 'density-warmup' "$TMP/dw2.out"; then
    ok density_warmup_longer_than_run_is_noted
else fail density_warmup_longer_than_run_is_noted "$(grep -E 'note|error' "$TMP/dw.out" "$TMP/dw2.out" | head -3)"; fi

# --- a log without validation events yet (a run still before its first evaluation: the plain run's log with its val
#     events taken out) still plots its train loss, with one note saying what it lacks
mkdir -p "$TMP/ne"
if grep -v '"event": "val"' "$TMP/a/log.jsonl" > "$TMP/ne/log.jsonl" \
   && scripts/plot_loss.sh "$TMP/ne.png" "$TMP/ne/log.jsonl" > "$TMP/ne.plot" 2>&1 \
   && [ "$(head -c 8 "$TMP/ne.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
   && [ "$(grep -c '^note: .* has no val events' "$TMP/ne.plot")" = 1 ]; then
    ok plot_loss_plots_a_log_without_val_events
else fail plot_loss_plots_a_log_without_val_events "$(cat "$TMP/ne.plot" 2>/dev/null | head -3)"; fi

# --- one run per --out: while a run holds the directory, a second one stops at once with one line naming the
#     holder and writes nothing there; once the holder is killed (SIGKILL: the kernel drops its lock), a run starts
"${RUN[@]}" --out "$TMP/lk" --steps 1000000 --eval-every 0 --sample-every 0 > "$TMP/lk1.out" 2>&1 &
holder=$!
for _ in $(seq 1 100); do grep -q '"event": "train"' "$TMP/lk/log.jsonl" 2>/dev/null && break; sleep 0.1; done
"${RUN[@]}" --out "$TMP/lk" --steps 3 > "$TMP/lk2.out" 2>&1
st=$?
second_lines=$(grep -c . "$TMP/lk2.out")
kill -9 "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
if [ "$st" = 1 ] && [ "$second_lines" = 1 ] && grep -q "^error: --out $TMP/lk is in use by another run (pid $holder " "$TMP/lk2.out" \
   && "${RUN[@]}" --out "$TMP/lk" --steps 3 --eval-every 0 --sample-every 0 > "$TMP/lk3.out" 2>&1; then
    ok one_run_per_out_directory
else fail one_run_per_out_directory "second run: status $st, $second_lines lines: $(head -2 "$TMP/lk2.out"); third: $(tail -1 "$TMP/lk3.out" 2>/dev/null)"; fi

# --- checksummed checkpoints (issue 21, symptom 1): a model.bin damaged in place (same size) is passed over by
#     --resume latest with one line naming it, refused when named, and reported by --verify-ckpt
"${RUN[@]}" --out "$TMP/dm" --ckpt-every 4 --keep-ckpts 0 > /dev/null 2>&1
cp "$TMP/dm/log.jsonl" "$TMP/dm.log0"
printf 'DAMAGEDBLOCK' | dd of="$TMP/dm/ckpt_12/model.bin" bs=1 seek=200 conv=notrunc status=none
"${RUN[@]}" --out "$TMP/dm" --resume latest > "$TMP/dm.out" 2> "$TMP/dm.err"
st=$?
if [ $st = 0 ] && grep -q "resuming from $TMP/dm/ckpt_8 at step 8" "$TMP/dm.out" \
   && [ "$(grep -c "^note: skipping checkpoint $TMP/dm/ckpt_12: model.bin fails its checksum" "$TMP/dm.err")" = 1 ] \
   && diff <(train_rows "$TMP/dm.log0" | after 8) <(train_rows "$TMP/dm/log.jsonl" | tail -4) > /dev/null; then
    ok damaged_model_bin_is_passed_over_by_resume_latest
else fail damaged_model_bin_is_passed_over_by_resume_latest "status $st; $(cat "$TMP/dm.err"; grep resuming "$TMP/dm.out")"; fi
printf 'DAMAGEDBLOCK' | dd of="$TMP/dm/ckpt_4/model.bin" bs=1 seek=200 conv=notrunc status=none
expect_error damaged_model_bin_is_refused_by_name any \
    "error: --resume $TMP/dm/ckpt_4: damaged or incomplete checkpoint \(model.bin fails its checksum" \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/dm/ckpt_4"
"$TOY" --verify-ckpt "$TMP/dm" > "$TMP/v.out" 2>&1
st=$?
"$TOY" --verify-ckpt "$TMP/dm/ckpt_8" > "$TMP/v1.out" 2>&1
st1=$?
if [ $st = 1 ] && [ $st1 = 0 ] && [ "$(wc -l < "$TMP/v.out")" = 3 ] \
   && grep -q "^$TMP/dm/ckpt_4: BAD, model.bin fails its checksum" "$TMP/v.out" \
   && grep -q "^$TMP/dm/ckpt_12: ok, step 12, 1 rank, 2 files, [0-9]* bytes, 2 checksums verified$" "$TMP/v.out" \
   && grep -q "^$TMP/dm/ckpt_8: ok, step 8" "$TMP/v1.out"; then
    ok verify_ckpt_reports_each_checkpoint
else fail verify_ckpt_reports_each_checkpoint "status $st/$st1: $(cat "$TMP/v.out" "$TMP/v1.out")"; fi

# --- a byte changed in manifest.json itself (an option a resume takes as given: --lr 0.05 read as 0.09) is caught
#     like a damaged state file: --verify-ckpt reports it, --resume DIR refuses it, --resume latest passes over it
cp -r "$TMP/dm/ckpt_8" "$TMP/dm/ckpt_16"
sed -i 's/"step": 8,/"step": 16,/; s/"lr": "0.0500000007"/"lr": "0.0900000007"/' "$TMP/dm/ckpt_16/manifest.json"
"$TOY" --verify-ckpt "$TMP/dm/ckpt_16" > "$TMP/vm.out" 2>&1
st=$?
if [ $st = 1 ] && grep -q '"lr": "0.09' "$TMP/dm/ckpt_16/manifest.json" \
   && grep -q "^$TMP/dm/ckpt_16: BAD, manifest.json fails its own checksum" "$TMP/vm.out"; then
    ok damaged_manifest_fails_verify_ckpt
else fail damaged_manifest_fails_verify_ckpt "status $st: $(cat "$TMP/vm.out")"; fi
expect_error damaged_manifest_is_refused_by_name any \
    "error: --resume $TMP/dm/ckpt_16: damaged or incomplete checkpoint \(manifest.json fails its own checksum" \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/dm/ckpt_16"
rm -rf "$TMP/dm/ckpt_16"

# --- an input that is a FIFO or a pipe (--init <(zcat m.bin.gz), --train <(cat shard.bin), a FIFO planted as a
#     manifest) is refused with one line, never waited on (a FIFO blocked the run, even after SIGTERM) nor read half
mkfifo "$TMP/fifo"
expect_error init_that_is_a_fifo_is_refused any "^error: --init $TMP/fifo: is not a regular file" \
    timeout -s KILL 20 "${RUN[@]}" --out "$TMP/x" --init "$TMP/fifo"
expect_error train_shard_that_is_a_fifo_is_refused any "^error: $TMP/fifo: is not a regular file" \
    timeout -s KILL 20 "${RUN[@]}" --out "$TMP/x" --train "$TMP/fifo"
cp -r "$TMP/dm/ckpt_8" "$TMP/fm"
rm "$TMP/fm/manifest.json"
mkfifo "$TMP/fm/manifest.json"
timeout -s KILL 20 "$TOY" --verify-ckpt "$TMP/fm" > "$TMP/fm.out" 2>&1
st=$?
if [ $st = 1 ] && grep -q "^$TMP/fm: BAD, manifest.json cannot be read as a file" "$TMP/fm.out"; then
    ok fifo_manifest_is_reported_not_waited_on
else fail fifo_manifest_is_reported_not_waited_on "status $st: $(cat "$TMP/fm.out")"; fi

# --- retention never deletes the checkpoint just written (the newest that verified), even when older steps are
#     resumed into a directory that holds newer checkpoints of an earlier branch: those are moved aside, kept
cp -r "$TMP/b" "$TMP/rt"
rm -rf "$TMP/rt/ckpt_5" "$TMP/rt/ckpt_8" # ckpt_8 lost its manifest above
"${RUN[@]}" --out "$TMP/rt" --resume "$TMP/rt/ckpt_4" --steps 6 --keep-ckpts 1 > "$TMP/rt.out" 2>&1
left=$(cd "$TMP/rt" && ls -d ckpt_* | sort -t_ -k2 -n | tr '\n' ' ')
if [ "$left" = "ckpt_6 " ] && "$TOY" --verify-ckpt "$TMP/rt/ckpt_6" > /dev/null \
   && "$TOY" --verify-ckpt "$TMP/rt/abandoned/after_ckpt_4/ckpt_12" > /dev/null; then ok retention_keeps_the_checkpoint_just_written
else fail retention_keeps_the_checkpoint_just_written "left: '$left', expected 'ckpt_6 ' and ckpt_12 under abandoned/after_ckpt_4/"; fi

# --- no checkpoint of a state reached through a skipped (non-finite) step
SCAPE_TEST_INJECT_NAN=4 "${RUN[@]}" --out "$TMP/ns" --ckpt-every 4 --keep-ckpts 0 > "$TMP/ns.out" 2>&1
left=$(cd "$TMP/ns" && ls -d ckpt_* | sort -t_ -k2 -n | tr '\n' ' ')
if [ "$left" = "ckpt_8 ckpt_12 " ] && grep -q "^step 4: no checkpoint of this step, the last 1 step was skipped" "$TMP/ns.out"; then
    ok no_checkpoint_of_a_skipped_step
else fail no_checkpoint_of_a_skipped_step "left: '$left'; $(grep 'step 4' "$TMP/ns.out")"; fi

# --- resume from the checkpoint alone (symptom 5): `--resume latest --out DIR` restores every recorded option and
#     reproduces the uninterrupted run bit for bit; a changed schedule flag is taken with a note
rm -rf "$TMP/b2"; cp -r "$TMP/b" "$TMP/b2"; rm -rf "$TMP/b2/ckpt_5" "$TMP/b2/ckpt_8" "$TMP/b2/ckpt_12"
"$TOY" --resume latest --out "$TMP/b2" > "$TMP/b2.out" 2>&1
st=$?
if [ $st = 0 ] && grep -q "resuming from $TMP/b2/ckpt_4 at step 4" "$TMP/b2.out" \
   && diff <(train_rows "$TMP/a/log.jsonl" | after 4) <(train_rows "$TMP/b2/log.jsonl" | tail -8) > /dev/null \
   && cmp -s "$TMP/a/ckpt_12/model.bin" "$TMP/b2/ckpt_12/model.bin"; then
    ok resume_from_the_checkpoint_alone
else fail resume_from_the_checkpoint_alone "status $st: $(tail -3 "$TMP/b2.out")"; fi
rm -rf "$TMP/b3"; cp -r "$TMP/b" "$TMP/b3"; rm -rf "$TMP/b3/ckpt_5" "$TMP/b3/ckpt_8" "$TMP/b3/ckpt_12"
if "$TOY" --resume latest --out "$TMP/b3" --steps 14 > "$TMP/b3.out" 2>&1 \
   && [ "$(grep -c '^note: --steps 14 applies from the resumed step on (the checkpoint.s run had 12)$' "$TMP/b3.out")" = 1 ] \
   && [ -d "$TMP/b3/ckpt_14" ]; then
    ok resume_takes_a_changed_schedule_with_a_note
else fail resume_takes_a_changed_schedule_with_a_note "$(grep -E 'note|error' "$TMP/b3.out" | head -3)"; fi
# a changed --total-batch gets one note, in tokens per step (the manifest's 0 means B*T*ranks: not "had 0")
rm -rf "$TMP/b4"; cp -r "$TMP/b" "$TMP/b4"; rm -rf "$TMP/b4/ckpt_5" "$TMP/b4/ckpt_8" "$TMP/b4/ckpt_12"
if "$TOY" --resume latest --out "$TMP/b4" --total-batch 128 > "$TMP/b4.out" 2>&1 \
   && [ "$(grep -c 'total-batch' "$TMP/b4.out")" = 1 ] \
   && grep -qx 'note: --total-batch changed from 64 to 128 tokens on resume' "$TMP/b4.out"; then
    ok resume_with_another_total_batch_has_one_note
else fail resume_with_another_total_batch_has_one_note "$(grep -E 'total-batch|error' "$TMP/b4.out" | head -3)"; fi

# --- --init is identified by content: the same bytes under another path resume, other bytes are refused
cp "$TMP/a/ckpt_12/model.bin" "$TMP/init1.bin"
"${RUN[@]}" --out "$TMP/in" --init "$TMP/init1.bin" --steps 4 --ckpt-every 2 --keep-ckpts 0 > /dev/null 2>&1
cp "$TMP/init1.bin" "$TMP/init1_copy.bin"; rm -rf "$TMP/in/ckpt_4"
if "$TOY" --resume latest --out "$TMP/in" --init "$TMP/init1_copy.bin" > "$TMP/in.out" 2>&1 \
   && grep -q "resuming from $TMP/in/ckpt_2 at step 2" "$TMP/in.out"; then ok init_identified_by_content
else fail init_identified_by_content "$(tail -2 "$TMP/in.out")"; fi
expect_error init_with_other_content_is_refused any \
    "error: --init $TMP/b/ckpt_4/model.bin: its content \(xxh3 [0-9a-f]{16}\) is not the file the run of checkpoint" \
    "$TOY" --resume latest --out "$TMP/in" --init "$TMP/b/ckpt_4/model.bin"

# --- every write checked (symptom 2): standard output and log.jsonl that cannot be written stop the run at once
#     with one line naming them (/dev/full: a device whose writes fail with ENOSPC, on every machine)
"${RUN[@]}" --out "$TMP/fo" > /dev/full 2> "$TMP/fo.err"
st=$?
if [ $st = 1 ] && [ "$(wc -l < "$TMP/fo.err")" = 1 ] \
   && grep -q '^error: cannot write standard output: No space left on device' "$TMP/fo.err" \
   && ! grep -q '"event": "train"' "$TMP/fo/log.jsonl"; then ok unwritable_stdout_stops_the_run_at_step_1
else fail unwritable_stdout_stops_the_run_at_step_1 "status $st: $(cat "$TMP/fo.err")"; fi
mkdir -p "$TMP/fl"; ln -s /dev/full "$TMP/fl/log.jsonl"
"${RUN[@]}" --out "$TMP/fl" > "$TMP/fl.out" 2> "$TMP/fl.err"
st=$?
if [ $st = 1 ] && [ "$(wc -l < "$TMP/fl.err")" = 1 ] && ! grep -q '^step ' "$TMP/fl.out" \
   && grep -q "^error: cannot write $TMP/fl/log.jsonl: No space left on device" "$TMP/fl.err"; then
    ok unwritable_log_stops_the_run
else fail unwritable_log_stops_the_run "status $st: $(cat "$TMP/fl.err")"; fi
# a log whose last line was cut by a crash loses that partial line when the next run opens it
mkdir -p "$TMP/pl"; printf '{"event": "start", "step": 0}\n{"event": "tra' > "$TMP/pl/log.jsonl"
if "${RUN[@]}" --out "$TMP/pl" --steps 2 > /dev/null 2> "$TMP/pl.err" \
   && grep -q "note: $TMP/pl/log.jsonl ended inside a line .*dropped its last 14 bytes" "$TMP/pl.err" \
   && /usr/bin/python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$TMP/pl/log.jsonl"; then
    ok partial_log_line_is_cut_on_open
else fail partial_log_line_is_cut_on_open "$(cat "$TMP/pl.err")"; fi
# a stop signal is acknowledged at once on stderr (the run's last output was a step line, so a Ctrl-C seemed ignored),
# and a second one, which ends the process at once, says so in one error line with the way to continue
"${RUN[@]}" --out "$TMP/sg" --steps 100000000 --eval-every 0 --sample-every 0 > "$TMP/sg.out" 2> "$TMP/sg.err" &
pid=$!
for _ in $(seq 100); do grep -q '^step' "$TMP/sg.out" && break; sleep 0.1; done
# both pending while it is stopped (two of one signal would merge into one); which one a thread takes first is the
# kernel's choice, so the note names the first and the exit status is the second's
kill -STOP $pid; kill -TERM $pid; kill -INT $pid; kill -CONT $pid
wait $pid; st=$?
first=$(head -1 "$TMP/sg.err" | grep -oE '^note: SIG(INT|TERM)' | grep -oE 'SIG[A-Z]+')
if { { [ "$first" = SIGINT ] && [ $st = 143 ]; } || { [ "$first" = SIGTERM ] && [ $st = 130 ]; }; } && [ "$(wc -l < "$TMP/sg.err")" = 2 ] \
   && [ "$(head -1 "$TMP/sg.err")" = "note: $first received: stopping after this step with a checkpoint (a second signal stops at once)" ] \
   && [ "$(grep -c '^error' "$TMP/sg.err")" = 1 ] \
   && [ "$(tail -1 "$TMP/sg.err")" = "error: second signal: stopped at once, without a checkpoint of this step; continue from the newest checkpoint with --resume latest --out $TMP/sg" ]; then
    ok stop_signals_are_acknowledged_and_the_second_says_how_to_continue
else fail stop_signals_are_acknowledged_and_the_second_says_how_to_continue "status $st: $(cat "$TMP/sg.err")"; fi

# a real full disk: a small tmpfs fills while the run logs and checkpoints. It stops with one line naming the file
# and the OS error; log.jsonl holds whole lines only; the newest complete checkpoint verifies
MNT="$TMP/mnt"; mkdir -p "$MNT"
if mount -t tmpfs -o size=160k tmpfs "$MNT" 2> /dev/null; then
    "${RUN[@]}" --out "$MNT/o" --steps 100000 --eval-every 0 --sample-every 0 --ckpt-every 10 --keep-ckpts 1 \
        > /dev/null 2> "$TMP/fd.err"
    st=$?
    newest=$(cd "$MNT/o" && ls -d ckpt_*/manifest.json 2>/dev/null | sort -t_ -k2 -n | tail -1 | cut -d/ -f1)
    if [ $st = 1 ] && [ "$(wc -l < "$TMP/fd.err")" = 1 ] \
       && grep -qE "^error: cannot write $MNT/o/.*: No space left on device" "$TMP/fd.err" \
       && [ "$(tail -c 1 "$MNT/o/log.jsonl" | od -An -c | tr -d ' ')" = '\n' ] \
       && /usr/bin/python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$MNT/o/log.jsonl" \
       && [ -n "$newest" ] && "$TOY" --verify-ckpt "$MNT/o/$newest" > /dev/null; then
        ok full_disk_stops_the_run_and_keeps_the_newest_checkpoint
    else fail full_disk_stops_the_run_and_keeps_the_newest_checkpoint "status $st, newest '$newest': $(cat "$TMP/fd.err")"; fi
    umount "$MNT"
else
    echo "skip full_disk_on_tmpfs: cannot mount a tmpfs here (it needs root with CAP_SYS_ADMIN); the /dev/full cases above check the same writes"
fi

[ "$failures" -eq 0 ]

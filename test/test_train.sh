#!/usr/bin/env bash
# test/test_train.sh TOY - end-to-end tests of the shared training loop (trainer/train.c) driving the toy bigram
# model (test/test_train_toy.c): learning, log.jsonl keys, bit-identical resume, checkpoint selection and
# pruning, and the one-line errors for bad input. Each case prints "ok <name>" or "FAIL <name>: ...".
# Everything lives in a temp dir under build/ that is removed on exit. Runs in a few seconds on one core.
set -u
TOY=${1:?usage: test/test_train.sh build/test_train_toy}
TMP=$(mktemp -d build/test_train.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
failures=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

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
              "comm_wait_ms", "comm_allreduce_bytes", "comm_allgather_bytes", "density"],
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
expect_error error_bad_choice 2 "^error: --optimizer: 'sgd' is not one of adamw\|adams\|scape\|topk-ef$" \
    "${RUN[@]}" --optimizer sgd
expect_error error_lr_floor_above_lr 2 '^error: --lr-floor 0.5 is above --lr 0.1' "${RUN[@]}" --lr 0.1 --lr-floor 0.5
expect_error error_density_without_scape 2 '^error: --density 0.1 applies only to --optimizer scape' \
    "${RUN[@]}" --density 0.1
expect_error error_vocab_mismatch any 'bad.bin' "${RUN[@]}" --out "$TMP/x" --train "$TMP/data/bad.bin"
expect_error error_missing_train_data any "error: --train $TMP/nothere.*make data" \
    "${RUN[@]}" --out "$TMP/x" --train "$TMP/nothere*.bin"
expect_error error_resume_missing_dir any "error: --resume $TMP/b/ckpt_99: no such checkpoint directory" \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_99"
rm "$TMP/b/ckpt_8/manifest.json"
expect_error error_resume_incomplete any "error: --resume $TMP/b/ckpt_8: incomplete checkpoint \(no manifest" \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_8"
expect_error error_resume_other_batch any 'B\*T = 4\*16 = 64 tokens per micro-batch, this run 8\*16' \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_4" --batch 8
expect_error error_resume_other_optimizer any 'trained with --optimizer adamw, this run asks for adams' \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_4" --optimizer adams
expect_error error_resume_other_model any "checkpoint is of model 'v32l2t64', this run asks for 'v32l3t64'" \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_4" --model v32l3t64
cp -r "$TMP/b/ckpt_4" "$TMP/b/ckpt_5"
sed -i 's/"step": 4/"step": 5/' "$TMP/b/ckpt_5/manifest.json"
printf '\x55' | dd of="$TMP/b/ckpt_5/state_rank0.bin" bs=1 seek=300 conv=notrunc status=none
expect_error error_resume_corrupt_state any 'state_rank0.bin: optimizer state fails its checksum' \
    "${RUN[@]}" --out "$TMP/x" --resume "$TMP/b/ckpt_5"
if [ -e "$TMP/x/log.jsonl" ] && grep -q '"event": "train"' "$TMP/x/log.jsonl"; then
    fail errors_leave_nothing_half_written "a failed run logged training steps"
else ok errors_leave_nothing_half_written; fi

# --- scripts/plot_loss.sh turns logs into one PNG (two runs compared)
if scripts/plot_loss.sh "$TMP/loss.png" "$TMP/a/log.jsonl" "$TMP/c/log.jsonl" > "$TMP/p.out" 2>&1 \
   && [ "$(head -c 8 "$TMP/loss.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
    ok plot_loss_writes_png
else fail plot_loss_writes_png "$(cat "$TMP/p.out")"; fi

# --- --help: exit 0, every option of the table (checked in C by test_train_units) appears here too
if "$TOY" --help > "$TMP/h.out" 2>&1 && grep -q -- '--resume S' "$TMP/h.out" && grep -q -- '--scape-exclude-norms N' "$TMP/h.out"; then
    ok help_exits_zero
else fail help_exits_zero "$(head -3 "$TMP/h.out")"; fi

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

[ "$failures" -eq 0 ]

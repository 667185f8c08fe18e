#!/usr/bin/env bash
# test/test_scape_gpt2.sh [TRAIN_GPT] [DATA] - SCAPE and data parallelism through the whole GPT-2 trainer on real
# tokens (the sotu shards of `make data`), a tiny model (d2c32h2t32, 1.6M parameters, mostly wte), N = 1..4 ranks
# under mpirun: density 1 == dense AdamS; every rank ends with identical parameters and shared SCAPE state
# (SCAPE_CHECK_SYNC=1, optim/dist.c); SCAPE save/resume/continue == uninterrupted at N=1 and N=4 (losses and model
# file bytes); N ranks x batch B == 1 rank x batch N*B; ZeRO-1 == no ZeRO; logged comm_bytes_sent == SCAPE.md
# section 6 for this model's slice table; SCAPE with ZeRO-1 == unsharded SCAPE; a killed rank ends the job non-zero in bounded time; resume on another
# N says so in one line and continues. topk-ef: density 1 == dense AdamW, identical ranks, save/resume bit for
# bit at N=1 and N=2; --mask-stats-every writes well-formed "mask" events.
# Prints "ok <name>"/"FAIL <name>: ..."; temp files under build/ go on exit.
set -u
TRAIN=${1:-./train_gpt}
DATA=${2:-data}
PY=/usr/bin/python3
[ -x "$TRAIN" ] || { echo "FAIL trainer_present: $TRAIN not found; run 'make train_gpt'"; exit 1; }
[ -s "$DATA/sotu/gpt2/sotu_train_000000.bin" ] || { echo "FAIL data_present: $DATA/sotu/gpt2 has no shards; run 'make data'"; exit 1; }
TMP=$(mktemp -d build/test_scape_gpt2.XXXXXX)
[ -n "${KEEP_TMP:-}" ] || trap 'rm -rf "$TMP"' EXIT
MPI=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none)
MODEL=d2c32h2t32
RUN=("$TRAIN" --model $MODEL --data "$DATA" --seq 16 --steps 6 --warmup 2 --lr 3e-3 --eval-every 0 --eval-batches 1
     --sample-every 0 --threads 1 --shuffle 0)
. "$(dirname "$0")/lib.sh" # failures=0, ok NAME, fail NAME WHY
# run NAME NP ARGS...: trains into $TMP/NAME, output in $TMP/NAME.out
run() {
    local name=$1 np=$2; shift 2
    "${MPI[@]}" -np "$np" "${RUN[@]}" --out "$TMP/$name" "$@" > "$TMP/$name.out" 2>&1
}
# compare A B TOL PTOL PFRAC: train losses of two runs agree to relative TOL, and their final model files (llm.c
# layout: 256 int32 header, then fp32) to absolute PTOL, with at most a fraction PFRAC of the parameters more than
# 1e-6 apart. (Adam-type updates divide by sqrt(nu) + eps: where a gradient is ~eps a rounding difference moves
# that parameter by up to ~lr per step, so a few such coordinates are expected; PTOL bounds them by ~lr.)
compare() {
    $PY - "$TMP/$1" "$TMP/$2" "$3" "$4" "$5" <<'PYEOF'
import json, sys, glob, array, os
a, b, tol, ptol, pfrac = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
def losses(d):
    return [e["train_loss"] for e in map(json.loads, open(os.path.join(d, "log.jsonl"))) if e["event"] == "train"]
def params(d):
    ck = sorted(glob.glob(os.path.join(d, "ckpt_*")), key=lambda p: int(p.rsplit("_", 1)[1]))[-1]
    x = array.array("f"); x.frombytes(open(os.path.join(ck, "model.bin"), "rb").read()[1024:]); return x
la, lb = losses(a), losses(b)
if len(la) != len(lb) or not la: sys.exit("loss rows %d vs %d" % (len(la), len(lb)))
dl = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(la, lb))
pa, pb = params(a), params(b)
if len(pa) != len(pb): sys.exit("model sizes %d vs %d" % (len(pa), len(pb)))
diffs = [abs(x - y) for x, y in zip(pa, pb)]
dp = max(diffs)
far = sum(1 for x in diffs if x > 1e-6)
print("losses max rel %.3g, params max abs %.3g, %d of %d params differ by > 1e-6" % (dl, dp, far, len(pa)))
if dl > tol or dp > ptol or far > pfrac * len(pa):
    sys.exit("losses max rel diff %.3g (tolerance %g); params max abs diff %.3g (tolerance %g), %d of %d differ by "
             "more than 1e-6 (at most %g allowed)" % (dl, tol, dp, ptol, far, len(pa), pfrac * len(pa)))
PYEOF
}

# 1. SCAPE at density 1 is dense AdamS (same N = 2); reconstruction g_hat rounds, so within 1e-5
if run adams2 2 --batch 2 --optimizer adams && run scape1_2 2 --batch 2 --optimizer scape --density 1; then
    if msg=$(compare adams2 scape1_2 1e-5 1e-4 1e-4 2>&1); then ok "scape_density_1_equals_dense_adams_2_ranks ($msg)"
    else fail scape_density_1_equals_dense_adams_2_ranks "$msg"; fi
else fail scape_density_1_equals_dense_adams_2_ranks "$(tail -2 "$TMP/adams2.out" "$TMP/scape1_2.out")"; fi

# 2. identical parameters, m and masks on every rank after sparse training (3 ranks, uneven owners)
if "${MPI[@]}" -np 3 -x SCAPE_CHECK_SYNC=1 "${RUN[@]}" --out "$TMP/sync3" --batch 2 --optimizer scape --density 0.05 \
       > "$TMP/sync3.out" 2>&1 && grep -q "sync check: parameters and shared optimizer state identical on 3 ranks" "$TMP/sync3.out"; then
    ok scape_every_rank_holds_identical_state_3_ranks
else fail scape_every_rank_holds_identical_state_3_ranks "$(grep -E 'sync|error' "$TMP/sync3.out" | head -2)"; fi

# 3. SCAPE save at step 3, resume, continue == uninterrupted, N = 1 and N = 4 (bit for bit)
for np in 1 4; do
    name=scape_save_resume_continue_bitwise_n$np
    S=(--batch 2 --optimizer scape --density 0.1 --density-start 1 --density-warmup 3)
    if run res$np.a $np "${S[@]}" --ckpt-every 3 --keep-ckpts 0 && run res$np.b $np "${S[@]}" --resume "$TMP/res$np.a/ckpt_3"; then
        if ! cmp -s "$TMP/res$np.a/ckpt_6/model.bin" "$TMP/res$np.b/ckpt_6/model.bin"; then fail $name "ckpt_6/model.bin differs after resume"
        elif ! diff <(grep '"event": "train"' "$TMP/res$np.a/log.jsonl" | grep -oE '"step": [4-6], "train_loss": [^,]+') \
                    <(grep '"event": "train"' "$TMP/res$np.b/log.jsonl" | grep -oE '"step": [0-9]+, "train_loss": [^,]+') > /dev/null
        then fail $name "losses of steps 4-6 differ after resume"
        else ok $name; fi
    else fail $name "$(tail -2 "$TMP/res$np.a.out" "$TMP/res$np.b.out")"; fi
done

# 4. N ranks x batch B == 1 rank x batch N*B (dense AdamW, reduction order only)
if run full1 1 --batch 4 --optimizer adamw && run split2 2 --batch 2 --optimizer adamw; then
    if msg=$(compare full1 split2 1e-5 1e-4 1e-4 2>&1); then ok "two_ranks_batch_2_equal_one_rank_batch_4 ($msg)"
    else fail two_ranks_batch_2_equal_one_rank_batch_4 "$msg"; fi
else fail two_ranks_batch_2_equal_one_rank_batch_4 "$(tail -2 "$TMP/full1.out" "$TMP/split2.out")"; fi

# 5. ZeRO-1 == no ZeRO (AdamW, 3 ranks)
if run nozero3 3 --batch 2 --optimizer adamw && run zero3 3 --batch 2 --optimizer adamw --zero; then
    if msg=$(compare nozero3 zero3 1e-5 1e-4 1e-4 2>&1); then ok "zero1_equals_no_zero_3_ranks ($msg)"
    else fail zero1_equals_no_zero_3_ranks "$msg"; fi
else fail zero1_equals_no_zero_3_ranks "$(tail -2 "$TMP/nozero3.out" "$TMP/zero3.out")"; fi

# 5b. SCAPE with ZeRO-1 (optim/dist_scape_zero.c) == unsharded SCAPE: bit for bit on 2 ranks (losses, model file),
#     within 1e-6 on 4 (the payload reduce-scatter may add a coordinate's 4 values in another order than the
#     all-reduce); every rank identical (sync check); the logged optimizer state smaller (m lives on its owners);
#     a ZeRO-1 checkpoint resumes unsharded and continues as the uninterrupted run; the bf16 payload.
Z=(--batch 2 --optimizer scape --density 0.05 --density-start 1 --density-warmup 3)
if run sz2.a 2 "${Z[@]}" && run sz2.b 2 "${Z[@]}" --zero; then
    if ! cmp -s "$TMP/sz2.a/ckpt_6/model.bin" "$TMP/sz2.b/ckpt_6/model.bin"; then fail scape_zero1_equals_unsharded_2_ranks_bitwise "model files differ"
    elif ! diff <(grep -oE '"train_loss": [^,]+' "$TMP/sz2.a/log.jsonl") <(grep -oE '"train_loss": [^,]+' "$TMP/sz2.b/log.jsonl") > /dev/null
    then fail scape_zero1_equals_unsharded_2_ranks_bitwise "losses differ"
    else
        sa=$(grep -oE '"optim_state_bytes": [0-9]+' "$TMP/sz2.a/log.jsonl" | tail -1 | grep -oE '[0-9]+$')
        sb=$(grep -oE '"optim_state_bytes": [0-9]+' "$TMP/sz2.b/log.jsonl" | tail -1 | grep -oE '[0-9]+$')
        if [ -n "$sa" ] && [ -n "$sb" ] && [ "$sb" -lt "$sa" ]; then ok "scape_zero1_equals_unsharded_2_ranks_bitwise (state $sb < $sa bytes)"
        else fail scape_zero1_equals_unsharded_2_ranks_bitwise "optim_state_bytes with ZeRO-1 '$sb', without '$sa': expected smaller"; fi
    fi
else fail scape_zero1_equals_unsharded_2_ranks_bitwise "$(tail -2 "$TMP/sz2.a.out" "$TMP/sz2.b.out")"; fi
if run sz4.a 4 "${Z[@]}" && "${MPI[@]}" -np 4 -x SCAPE_CHECK_SYNC=1 "${RUN[@]}" --out "$TMP/sz4.b" "${Z[@]}" --zero \
       > "$TMP/sz4.b.out" 2>&1; then
    if ! grep -q "sync check: parameters and shared optimizer state identical on 4 ranks" "$TMP/sz4.b.out"; then
        fail scape_zero1_equals_unsharded_4_ranks "$(grep -E 'sync|error' "$TMP/sz4.b.out" | head -2)"
    elif msg=$(compare sz4.a sz4.b 1e-6 1e-5 1e-5 2>&1); then ok "scape_zero1_equals_unsharded_4_ranks ($msg)"
    else fail scape_zero1_equals_unsharded_4_ranks "$msg"; fi
else fail scape_zero1_equals_unsharded_4_ranks "$(tail -2 "$TMP/sz4.a.out" "$TMP/sz4.b.out")"; fi
name=scape_zero1_checkpoint_resumes_unsharded_bitwise_2_ranks
if run szr.a 2 "${Z[@]}" --zero --ckpt-every 3 --keep-ckpts 0 && run szr.b 2 "${Z[@]}" --resume "$TMP/szr.a/ckpt_3"; then
    if ! cmp -s "$TMP/sz2.a/ckpt_6/model.bin" "$TMP/szr.b/ckpt_6/model.bin"; then fail $name "ckpt_6/model.bin differs from the uninterrupted unsharded run"
    else ok $name; fi
else fail $name "$(tail -2 "$TMP/szr.a.out" "$TMP/szr.b.out")"; fi
# the bf16 payload: bit for bit on 1 rank; on 2 the mean's rounding error goes to the slice's owner instead of the
# all-reduce part's rank, which moves some masks: losses within 1e-3, parameters within about 2 lr; identical ranks
name=scape_zero1_bf16_payload_equals_unsharded_on_1_rank_tracks_it_on_2
if run szb1.a 1 "${Z[@]}" --scape-payload bf16 && run szb1.b 1 "${Z[@]}" --scape-payload bf16 --zero &&
   run szb2.a 2 "${Z[@]}" --scape-payload bf16 &&
   "${MPI[@]}" -np 2 -x SCAPE_CHECK_SYNC=1 "${RUN[@]}" --out "$TMP/szb2.b" "${Z[@]}" --scape-payload bf16 --zero > "$TMP/szb2.b.out" 2>&1; then
    if ! cmp -s "$TMP/szb1.a/ckpt_6/model.bin" "$TMP/szb1.b/ckpt_6/model.bin"; then fail $name "1 rank: model files differ"
    elif ! grep -q "sync check: parameters and shared optimizer state identical on 2 ranks" "$TMP/szb2.b.out"; then
        fail $name "2 ranks: $(grep -E 'sync|error' "$TMP/szb2.b.out" | head -2)"
    elif msg=$(compare szb2.a szb2.b 1e-3 1e-2 0.1 2>&1); then ok "$name (2 ranks: $msg)"
    else fail $name "2 ranks: $msg"; fi
else fail $name "$(tail -2 "$TMP/szb1.b.out" "$TMP/szb2.b.out")"; fi

# 6. logged comm_bytes_sent == SCAPE.md section 6 for this model's slice table (sync4: N = 4, d = 0.1; steps >= 2,
#    since step 1 makes its first mask synchronously). Per rank and step: payload all-reduce 2*4*K(N-1)/N, mask
#    all-gather of the owners' byte-padded segments S(N-1)/N, plus the trainer's control traffic: one max-i64
#    all-reduce (non-finite flag, 2*8(N-1)/N) and the f64 sum of the mean loss and the stop flag (an all-gather of
#    2 doubles, 16(N-1)). Counters sum the
#    numerators and divide by N once.
if run bytes4 4 --batch 2 --optimizer scape --density 0.1 --scape-mask-coding none; then
    if msg=$($PY - "$TMP/bytes4/log.jsonl" $MODEL 4 0.1 <<'PYEOF' 2>&1
import json, sys, math, re
log, model, N, d = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
L, C, NH, maxT = map(int, re.fullmatch(r"d(\d+)c(\d+)h(\d+)t(\d+)", model).groups())
Vp = 50304
# train_gpt.c gpt2_build_table: (name, numel, decay) in memory order
tab = [("wte", Vp * C, 1), ("wpe", maxT * C, 1)]
per = [("ln1w", C, 0), ("ln1b", C, 0), ("qkvw", 3 * C * C, 1), ("qkvb", 3 * C, 0), ("attprojw", C * C, 1),
       ("attprojb", C, 0), ("ln2w", C, 0), ("ln2b", C, 0), ("fcw", 4 * C * C, 1), ("fcb", 4 * C, 0),
       ("fcprojw", 4 * C * C, 1), ("fcprojb", C, 0)]
for n, k, dec in per:
    tab += [(n, k, dec)] * L
tab += [("lnfw", C, 0), ("lnfb", C, 0)]
P = sum(t[1] for t in tab)
offs = [sum(t[1] for t in tab[:i]) for i in range(len(tab))]
# K: per slice max(1, floor(d n)) in double (scape_k), dense (all) for norm gains and biases
K = sum(n if not dec else min(n, max(1, math.floor(d * n))) for _, n, dec in tab)
# owners: boundary r = the slice start nearest r P / N (ties to the earlier), scape.c owner_table_build
first = [0]; s = 0
for r in range(1, N):
    target = P * r / N
    while s < len(tab):
        here = offs[s]; nxt = offs[s + 1] if s + 1 < len(tab) else P
        if abs(nxt - target) < abs(here - target): s += 1
        else: break
    first.append(s)
first.append(len(tab))
bounds = [offs[f] if f < len(tab) else P for f in first]
S = sum((bounds[r + 1] - bounds[r] + 7) // 8 for r in range(N))
want = (8 * K * (N - 1) + S * (N - 1) + 16 * (N - 1) + 16 * (N - 1) * N) // N
rows = [e for e in map(json.loads, open(log)) if e["event"] == "train" and e["step"] >= 2]
bad = [(e["step"], e["comm_bytes_sent"]) for e in rows if e["comm_bytes_sent"] != want]
if not rows or bad: sys.exit("expected %d bytes/step (K=%d of P=%d, mask segments %d B), got %s" % (want, K, P, S, bad[:3]))
print("K=%d P=%d bytes=%d" % (K, P, want))
PYEOF
    ); then ok scape_comm_bytes_sent_match_section_6_formula_4_ranks; else fail scape_comm_bytes_sent_match_section_6_formula_4_ranks "$msg"; fi
else fail scape_comm_bytes_sent_match_section_6_formula_4_ranks "$(tail -2 "$TMP/bytes4.out")"; fi

# 6b. coded masks (--scape-mask-coding auto, the default) against the 1-bit all-gather, 4 ranks, d = 0.01 after a
#     2-step warm-up: identical losses and model file; the same payload bytes; the mask all-gather at least 4x
#     smaller from step 4 on (d 0.01: H(d) = 0.08 bits per parameter, less once consecutive masks overlap); and a
#     damaged coded segment (test hook: rank 2, which owns no parameters of this model, sends an empty segment
#     with a byte too many) ends the job naming rank 2 (each rank prints the line; their output may interleave).
if run code_none 4 --batch 2 --optimizer scape --density 0.01 --density-warmup 2 --scape-mask-coding none \
   && run code_auto 4 --batch 2 --optimizer scape --density 0.01 --density-warmup 2; then
    if msg=$(compare code_none code_auto 0 0 0 2>&1) && cmp -s "$(ls -d "$TMP"/code_none/ckpt_* | tail -1)/model.bin" \
        "$(ls -d "$TMP"/code_auto/ckpt_* | tail -1)/model.bin" && msg2=$($PY - "$TMP/code_none/log.jsonl" "$TMP/code_auto/log.jsonl" <<'PYEOF' 2>&1
import json, sys
a, b = ([e for e in map(json.loads, open(f)) if e["event"] == "train"] for f in sys.argv[1:3])
if [e["comm_allreduce_bytes"] for e in a] != [e["comm_allreduce_bytes"] for e in b]: sys.exit("payload bytes differ")
ratios = [x["comm_allgather_bytes"] / max(1, y["comm_allgather_bytes"]) for x, y in zip(a, b) if x["step"] >= 4]
if not ratios or min(ratios) < 4: sys.exit("mask all-gather bytes 1-bit / coded per step %s (want >= 4)" % [round(r, 1) for r in ratios])
print("mask bytes %d -> %d per step (%.1fx)" % (a[-1]["comm_allgather_bytes"], b[-1]["comm_allgather_bytes"], min(ratios)))
PYEOF
    ); then ok "scape_coded_masks_identical_training_fewer_bytes_4_ranks ($msg2)"
    else fail scape_coded_masks_identical_training_fewer_bytes_4_ranks "$msg $msg2"; fi
else fail scape_coded_masks_identical_training_fewer_bytes_4_ranks "$(tail -2 "$TMP/code_none.out" "$TMP/code_auto.out")"; fi
if SCAPE_TEST_CORRUPT_MASK=2 "${MPI[@]}" -x SCAPE_TEST_CORRUPT_MASK -np 4 "${RUN[@]}" --out "$TMP/corrupt" --batch 2 \
        --optimizer scape --density 0.01 > "$TMP/corrupt.out" 2>&1; then
    fail scape_damaged_coded_mask_stops_naming_the_rank "the run succeeded"
elif [ "$(grep -c 'mask all-gather: rank 2' "$TMP/corrupt.out")" -ge 1 ] && ! grep -q 'rank [013].s coded' "$TMP/corrupt.out"; then
    ok scape_damaged_coded_mask_stops_naming_the_rank
else fail scape_damaged_coded_mask_stops_naming_the_rank "$(grep -m2 error "$TMP/corrupt.out")"; fi

# 7. a rank killed mid-training (SIGKILL) ends the job non-zero within the timeout
"${MPI[@]}" -np 2 "${RUN[@]}" --out "$TMP/kill" --batch 2 --optimizer scape --density 0.1 --steps 100000 > "$TMP/kill.out" 2>&1 &
job=$!
for _ in $(seq 1 100); do grep -q "step      2/" "$TMP/kill.out" 2>/dev/null && break; sleep 0.2; done
victim=""
for p in $(pgrep -f -- "--out $TMP/kill"); do   # a rank process itself, never mpirun/timeout
    [ "$(cat /proc/$p/comm 2>/dev/null)" = "$(basename "$TRAIN")" ] && victim=$p
done
t0=$(date +%s)
if [ -n "$victim" ]; then kill -9 "$victim"; else kill "$job"; fi
wait $job; rc=$?
secs=$(( $(date +%s) - t0 ))
if [ -n "$victim" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $secs -lt 60 ]; then ok "killed_rank_ends_training_nonzero_in_bounded_time (rc $rc, ${secs}s)"
else fail killed_rank_ends_training_nonzero_in_bounded_time "killed rank pid '${victim}', job rc $rc after ${secs}s (want non-zero, not 124, < 60 s)"; fi

# 8. resume a 4-rank SCAPE checkpoint on 2 ranks: one line says so, the run continues to the end
if run w42 2 --batch 2 --optimizer scape --density 0.1 --density-start 1 --density-warmup 3 --resume "$TMP/res4.a/ckpt_3" \
   && [ "$(grep -c "note: resuming a 4-rank checkpoint on 2 ranks" "$TMP/w42.out")" = 1 ] && [ -s "$TMP/w42/ckpt_6/model.bin" ]; then
    ok scape_resume_4_rank_checkpoint_on_2_ranks
else fail scape_resume_4_rank_checkpoint_on_2_ranks "$(grep -E 'note|error' "$TMP/w42.out" | head -2)"; fi
# 8a. the same 4-rank (unsharded) checkpoint continues on 3 ranks with ZeRO-1 (m scattered to the new owners, each
#     rank's residual the saved ranks' mean, folded), every rank identical at the end
if "${MPI[@]}" -np 3 -x SCAPE_CHECK_SYNC=1 "${RUN[@]}" --out "$TMP/w43z" --batch 2 --optimizer scape --density 0.1 \
       --density-start 1 --density-warmup 3 --zero --resume "$TMP/res4.a/ckpt_3" > "$TMP/w43z.out" 2>&1 \
   && [ "$(grep -c "note: resuming a 4-rank checkpoint on 3 ranks" "$TMP/w43z.out")" = 1 ] && [ -s "$TMP/w43z/ckpt_6/model.bin" ] \
   && grep -q "sync check: parameters and shared optimizer state identical on 3 ranks" "$TMP/w43z.out"; then
    ok scape_resume_4_rank_checkpoint_on_3_ranks_with_zero1
else fail scape_resume_4_rank_checkpoint_on_3_ranks_with_zero1 "$(grep -E 'note|error|sync' "$TMP/w43z.out" | head -2)"; fi
# 8b. a 1-rank SCAPE checkpoint continues on 2 ranks (its one state file is every saved rank's: each new rank starts
#     from its residual, the mean over the one saved rank)
if run w12 2 --batch 2 --optimizer scape --density 0.1 --density-start 1 --density-warmup 3 --resume "$TMP/res1.a/ckpt_3" \
   && [ "$(grep -c "note: resuming a 1-rank checkpoint on 2 ranks" "$TMP/w12.out")" = 1 ] && [ -s "$TMP/w12/ckpt_6/model.bin" ]; then
    ok scape_resume_1_rank_checkpoint_on_2_ranks
else fail scape_resume_1_rank_checkpoint_on_2_ranks "$(grep -E 'note|error' "$TMP/w12.out" | head -2)"; fi

# 9. topk-ef (top-k of raw gradients with error feedback into AdamW) at density 1 == dense AdamW, 2 ranks, bit for
#    bit (the sum of two ranks' values cannot depend on order), and every rank ends identical under sparse topk-ef
if run adamw2 2 --batch 2 --optimizer adamw && run topk1_2 2 --batch 2 --optimizer topk-ef --density 1; then
    if msg=$(compare adamw2 topk1_2 0 0 0 2>&1); then ok "topk_ef_density_1_equals_dense_adamw_2_ranks_bitwise ($msg)"
    else fail topk_ef_density_1_equals_dense_adamw_2_ranks_bitwise "$msg"; fi
else fail topk_ef_density_1_equals_dense_adamw_2_ranks_bitwise "$(tail -2 "$TMP/adamw2.out" "$TMP/topk1_2.out")"; fi
if "${MPI[@]}" -np 3 -x SCAPE_CHECK_SYNC=1 "${RUN[@]}" --out "$TMP/tsync3" --batch 2 --optimizer topk-ef --density 0.05 \
       > "$TMP/tsync3.out" 2>&1 && grep -q "sync check: parameters and shared optimizer state identical on 3 ranks" "$TMP/tsync3.out"; then
    ok topk_ef_every_rank_holds_identical_state_3_ranks
else fail topk_ef_every_rank_holds_identical_state_3_ranks "$(grep -E 'sync|error' "$TMP/tsync3.out" | head -2)"; fi

# 10. topk-ef save at step 3, resume, continue == uninterrupted, N = 1 and N = 2 (bit for bit)
for np in 1 2; do
    name=topk_ef_save_resume_continue_bitwise_n$np
    S=(--batch 2 --optimizer topk-ef --density 0.1 --density-start 1 --density-warmup 3)
    if run tres$np.a $np "${S[@]}" --ckpt-every 3 --keep-ckpts 0 && run tres$np.b $np "${S[@]}" --resume "$TMP/tres$np.a/ckpt_3"; then
        if ! cmp -s "$TMP/tres$np.a/ckpt_6/model.bin" "$TMP/tres$np.b/ckpt_6/model.bin"; then fail $name "ckpt_6/model.bin differs after resume"
        elif ! diff <(grep '"event": "train"' "$TMP/tres$np.a/log.jsonl" | grep -oE '"step": [4-6], "train_loss": [^,]+') \
                    <(grep '"event": "train"' "$TMP/tres$np.b/log.jsonl" | grep -oE '"step": [0-9]+, "train_loss": [^,]+') > /dev/null
        then fail $name "losses of steps 4-6 differ after resume"
        else ok $name; fi
    else fail $name "$(tail -2 "$TMP/tres$np.a.out" "$TMP/tres$np.b.out")"; fi
done
# 10b. a 1-rank topk-ef checkpoint continues on 2 ranks (error feedback: the mean over the one saved rank)
if run tw12 2 --batch 2 --optimizer topk-ef --density 0.1 --density-start 1 --density-warmup 3 --resume "$TMP/tres1.a/ckpt_3" \
   && [ "$(grep -c "note: resuming a 1-rank checkpoint on 2 ranks" "$TMP/tw12.out")" = 1 ] && [ -s "$TMP/tw12/ckpt_6/model.bin" ]; then
    ok topk_ef_resume_1_rank_checkpoint_on_2_ranks
else fail topk_ef_resume_1_rank_checkpoint_on_2_ranks "$(grep -E 'note|error' "$TMP/tw12.out" | head -2)"; fi

# 11. --mask-stats-every 2: one "mask" event per logged step (2, 4, 6) with per-tensor arrays of equal length and
#     values in [0, 1]; SCAPE logs first-moment (_m) and raw-gradient (_g) masks, topk-ef only _g; off by default
for opt in scape topk-ef; do
    name=mask_stats_events_${opt/-/_}
    if run ms_$opt 2 --batch 2 --optimizer $opt --density 0.05 --mask-stats-every 2; then
        if msg=$($PY - "$TMP/ms_$opt/log.jsonl" $opt "$TMP/topk1_2/log.jsonl" <<'PYEOF' 2>&1
import json, sys
log, opt, plain = sys.argv[1], sys.argv[2], sys.argv[3]
ev = [e for e in map(json.loads, open(log)) if e["event"] == "mask"]
if [e["step"] for e in ev] != [2, 4, 6]: sys.exit("mask events at steps %s, expected [2, 4, 6]" % [e["step"] for e in ev])
kinds = ["g", "m"] if opt == "scape" else ["g"]
for e in ev:
    n = len(e["tensors"])
    if n == 0 or any(t in ("h0.ln1w", "lnfw", "h0.qkvb") for t in e["tensors"]): sys.exit("tensor list %s" % e["tensors"])
    if opt != "scape" and any(k in e for k in ("jaccard_m", "energy_m")): sys.exit("topk-ef logs first-moment masks")
    for k in kinds:
        for key in ("jaccard_" + k, "energy_" + k):
            v = e[key]
            if len(v) != n or any(x is None or not 0 <= x <= 1 for x in v): sys.exit("step %d %s = %s" % (e["step"], key, v))
        m = e["mean_jaccard_" + k]
        if m is None or not 0 < m <= 1: sys.exit("step %d mean_jaccard_%s = %s" % (e["step"], k, m))
if any(e["event"] == "mask" for e in map(json.loads, open(plain))): sys.exit("mask events without --mask-stats-every")
print("%d events, %d tensors, mean_jaccard_g %s" % (len(ev), len(ev[0]["tensors"]), [round(e["mean_jaccard_g"], 3) for e in ev]))
PYEOF
        ); then ok "$name ($msg)"; else fail $name "$msg"; fi
    else fail $name "$(tail -2 "$TMP/ms_$opt.out")"; fi
done
if out=$(scripts/plot_mask_stability.sh "$TMP/mask.png" "$TMP/ms_scape/log.jsonl" "$TMP/ms_topk-ef/log.jsonl" 2>&1) \
   && [ "$(head -c 8 "$TMP/mask.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
   && ! scripts/plot_mask_stability.sh "$TMP/none.png" "$TMP/adamw2/log.jsonl" > /dev/null 2>&1 && [ ! -e "$TMP/none.png" ]; then
    ok plot_mask_stability_writes_png_and_refuses_logs_without_mask_events
else fail plot_mask_stability_writes_png_and_refuses_logs_without_mask_events "$out"; fi

# 12. shards tokenized for another vocabulary are refused before the first step, on 1 and 2 ranks (Llama 2's ids all
#     lie below GPT-2's V, so the vocabulary check alone would let them train); shards of the model's own tokenizer
#     train. `tok shards` records the tokenizer in the header; llm.c's shards record none and load as before.
mkdir -p "$TMP/l2txt"
for f in $(ls "$DATA"/sotu/txt/*.txt | sort | head -4); do cp "$f" "$TMP/l2txt/"; done
if ./tok shards --data "$DATA" --model llama2 --out "$TMP/l2sh" --name x --val-percent 25 "$TMP/l2txt" > /dev/null 2>&1 \
   && ./tok shards --data "$DATA" --model gpt2 --out "$TMP/g2sh" --name x --val-percent 25 "$TMP/l2txt" > /dev/null 2>&1; then
    wrong=(--train "$TMP/l2sh/x_train_*.bin" --val "$TMP/l2sh/x_val_*.bin" --batch 2 --steps 2)
    right=(--train "$TMP/g2sh/x_train_*.bin" --val "$TMP/g2sh/x_val_*.bin" --batch 2 --steps 2)
    if ! "${RUN[@]}" --out "$TMP/wt1" "${wrong[@]}" > "$TMP/wt1.out" 2>&1 \
       && [ "$(grep -c '^error: .*x_train_000000.bin was tokenized for llama2, but this gpt2 model' "$TMP/wt1.out")" = 1 ] \
       && ! grep -q '^step ' "$TMP/wt1.out" && ! run wt2 2 "${wrong[@]}" \
       && grep -q 'was tokenized for llama2' "$TMP/wt2.out" && ! grep -q '^step ' "$TMP/wt2.out" \
       && "${RUN[@]}" --out "$TMP/rt1" "${right[@]}" > "$TMP/rt1.out" 2>&1; then
        ok data_of_another_tokenizer_is_refused_before_the_first_step
    else fail data_of_another_tokenizer_is_refused_before_the_first_step "$(grep -h error "$TMP/wt1.out" "$TMP/wt2.out" "$TMP/rt1.out" | head -3)"; fi
else fail data_of_another_tokenizer_is_refused_before_the_first_step "tok shards failed"; fi

[ "$failures" -eq 0 ]

#!/usr/bin/env bash
# test/test_scape_llama.sh [TRAIN_LLAMA] [DATA] - the whole Llama trainer under the shared loop, data parallel and
# SCAPE, on real Llama 2 tokens (the sotu shards of `make data-llama`) with a tiny GQA Llama (l2c32h4kv2t32: 2.1M
# parameters, mostly wte and lm_head) on 2 ranks under mpirun: SCAPE at density 1 == dense AdamS (losses and final
# model.bin); every rank ends with identical parameters and shared SCAPE state (SCAPE_CHECK_SYNC=1, optim/dist.c,
# the same check as test/test_scape_gpt2.sh) for adamw, adams and sparse scape; SCAPE save at step 3 / resume /
# continue == uninterrupted, bit for bit (losses and model.bin bytes); SCAPE with ZeRO-1 == unsharded; the log has the GPT-2 trainer's events and
# keys; samples decode to text that starts with the prompt. Prints "ok <name>"/"FAIL <name>: ..."; exits non-zero
# on any failure; temp files under build/ go on exit (KEEP_TMP=1 keeps them). About 30-60 s on 2 busy cores.
set -u
TRAIN=${1:-./train_llama}
DATA=${2:-data}
PY=/usr/bin/python3
[ -x "$TRAIN" ] || { echo "FAIL trainer_present: $TRAIN not found; run 'make train_llama'"; exit 1; }
for s in train val; do
    [ -s "$DATA/sotu/llama2/sotu_${s}_000000.bin" ] ||
        { echo "FAIL data_present: $DATA/sotu/llama2 has no $s shard; run 'make data-llama'"; exit 1; }
done
mkdir -p build
TMP=$(mktemp -d build/test_scape_llama.XXXXXX)
[ -n "${KEEP_TMP:-}" ] || trap 'rm -rf "$TMP"' EXIT
MPI=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none)
MODEL=l2c32h4kv2t32
# explicit --train/--val: the test must never start `make data-llama` itself
RUN=("$TRAIN" --model $MODEL --data "$DATA" --train "$DATA/sotu/llama2/sotu_train_000000.bin"
     --val "$DATA/sotu/llama2/sotu_val_000000.bin" --batch 2 --seq 16 --steps 6 --warmup 2 --lr 3e-3 --eval-every 0
     --eval-batches 1 --sample-every 0 --threads 1 --shuffle 0)
failures=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }
# run NAME NP ARGS...: trains into $TMP/NAME, output in $TMP/NAME.out. SCAPE_CHECK_SYNC=1: at the end every rank
# hashes its parameters (and SCAPE's m and masks) and rank 0 prints "sync check: ... identical" or the run fails.
run() {
    local name=$1 np=$2; shift 2
    "${MPI[@]}" -np "$np" -x SCAPE_CHECK_SYNC=1 "${RUN[@]}" --out "$TMP/$name" "$@" > "$TMP/$name.out" 2>&1
}
why() { tail -n 2 "$TMP/$1.out" | tr '\n' ' '; }

# compare A B TOL PTOL PFRAC: train losses of two runs agree to relative TOL, and the parameters of their final
# model files (train_llama.c's layout: 256 x int32 header, then fp32) to absolute PTOL, with at most a fraction
# PFRAC of them more than 1e-6 apart. Why not exact: SCAPE rebuilds AdamS's gradient from the averaged momentum,
# g_hat = (m_t - beta1 m_{t-1}) / (1 - beta1) (SCAPE.md section 3.5), which rounds differently from the mean
# gradient, and an Adam-type step divides by sqrt(nu) + eps, so where a gradient is ~eps that rounding can move a
# parameter by up to ~lr per step. Losses: 1e-5 relative; parameters: 1e-4 absolute (lr 3e-3 x 6 steps bounds
# the worst case at 1.8e-2, so 1e-4 still fails a wrong update); at most 1e-4 of them beyond 1e-6.
compare() {
    $PY - "$TMP/$1" "$TMP/$2" "$3" "$4" "$5" <<'PYEOF'
import json, sys, glob, array, os
a, b, tol, ptol, pfrac = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
def losses(d):
    return [e["train_loss"] for e in map(json.loads, open(os.path.join(d, "log.jsonl"))) if e["event"] == "train"]
def params(d):
    ck = sorted(glob.glob(os.path.join(d, "ckpt_*")), key=lambda p: int(p.rsplit("_", 1)[1]))[-1]
    raw = open(os.path.join(ck, "model.bin"), "rb").read()
    hdr = array.array("i"); hdr.frombytes(raw[:1024])
    if hdr[0] != 20261129: sys.exit("%s: not a Llama model file (magic %d)" % (ck, hdr[0]))
    x = array.array("f"); x.frombytes(raw[1024:]); return x
la, lb = losses(a), losses(b)
if len(la) != len(lb) or not la: sys.exit("loss rows %d vs %d" % (len(la), len(lb)))
dl = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(la, lb))
pa, pb = params(a), params(b)
if len(pa) != len(pb): sys.exit("model sizes %d vs %d" % (len(pa), len(pb)))
diffs = [abs(x - y) for x, y in zip(pa, pb)]
dp, far = max(diffs), sum(1 for x in diffs if x > 1e-6)
moved = max(abs(x) for x in pa) > 0 and la[0] != la[-1]
if not moved: sys.exit("the run did not train (loss constant or parameters zero)")
if dl > tol or dp > ptol or far > pfrac * len(pa):
    sys.exit("losses max rel diff %.3g (tolerance %g); params max abs diff %.3g (tolerance %g), %d of %d differ by "
             "more than 1e-6 (at most %g allowed)" % (dl, tol, dp, ptol, far, len(pa), pfrac * len(pa)))
print("losses max rel %.3g, params max abs %.3g, %d of %d params differ by > 1e-6" % (dl, dp, far, len(pa)))
PYEOF
}

# 1. SCAPE at density 1 is dense AdamS (N = 2)
if run adams2 2 --optimizer adams && run scape1_2 2 --optimizer scape --density 1; then
    if msg=$(compare adams2 scape1_2 1e-5 1e-4 1e-4 2>&1); then ok "llama_scape_density_1_equals_dense_adams_2_ranks ($msg)"
    else fail llama_scape_density_1_equals_dense_adams_2_ranks "$msg"; fi
else fail llama_scape_density_1_equals_dense_adams_2_ranks "$(why adams2) $(why scape1_2)"; fi

# 2. every rank holds identical parameters (and SCAPE's m and masks) at the end, for each optimizer (N = 2):
#    adams from test 1, adamw here, sparse scape (d 0.1 after a 3-step warm-up) from test 3's runs below
run sync_adamw 2 --optimizer adamw
sync_ok() {  # sync_ok OPT RUN...: the named runs all printed rank 0's sync line
    local name=llama_every_rank_identical_after_training_${1}_2_ranks r; shift
    for r in "$@"; do
        if ! grep -q "sync check: parameters and shared optimizer state identical on 2 ranks" "$TMP/$r.out"; then
            fail $name "$r: $(grep -E 'sync|error' "$TMP/$r.out" | head -n 2 | tr '\n' ' ')"; return; fi
    done
    ok "$name ($r: $(grep -o 'hash [0-9a-f]*' "$TMP/$r.out"))"
}

# 3. SCAPE save at step 3, resume, continue == uninterrupted (N = 2), bit for bit
name=llama_scape_save_resume_continue_bitwise_2_ranks
S=(--optimizer scape --density 0.1 --density-start 1 --density-warmup 3)
if run res.a 2 "${S[@]}" --ckpt-every 3 --keep-ckpts 0 && [ -f "$TMP/res.a/ckpt_3/manifest.json" ] &&
   run res.b 2 "${S[@]}" --resume "$TMP/res.a/ckpt_3"; then
    if ! cmp -s "$TMP/res.a/ckpt_6/model.bin" "$TMP/res.b/ckpt_6/model.bin"; then fail $name "ckpt_6/model.bin differs after resume"
    elif ! grep -q "resuming from $TMP/res.a/ckpt_3 at step 3" "$TMP/res.b.out"; then fail $name "no 'resuming from' line"
    elif ! diff <(grep '"event": "train"' "$TMP/res.a/log.jsonl" | grep -oE '"step": [4-6], "train_loss": [^,]+') \
                <(grep '"event": "train"' "$TMP/res.b/log.jsonl" | grep -oE '"step": [0-9]+, "train_loss": [^,]+') > /dev/null
    then fail $name "losses of steps 4-6 differ after resume"
    else ok $name; fi
else fail $name "$(why res.a) $(why res.b)"; fi
# 3b. SCAPE with ZeRO-1 (m on its owners, the payload reduce-scattered, m_t and p all-gathered on the mask) ==
#     unsharded SCAPE (res.a), bit for bit on 2 ranks: the losses and the final model.bin; identical ranks
name=llama_scape_zero1_equals_unsharded_bitwise_2_ranks
if run zero.a 2 "${S[@]}" --zero; then
    if ! cmp -s "$TMP/res.a/ckpt_6/model.bin" "$TMP/zero.a/ckpt_6/model.bin"; then fail $name "ckpt_6/model.bin differs"
    elif ! diff <(grep -oE '"train_loss": [^,]+' "$TMP/res.a/log.jsonl") <(grep -oE '"train_loss": [^,]+' "$TMP/zero.a/log.jsonl") > /dev/null
    then fail $name "losses differ"
    else ok $name; fi
else fail $name "$(why zero.a)"; fi
sync_ok adamw sync_adamw
sync_ok adams adams2
sync_ok scape scape1_2 res.a res.b zero.a

# 4. the log has the GPT-2 trainer's events and keys (start, train with comm bytes and density, val, sample, ckpt),
#    and a sample decodes to text that starts with the prompt (the loop feeds <s>, then the prompt's tokens)
name=llama_log_events_and_samples_decode_to_text
if run logs 2 --optimizer scape --density 0.1 --steps 2 --sample-every 1 --sample-tokens 8 --prompt "The Congress"; then
    if msg=$($PY - "$TMP/logs/log.jsonl" <<'PYEOF' 2>&1
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
kinds = [e["event"] for e in ev]
for k in ("start", "train", "val", "sample", "ckpt"):
    if k not in kinds: sys.exit("no %r event in %s" % (k, kinds))
st = ev[kinds.index("start")]
if st.get("family") != "llama" or st.get("world") != 2 or st.get("optimizer") != "scape":
    sys.exit("start event %s" % st)
for e in ev:
    if e["event"] == "train":
        for k in ("step", "train_loss", "lr", "grad_norm", "ms", "tok_per_s", "comm_bytes_sent", "comm_bytes_recv",
                  "comm_wait_ms", "density"):
            if k not in e: sys.exit("train event lacks %r: %s" % (k, e))
        if e["comm_bytes_sent"] <= 0: sys.exit("no communication logged on 2 ranks: %s" % e)
s = [e["text"] for e in ev if e["event"] == "sample"]
if len(s) != 2 or not all(t.startswith("The Congress") and len(t) > len("The Congress") for t in s):
    sys.exit("samples %r: want 2, each the prompt and more text" % s)
print(repr(s[-1]))
PYEOF
    ); then ok "$name ($msg)"; else fail $name "$msg"; fi
else fail $name "$(why logs)"; fi

# 5. with no --train/--val and the default corpus missing, ./train_llama prepares it once with `make -s -C <repo> data-llama`
#    (not GPT-2's `make data`) and trains on its uint32 Llama 2 shards. A data dir with the fetched vocabularies
#    and only 20 of the corpus's documents keeps the tokenization short.
name=llama_default_corpus_prepared_on_first_use
mkdir -p "$TMP/data/sotu/txt"
cp -r "$DATA/gpt2" "$DATA/llama2" "$DATA/llama3" "$TMP/data/"
ls "$DATA/sotu/txt" | head -n 20 | while IFS= read -r f; do ln -s "$(realpath "$DATA/sotu/txt/$f")" "$TMP/data/sotu/txt/$f"; done
if env OMP_NUM_THREADS=1 timeout 120 "$TRAIN" --model $MODEL --data "$TMP/data" --batch 2 --seq 16 --steps 1 \
       --eval-batches 1 --sample-every 0 --threads 1 --out "$TMP/first" > "$TMP/first.out" 2>&1; then
    if ! grep -qF "preparing it once with \`make -s -C '$(pwd)' data-llama 'DATA=$(realpath "$TMP")/data'\`" "$TMP/first.out"; then
        fail $name "no 'preparing it once with \`make -s -C ... data-llama ...\`' line: $(head -n 1 "$TMP/first.out")"
    elif ! [ -s "$TMP/data/sotu/llama2/sotu_train_000000.bin" ] || [ -e "$TMP/data/sotu/gpt2" ]; then
        fail $name "want $TMP/data/sotu/llama2 shards and no GPT-2 ones: $(ls "$TMP/data/sotu")"
    elif ! grep -q '"event": "train"' "$TMP/first/log.jsonl"; then fail $name "no train event"
    else ok $name; fi
else fail $name "$(why first)"; fi

# 6. a Llama with Llama 3's vocabulary (V 128256, as the 1.8b spec) reads the Llama 3 shards and samples with the
#    Llama 3 tokenizer: with only $TMP/data/sotu/llama3 present (from test 5) it trains without preparing anything
name=llama3_vocabulary_model_uses_llama3_shards_and_tokenizer
rm -rf "$TMP/data/sotu/llama2"
if [ -s "$TMP/data/sotu/llama3/sotu_train_000000.bin" ] &&
   env OMP_NUM_THREADS=1 timeout 120 "$TRAIN" --model l1c32h2t32v128256 --data "$TMP/data" --batch 2 --seq 16 \
       --steps 1 --eval-batches 1 --sample-tokens 4 --prompt "The Congress" --threads 1 --out "$TMP/l3" \
       > "$TMP/l3.out" 2>&1; then
    if grep -q "preparing" "$TMP/l3.out"; then fail $name "it prepared data: $(grep preparing "$TMP/l3.out")"
    elif ! grep -a -q "sample: The Congress" "$TMP/l3.out"; then fail $name "no sample starting with the prompt"
    else ok $name; fi
else fail $name "$(why l3)"; fi

exit $((failures > 0))

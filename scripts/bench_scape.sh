#!/usr/bin/env bash
# scripts/bench_scape.sh [--model S] [--np N] [--steps N] [--batch B] [--seq T] [--data DIR] [--out DIR]
# SCAPE's communication benchmark (SCAPE.md section 6): trains the same model for the same steps on N ranks
# (default 4) with dense AdamS, SCAPE d=0.1 and SCAPE d=0.01 (no density warm-up), each SCAPE density with coded
# masks (--scape-mask-coding auto, the default) and with the 1-bit bitmask ("_1bit"), then prints per config the
# bytes each rank sends per step and the ratio to dense (targets: >= 6x fewer at 0.1, >= 80x at 0.01 coded), the step
# time, and the share of communication hidden behind compute: 1 - W / B over the run's gradient/payload
# all-reduces and mask (or ZeRO) all-gathers, W the time the compute thread waited for them and B the time the
# communication thread spent in them (SCAPE_COMM_REPORT=1, comm/comm.c; includes step 1). Then what
# the mask costs: 1 bit per parameter (the packed bitmask sent now) against the entropy floor H(d) and the actual
# Golomb-Rice and Elias-Fano sizes of the real final masks (read from the checkpoint), per parameter.
# Needs train_gpt and `make data`. Not a test: it prints figures; steps 2.. are measured (step 1 bootstraps).
# SKIP_TRAIN=1 only re-analyses the runs already under --out.
set -eu
MODEL=d4c256; NP=4; STEPS=6; B=2; T=64; DATA=data; OUT=out/bench_scape
while [ $# -gt 0 ]; do
    case $1 in
        --model) MODEL=$2; shift 2 ;; --np) NP=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;;
        --batch) B=$2; shift 2 ;; --seq) T=$2; shift 2 ;; --data) DATA=$2; shift 2 ;; --out) OUT=$2; shift 2 ;;
        *) echo "error: unknown option '$1'; usage: $0 [--model S] [--np N] [--steps N] [--batch B] [--seq T] [--data DIR] [--out DIR]" >&2; exit 2 ;;
    esac
done
[ -x ./train_gpt ] || { echo "error: ./train_gpt not found; run 'make train_gpt' first" >&2; exit 1; }
[ "$STEPS" -ge 2 ] 2>/dev/null || { echo "error: --steps $STEPS must be >= 2 (step 1 is not measured)" >&2; exit 2; }
MPI=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 SCAPE_COMM_REPORT=1 mpirun -x SCAPE_COMM_REPORT --allow-run-as-root --oversubscribe --bind-to none -np "$NP")
COMMON=(./train_gpt --model "$MODEL" --data "$DATA" --batch "$B" --seq "$T" --steps "$STEPS" --eval-every 0
        --eval-batches 1 --sample-every 0 --threads 1 --warmup 0)
mkdir -p "$OUT"
if [ -z "${SKIP_TRAIN:-}" ]; then
for cfg in "adams:--optimizer adams" "scape_0.1:--optimizer scape --density 0.1 --density-warmup 0" \
           "scape_0.01:--optimizer scape --density 0.01 --density-warmup 0" \
           "scape_0.1_1bit:--optimizer scape --density 0.1 --density-warmup 0 --scape-mask-coding none" \
           "scape_0.01_1bit:--optimizer scape --density 0.01 --density-warmup 0 --scape-mask-coding none"; do
    name=${cfg%%:*}
    rm -rf "${OUT:?}/$name"
    echo "== $name: ${cfg#*:} ($NP ranks, $STEPS steps)" >&2
    # shellcheck disable=SC2086
    "${MPI[@]}" "${COMMON[@]}" ${cfg#*:} --out "$OUT/$name" > "$OUT/$name.out" 2>&1 \
        || { echo "error: the $name run failed; see $OUT/$name.out" >&2; tail -3 "$OUT/$name.out" >&2; exit 1; }
done
fi
/usr/bin/python3 - "$OUT" "$MODEL" "$NP" <<'PYEOF'
import json, sys, os, re, glob, math, statistics
import numpy as np
out, model, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
def rows(name):
    return [e for e in map(json.loads, open(os.path.join(out, name, "log.jsonl"))) if e["event"] == "train" and e["step"] >= 2]
res = {}
for name in ["adams", "scape_0.1", "scape_0.1_1bit", "scape_0.01", "scape_0.01_1bit"]:
    r = rows(name)
    res[name] = dict(bytes=statistics.median(e["comm_bytes_sent"] for e in r), ms=statistics.median(e["ms"] for e in r),
                     loss=r[-1]["train_loss"], mask=statistics.median(e["comm_allgather_bytes"] for e in r),
                     payload=statistics.median(e["comm_allreduce_bytes"] for e in r))
    W = B = 0.0
    for line in open(os.path.join(out, name + ".out")):
        m = re.match(r"comm report: (allreduce|reduce_scatter|allgather) .* wait_ms ([\d.]+) busy_ms ([\d.]+)", line)
        if m: W += float(m.group(2)); B += float(m.group(3))
    res[name]["hidden"] = 1 - W / B if B > 0 else float("nan")
    res[name]["wait"], res[name]["busy"] = W, B
dense = res["adams"]["bytes"]
print("model %s, %d ranks; per rank per step (median of steps 2..):" % (model, N))
print("%-15s %12s %12s %10s %9s %9s %12s %9s %11s %10s" % ("config", "bytes sent", "all-reduce", "all-gather", "vs dense", "step ms", "comm busy ms", "wait ms", "comm hidden", "last loss"))
for name, v in res.items():
    print("%-15s %12.0f %12.0f %10.0f %8.1fx %9.1f %12.1f %9.1f %10.1f%% %10.4f" % (name, v["bytes"], v["payload"], v["mask"], dense / v["bytes"], v["ms"], v["busy"], v["wait"], 100 * v["hidden"], v["loss"]))
for a, b in [("scape_0.1", "scape_0.1_1bit"), ("scape_0.01", "scape_0.01_1bit")]:
    same = res[a]["loss"] == res[b]["loss"]
    print("%s: coded mask all-gather %.0f B vs 1-bit %.0f B per step (%.1fx fewer); last loss %s" % (a, res[a]["mask"], res[b]["mask"], res[b]["mask"] / max(1, res[a]["mask"]), "identical" if same else "DIFFERS"))
print("(comm busy / wait ms: whole run, gradient/payload all-reduces and mask all-gathers)")
for name, target in [("scape_0.1", 6), ("scape_0.01", 80), ("scape_0.1_1bit", 6), ("scape_0.01_1bit", 35)]:
    got = dense / res[name]["bytes"]
    print("%s: %.1fx fewer bytes than dense, target >= %dx: %s" % (name, got, target, "met" if got >= target else "NOT met"))

# mask coding: the packed bitmask costs 1 bit per parameter; read the real final masks from rank 0's state file
def load_mask(name):
    f = sorted(glob.glob(os.path.join(out, name, "ckpt_*", "state_rank0.bin")))[-1]
    raw = open(f, "rb").read()
    at = raw.find(b"SCPE")
    h = np.frombuffer(raw, dtype=np.int32, count=10, offset=at)
    P, lo, hi, K = np.frombuffer(raw, dtype=np.uint64, count=4, offset=at + 40)
    have_cur = int(h[7])
    if not have_cur: sys.exit("no current mask in " + f)
    moff = at + 72 + 4 * int(P)
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8, count=(int(P) + 7) // 8, offset=moff), bitorder="little")[:int(P)]
    return bits.astype(bool)
# the slice table of train_gpt.c (gpt2_build_table): (numel, decay) in memory order; decay == sparse under SCAPE
mm = re.fullmatch(r"d(\d+)c(\d+)(?:h\d+)?(?:t(\d+))?", model)
if not mm: sys.exit("mask cost: --model %s is not of the form d<L>c<C>[h<NH>][t<maxT>]; pass such a spec" % model)
L, C, maxT, Vp = int(mm.group(1)), int(mm.group(2)), int(mm.group(3) or 1024), 50304
tab = [(Vp * C, 1), (maxT * C, 1)]
for n, dec in [(C, 0), (C, 0), (3 * C * C, 1), (3 * C, 0), (C * C, 1), (C, 0), (C, 0), (C, 0), (4 * C * C, 1), (4 * C, 0), (4 * C * C, 1), (C, 0)]:
    tab += [(n, dec)] * L
tab += [(C, 0), (C, 0)]
def H(d): return -d * math.log2(d) - (1 - d) * math.log2(1 - d)
def rice_bits(idx, n):
    """Golomb-Rice code of the gaps between set positions (gap g >= 0 costs (g >> k) + 1 + k bits), best k."""
    if len(idx) == 0: return 0
    gaps = np.diff(np.concatenate(([-1], idx))) - 1
    return min(int(np.sum((gaps >> k) + 1 + k)) for k in range(0, 24))
def ef_bits(m, n):
    if m == 0: return 0
    l = max(0, int(math.floor(math.log2(n / m))))
    return m * (l + 2)  # l low bits each + about 2 bits per element of unary high part
print("\nmask cost per parameter of the sparse tensors (norm gains and biases are always dense and cost nothing), final masks:")
print("%-11s %8s %10s %12s %12s %12s" % ("config", "density", "bitmask", "H(d) floor", "Golomb-Rice", "Elias-Fano"))
for name in ["scape_0.1", "scape_0.01"]:
    m = load_mask(name)
    if len(m) != sum(n for n, _ in tab): sys.exit("mask cost: the checkpoint holds %d parameters, the table of %s %d" % (len(m), model, sum(n for n, _ in tab)))
    n = k = rice = ef = 0
    off = 0
    for numel, dec in tab:
        if dec:  # each sparse slice coded on its own (its Rice parameter costs 5 bits)
            idx = np.flatnonzero(m[off:off + numel])
            n += numel; k += len(idx); rice += rice_bits(idx, numel) + 5; ef += ef_bits(len(idx), numel)
        off += numel
    d = k / n
    print("%-11s %8.4f %10.3f %12.4f %12.4f %12.4f   (bits/param over %d sparse params, %d set)" %
          (name, d, 1.0, H(d), rice / n, ef / n, n, k))
    mb_bitmask = len(m) / 8 * (N - 1) / N
    mb_rice = rice / 8 * (N - 1) / N
    print("%-11s mask all-gather per rank per step: bitmask %.0f B, Golomb-Rice %.0f B (%.1fx smaller)" % ("", mb_bitmask, mb_rice, mb_bitmask / max(1, mb_rice)))
PYEOF

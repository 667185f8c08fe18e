#!/usr/bin/env bash
# scripts/netem_bench.sh [--rates "unlimited 2gbit 500mbit 100mbit"] [--runs FILE] [--np N] [--steps N] [--model S]
#                        [--batch B] [--seq T] [--data DIR] [--out DIR]
# Update rules on a bandwidth-limited network, on one machine. Creates a network namespace whose loopback is the
# only interface (MTU 1500), shapes it with tc's token-bucket filter (tbf) at each --rates value, and runs N ranks
# (default 4) of ./train_gpt inside it with Open MPI over TCP only (--mca btl tcp,self: no shared memory, so every
# byte between ranks crosses the shaped loopback), once per run: by default dense AdamS, SCAPE d=0.1 and SCAPE
# d=0.01 (no density warm-up; coded masks, the default) and SCAPE d=0.01 with the 1-bit mask all-gather
# (--scape-mask-coding none); with --runs FILE the runs FILE names instead, one a line `name<TAB>trainer flags`
# (# comments, blank lines skipped; e.g. `diloco_30<TAB>--optimizer diloco --diloco-h 30`), the first the baseline.
# A local-update rule communicates once in H steps: give it --steps past H, and compare mean step times.
# Prints per rate and run the median and mean step time (steps 2..; step 1 bootstraps), the bytes counted per step,
# the speedup over the baseline (mean over mean) and the crossover rate where each run starts to beat it, and
# checks that the traffic really crossed the shaped link: the qdisc's byte counter against the trainers' own
# comm_bytes_sent (x ranks).
# What it emulates, honestly:
#  - The rate is the TOTAL over all ranks: all of them share one loopback, like N hosts behind one switch port of
#    that rate. A ring all-reduce's per-rank bandwidth is therefore about rate / N.
#  - Latency: only if the kernel has the netem qdisc (probed at start). Where it is missing (this project's CI
#    machines) the script says so and measures bandwidth only; the alpha (latency) term is left to
#    scripts/cost_model.py rather than faked with sleeps.
# Needs root (ip netns, tc), ./train_gpt and `make data`. Clean-up (namespace, qdisc, processes) runs on exit,
# Ctrl-C (SIGINT) and SIGTERM; the namespace is named scapebench_<pid of this script>.
# Not for: a test of SCAPE's correctness (test/test_dist*), or multi-host measurements (scripts/cluster/).
set -euo pipefail
caller=$PWD   # --runs FILE is read from where the script was called; --data and --out are the repository's
cd "$(dirname "$0")/.."

RATES="unlimited 2gbit 500mbit 100mbit"; NP=4; STEPS=4; MODEL=d2c64h2t64; B=2; T=32; DATA=data; OUT=out/netem_bench; RUNS=
usage="usage: $0 [--rates \"unlimited 2gbit 500mbit ...\"] [--runs FILE] [--np N] [--steps N] [--model S] [--batch B] [--seq T] [--data DIR] [--out DIR]"
while [ $# -gt 0 ]; do
    case $1 in --rates|--np|--steps|--model|--batch|--seq|--data|--out|--runs)
        [ $# -ge 2 ] || { echo "error: $1 needs a value; $usage" >&2; exit 2; } ;;
    esac
    case $1 in
        --rates) RATES=$2; shift 2 ;; --np) NP=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;; --batch) B=$2; shift 2 ;; --seq) T=$2; shift 2 ;;
        --data) DATA=$2; shift 2 ;; --out) OUT=$2; shift 2 ;; --runs) RUNS=$2; shift 2 ;;
        -h|--help) echo "$usage"; exit 0 ;;
        *) echo "error: unknown option '$1'; $usage" >&2; exit 2 ;;
    esac
done
[ "$STEPS" -ge 2 ] 2>/dev/null || { echo "error: --steps $STEPS must be an integer >= 2 (step 1 is not measured)" >&2; exit 2; }
[ "$NP" -ge 2 ] 2>/dev/null || { echo "error: --np $NP must be an integer >= 2 (one rank sends nothing)" >&2; exit 2; }
for v in "--batch $B" "--seq $T"; do
    [[ ${v#* } =~ ^[1-9][0-9]{0,5}$ ]] || { echo "error: ${v% *} '${v#* }' must be a positive integer" >&2; exit 2; }
done
[[ $MODEL =~ ^[a-z0-9]+$ ]] || { echo "error: --model '$MODEL' is no model spec (e.g. d2c64h2t64)" >&2; exit 2; }
[ -n "${RATES// /}" ] || { echo "error: --rates is empty; give e.g. --rates \"unlimited 100mbit\"" >&2; exit 2; }
if [ -e "$OUT" ] && [ ! -d "$OUT" ] || [ -L "$OUT/runs.tsv" ]; then
    echo "error: --out $OUT is no folder (or its runs.tsv is a symlink); give a folder of its own" >&2; exit 2
fi
for r in $RATES; do
    [[ $r == unlimited || $r =~ ^[0-9]+(\.[0-9]+)?(kbit|mbit|gbit)$ ]] \
        || { echo "error: --rates entry '$r' is not 'unlimited' or <number>kbit|mbit|gbit (e.g. 500mbit)" >&2; exit 2; }
done
# the runs: name and trainer flags each, the first the baseline; refused whole, with one line, before anything starts
NAMES=(adams scape_0.1 scape_0.01 scape_0.01_1bit)
FLAGS=("--optimizer adams" "--optimizer scape --density 0.1 --density-warmup 0"
       "--optimizer scape --density 0.01 --density-warmup 0"
       "--optimizer scape --density 0.01 --density-warmup 0 --scape-mask-coding none")
if [ -n "$RUNS" ]; then
    [[ $RUNS == /* ]] || RUNS=$caller/$RUNS
    { [ -f "$RUNS" ] && [ -r "$RUNS" ]; } || { echo "error: --runs $RUNS is not a readable file" >&2; exit 2; }
    NAMES=(); FLAGS=(); lineno=0
    # bench's own options, set for every run (COMMON below)
    owned=" --model --data --batch --seq --steps --out --threads --eval-every --eval-batches --sample-every --warmup --keep-ckpts --resume --init --help "
    while IFS= read -r line || [ -n "$line" ]; do
        lineno=$((lineno + 1)); line=${line%$'\r'}; where="--runs $RUNS:$lineno"
        [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
        [[ $line == *$'\t'* ]] || { echo "error: $where: expected name<TAB>trainer flags, found no tab" >&2; exit 2; }
        name=${line%%$'\t'*}; flags=${line#*$'\t'}
        [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] \
            || { echo "error: $where: run name '$name' must be letters, digits, '.', '_' or '-' (it names a folder)" >&2; exit 2; }
        for n in "${NAMES[@]}"; do
            [ "$n" != "$name" ] || { echo "error: $where: run name '$name' is used twice; names must be unique" >&2; exit 2; }
        done
        [[ $flags =~ ^[A-Za-z0-9._=,:+/\ -]*$ ]] \
            || { echo "error: $where: the flags of '$name' hold a character other than letters, digits, spaces and ._=,:+/- (no quotes, tabs or shell syntax)" >&2; exit 2; }
        for w in $flags; do
            [[ $owned == *" ${w%%=*} "* ]] \
                && { echo "error: $where: '${w%%=*}' is set by the bench for every run (use its own option, e.g. --steps N)" >&2; exit 2; }
        done
        NAMES+=("$name"); FLAGS+=("$flags")
    done < "$RUNS"
    [ ${#NAMES[@]} -gt 0 ] || { echo "error: --runs $RUNS names no run; write name<TAB>trainer flags lines" >&2; exit 2; }
fi
[ "$(id -u)" = 0 ] || { echo "error: $0 needs root for 'ip netns' and 'tc'; run it with sudo" >&2; exit 1; }
command -v tc > /dev/null && command -v ip > /dev/null || { echo "error: tc/ip not found; install the Debian package iproute2" >&2; exit 1; }
[ -x ./train_gpt ] || { echo "error: ./train_gpt not found; run 'make train_gpt' first" >&2; exit 1; }
compgen -G "$DATA/sotu/gpt2/*train*.bin" > /dev/null || { echo "error: no corpus in $DATA/sotu/gpt2; run 'make data'" >&2; exit 1; }

NS=scapebench_$$
run_pid=
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$run_pid" ] && kill -0 "$run_pid" 2> /dev/null; then
        kill -TERM "$run_pid" 2> /dev/null || true       # mpirun forwards it to its ranks
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$run_pid" 2> /dev/null || break; sleep 0.5; done
        kill -KILL "$run_pid" 2> /dev/null || true
    fi
    if ip netns list 2> /dev/null | grep -qw "$NS"; then
        # whatever still runs inside the namespace was started by this script
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            pids=$(ip netns pids "$NS" 2> /dev/null)
            [ -z "$pids" ] && break
            for p in $pids; do kill -KILL "$p" 2> /dev/null || true; done
            sleep 0.3
        done
        ip netns exec "$NS" tc qdisc del dev lo root 2> /dev/null || true
        ip netns del "$NS" 2> /dev/null || true            # takes its loopback and qdisc with it
    fi
    [ -n "$run_pid" ] && wait "$run_pid" 2> /dev/null || true
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "netem_bench: interrupted, cleaning up" >&2; exit 130' INT
trap 'echo "netem_bench: terminated, cleaning up" >&2; exit 143' TERM

# a namespace left by an earlier run of this script that was SIGKILLed (no trap runs then): its owner is gone
for old in $(ip netns list 2> /dev/null | awk '$1 ~ /^scapebench_[0-9]+$/ { print $1 }'); do
    kill -0 "${old#scapebench_}" 2> /dev/null && continue
    echo "netem_bench: removing $old, left by a killed earlier run" >&2
    for p in $(ip netns pids "$old" 2> /dev/null); do kill -KILL "$p" 2> /dev/null || true; done
    ip netns del "$old" 2> /dev/null || true
done
ip netns add "$NS" || { echo "error: 'ip netns add $NS' failed; this needs root and a kernel with network namespaces" >&2; exit 1; }
nsx() { ip netns exec "$NS" "$@"; }
nsx ip link set lo mtu 1500     # real Ethernet frames, not 64 KiB loopback ones; tbf's burst must exceed the MTU
nsx ip link set lo up
if nsx tc qdisc add dev lo root netem delay 1ms 2> /dev/null; then
    nsx tc qdisc del dev lo root
    echo "netem_bench: the kernel has the netem qdisc, but this script emulates bandwidth only (latency: see scripts/cost_model.py)" >&2
else
    echo "netem_bench: the kernel has no netem qdisc (sch_netem): latency cannot be emulated here; measuring bandwidth limits only (tbf)" >&2
fi

qdisc_bytes() { nsx tc -s qdisc show dev lo | awk '/Sent/ { print $2; exit }'; }
mkdir -p "$OUT"
rm -f "$OUT/runs.tsv"; : > "$OUT/runs.tsv"   # a file of its own, never through a link
# shellcheck disable=SC2054  # "tcp,self" is one argument
MPI=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe --bind-to none
     --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np "$NP")
COMMON=(./train_gpt --model "$MODEL" --data "$DATA" --batch "$B" --seq "$T" --steps "$STEPS" --eval-every 0
        --eval-batches 1 --sample-every 0 --threads 1 --warmup 0 --keep-ckpts 1)
for rate in $RATES; do
    nsx tc qdisc del dev lo root 2> /dev/null || true
    if [ "$rate" != unlimited ]; then
        # burst: at least 10 ms of traffic and 64 KiB; latency bounds the queue (drops would add TCP retransmits)
        burst=$(awk -v r="$rate" 'BEGIN { v = r + 0; u = r; sub(/^[0-9.]+/, "", u);
            bps = v * (u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : 1e3); b = bps / 8 / 100; if (b < 65536) b = 65536; printf "%d", b }')
        nsx tc qdisc add dev lo root tbf rate "$rate" burst "$burst" latency 500ms
    fi
    for i in "${!NAMES[@]}"; do
        name=${NAMES[$i]}; dir=$OUT/${rate}_$name
        rm -rf "$dir"
        echo "== $rate $name ($(date -u +%H:%M:%S))" >&2
        before=$( [ "$rate" = unlimited ] && echo 0 || qdisc_bytes )
        # in the background so that a signal reaches the trap at once (bash defers traps until a foreground child ends)
        # shellcheck disable=SC2086
        ip netns exec "$NS" "${MPI[@]}" "${COMMON[@]}" ${FLAGS[$i]} --out "$dir" > "$dir.out" 2>&1 &
        run_pid=$!
        wait "$run_pid" || { echo "error: the $rate $name run failed; see $dir.out:" >&2; tail -3 "$dir.out" >&2; exit 1; }
        run_pid=
        after=$( [ "$rate" = unlimited ] && echo 0 || qdisc_bytes )
        printf '%s\t%s\t%s\t%s\n' "$rate" "$name" "$dir" "$((after - before))" >> "$OUT/runs.tsv"
    done
done

/usr/bin/python3 - "$OUT/runs.tsv" "$NP" "$MODEL" <<'PYEOF'
import json, math, statistics, sys
tsv, N, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def bits_per_s(rate):
    if rate == "unlimited": return math.inf
    for u, f in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate.endswith(u): return float(rate[:-len(u)]) * f
res, order, names = {}, [], []
for line in open(tsv):
    rate, name, d, qbytes = line.rstrip("\n").split("\t")
    ev = [json.loads(l) for l in open(d + "/log.jsonl") if l.strip()]
    tr = [e for e in ev if e["event"] == "train"]
    meas = [e for e in tr if e["step"] >= 2]
    res[rate, name] = dict(med=statistics.median(e["ms"] for e in meas), mean=statistics.mean(e["ms"] for e in meas),
                           step_sent=statistics.mean(e["comm_bytes_sent"] for e in meas),
                           sent=sum(e["comm_bytes_sent"] for e in tr), q=int(qbytes))
    if rate not in order: order.append(rate)
    if name not in names: names.append(name)
base = names[0]
w = max([10] + [len(n) for n in names])
print("model %s, %d ranks over TCP on one tbf-shaped loopback (rate = total over all ranks); steps 2..; speedup = %s's"
      " mean ms / the run's:" % (model, N, base))
print("%-10s %-*s %10s %10s %12s %9s %20s" % ("rate", w, "run", "median ms", "mean ms", "MB/step/rank", "speedup",
                                           "link bytes / counted"))
ok = True
for rate in order:
    for name in names:
        v = res[rate, name]
        chk = "(not shaped)"
        if rate != "unlimited":
            ratio = v["q"] / (N * v["sent"]) if v["sent"] else float("nan")
            chk = "%.2f" % ratio
            if not ratio >= 0.9: ok = False
        print("%-10s %-*s %10.1f %10.1f %12.3f %8.2fx %20s" % (rate, w, name, v["med"], v["mean"], v["step_sent"] / 1e6,
              res[rate, base]["mean"] / v["mean"], chk))
print("(link bytes / counted: bytes the qdisc sent during the run over N x the trainer's comm_bytes_sent summed over"
      " steps; >= 1 means every counted byte crossed the shaped link, the excess is TCP/IP headers, validation and start-up)")
if not ok:
    print("WARNING: some runs moved fewer bytes over the shaped link than the trainers counted: traffic bypassed it")
for name in names:
    if all(res[r, name]["step_sent"] == 0 for r in order):
        print("WARNING: %s sent nothing in steps 2..: a local-update rule's outer step never came; raise --steps past its H"
              % name)
for name in names[1:]:
    pts = sorted(((bits_per_s(r), res[r, base]["mean"] / res[r, name]["mean"]) for r in order), key=lambda p: -p[0])
    wins = [bps for bps, s in pts if s > 1]
    if len(wins) == len(pts):
        top = "even unshaped" if math.isinf(pts[0][0]) else "up to %.3g Gbit/s" % (pts[0][0] / 1e9)
        print("%s: faster than %s at every measured rate, %s (no crossover in the measured range)" % (name, base, top))
        continue
    if not wins:
        print("%s: slower than %s at every measured rate (crossover below %.3g Mbit/s)" % (name, base, pts[-1][0] / 1e6))
        continue
    # first rate, going down, where the run wins; interpolate the crossing in log(rate) with the faster neighbour
    for (r_hi, s_hi), (r_lo, s_lo) in zip(pts, pts[1:]):
        if s_hi <= 1 < s_lo:
            if math.isinf(r_hi):
                print("%s: crossover between %.3g Gbit/s and unlimited" % (name, r_lo / 1e9)); break
            f = (1 - s_lo) / (s_hi - s_lo)
            x = math.exp(math.log(r_lo) + f * (math.log(r_hi) - math.log(r_lo)))
            print("%s: starts to beat %s below about %.3g Mbit/s (speedup %.2fx at %.3g, %.2fx at %.3g Mbit/s)" %
                  (name, base, x / 1e6, s_hi, r_hi / 1e6, s_lo, r_lo / 1e6)); break
    else:
        print("%s: speedup is not monotone in the rate: %s" % (name, ", ".join("%.3g:%.2fx" % (r / 1e6, s) for r, s in pts)))
PYEOF

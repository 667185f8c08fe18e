#!/usr/bin/env bash
# test/test_reproduce.sh FAMILY [DATA] - scripts/reproduce_cpu.sh gpt|llama in QUICK mode (tiny bpe4k model, 2 ranks,
# 2 seeds, run lengths 6 and 4 steps; AdamW, AdamS, SCAPE 0.1 and 0.01 with norms sparsified, topk-ef when the trainer
# has it, and the norms-dense SCAPE 0.01 ablation): one plot per length and the tables are produced, every number in
# them is recomputed here from the runs' log.jsonl (means, sample sd, min and max over seeds, gaps, bytes, mask
# stability, the per-length gap table and the verdict), each run got the flags of its kind, and bad settings are
# refused with one line and status 2. About 40-60 s on 2 cores.
# Not for: the quality of the comparison (that needs the full run; docs/reproduction.md).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
family=${1:-gpt}
data=${2:-data}
fails=0
ok()   { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

refuse() { # name, env assignment (or -), family
    local err rc
    if [ "$2" = - ]; then err=$(scripts/reproduce_cpu.sh "$3" 2>&1); rc=$?
    else err=$(env "$2" scripts/reproduce_cpu.sh "$3" 2>&1); rc=$?; fi
    [ $rc = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && ok "$1" || fail "$1" "expected status 2 and one line, got $rc: $err"
}
refuse reproduce_bad_family_refused - gptx
refuse reproduce_bad_length_refused LENGTHS=1 "$family"
refuse reproduce_bad_seed_refused SEEDS=x "$family"
refuse reproduce_bad_density_warmup_refused DW_FRAC=1.5 "$family"

if QUICK=1 DATA="$data" OUT="$tmp/r" scripts/reproduce_cpu.sh "$family" > "$tmp/stdout" 2> "$tmp/stderr"; then
    ok reproduce_quick_runs
else
    fail reproduce_quick_runs "status $?: $(tail -3 "$tmp/stderr")"; exit 1
fi
for n in 4 6; do
    png="$tmp/r/val_loss_steps$n.png"
    [ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$png")" -gt 10000 ] \
        && ok "reproduce_png_written_steps$n" || fail "reproduce_png_written_steps$n" "no PNG of plausible size at $png"
done
[ -s "$tmp/r/results.md" ] && grep -qF "$(sed -n 5p "$tmp/r/results.md")" "$tmp/stdout" \
    && ok reproduce_table_written_and_printed || fail reproduce_table_written_and_printed "results.md missing or not printed"

# Recompute every cell from the logs, independently of the script's own code.
expect="adamw adams scape_0.1 scape_0.01"
trainer=./train_gpt; [ "$family" = llama ] && trainer=./train_llama; trainer=${TRAINER:-$trainer}
[[ $("$trainer" --help 2>&1) == *topk-ef* ]] && expect="$expect topk_ef_0.01"
expect="$expect scape_0.01_xnorm"
/usr/bin/python3 - "$tmp/r" $expect <<'PYEOF'
import json, os, re, statistics, sys
out, expect = sys.argv[1], sys.argv[2:]
seeds, lengths = ["1", "2"], [4, 6]
fails = 0
def check(name, cond, msg):
    global fails
    print(("ok %s" % name) if cond else ("FAIL %s: %s" % (name, msg)))
    fails += 0 if cond else 1
# results.md: "### N steps" sections, each with the main table then (maybe) the mask table; then the gap table
sections, cur, gaps, mode = {}, None, {}, None
text = open(os.path.join(out, "results.md")).read()
for line in text.splitlines():
    m = re.match(r"### (\d+) steps", line)
    if m:
        cur = int(m.group(1)); sections[cur] = {"rows": {}, "stab": {}}; mode = None; continue
    if line.startswith("### Gap"):
        cur = "gap"; continue
    if line.startswith("| run"):
        mode = "stab" if "jaccard_m" in line else "rows"; continue
    if line.startswith("| ") and not line.startswith("|---"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cur == "gap": gaps[cells[0]] = cells[1:]
        elif cur is not None: sections[cur][mode][cells[0]] = cells
check("reproduce_one_section_per_length", sorted(sections) == lengths, "sections %s" % sorted(sections))
def log(L, name, seed):
    return [json.loads(l) for l in open(os.path.join(out, "steps_%d" % L, name, "seed" + seed, "log.jsonl"))]
def final_val(ev):
    return max((e for e in ev if e["event"] == "val"), key=lambda e: e["step"])["val_loss"]
def start(ev):
    return next(e for e in ev if e["event"] == "start")
gap_want = {}
for L in lengths:
    rows, stab = sections.get(L, {"rows": {}, "stab": {}})["rows"], sections.get(L, {"rows": {}, "stab": {}})["stab"]
    check("reproduce_table_has_every_run_%d" % L, sorted(rows) == sorted(expect), "rows %s, expected %s" % (sorted(rows), sorted(expect)))
    logs = {n: {sd: log(L, n, sd) for sd in seeds} for n in rows}
    ref = [final_val(logs["adams"][sd]) for sd in seeds]
    for name, c in rows.items():
        f = [final_val(logs[name][sd]) for sd in seeds]
        tr = {sd: [e for e in logs[name][sd] if e["event"] == "train"] for sd in seeds}
        s2 = {sd: [e for e in tr[sd] if e["step"] > 1] for sd in seeds}
        mean = statistics.mean(f)
        mb, sdv = re.match(r"([-\d.]+) \+- ([\d.]+)", c[1]).groups()
        lo, hi = re.match(r"\[([-\d.]+), ([-\d.]+)\]", c[2]).groups()
        want = [mean, statistics.stdev(f), min(f), max(f), mean - statistics.mean(ref),
                statistics.mean(sum(e["comm_bytes_sent"] for e in s2[sd]) / len(s2[sd]) for sd in seeds),
                statistics.mean(max(tr[sd], key=lambda e: e["step"])["comm_bytes_sent"] for sd in seeds),
                statistics.mean(sum(e["ms"] for e in s2[sd]) / len(s2[sd]) for sd in seeds)]
        got = [float(mb), float(sdv), float(lo), float(hi), float(c[3]), float(c[4]), float(c[5]), float(c[7])]
        tol = [5e-5, 5e-5, 5e-5, 5e-5, 5e-5, 0.5, 0.5, 0.05]
        bad = [(i, w, g) for i, (w, g, t) in enumerate(zip(want, got, tol)) if abs(w - g) > t]
        check("reproduce_numbers_from_logs_%s_%d" % (name, L), not bad, "column (index, from log, in table): %s" % bad)
        diffs = [a - b for a, b in zip(f, ref)]
        gap_want[(name, L)] = (mean - statistics.mean(ref), statistics.stdev(diffs))
        # each run got its kind's flags: norms sparsified except in the ablation, the density warm-up, the seed
        st = [start(logs[name][sd]) for sd in seeds]
        check("reproduce_runs_are_what_they_say_%s_%d" % (name, L),
              all(s["steps"] == L and s["seed"] == int(sd) and s["world"] == 2 for s, sd in zip(st, seeds)) and
              all(s["optimizer"] == {"adamw": "adamw", "adams": "adams"}.get(name, "topk-ef" if "topk" in name else "scape") for s in st),
              "start events %s" % st)
        # norm gains sparsified (their tensors in the mask events) in every sparse run but the ablation
        if name not in ("adamw", "adams"):
            mk_t = {t for sd in seeds for e in logs[name][sd] if e["event"] == "mask" for t in e["tensors"]}
            norms = {t for t in mk_t if re.search(r"ln|norm", t)}
            check("reproduce_norms_sparsified_as_said_%s_%d" % (name, L), bool(mk_t) and bool(norms) == (not name.endswith("xnorm")),
                  "norm tensors among the masked: %s" % sorted(norms)[:4])
        # plot data: step, mean, min, max over the seeds
        dat = [l.split() for l in open(os.path.join(out, "steps_%d" % L, name + ".val.dat"))]
        vs = [{e["step"]: e["val_loss"] for e in logs[name][sd] if e["event"] == "val"} for sd in seeds]
        steps = sorted(set(vs[0]) & set(vs[1]))
        okd = len(dat) == len(steps) and all(int(d[0]) == s and abs(float(d[1]) - statistics.mean(v[s] for v in vs)) < 2e-6
                                              and abs(float(d[2]) - min(v[s] for v in vs)) < 2e-6 and abs(float(d[3]) - max(v[s] for v in vs)) < 2e-6
                                              for d, s in zip(dat, steps))
        check("reproduce_plot_data_from_logs_%s_%d" % (name, L), okd, "plot data %s" % dat)
    warm = int(re.search(r"### %d steps \(density warm-up (\d+) steps" % L, text).group(1))
    check("reproduce_density_warmup_is_the_fraction_%d" % L, warm == int(L * 0.3 + 0.5), "warm-up %d" % warm)
    for name, c in stab.items():
        mk = [e for sd in seeds for e in logs[name][sd] if e["event"] == "mask" and e["step"] > warm]
        want = []
        for key in ("mean_jaccard_m", "mean_energy_m", "mean_jaccard_g", "mean_energy_g"):
            v = [e[key] for e in mk if isinstance(e.get(key), (int, float))]
            want.append(sum(v) / len(v) if v else None)
        got = [None if x == "n/a" else float(x) for x in c[2:6]]
        okv = int(c[1]) == len(mk) and all((w is None) == (g is None) and (w is None or abs(w - g) < 6e-5) for w, g in zip(want, got))
        check("reproduce_mask_stability_from_logs_%s_%d" % (name, L), okv, "table %s, from log %d steps %s" % (c[1:], len(mk), want))
    b = {n: float(rows[n][5]) for n in rows}
    check("reproduce_scape_sends_less_%d" % L, b["scape_0.01"] < b["scape_0.1"] < b["adams"] == b["adamw"], "bytes at target d %s" % b)
okg = sorted(gaps) == sorted(expect) and all(
    abs(float(re.match(r"([-+\d.]+) \+- ([\d.]+)", gaps[n][i]).group(1)) - gap_want[(n, L)][0]) < 5e-5 and
    abs(float(re.match(r"([-+\d.]+) \+- ([\d.]+)", gaps[n][i]).group(2)) - gap_want[(n, L)][1]) < 5e-5
    for n in gaps for i, L in enumerate(lengths))
check("reproduce_gap_by_length_from_logs", okg, "gap table %s" % gaps)
g1, g2 = gap_want[("scape_0.1", 6)][0], gap_want[("scape_0.01", 6)][0]
v1 = "met" if g1 <= 0.02 else "not met, by %.4f" % (g1 - 0.02)
v2 = "met" if g2 <= 0.04 else "not met, by %.4f" % (g2 - 0.04)
check("reproduce_verdict_from_logs", ("scape_0.1: %+.4f at 6 steps, target <= +0.02: %s" % (g1, v1)) in text and
      ("scape_0.01: %+.4f at 6 steps, target <= +0.04: %s" % (g2, v2)) in text, "verdict line in results.md")
sys.exit(1 if fails else 0)
PYEOF
[ $? = 0 ] || fails=$((fails + 1))

# A run left out of one length (ONLY=...) is listed as "not run" there and drawn without it; a run missing only some
# of its seeds is an error naming the missing log.
rm -rf "$tmp/r/steps_4/scape_0.01_xnorm"
if SKIP_TRAIN=1 QUICK=1 DATA="$data" OUT="$tmp/r" scripts/reproduce_cpu.sh "$family" > "$tmp/stdout2" 2> "$tmp/stderr2" &&
   grep -q "^| scape_0.01_xnorm | not run at this length" "$tmp/r/results.md" &&
   grep -qE "^\| scape_0.01_xnorm \| not run \| [+-]" "$tmp/r/results.md" && [ -s "$tmp/r/val_loss_steps4.png" ]; then
    ok reproduce_run_left_out_of_a_length_is_listed_not_run
else fail reproduce_run_left_out_of_a_length_is_listed_not_run "$(tail -2 "$tmp/stderr2"; grep xnorm "$tmp/r/results.md")"; fi
rm -rf "$tmp/r/steps_6/adamw/seed1"
if SKIP_TRAIN=1 QUICK=1 DATA="$data" OUT="$tmp/r" scripts/reproduce_cpu.sh "$family" > /dev/null 2> "$tmp/stderr3"; then
    fail reproduce_run_missing_a_seed_is_an_error "the tables were built without adamw's seed 1"
elif grep -q "steps_6/adamw/seed1/log.jsonl is missing" "$tmp/stderr3"; then ok reproduce_run_missing_a_seed_is_an_error
else fail reproduce_run_missing_a_seed_is_an_error "$(tail -2 "$tmp/stderr3")"; fi
# `reproduce_cpu.sh study MODE` is the gap study of issue 29 (scripts/study_gap.sh): without a mode, its usage
scripts/reproduce_cpu.sh study > /dev/null 2> "$tmp/stderr4"; st=$?
if [ $st = 2 ] && grep -q "study_gap.sh length|batch|probe|peers|tables" "$tmp/stderr4"; then ok reproduce_study_is_the_gap_study
else fail reproduce_study_is_the_gap_study "exit $st: $(head -1 "$tmp/stderr4")"; fi
# `reproduce_cpu.sh peers` (issue 33) on a tiny model, 2 ranks, 3 steps, one seed and batch: every method trains with
# its own rule, the DeMo probe's best lr becomes DeMo's, and the equal-bytes table (bytes recomputed here from each
# run's log), its plot data and the plot come out.
if [ "$family" = gpt ]; then
    if env DOC="$tmp/pd" OUT="$tmp/po" DATA="$data" MODEL_SPEC=d2c32h2t64v4096 RANKS=2 B=2 T=32 BATCH_STEPS=3 \
        PEER_BATCHES=128 SEEDS=1 EVAL_BATCHES=1 LR_128=1e-3 DEMO_PROBE_LRS="1e-3 3e-3" \
        PEER_RUNS="topk_ef_c0.05 powersgd_r2 onebit_f1 demo_k4" \
        scripts/reproduce_cpu.sh peers > "$tmp/stdout5" 2> "$tmp/stderr5"; then ok reproduce_peers_runs
    else fail reproduce_peers_runs "status $?: $(tail -3 "$tmp/stderr5")"; fi
    demo_lr=$(awk -F'\t' '$1 == "demoprobe_tb128" { split($2, a, "_lr"); if (b == "" || $4 < v) { v = $4; b = a[2] } }
        END { printf "%.6g", b }' "$tmp/pd/runs.tsv")
    for pair in adams:adams scape_0.1:scape scape_0.01:scape topk_ef_c0.05:topk-ef powersgd_r2:powersgd \
                onebit_f1:onebit-adam demo_k4:demo; do
        r=${pair%%:*}; want=${pair#*:}; lr=0.001; [ "$want" = demo ] && lr=$demo_lr
        got=$(/usr/bin/python3 -c '
import json, sys
log, md, run = sys.argv[1:4]
ev = [json.loads(l) for l in open(log)]
sent = [e["comm_bytes_sent"] for e in ev if e["event"] == "train" and e["step"] >= 2]
row = [l for l in open(md) if l.startswith("| %s |" % run)]
print(ev[0]["optimizer"], "%.6g" % ev[0]["lr"], bool(row) and round(sum(sent) / len(sent)) == float(row[-1].split("|")[2]))
' "$tmp/po/tb128_steps3/$r/seed1/log.jsonl" "$tmp/pd/results.md" "$r" 2>&1)
        [ "$got" = "$want $lr True" ] && ok "reproduce_peers_run_$r" \
            || fail "reproduce_peers_run_$r" "optimizer, lr, bytes equal to the table's: want '$want $lr True', got '$got'"
    done
    n=$(find "$tmp/pd" -name 'peers_tb128_*.dat' | wc -l)
    if [ "$n" = 6 ] && [ "$(head -c 4 "$tmp/pd/peers.png" 2> /dev/null | od -An -tx1 | tr -d ' \n')" = 89504e47 ] \
        && grep -q '^## DeMo lr probe' "$tmp/pd/results.md"; then ok reproduce_peers_table_plot_data_and_plot
    else fail reproduce_peers_table_plot_data_and_plot "$n plot data files: $(ls "$tmp/pd")"; fi
fi
exit $((fails > 0))

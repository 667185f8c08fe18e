#!/usr/bin/env bash
# test/test_reproduce.sh FAMILY [DATA] - scripts/reproduce_cpu.sh gpt|llama in QUICK mode (tiny model, 2 ranks, 6 steps;
# AdamW, AdamS, SCAPE 0.1 and 0.01, and topk-ef when the trainer has it): the plot and the table are produced, every
# number in the table is recomputed here from the runs' log.jsonl, and a bad family is refused with one line and
# status 2. About 15-30 s on 2 cores.
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

err=$(scripts/reproduce_cpu.sh gptx 2>&1); rc=$?
[ $rc = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && ok reproduce_bad_family_refused \
    || fail reproduce_bad_family_refused "expected status 2 and one line, got $rc: $err"

if QUICK=1 DATA="$data" OUT="$tmp/r" scripts/reproduce_cpu.sh "$family" > "$tmp/stdout" 2> "$tmp/stderr"; then
    ok reproduce_quick_runs
else
    fail reproduce_quick_runs "status $?: $(tail -3 "$tmp/stderr")"; exit 1
fi
[ "$(head -c 8 "$tmp/r/val_loss.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$tmp/r/val_loss.png")" -gt 10000 ] \
    && ok reproduce_png_written || fail reproduce_png_written "no PNG of plausible size at $tmp/r/val_loss.png"
[ -s "$tmp/r/results.md" ] && grep -qF "$(sed -n 3p "$tmp/r/results.md")" "$tmp/stdout" \
    && ok reproduce_table_written_and_printed || fail reproduce_table_written_and_printed "results.md missing or not printed"

# Recompute every cell from the logs, independently of the script's own code.
expect="adamw adams scape_0.1 scape_0.01"
trainer=./train_gpt; [ "$family" = llama ] && trainer=./train_llama; trainer=${TRAINER:-$trainer}
[[ $("$trainer" --help 2>&1) == *topk-ef* ]] && expect="$expect topk_ef_0.01"
/usr/bin/python3 - "$tmp/r" $expect <<'PYEOF'
import json, os, re, sys
out, expect = sys.argv[1], sys.argv[2:]
rows, stab, table = {}, {}, 0
for line in open(os.path.join(out, "results.md")):
    if line.startswith("| run"):
        table += 1
    elif line.startswith("| "):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        (rows if table == 1 else stab)[cells[0]] = cells
fails = 0
def check(name, cond, msg):
    global fails
    print(("ok %s" % name) if cond else ("FAIL %s: %s" % (name, msg)))
    fails += 0 if cond else 1
check("reproduce_table_has_every_run", sorted(rows) == sorted(expect), "rows %s, expected %s" % (sorted(rows), sorted(expect)))
logs = {}
for name in rows:
    ev = [json.loads(l) for l in open(os.path.join(out, name, "log.jsonl"))]
    logs[name] = ev
def final_val(ev):
    v = [e for e in ev if e["event"] == "val"]
    return max(v, key=lambda e: e["step"])["val_loss"]
def steps2(ev):
    return [e for e in ev if e["event"] == "train" and e["step"] > 1]
ref = final_val(logs["adams"])
for name, c in rows.items():
    ev = logs[name]
    tr = [e for e in ev if e["event"] == "train"]
    s2 = steps2(ev)
    want = [final_val(ev), final_val(ev) - ref, sum(e["comm_bytes_sent"] for e in s2) / len(s2),
            max(tr, key=lambda e: e["step"])["comm_bytes_sent"], None,
            sum(e["ms"] for e in s2) / len(s2), sum(e["ms"] for e in tr) / 1e3]
    got = [float(c[1]), float(c[2]), float(c[3]), float(c[4]), None, float(c[6]), float(c[7])]
    tol = [5e-5, 5e-5, 0.5, 0.5, None, 0.05, 0.05]
    bad = [(i, w, g) for i, (w, g, t) in enumerate(zip(want, got, tol)) if t is not None and abs(w - g) > t]
    check("reproduce_numbers_from_logs_" + name, not bad, "column (index, from log, in table): %s" % bad)
    dense_last = max((e for e in logs["adams"] if e["event"] == "train"), key=lambda e: e["step"])["comm_bytes_sent"]
    ratio = float(re.match(r"([\d.]+)x", c[5]).group(1))
    check("reproduce_ratio_from_logs_" + name, abs(ratio - dense_last / want[3]) < 0.051, "%s vs %.3f" % (c[5], dense_last / want[3]))
    dat = [l.split() for l in open(os.path.join(out, name + ".val.dat"))]
    vals = sorted((e["step"], e["val_loss"]) for e in ev if e["event"] == "val")
    check("reproduce_plot_data_from_logs_" + name, len(dat) == len(vals) and all(int(d[0]) == s and abs(float(d[1]) - v) < 2e-6 for d, (s, v) in zip(dat, vals)),
          "plot data %s vs log %s" % (dat, vals))
# the mask-stability table, present when the trainer logs "mask" events: its means recomputed after the warm-up
warm = int(re.search(r"step > (\d+)", open(os.path.join(out, "results.md")).read()).group(1)) if stab else 0
for name, c in stab.items():
    mk = [e for e in logs[name] if e["event"] == "mask" and e["step"] > warm]
    want = []
    for key in ("mean_jaccard_m", "mean_energy_m", "mean_jaccard_g", "mean_energy_g"):
        v = [e[key] for e in mk if isinstance(e.get(key), (int, float))]
        want.append(sum(v) / len(v) if v else None)
    got = [None if x == "n/a" else float(x) for x in c[2:6]]
    okv = int(c[1]) == len(mk) and all((w is None) == (g is None) and (w is None or abs(w - g) < 6e-5) for w, g in zip(want, got))
    check("reproduce_mask_stability_from_logs_" + name, okv, "table %s, from log %d steps %s" % (c[1:], len(mk), want))
b = {n: float(rows[n][4]) for n in rows}
check("reproduce_scape_sends_less", b["scape_0.01"] < b["scape_0.1"] < b["adams"] == b["adamw"], "bytes at target d %s" % b)
sys.exit(1 if fails else 0)
PYEOF
[ $? = 0 ] || fails=$((fails + 1))
exit $((fails > 0))

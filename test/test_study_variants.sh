#!/usr/bin/env bash
# test/test_study_variants.sh [DATA] - scripts/study_variants.sh (issue 31) on a tiny bpe4k model (2 ranks, 12 steps,
# 2 seeds): every run's line in the tsv is recomputed here from its log.jsonl (final validation loss, mean bytes,
# bytes at the target density, energy_m), the displacements are positive and below AdamS's for faithful SCAPE 0.01,
# the variants send faithful SCAPE's payload (bytes at d within 2%: only the coded mask sizes differ), the table's
# gaps are the paired means of the tsv, a second run trains nothing, and an unknown run name is refused with one
# line. About 30 s on 2 cores.
# Not for: the variants' quality (docs/reproduction.md 6.5).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
data=${1:-data}
fails=0
ok()   { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DATA=$data OUT=$tmp/out DOC=$tmp/doc STEPS=12 RANKS=2 MODEL_SPEC=d2c32h2t64v4096 T=64 B=2 EVAL_BATCHES=2 SEEDS="1 2"
runs="adams scape_0.01 scape_0.01_catchup_a4 scape_0.01_tensornu_a4 scape_0.01_rdecay_0.5"
if RUNS="$runs" scripts/study_variants.sh run > "$tmp/stdout" 2> "$tmp/stderr"; then ok study_variants_runs
else fail study_variants_runs "status $?: $(tail -3 "$tmp/stderr")"; exit 1; fi

/usr/bin/python3 - "$tmp" <<'EOF' && ok study_variants_tsv_and_table_match_the_logs || fail study_variants_tsv_and_table_match_the_logs "see above"
import json, sys, math
tmp = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(tmp + "/doc/variants.tsv")]
head, rows = rows[0], rows[1:]
bad = []
if len(rows) != 10: bad.append("%d rows, expected 10 (5 runs x 2 seeds)" % len(rows))
by = {}
for r in rows:
    steps, run, seed = int(r[0]), r[1], int(r[2])
    by[(run, seed)] = r
    val, sent, target, energy = None, [], [], []
    for line in open("%s/out/steps_12/%s/seed%d/log.jsonl" % (tmp, run, seed)):
        o = json.loads(line)
        if o["event"] == "val" and o["step"] == 12: val = o["val_loss"]
        if o["event"] == "train" and o["step"] >= 2:
            sent.append(o["comm_bytes_sent"])
            if o["step"] > 4: target.append(o["comm_bytes_sent"])  # density warm-up round(0.3 * 12) = 4
        if o["event"] == "mask" and o["step"] > 4 and "mean_energy_m" in o: energy.append(o["mean_energy_m"])
    if abs(float(r[3]) - val) > 1e-6: bad.append("%s %d: val %s, log %.6f" % (run, seed, r[3], val))
    if abs(float(r[5]) - sum(sent) / len(sent)) > 0.5: bad.append("%s %d: bytes %s" % (run, seed, r[5]))
    if abs(float(r[6]) - sum(target) / len(target)) > 0.5: bad.append("%s %d: bytes at d %s" % (run, seed, r[6]))
    want_e = "%.4f" % (sum(energy) / len(energy)) if energy else "nan"
    if r[9] != want_e: bad.append("%s %d: energy_m %s, logs %s" % (run, seed, r[9], want_e))
    if not (float(r[7]) > 0 and float(r[8]) > 0): bad.append("%s %d: displacement not positive" % (run, seed))
for s in (1, 2):
    f, a = by[("scape_0.01", s)], by[("adams", s)]
    if not float(f[8]) < float(a[8]): bad.append("seed %d: SCAPE 0.01 moved the blocks as far as AdamS" % s)
    for v in ("scape_0.01_catchup_a4", "scape_0.01_tensornu_a4", "scape_0.01_rdecay_0.5"):
        x = float(by[(v, s)][6]) / float(f[6])
        if not 0.98 < x < 1.02: bad.append("seed %d: %s sends %.3fx faithful's bytes at d" % (s, v, x))
table = open(tmp + "/doc/variants.md").read()
for v in ("scape_0.01", "scape_0.01_catchup_a4", "scape_0.01_tensornu_a4", "scape_0.01_rdecay_0.5"):
    g = [float(by[(v, s)][3]) - float(by[("adams", s)][3]) for s in (1, 2)]
    m = sum(g) / 2
    sd = math.sqrt(sum((x - m) ** 2 for x in g))
    cell = "%+.3f +- %.3f [%+.3f, %+.3f]" % (m, sd, min(g), max(g))
    if "| %s | " % v not in table or cell not in table: bad.append("%s: the table lacks its gap %s" % (v, cell))
dat = [l.split("\t")[0] for l in open(tmp + "/doc/variants_gap_steps12.dat") if not l.startswith("#")]
if sorted(dat) != sorted(["scape_0.01", "scape_0.01_catchup_a4", "scape_0.01_tensornu_a4", "scape_0.01_rdecay_0.5"]):
    bad.append("plot data rows %s" % dat)
if bad:
    print("\n".join(bad[:8]))
    sys.exit(1)
EOF

before=$(wc -l < "$tmp/doc/variants.tsv")
RUNS="$runs" scripts/study_variants.sh run > /dev/null 2> "$tmp/stderr2"
[ "$(wc -l < "$tmp/doc/variants.tsv")" = "$before" ] && [ "$(grep -c 'in .* already' "$tmp/stderr2")" = 10 ] \
    && ok study_variants_skips_finished_runs || fail study_variants_skips_finished_runs "$(head -3 "$tmp/stderr2")"
err=$(RUNS=scape_0.01_bogus scripts/study_variants.sh run 2>&1); rc=$?
[ $rc = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && ok study_variants_unknown_run_refused \
    || fail study_variants_unknown_run_refused "status $rc: $err"
exit $((fails > 0))

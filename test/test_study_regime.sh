#!/usr/bin/env bash
# test/test_study_regime.sh [DATA] - scripts/study_regime.sh (issue 42) on a tiny model (2 ranks, a 12-step probe,
# lengths 6, 12 and 18, 2 seeds): the trainer is built from the pinned commit and every line names it; each run's line
# is recomputed here from its log.jsonl (final and lowest validation loss, mean bytes of steps 2.., mean train loss of
# the last 5%), but AdamS at the probe's length and lr, seed 1, whose line is the probe's run's; every run after the probe used the probe's lr, the SCAPE lr controls half and twice it, and past the
# probe's length AdamS ran again at half and twice it; the table's gaps are the tsv's paired means, and the long
# length's rules are set against the best of its AdamS lrs; a second `run` trains nothing; a run killed (SIGKILL) after a checkpoint resumes
# to the line of a run never interrupted; bad sizes, modes and commits are refused with one line; and the committed
# docs/study/regime.md is what the tables script makes of the committed runs.tsv. About 60 s on 2 cores.
# Not for: the study's findings (docs/reproduction.md).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
data=${1:-data}
fails=0
ok()   { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DATA=$data OUT=$tmp/out DOC=$tmp/doc RANKS=2 B=2 T=32 SPEC=d2c32h2t64v4096 PROBE_STEPS=12 LENGTHS="6 12 18"
export EVAL_BATCHES=2 EVAL_POINTS=3 CKPT_EVERY=4 SEEDS="1 2"
# the trainer of a pinned commit, built by the script (HEAD here); where this tree is no git checkout (make
# test-sanitize's copy of it, ignored inside the repository) the tree's own trainer, recorded by its hash
if git ls-files --error-unmatch scripts/study_regime.sh > /dev/null 2>&1; then
    export STUDY_COMMIT=HEAD; head=$(git rev-parse HEAD | cut -c1-12)
else
    export STUDY_TRAINER=$PWD/train_gpt; head=local-$(sha1sum < train_gpt | cut -c1-12)
fi
if ONLY="adams adamw scape_0.1 scape_0.01 topk_ef_c0.008" scripts/study_regime.sh run small > "$tmp/stdout" 2> "$tmp/stderr"
then ok study_regime_runs; else fail study_regime_runs "status $?: $(tail -3 "$tmp/stderr")"; exit 1; fi

/usr/bin/python3 - "$tmp" "$head" <<'EOF' && ok study_regime_lines_match_the_logs || fail study_regime_lines_match_the_logs "see above"
import json, sys
tmp, head = sys.argv[1:3]
rows = [l.rstrip("\n").split("\t") for l in open(tmp + "/doc/runs.tsv")]
hdr, rows = rows[0], rows[1:]
bad = []
if hdr != "point run seed val_loss seconds bytes_per_step train_tail val_best commit".split():
    bad.append("header %s" % hdr)
spec = "d2c32h2t64v4096"
probe = ["regime_probe_%s_steps12 adams_lr%s 1" % (spec, lr) for lr in ("5e-4", "1e-3", "2e-3")]
want = set(probe)
for L in (6, 12, 18):
    for s in (1, 2):
        for r in ("adams", "scape_0.1", "scape_0.01", "topk_ef_c0.008"):
            want.add("regime_%s_steps%d %s %d" % (spec, L, r, s))
got = {" ".join(r[:3]): r for r in rows}
vals = {lr: float(got["regime_probe_%s_steps12 adams_lr%s 1" % (spec, lr)][3]) for lr in ("5e-4", "1e-3", "2e-3")}
lr = min(vals, key=vals.get)
x = float(lr)
for ctl in ("%g" % (x / 2), "%g" % (x * 2)):
    for d in ("0.1", "0.01"):
        want.add("regime_%s_steps12 scape_%s_lr%s 1" % (spec, d, ctl))
    want.add("regime_%s_steps18 adams_lr%s 1" % (spec, ctl))
want.add("regime_%s_steps18 adamw 1" % spec)
if set(got) != want or len(rows) != len(want):
    bad.append("lines %s, expected %s" % (sorted(set(got) ^ want), len(want)))
# AdamS at the probe's length, seed 1, the chosen lr is the probe's run of that lr: its line copied, never trained
copied = "regime_%s_steps12 adams 1" % spec
if copied in got and got[copied][2:] != got["regime_probe_%s_steps12 adams_lr%s 1" % (spec, lr)][2:]:
    bad.append("%s: %s is not the probe's line of lr %s" % (copied, got[copied], lr))
import os
if os.path.exists("%s/out/regime_%s_steps12/adams/seed1" % (tmp, spec)):
    bad.append("%s was trained again (the probe's run has the same flags, seed and trainer)" % copied)
for key, r in got.items():
    point, run, seed = key.split()
    steps = int(point.rsplit("steps", 1)[1])
    if key == copied: continue
    train, val, start = {}, {}, None
    for line in open("%s/out/%s/%s/seed%s/log.jsonl" % (tmp, point, run, seed)):
        o = json.loads(line)
        if o["event"] in ("start", "resume"): start = o
        if o["event"] == "train": train[o["step"]] = o
        if o["event"] == "val": val[o["step"]] = o["val_loss"]
    sent = [train[s]["comm_bytes_sent"] for s in range(2, steps + 1)]
    tail = [train[s]["train_loss"] for s in range(steps - max(1, steps // 20) + 1, steps + 1)]
    if abs(float(r[3]) - val[steps]) > 1e-6: bad.append("%s: val %s, log %.6f" % (key, r[3], val[steps]))
    if abs(float(r[5]) - sum(sent) / len(sent)) > 0.5: bad.append("%s: bytes %s" % (key, r[5]))
    if abs(float(r[6]) - sum(tail) / len(tail)) > 1e-6: bad.append("%s: train tail %s" % (key, r[6]))
    if abs(float(r[7]) - min(val.values())) > 1e-6: bad.append("%s: val_best %s" % (key, r[7]))
    if r[8] != head: bad.append("%s: commit %s, expected %s" % (key, r[8], head))
    want_lr = float(run.split("_lr")[1]) if "_lr" in run else x
    if abs(start["lr"] - want_lr) > 1e-6 * want_lr: bad.append("%s: trained at lr %g, expected %g" % (key, start["lr"], want_lr))
    if start["steps"] != steps or start["world"] != 2: bad.append("%s: %s steps on %s ranks" % (key, start["steps"], start["world"]))
    if run == "topk_ef_c0.008" and start["optimizer"] != "topk-ef": bad.append("%s: optimizer %s" % (key, start["optimizer"]))
if bad:
    print("\n".join(bad[:10]))
    sys.exit(1)
EOF

scripts/study_regime.sh tables > /dev/null 2> "$tmp/tables.err" || fail study_regime_tables "$(cat "$tmp/tables.err")"
/usr/bin/python3 - "$tmp" <<'EOF' && ok study_regime_table_gaps_are_the_paired_means || fail study_regime_table_gaps_are_the_paired_means "see above"
import sys
tmp = sys.argv[1]
rows = {tuple(l.split("\t")[:3]): l.split("\t") for l in list(open(tmp + "/doc/runs.tsv"))[1:]}
table = open(tmp + "/doc/regime.md").read()
spec, bad = "d2c32h2t64v4096", []
for L in (6, 12, 18):
    line = [l for l in table.splitlines() if l.startswith("| %d | " % L)]
    if len(line) < 1: bad.append("no row for %d steps" % L); continue
    for r in ("scape_0.1", "scape_0.01", "topk_ef_c0.008"):
        p = "regime_%s_steps%d" % (spec, L)
        d = [float(rows[(p, r, s)][3]) - float(rows[(p, "adams", s)][3]) for s in ("1", "2")]
        m, sd = sum(d) / 2, abs(d[0] - d[1]) / 2 ** 0.5
        c = "%+.3f +- %.3f [%+.3f, %+.3f] (2)" % (m, sd, min(d), max(d))
        if c not in line[0]: bad.append("%d steps, %s: %s not in %s" % (L, r, c, line[0]))
if "d2c32h2t64v4096" not in table: bad.append("no section for the model")
p = "regime_%s_steps18" % spec
alt = {r: float(v[3]) for (q, r, s), v in rows.items() if q == p and s == "1" and r.startswith("adams")}
best = min(alt.values())
for r in ("adams_lr", "scape_0.1", "scape_0.01", "topk_ef_c0.008"):
    for (q, rr, s), v in rows.items():
        if q == p and s == "1" and (rr == r or (r == "adams_lr" and rr.startswith(r))):
            c = "| %.4f | %+.3f |" % (float(v[3]), float(v[3]) - best)
            if c not in table.split("AdamS at other lrs (seed 1, 18 steps)")[-1]:
                bad.append("18 steps, %s: %s not set against the best AdamS %.4f" % (rr, c, best))
if len(alt) != 3: bad.append("18 steps: AdamS at %d lrs, expected 3" % len(alt))
import os
dat = sorted(f for f in os.listdir(tmp + "/doc") if f.startswith("regime_gap_"))
if dat != ["regime_gap_%s_%s.dat" % (spec, r) for r in ("adamw", "scape_0.01", "scape_0.1", "topk_ef_c0.008")]:
    bad.append("plot data %s" % dat)
if bad:
    print("\n".join(bad))
    sys.exit(1)
EOF

before=$(wc -l < "$tmp/doc/runs.tsv")
ONLY="adams adamw scape_0.1 scape_0.01 topk_ef_c0.008" scripts/study_regime.sh run small > /dev/null 2> "$tmp/stderr2"
[ "$(wc -l < "$tmp/doc/runs.tsv")" = "$before" ] && grep -q "^== 0 runs trained" "$tmp/stderr2" \
    && ok study_regime_second_run_trains_nothing || fail study_regime_second_run_trains_nothing "$(tail -2 "$tmp/stderr2")"

# a run killed after its first checkpoint resumes to the uninterrupted run's line
mkdir -p "$tmp/k1/doc" "$tmp/k2/doc" "$tmp/k1/out" "$tmp/k2/out"
grep -e '^point' -e '^regime_probe' "$tmp/doc/runs.tsv" | tee "$tmp/k1/doc/runs.tsv" > "$tmp/k2/doc/runs.tsv"
for d in "$tmp"/out/build-*; do [ -d "$d" ] && cp -r "$d" "$tmp/k1/out/" && cp -r "$d" "$tmp/k2/out/"; done # no rebuild
export LENGTHS=400 SEEDS=1 ONLY=adams CKPT_EVERY=50
OUT=$tmp/k1/out DOC=$tmp/k1/doc scripts/study_regime.sh run small > /dev/null 2>&1 || fail study_regime_resume "the uninterrupted run failed"
( OUT=$tmp/k2/out DOC=$tmp/k2/doc setsid scripts/study_regime.sh run small > /dev/null 2>&1 & echo $! > "$tmp/pid"; wait ) 2> /dev/null &
log=$tmp/k2/out/regime_${SPEC}_steps400/adams/seed1/log.jsonl
for _ in $(seq 600); do grep -q '"event": "ckpt"' "$log" 2> /dev/null && break; sleep 0.02; done
kill -KILL -- -"$(cat "$tmp/pid")" 2> /dev/null; wait
if [ "$(grep -c steps400 "$tmp/k2/doc/runs.tsv")" != 0 ]; then
    fail study_regime_resume "the run finished before it could be killed"
else
    OUT=$tmp/k2/out DOC=$tmp/k2/doc scripts/study_regime.sh run small > /dev/null 2> "$tmp/k2.err"
    a=$(grep steps400 "$tmp/k1/doc/runs.tsv" | cut -f1-4,6-9); b=$(grep steps400 "$tmp/k2/doc/runs.tsv" | cut -f1-4,6-9)
    if grep -q "from step" "$tmp/k2.err" && [ -n "$a" ] && [ "$a" = "$b" ]; then ok study_regime_killed_run_resumes_to_the_same_line
    else fail study_regime_killed_run_resumes_to_the_same_line "uninterrupted '$a', resumed '$b' ($(head -1 "$tmp/k2.err"))"; fi
fi
unset LENGTHS SEEDS ONLY

err=$(scripts/study_regime.sh run large 2>&1); rc=$?
[ $rc = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && ok study_regime_unknown_size_refused || fail study_regime_unknown_size_refused "status $rc: $err"
err=$(scripts/study_regime.sh runn 2>&1); rc=$?
[ $rc = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && ok study_regime_unknown_mode_refused || fail study_regime_unknown_mode_refused "status $rc: $err"
err=$(OUT=$tmp/bad STUDY_TRAINER= STUDY_COMMIT=0123456789abcdef scripts/study_regime.sh run small 2>&1); rc=$?
[ $rc = 1 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && [[ $err == *STUDY_COMMIT* ]] \
    && ok study_regime_unknown_commit_refused || fail study_regime_unknown_commit_refused "status $rc: $err"
exec 8> "$tmp/out/.lock"; flock 8
err=$(scripts/study_regime.sh run small 2>&1); rc=$?
exec 8>&-
[ $rc = 1 ] && [[ $err == *"another study_regime.sh"* ]] && ok study_regime_one_at_a_time || fail study_regime_one_at_a_time "status $rc: $err"

# the committed tables are the committed runs.tsv's (HEAD's files: a study running in this tree appends lines that
# its next commit brings with regenerated tables; outside a git checkout, the files as they are)
mkdir -p "$tmp/committed"
if git cat-file -e HEAD:docs/study/runs.tsv 2> /dev/null; then
    git show HEAD:docs/study/runs.tsv > "$tmp/committed/runs.tsv"; git show HEAD:docs/study/regime.md > "$tmp/committed/want.md"
else
    cp docs/study/runs.tsv "$tmp/committed/runs.tsv"; cp docs/study/regime.md "$tmp/committed/want.md"
fi
if /usr/bin/python3 scripts/study_regime_tables.py "$tmp/committed/runs.tsv" "$tmp/committed" > /dev/null \
    && cmp -s "$tmp/committed/regime.md" "$tmp/committed/want.md"; then ok study_regime_committed_tables_match_runs_tsv
else fail study_regime_committed_tables_match_runs_tsv "docs/study/regime.md differs from scripts/study_regime.sh tables' output"; fi
exit $((fails > 0))

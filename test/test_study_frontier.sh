#!/usr/bin/env bash
# test/test_study_frontier.sh [DATA] - scripts/study_frontier.sh (issue 45) on a tiny model (2 ranks, lengths 8 and
# 16, seeds 1-2 at 8 steps and 1 at 16) with six rules' settings, DiLoCo and SparseLoCo's shared mask among them, and
# the trainer of this tree: every run name maps to its rule's flags and a bad one is refused with one line; the plan
# trains every setting at the first length (seeds 1-3) before the second; a line the regime study already wrote is
# not trained again; each run's line is recomputed from its log.jsonl, ran at the regime probe's lr, and shows its
# rule in the bytes it sent (DiLoCo's all-reduce every H steps, SparseLoCo's shared mask all-reduced, 1-bit Adam dense
# until its freeze); a second `run` trains nothing; a DiLoCo run killed (SIGKILL) between outer steps resumes to the
# line of a run never interrupted; the tables hold the tsv's means, paired gaps and fronts, interpolate the bytes to
# AdamS +0.02 / +0.05 on a made-up runs.tsv, and render missing seeds, settings and lengths; the committed
# docs/study/frontier.md is what the tables script makes of the committed runs.tsv. About 35 s of CPU (100 s
# wall on 2 cores busy with other jobs).
# Not for: the study's findings (docs/study/frontier.md).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
data=${1:-data}
fails=0
ok()   { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
one_line() { [ "$(printf '%s\n' "$1" | wc -l)" = 1 ] && [[ $1 == error:* ]]; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spec=d2c32h2t64v4096
export DATA=$data OUT=$tmp/out DOC=$tmp/doc RANKS=2 B=2 T=32 SPEC=$spec PROBE_STEPS=12 LENGTHS="8 16"
export EVAL_BATCHES=2 EVAL_POINTS=2 CKPT_EVERY=4
export SETTINGS="adams adamw scape_0.1 onebit_adam_f0.3 diloco_h4 sparseloco_shared_h4"
# this tree's trainer (built by make; building a pinned commit is test_study_regime.sh's, through the same
# scripts/study_lib.sh), recorded by its hash
export STUDY_TRAINER=$PWD/train_gpt
head=local-$(sha1sum < train_gpt | cut -c1-12)

# the flags of every rule's names (the regime study's names as before the mapping moved into study_lib.sh)
bad=""
while IFS='|' read -r name steps want; do
    got=$(scripts/study_frontier.sh flags "$name" "$steps" 2>&1)
    [ "$got" = "$want" ] || bad="$bad; $name at $steps: '$got', expected '$want'"
done <<'EOF'
adams|1000|--optimizer adams
adamw|1000|--optimizer adamw
adams_lr5e-4|1000|--optimizer adams
scape_0.1|1000|--optimizer scape --density 0.1 --density-start 1 --density-warmup 100 --scape-exclude-norms 0
scape_0.003|10000|--optimizer scape --density 0.003 --density-start 1 --density-warmup 1000 --scape-exclude-norms 0
scape_0.01_catchup_a4|1000|--optimizer scape --density 0.01 --density-start 1 --density-warmup 100 --scape-exclude-norms 0 --scape-variant catchup --scape-variant-cap 4
scape_0.1_lr0.002|10000|--optimizer scape --density 0.1 --density-start 1 --density-warmup 1000 --scape-exclude-norms 0
topk_ef_c0.0008|1000|--optimizer topk-ef --density 0.0008 --scape-exclude-norms 0
powersgd_r16|10000|--optimizer powersgd --powersgd-rank 16 --powersgd-start 1000
onebit_adam_f0.15|1000|--optimizer onebit-adam --onebit-freeze 150
onebit_adam_f0.05|8|--optimizer onebit-adam --onebit-freeze 1
demo_k16|1000|--optimizer demo --demo-topk 16
diloco_h100|1000|--optimizer diloco --diloco-h 100
sparseloco_h30|1000|--optimizer sparseloco --sparseloco-h 30
sparseloco_shared_h10|1000|--optimizer sparseloco --sparseloco-h 10 --sparseloco-mask shared
EOF
[ -z "$bad" ] && ok study_frontier_run_names_map_to_their_flags || fail study_frontier_run_names_map_to_their_flags "${bad#; }"
bad=""
for name in foo scape_0 scape_1.5 scape_0.1_catchup_ax topk_ef_0.01 powersgd_r0 onebit_adam_f1 demo_k diloco_h4.5 \
            sparseloco_own_h4 adams_lrx; do
    err=$(scripts/study_frontier.sh flags "$name" 2>&1); rc=$?
    { [ $rc = 2 ] && one_line "$err"; } || bad="$bad; $name: status $rc, '$err'"
done
err=$(SETTINGS="adams scape_x" scripts/study_frontier.sh plan 2>&1); rc=$?
{ [ $rc = 2 ] && one_line "$err" && [[ $err == *SETTINGS* ]]; } || bad="$bad; SETTINGS: status $rc, '$err'"
err=$(ONLY="adams demo_kx" scripts/study_frontier.sh run 2>&1); rc=$?
{ [ $rc = 2 ] && one_line "$err" && [[ $err == *ONLY* ]]; } || bad="$bad; ONLY: status $rc, '$err'"
err=$(ONLY="demo_k4" scripts/study_frontier.sh run 2>&1); rc=$?
{ [ $rc = 2 ] && one_line "$err" && [[ $err == *SETTINGS* ]]; } || bad="$bad; ONLY off SETTINGS: status $rc, '$err'"
[ -z "$bad" ] && ok study_frontier_unknown_names_refused_with_one_line || fail study_frontier_unknown_names_refused_with_one_line "${bad#; }"

# no probe in runs.tsv and no LR: nothing runs
err=$(scripts/study_frontier.sh run 2>&1); rc=$?
[ $rc = 1 ] && one_line "$err" && [[ $err == *probe* ]] && ! ls "$OUT"/regime_* > /dev/null 2>&1 \
    && ok study_frontier_refuses_without_the_probes_lr || fail study_frontier_refuses_without_the_probes_lr "status $rc: $err"

# the regime study's lines: its probe (2e-3 lowest) and one run of this study's plan, from its older commit
probe=regime_probe_${spec}_steps12 p8=regime_${spec}_steps8 p16=regime_${spec}_steps16
printf '%s\tadams_lr%s\t1\t%s\t5\t600000\t%s\t%s\t7753401fc518\n' "$probe" 5e-4 8.9 8.9 8.9 "$probe" 1e-3 8.5 8.5 8.5 \
    "$probe" 2e-3 8.1 8.1 8.1 >> "$DOC/runs.tsv"
shared_line=$(printf '%s\tscape_0.1\t1\t8.123456\t3\t90000\t8.2\t8.123456\t7753401fc518' "$p8")
echo "$shared_line" >> "$DOC/runs.tsv"
err=$(LR=1e-3 scripts/study_frontier.sh run 2>&1); rc=$?
[ $rc = 2 ] && one_line "$err" && [[ $err == *probe* ]] && ok study_frontier_lr_must_be_the_probes \
    || fail study_frontier_lr_must_be_the_probes "status $rc: $err"

# the plan: every setting at 8 steps for seeds 1-3, then 16 steps seed 1, then seeds 2-3; the shared line done
scripts/study_frontier.sh plan > "$tmp/plan" 2>&1
want=$(for s in 1 2 3; do for r in $SETTINGS; do echo "$p8 $r $s 8 2e-3"; done; done
       for s in 1 2 3; do for r in $SETTINGS; do echo "$p16 $r $s 16 2e-3"; done; done)
got=$(awk 'NF >= 6 && ($1 == "done" || $1 == "todo") { print $2, $3, $4, $5, $6 }' "$tmp/plan")
if [ "$got" = "$want" ] && [ "$(grep -c '^done' "$tmp/plan")" = 1 ] && grep -q "^done .* scape_0.1 .* 1 " "$tmp/plan"
then ok study_frontier_plan_order; else fail study_frontier_plan_order "$(diff <(echo "$want") <(echo "$got") | head -5)"; fi

if SEEDS=1 scripts/study_frontier.sh run > "$tmp/stdout" 2> "$tmp/stderr" && LENGTHS=8 SEEDS=2 scripts/study_frontier.sh run \
    > /dev/null 2>> "$tmp/stderr"
then ok study_frontier_runs; else fail study_frontier_runs "status $?: $(tail -3 "$tmp/stderr")"; exit 1; fi
order=$(sed -n 's/^== \(regime_[^ ]*\) \([^ ]*\) seed \([0-9]*\):.*/\1 \2 \3/p' "$tmp/stderr")
want=$(for s in 1; do for r in $SETTINGS; do [ "$r" = scape_0.1 ] || echo "$p8 $r $s"; done; done
       for r in $SETTINGS; do echo "$p16 $r 1"; done; for r in $SETTINGS; do echo "$p8 $r 2"; done)
[ "$order" = "$want" ] && [ "$(grep -cF "$shared_line" "$DOC/runs.tsv")" = 1 ] && [ ! -e "$OUT/$p8/scape_0.1/seed1" ] \
    && ok study_frontier_trains_in_plan_order_and_keeps_the_regimes_line \
    || fail study_frontier_trains_in_plan_order_and_keeps_the_regimes_line "$(diff <(echo "$want") <(echo "$order") | head -5)"

/usr/bin/python3 - "$tmp" "$head" "$SETTINGS" <<'EOF' && ok study_frontier_lines_match_the_logs_and_rules || fail study_frontier_lines_match_the_logs_and_rules "see above"
import json, sys
tmp, head, settings = sys.argv[1], sys.argv[2], sys.argv[3].split()
rows = [l.rstrip("\n").split("\t") for l in open(tmp + "/doc/runs.tsv")][1:]
spec, bad = "d2c32h2t64v4096", []
got = {" ".join(r[:3]): r for r in rows if not r[0].startswith("regime_probe")}
want = {"regime_%s_steps%d %s %d" % (spec, L, r, s) for r in settings for L, s in ((8, 1), (8, 2), (16, 1))}
if set(got) != want or len(rows) != len(want) + 3:
    bad.append("lines %s" % sorted(set(got) ^ want))
for key, r in got.items():
    point, run, seed = key.split()
    if r[8] == "7753401fc518":
        continue  # the regime study's line
    steps = int(point.rsplit("steps", 1)[1])
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
    if abs(start["lr"] - 2e-3) > 1e-9: bad.append("%s: lr %g, expected the probe's 2e-3" % (key, start["lr"]))
    if start["steps"] != steps or start["world"] != 2: bad.append("%s: %s steps on %s ranks" % (key, start["steps"], start["world"]))
    opt = {"adams": "adams", "adamw": "adamw", "scape_0.1": "scape", "onebit_adam_f0.3": "onebit-adam",
           "diloco_h4": "diloco", "sparseloco_shared_h4": "sparseloco"}[run]
    if start["optimizer"] != opt: bad.append("%s: optimizer %s, expected %s" % (key, start["optimizer"], opt))
    ar = [s for s in range(1, steps + 1) if train[s]["comm_allreduce_bytes"] > 0]
    ag = [s for s in range(1, steps + 1) if train[s]["comm_allgather_bytes"] > 0]
    if run in ("diloco_h4", "sparseloco_shared_h4") and ar != list(range(4, steps + 1, 4)):
        bad.append("%s: all-reduces at steps %s, expected every 4th" % (key, ar))
    if run == "sparseloco_shared_h4" and ag != ar:
        bad.append("%s: mask all-gathers at steps %s, expected the outer steps %s" % (key, ag, ar))
    if run == "onebit_adam_f0.3":
        freeze = int(steps * 0.3 + 0.5)
        if ar != list(range(1, freeze + 1)) or ag != list(range(freeze + 1, steps + 1)):
            bad.append("%s: dense steps %s, compressed %s; expected the freeze after step %d" % (key, ar, ag, freeze))
if bad:
    print("\n".join(bad[:10]))
    sys.exit(1)
EOF

before=$(wc -l < "$DOC/runs.tsv")
LENGTHS=8 SEEDS="1 2" scripts/study_frontier.sh run > /dev/null 2> "$tmp/stderr2"
[ "$(wc -l < "$DOC/runs.tsv")" = "$before" ] && grep -q "^== 0 runs trained" "$tmp/stderr2" \
    && ok study_frontier_second_run_trains_nothing || fail study_frontier_second_run_trains_nothing "$(tail -2 "$tmp/stderr2")"

scripts/study_frontier.sh tables > /dev/null 2> "$tmp/tables.err" || fail study_frontier_tables "$(cat "$tmp/tables.err")"
/usr/bin/python3 - "$tmp" <<'EOF' && ok study_frontier_tables_hold_the_tsvs_means_gaps_and_fronts || fail study_frontier_tables_hold_the_tsvs_means_gaps_and_fronts "see above"
import math, os, sys
tmp = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(tmp + "/doc/runs.tsv")][1:]
md = open(tmp + "/doc/frontier.md").read()
spec, bad = "d2c32h2t64v4096", []
for L in (8, 16):
    sec = md.split("## %d steps" % L)[1].split("\n## ")[0]
    p = "regime_%s_steps%d" % (spec, L)
    by = {}
    for r in rows:
        if r[0] == p: by.setdefault(r[1], {})[r[2]] = r
    pts = {}
    for run, seeds in by.items():
        v = [float(x[3]) for x in seeds.values()]
        m = sum(v) / len(v)
        b = sum(float(x[5]) for x in seeds.values()) / len(seeds)
        pts[run] = (b, m)
        cell = "%.4f +- %.4f (%d)" % (m, math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)), len(v)) if len(v) > 1 \
            else "%.4f (1)" % v[0]
        line = [l for l in sec.splitlines() if l.startswith("| %s | " % run)]
        if not line: bad.append("%d steps: no row for %s" % (L, run)); continue
        if cell not in line[0] or format(int(round(b)), ",") not in line[0]:
            bad.append("%d steps, %s: %s / bytes %.0f not in %s" % (L, run, cell, b, line[0]))
        for base in ("adams", "adamw"):
            if run == base: continue
            common = sorted(set(seeds) & set(by.get(base, {})))
            d = [float(seeds[s][3]) - float(by[base][s][3]) for s in common]
            if len(d) == 2:
                g = "%+.3f +- %.3f [%+.3f, %+.3f] (2)" % (sum(d) / 2, abs(d[0] - d[1]) / 2 ** 0.5, min(d), max(d))
            else:
                g = "%+.3f (1)" % d[0]
            if g not in line[0]: bad.append("%d steps, %s: gap to %s %s not in %s" % (L, run, base, g, line[0]))
        # every setting is alone in its rule here, so on its front
        if not line[0].endswith("| yes |"): bad.append("%d steps, %s: not on its front: %s" % (L, run, line[0]))
    if "| DiLoCo | " not in sec or "| SparseLoCo (shared mask) | " not in sec:
        bad.append("%d steps: no bytes-to-AdamS row of DiLoCo or SparseLoCo" % L)
    if "| AdamW (dense) | dense | dense |" not in sec: bad.append("%d steps: AdamW not 'dense'" % L)
if "7753401fc518" not in md: bad.append("the regime line's commit is not named")
if "lr 0.002 (the regime study's AdamS probe" not in md: bad.append("the probe's lr is not stated")
if "2 seeds each" not in md.split("## 8 steps")[1] or "1 seed each" not in md.split("## 16 steps")[1]:
    bad.append("the seed counts (2 at 8 steps, 1 at 16) not shown")
import shutil
if shutil.which("gnuplot") and not os.path.getsize(tmp + "/doc/frontier.png"): bad.append("no frontier.png")
if bad:
    print("\n".join(bad))
    sys.exit(1)
EOF

# the tables on a made-up runs.tsv: a dominated setting, the interpolated bytes (SCAPE: 1,000 B at 5.4 and 10,000 B
# at 5.1 against AdamS 5.1, so +0.02 at 10^(3 + 0.28/0.3) B), the cheapest setting already within reach, none within
# reach, seeds and settings missing, a length without AdamS and one without runs; and no runs at all
mkdir -p "$tmp/syn/e"
{ printf 'point\trun\tseed\tval_loss\tseconds\tbytes_per_step\ttrain_tail\tval_best\tcommit\n'
  while read -r p r s v b; do printf 'regime_%s\t%s\t%s\t%s\t10\t%s\t5\t5\tc1\n' "$p" "$r" "$s" "$v" "$b"; done <<'EOF'
d2c32h2t64v4096_steps8 adams 1 5.0 100000
d2c32h2t64v4096_steps8 adams 2 5.2 100000
d2c32h2t64v4096_steps8 adamw 1 4.9 100000
d2c32h2t64v4096_steps8 scape_0.1 1 5.1 10000
d2c32h2t64v4096_steps8 scape_0.03 1 5.5 3000
d2c32h2t64v4096_steps8 scape_0.01 1 5.4 1000
d2c32h2t64v4096_steps8 diloco_h10 1 5.05 10000
d2c32h2t64v4096_steps8 diloco_h30 2 5.11 3333
d2c32h2t64v4096_steps8 sparseloco_shared_h4 1 6.0 500
d2c32h2t64v4096_steps8 adams_lr2e-3 1 6.0 100000
d2c32h2t64v4096_steps16 scape_0.1 1 4.1 10000
EOF
} > "$tmp/syn/runs.tsv"
head -1 "$tmp/syn/runs.tsv" > "$tmp/syn/e/runs.tsv"
tables() { /usr/bin/python3 scripts/study_frontier_tables.py "$1/runs.tsv" "$1" --spec $spec --lengths "8 16 32" > /dev/null; }
if tables "$tmp/syn" 2> "$tmp/syn.err" && tables "$tmp/syn/e" 2>> "$tmp/syn.err"; then
    md=$(cat "$tmp/syn/frontier.md") bad=""
    for want in "| SCAPE | scape_0.01 1,000: 5.4000 (1), scape_0.1 10,000: 5.1000 (1) | scape_0.03 |" \
                "| SCAPE | 8,577 (8.58%) | 6,813 (6.81%) | +0.000 (scape_0.1, 1) |" \
                "| DiLoCo | <= 3,333 (3.33%) | <= 3,333 (3.33%) | -0.050 (diloco_h10, 1) |" \
                "| SparseLoCo (shared mask) | not reached | not reached |" "| AdamW (dense) | dense | dense |" \
                "| diloco_h30 | DiLoCo | 3,333 | 3.33% | 5.1100 (1) | -0.090 (1) |  |" \
                "| adams | AdamS (dense) | 100,000 | 100.00% | 5.1000 +- 0.1414 (2) | base | +0.100 (1) |" \
                "left out (other lrs or names): adams_lr2e-3" "no AdamS line at this length yet" \
                "## 32 steps (0.2 tokens per parameter, 0.0 epochs)"$'\n\n'"No runs at this length yet."; do
        [[ $md == *"$want"* ]] || bad="$bad; no '$want'"
    done
    [ ! -e "$tmp/syn/e/frontier.png" ] && grep -q "No runs at this length yet" "$tmp/syn/e/frontier.md" || bad="$bad; the empty tsv's tables"
    [ -z "$bad" ] && ok study_frontier_tables_fronts_and_bytes_to_adams || fail study_frontier_tables_fronts_and_bytes_to_adams "${bad#; }"
else fail study_frontier_tables_fronts_and_bytes_to_adams "$(cat "$tmp/syn.err")"; fi

# a DiLoCo run killed after its first checkpoint (step 50: mid outer step) resumes to the uninterrupted run's line
mkdir -p "$tmp/k1/doc" "$tmp/k2/doc"
grep -e '^point' -e '^regime_probe' "$DOC/runs.tsv" | tee "$tmp/k1/doc/runs.tsv" > "$tmp/k2/doc/runs.tsv"
export LENGTHS=400 SEEDS=1 SETTINGS=diloco_h4 CKPT_EVERY=50
OUT=$tmp/k1/out DOC=$tmp/k1/doc scripts/study_frontier.sh run > /dev/null 2>&1 || fail study_frontier_resume "the uninterrupted run failed"
( OUT=$tmp/k2/out DOC=$tmp/k2/doc setsid scripts/study_frontier.sh run > /dev/null 2>&1 & echo $! > "$tmp/pid"; wait ) 2> /dev/null &
log=$tmp/k2/out/regime_${spec}_steps400/diloco_h4/seed1/log.jsonl
for _ in $(seq 600); do grep -q '"event": "ckpt"' "$log" 2> /dev/null && break; sleep 0.02; done
kill -KILL -- -"$(cat "$tmp/pid")" 2> /dev/null; wait
if [ "$(grep -c steps400 "$tmp/k2/doc/runs.tsv")" != 0 ]; then
    fail study_frontier_killed_run_resumes_to_the_same_line "the run finished before it could be killed"
else
    OUT=$tmp/k2/out DOC=$tmp/k2/doc scripts/study_frontier.sh run > /dev/null 2> "$tmp/k2.err"
    a=$(grep steps400 "$tmp/k1/doc/runs.tsv" | cut -f1-4,6-9); b=$(grep steps400 "$tmp/k2/doc/runs.tsv" | cut -f1-4,6-9)
    if grep -q "from step" "$tmp/k2.err" && [ -n "$a" ] && [ "$a" = "$b" ]; then ok study_frontier_killed_run_resumes_to_the_same_line
    else fail study_frontier_killed_run_resumes_to_the_same_line "uninterrupted '$a', resumed '$b' ($(head -1 "$tmp/k2.err"))"; fi
fi
unset LENGTHS SEEDS
export SETTINGS="adams diloco_h4"

err=$(scripts/study_frontier.sh runn 2>&1); rc=$?
[ $rc = 2 ] && one_line "$err" && ok study_frontier_unknown_mode_refused || fail study_frontier_unknown_mode_refused "status $rc: $err"
exec 8> "$OUT/.lock"; flock 8
err=$(scripts/study_frontier.sh run 2>&1); rc=$?
exec 8>&-
[ $rc = 1 ] && [[ $err == *"another study_frontier.sh"* ]] && ok study_frontier_one_at_a_time || fail study_frontier_one_at_a_time "status $rc: $err"
# the pinned trainer: an unknown commit is refused, one before DiLoCo and SparseLoCo too, and the default has them
if git ls-files --error-unmatch scripts/study_frontier.sh > /dev/null 2>&1; then
    err=$(OUT=$tmp/bad STUDY_TRAINER= FRONTIER_COMMIT=0123456789abcdef scripts/study_frontier.sh run 2>&1); rc=$?
    [ $rc = 1 ] && one_line "$err" && [[ $err == *FRONTIER_COMMIT* ]] || fail study_frontier_pinned_commit "status $rc: $err"
    err=$(OUT=$tmp/bad STUDY_TRAINER= FRONTIER_COMMIT=7753401fc518 scripts/study_frontier.sh run 2>&1); rc=$?
    [ $rc = 1 ] && one_line "$err" && [[ $err == *019dfd9* ]] || fail study_frontier_pinned_commit "status $rc: $err"
    pin=$(sed -n 's/^FRONTIER_COMMIT=\${FRONTIER_COMMIT:-\([0-9a-f]*\)}$/\1/p' scripts/study_frontier.sh)
    git merge-base --is-ancestor 019dfd9 "$pin" 2> /dev/null && ok study_frontier_pinned_commit \
        || fail study_frontier_pinned_commit "the default FRONTIER_COMMIT '$pin' lacks DiLoCo and SparseLoCo (019dfd9)"
fi

# the committed tables are the committed runs.tsv's (HEAD's files; outside a git checkout, the files as they are)
mkdir -p "$tmp/committed"
if git cat-file -e HEAD:docs/study/frontier.md 2> /dev/null; then
    git show HEAD:docs/study/runs.tsv > "$tmp/committed/runs.tsv"; git show HEAD:docs/study/frontier.md > "$tmp/committed/want.md"
else
    cp docs/study/runs.tsv "$tmp/committed/runs.tsv"; cp docs/study/frontier.md "$tmp/committed/want.md"
fi
if /usr/bin/python3 scripts/study_frontier_tables.py "$tmp/committed/runs.tsv" "$tmp/committed" > /dev/null \
    && cmp -s "$tmp/committed/frontier.md" "$tmp/committed/want.md"; then ok study_frontier_committed_tables_match_runs_tsv
else fail study_frontier_committed_tables_match_runs_tsv "docs/study/frontier.md differs from scripts/study_frontier.sh tables' output"; fi
exit $((fails > 0))

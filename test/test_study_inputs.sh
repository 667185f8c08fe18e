#!/usr/bin/env bash
# test/test_study_inputs.sh - scripts/study_regime.sh and scripts/study_frontier.sh refuse bad input with one line
# and write nothing half: a setting of the wrong form in the environment (each variable), ONLY and SEEDS that would
# train nothing (in plan too, whose lines they restrict as run's), a size given to the frontier, a runs.tsv with a short, non-numeric, headerless, non-UTF-8 or misnamed regime line, or none at all
# for `tables`, a symlinked runs.tsv or a file as OUT for `run`; `tables` replaces a symlink at an output instead of
# writing through it, and a write that fails (a file-size limit standing in for a full disk) leaves the old tables as
# they were, no temporary file behind and no traceback; study_regime_tables.py --line / --header given bad arguments
# or files (a missing log, a seconds file that is not numbers, STEPS not a number) stop with one line. Trains nothing
# (a trainer that is /bin/false, data that are not there); about 10 s. Run from another folder, as a user may.
# Not for: the studies' runs and tables (test/test_study_regime.sh, test/test_study_frontier.sh).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd) || exit 1
fails=0
ok()   { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
regime=$repo/scripts/study_regime.sh frontier=$repo/scripts/study_frontier.sh
export STUDY_TRAINER=/bin/false DATA=$tmp/no-data OUT=$tmp/out DOC=$tmp/doc
header=$(printf 'point\trun\tseed\tval_loss\tseconds\tbytes_per_step\ttrain_tail\tval_best\tcommit')
p1000=regime_d4c64h4t64v4096_steps1000
fresh() { # a DOC holding a runs.tsv of two AdamS seeds and SCAPE 0.1 at 1,000 steps, and another study's line
    rm -rf "$DOC"; mkdir -p "$DOC"
    { echo "$header"; printf 'tb2048\tadams\t1\t5.1\t3\t4\n'
      printf '%s\tadams\t%s\t5.%s\t60\t100000\t5.2\t5.%s\tabc123\n' "$p1000" 1 30 30 "$p1000" 2 32 32
      printf '%s\tscape_0.1\t%s\t5.%s\t60\t10000\t5.2\t5.%s\tabc123\n' "$p1000" 1 40 40 "$p1000" 2 41 41; } > "$DOC/runs.tsv"
}
# refused ENV... -- SCRIPT ARGS...: status 1 or 2, exactly one line on stdout and stderr together, starting error:,
# holding WANT, no traceback
refused() {
    local name=$1 want=$2 out rc
    shift 2
    out=$(env "$@" 2>&1); rc=$?
    if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && [[ $out == error:* && $out == *"$want"* ]]; then return 0; fi
    bad="$bad; $name: status $rc, '$(printf '%s' "$out" | head -3 | tr '\n' '|')'"
}

# the environment: each variable of the wrong form, named in the one line
fresh
bad=""
for case in "RANKS=abc|RANKS" "RANKS=0|RANKS" "B=-1|B" "T=0|T" "EVAL_BATCHES=-1|EVAL_BATCHES" "EVAL_POINTS=0|EVAL_POINTS" \
            "EVAL_POINTS=5000|EVAL_POINTS" "PROBE_STEPS=abc|PROBE_STEPS" "CKPT_EVERY=x|CKPT_EVERY" "PROBE_LRS=abc|PROBE_LRS" \
            "PROBE_LRS=0|PROBE_LRS" "SPEC=foo|SPEC" "LENGTHS=abc|LENGTHS" "LENGTHS= |LENGTHS"; do
    refused "regime plan $case" "${case#*|}" "${case%|*}" "$regime" plan small
    refused "frontier plan $case" "${case#*|}" "${case%|*}" "$frontier" plan
done
for case in "ONLY=nonexistent|ONLY" "ONLY=demo_k5|ONLY" "ONLY= |ONLY" "SEEDS=abc|SEEDS" "SEEDS=4|SEEDS"; do
    refused "regime run $case" "${case#*|}" "${case%|*}" "$regime" run small
    refused "frontier run $case" "${case#*|}" "${case%|*}" LR=1e-3 "$frontier" run
done
refused "frontier run SETTINGS= " SETTINGS "SETTINGS= " "$frontier" run
# plan checks ONLY and SEEDS as run does, and a size given to the frontier is named
refused "regime plan SEEDS=x" SEEDS SEEDS=x "$regime" plan small
refused "frontier plan ONLY=typo" ONLY ONLY=scape_O.1 "$frontier" plan
refused "frontier plan small" "takes no size" "$frontier" plan small
refused "regime run OUT a file" OUT OUT="$DOC/runs.tsv" "$regime" run small
[ "$(wc -l < "$DOC/runs.tsv")" = 6 ] && [ ! -e "$OUT" ] || bad="$bad; a refusal wrote something"
[ -z "$bad" ] && ok study_settings_of_the_wrong_form_refused_with_one_line || fail study_settings_of_the_wrong_form_refused_with_one_line "${bad#; }"

# plan shows what run would train: ONLY and SEEDS restrict its lines
fresh
f_lines=$(LR=1e-3 ONLY=scape_0.1 SEEDS=2 "$frontier" plan 2> /dev/null | grep -E '^(done|todo) ')
r_lines=$(ONLY=adams_lr1e-3 "$regime" plan small 2> /dev/null | grep -E '^(done|todo) ')
if [ "$(printf '%s\n' "$f_lines" | grep -c .)" = 2 ] && [ -z "$(printf '%s\n' "$f_lines" | awk '$3 != "scape_0.1" || $4 != 2')" ] \
   && [ "$(printf '%s\n' "$r_lines" | awk '{ print $3 }')" = adams_lr1e-3 ]; then
    ok study_plan_follows_only_and_seeds
else fail study_plan_follows_only_and_seeds "frontier '$(printf '%s' "$f_lines" | tr '\n' '|')', regime '$(printf '%s' "$r_lines" | tr '\n' '|')'"; fi

# runs.tsv: every bad regime line refused naming FILE:LINE, in plan, run and tables; other studies' lines as they are
bad=""
while IFS='|' read -r name line want; do
    fresh
    printf "$line\n" >> "$DOC/runs.tsv"
    for cmd in "$regime plan" "$frontier plan" "$regime tables" "$frontier tables" "$regime run"; do
        # shellcheck disable=SC2086
        refused "$name: $cmd" "$want" DOC="$DOC" $cmd
    done
    [ ! -e "$DOC/regime.md" ] && [ ! -e "$DOC/frontier.md" ] || bad="$bad; $name: tables written"
done <<EOF
short line|$p1000\tadams\t3\t5.3|runs.tsv:7: 4 fields
seed no number|$p1000\tadams\tx\t5.3\t1\t2\t3\t4\tc|runs.tsv:7: seed 'x'
loss no number|$p1000\tadams\t3\tnan\t1\t2\t3\t4\tc|runs.tsv:7: val_loss 'nan'
point misnamed|regime_foo_steps1000\tadams\t3\t5.3\t1\t2\t3\t4\tc|runs.tsv:7: point 'regime_foo_steps1000'
lr suffix no number|$p1000\tscape_0.1_lrx\t1\t5.3\t1\t2\t3\t4\tc|runs.tsv:7: run 'scape_0.1_lrx'
not UTF-8|\xff\xfe|runs.tsv:7: not UTF-8
EOF
fresh; sed -i 1d "$DOC/runs.tsv"
refused "no header" "runs.tsv:1: no header" DOC="$DOC" "$regime" tables
rm -rf "$DOC"
refused "tables without runs.tsv" "runs.tsv not found" "$regime" tables
refused "frontier tables without runs.tsv" "runs.tsv not found" "$frontier" tables
[ ! -e "$DOC" ] || bad="$bad; tables without runs.tsv created $DOC"
fresh; mv "$DOC/runs.tsv" "$tmp/real.tsv"; ln -s "$tmp/real.tsv" "$DOC/runs.tsv"
refused "run with a symlinked runs.tsv" "symlink" "$regime" run small
[ -z "$bad" ] && ok study_bad_runs_tsv_refused_naming_its_line || fail study_bad_runs_tsv_refused_naming_its_line "${bad#; }"

# a plan without runs.tsv lists every run as to do and writes nothing
rm -rf "$DOC"
out=$("$frontier" plan 2> "$tmp/err"); rc=$?
[ $rc = 0 ] && [ ! -e "$DOC" ] && ! grep -q '^done' <<< "$out" && grep -q "does not exist yet" "$tmp/err" \
    && ok study_plan_without_runs_tsv_writes_nothing || fail study_plan_without_runs_tsv_writes_nothing "status $rc, $(head -2 "$tmp/err")"

# tables: a symlink at an output is replaced, its target untouched; a repeated line is noted, the later one counting
fresh
printf '%s\tscape_0.1\t2\t5.52\t60\t10000\t5.2\t5.52\tabc123\n' "$p1000" >> "$DOC/runs.tsv"
echo precious > "$tmp/target"
ln -s "$tmp/target" "$DOC/regime.md"; ln -s "$tmp/target" "$DOC/frontier.md"
"$regime" tables > /dev/null 2> "$tmp/err1" && "$frontier" tables > /dev/null 2> "$tmp/err2"; rc=$?
if [ $rc = 0 ] && [ "$(cat "$tmp/target")" = precious ] && [ ! -L "$DOC/regime.md" ] && [ ! -L "$DOC/frontier.md" ] \
   && grep -q "| +0.150 +- 0.071 \[+0.100, +0.200\] (2) |" "$DOC/regime.md" && grep -q "runs.tsv:7 repeats the run of line 6" "$tmp/err1" \
   && [ "$(stat -c %a "$DOC/regime.md")" = "$(stat -c %a "$DOC/runs.tsv")" ]; then
    ok study_tables_replace_a_symlink_not_write_through_it
else fail study_tables_replace_a_symlink_not_write_through_it "status $rc, target '$(cat "$tmp/target")', $(ls -l "$DOC" | tr '\n' ' ')"; fi

# a write that fails (file-size limit: EFBIG, as a full disk's ENOSPC) leaves the old tables, no temporary file
sed -i 7d "$DOC/runs.tsv"; "$regime" tables > /dev/null 2>&1
cp "$DOC/regime.md" "$tmp/regime.md.before"; ls "$DOC" > "$tmp/ls.before"
printf '%s\ttopk_ef_c0.008\t1\t5.5\t60\t9000\t5.2\t5.5\tabc123\n' "$p1000" >> "$DOC/runs.tsv"
out=$(ulimit -f 1; "$regime" tables 2>&1 > /dev/null); rc=$?
if [ $rc = 1 ] && [[ $out == "error: writing the tables into $DOC:"* ]] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] \
   && cmp -s "$DOC/regime.md" "$tmp/regime.md.before" && ls "$DOC" | cmp -s - "$tmp/ls.before" \
   && [ -z "$(find "$DOC" -name '.*.tmp')" ]; then ok study_tables_failed_write_leaves_the_old_tables
else fail study_tables_failed_write_leaves_the_old_tables "status $rc: $out; $(ls -A "$DOC" | tr '\n' ' ')"; fi
# study_regime_tables.py --line / --header given bad arguments or files (study_lib.sh writes each finished run's line
# with it): one line naming the argument or file and the fix, status 1, no traceback, nothing on stdout
tables=$repo/scripts/study_regime_tables.py
{ echo '{"event": "val", "step": 0, "val_loss": 9.0}'
  for s in 1 2 3; do echo '{"event": "train", "step": '$s', "train_loss": 8.'$s', "comm_bytes_sent": 100}'; done
  echo '[1]'; echo '{"event": "train"}'; echo '{"event": "val", "step": 3, "val_loss": 7.5}'; } > "$tmp/log.jsonl"
echo 5 > "$tmp/secs"; printf '5\nx\n' > "$tmp/secs.bad"
line_bad=()
check_line() { # WANT ARGS...: the message starts with WANT
    local want=$1; shift
    out=$(/usr/bin/python3 "$tables" "$@" 2> "$tmp/line.err"); rc=$?
    err=$(cat "$tmp/line.err")
    if [ $rc != 1 ] || [ -n "$out" ] || [ "$(wc -l < "$tmp/line.err")" != 1 ] || [[ $err != "$want"* ]]; then
        line_bad+=("[$*] status $rc, stdout '$out', stderr '$(head -c 300 "$tmp/line.err")'"); fi
}
check_line "error: --line LOG $tmp/no-log: No such file" --line "$tmp/no-log" "$tmp/secs" p r 1 3 c
check_line "error: --line LOG $tmp: Is a directory" --line "$tmp" "$tmp/secs" p r 1 3 c
check_line "error: --line SECONDS $tmp/no-secs: No such file" --line "$tmp/log.jsonl" "$tmp/no-secs" p r 1 3 c
check_line "error: --line SECONDS $tmp/secs.bad: not whole numbers" --line "$tmp/log.jsonl" "$tmp/secs.bad" p r 1 3 c
check_line "error: --line STEPS 'three' is not a positive integer" --line "$tmp/log.jsonl" "$tmp/secs" p r 1 three c
check_line "error: --line STEPS '0' is not a positive integer" --line "$tmp/log.jsonl" "$tmp/secs" p r 1 0 c
check_line "error: $tmp/log.jsonl: no validation at step 4" --line "$tmp/log.jsonl" "$tmp/secs" p r 1 4 c
check_line "error: --line takes 7 arguments" --line "$tmp/log.jsonl" "$tmp/secs" p r 1
check_line "error: --line takes 7 arguments" --line "$tmp/log.jsonl" "$tmp/secs" p r 1 3 c extra
check_line "error: --header takes no arguments" --header extra
good=$(/usr/bin/python3 "$tables" --line "$tmp/log.jsonl" "$tmp/secs" p r 1 3 c 2>&1)
[ "$good" = "$(printf 'p\tr\t1\t7.500000\t5\t100\t8.300000\t7.500000\tc')" ] || line_bad+=("good log: '$good'")
if [ ${#line_bad[@]} = 0 ]; then ok study_tables_line_refuses_bad_arguments_with_one_line
else fail study_tables_line_refuses_bad_arguments_with_one_line "$(printf '%s; ' "${line_bad[@]}")"; fi

exit $((fails > 0))

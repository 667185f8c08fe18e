# shellcheck shell=bash disable=SC2154   # runs_tsv, OUT, DATA, SPEC, ... are the sourcing script's
# scripts/study_lib.sh - sourced by the long studies that train one resumable run per line of docs/study/runs.tsv
# (scripts/study_regime.sh, scripts/study_frontier.sh): the run name -> trainer flags mapping of every update rule,
# the trainer of a pinned commit, one run trained and its line appended, the plan's printer and the loop that trains
# a plan's missing lines one at a time under a lock per OUT.
# The sourcing script sets: OUT, DATA, SPEC, RANKS, B, T, TB, EVAL_BATCHES, EVAL_POINTS, CKPT_EVERY and runs_tsv
# (the shared docs/study/runs.tsv), and, for build_trainer, STUDY_TRAINER where it runs a binary as it is.
# Not for: the undertrained studies (scripts/study_gap.sh, scripts/study_variants.sh keep their own).

# Number forms a run name may carry: a decimal (0.01, 1e-3) and a positive integer.
study_num='^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$'
study_int='^[1-9][0-9]*$'

# study_flags RUN STEPS: the update rule's trainer flags of a run's name, for a run of STEPS steps; an optional
# _lr<x> suffix (the lr the plan trains it at) leaves the flags as they are. DW, the density warm-up, is 10% of
# STEPS (rounded): SCAPE's density goes from 1 to d geometrically over it and PowerSGD all-reduces whole gradients
# during it. Names:
#   adams, adamw                 dense AdamS / AdamW
#   scape_<d>                    SCAPE at density d (norms and biases sparsified)
#   scape_<d>_catchup_a<c>       its catchup variant, cap c on the entering step's factor
#   topk_ef_c<d>                 topk-ef at constant density d
#   powersgd_r<R>                PowerSGD at rank R
#   onebit_adam_f<x>             1-bit Adam whose variance freezes after x (0 < x < 1) of the steps (at least 1 step)
#   demo_k<K>                    DeMo sending K DCT coefficients per block and rank
#   diloco_h<H>                  DiLoCo, H inner steps per outer step
#   sparseloco_h<H>              SparseLoCo with each rank's own mask (the paper's)
#   sparseloco_shared_h<H>       SparseLoCo with the shared mask of SCAPE's owners
# Errors: any other name, or a number out of its range, prints one line on stderr and returns 2.
study_flags() {
    local name=$1 steps=$2 run=${1%_lr*} dw x
    if [ "$run" != "$name" ] && ! [[ ${name##*_lr} =~ $study_num ]]; then
        echo "error: run '$name': its _lr suffix is no number (e.g. adams_lr5e-4)" >&2; return 2
    fi
    dw=$(awk -v s="$steps" 'BEGIN { printf "%d", s * 0.1 + 0.5 }')
    local sparse="--density-start 1 --density-warmup $dw --scape-exclude-norms 0"
    case $run in
        adams) echo "--optimizer adams"; return ;;
        adamw) echo "--optimizer adamw"; return ;;
        scape_*_catchup_a*) x=${run#scape_}; x=${x%%_catchup_a*}
            if [[ $x =~ $study_num ]] && study_unit "$x" && [[ ${run##*_catchup_a} =~ $study_num ]]; then
                echo "--optimizer scape --density $x $sparse --scape-variant catchup --scape-variant-cap ${run##*_catchup_a}"
                return
            fi ;;
        scape_*) x=${run#scape_}
            if [[ $x =~ $study_num ]] && study_unit "$x"; then echo "--optimizer scape --density $x $sparse"; return; fi ;;
        topk_ef_c*) x=${run#topk_ef_c}
            if [[ $x =~ $study_num ]] && study_unit "$x"; then
                echo "--optimizer topk-ef --density $x --scape-exclude-norms 0"; return
            fi ;;
        powersgd_r*) x=${run#powersgd_r}
            if [[ $x =~ $study_int ]]; then echo "--optimizer powersgd --powersgd-rank $x --powersgd-start $dw"; return; fi ;;
        onebit_adam_f*) x=${run#onebit_adam_f}
            if [[ $x =~ $study_num ]] && study_unit "$x" && [ "$(awk -v x="$x" 'BEGIN { print (x < 1) }')" = 1 ]; then
                echo "--optimizer onebit-adam --onebit-freeze $(awk -v s="$steps" -v x="$x" \
                    'BEGIN { f = int(s * x + 0.5); printf "%d", f < 1 ? 1 : f }')"; return
            fi ;;
        demo_k*) x=${run#demo_k}
            if [[ $x =~ $study_int ]]; then echo "--optimizer demo --demo-topk $x"; return; fi ;;
        diloco_h*) x=${run#diloco_h}
            if [[ $x =~ $study_int ]]; then echo "--optimizer diloco --diloco-h $x"; return; fi ;;
        sparseloco_shared_h*) x=${run#sparseloco_shared_h}
            if [[ $x =~ $study_int ]]; then echo "--optimizer sparseloco --sparseloco-h $x --sparseloco-mask shared"; return; fi ;;
        sparseloco_h*) x=${run#sparseloco_h}
            if [[ $x =~ $study_int ]]; then echo "--optimizer sparseloco --sparseloco-h $x"; return; fi ;;
    esac
    echo "error: unknown run '$name' (adams, adamw, scape_<d>, scape_<d>_catchup_a<c>, topk_ef_c<d>, powersgd_r<R>, onebit_adam_f<x>, demo_k<K>, diloco_h<H>, sparseloco_h<H>, sparseloco_shared_h<H>; 0 < d <= 1, 0 < x < 1, integers R K H >= 1; optionally _lr<x>)" >&2
    return 2
}
study_unit() { awk -v x="$1" 'BEGIN { exit !(x > 0 && x <= 1) }'; } # 0 < X <= 1

# runs.tsv's fields are named in scripts/study_regime_tables.py (FIELDS), which writes the header and each run's line
study_tsv=(/usr/bin/python3 scripts/study_regime_tables.py)

# study_check_spec: SPEC a GPT-2 spec d<L>c<C>h<NH>t<T>v<V> (the form the tables read), LENGTHS positive step counts
# and PROBE_STEPS, each at least EVAL_POINTS (validation every steps / EVAL_POINTS steps); else one line and exit 2
study_check_spec() {
    local x
    [[ $SPEC =~ ^d[1-9][0-9]*c[1-9][0-9]*h[1-9][0-9]*t[1-9][0-9]*v[1-9][0-9]*$ ]] \
        || { echo "error: SPEC '$SPEC' is no GPT-2 spec d<L>c<C>h<NH>t<T>v<V> (e.g. d4c64h4t64v4096); unset it" >&2; exit 2; }
    [ -n "${LENGTHS// /}" ] || { echo "error: LENGTHS is empty; give the steps of each point, e.g. LENGTHS=\"1000 10000\"" >&2; exit 2; }
    for x in $LENGTHS $PROBE_STEPS; do
        [[ $x =~ ^[1-9][0-9]{0,8}$ ]] || { echo "error: LENGTHS: '$x' is no positive number of steps" >&2; exit 2; }
        [ "$x" -ge "$EVAL_POINTS" ] \
            || { echo "error: a length of $x steps is shorter than EVAL_POINTS=$EVAL_POINTS validations; lower EVAL_POINTS" >&2; exit 2; }
    done
}

# study_check_filters WHAT NAMES...: ONLY's words (run names, with or without their _lr suffix) among NAMES (WHAT names
# them in the error) and SEEDS's among the plans' seeds 1 2 3; else one line and exit 2 (for `run`, which would
# otherwise train nothing and say only that)
study_check_filters() {
    local what=$1 x err
    shift
    local names=" $* "
    if [ -n "${ONLY+x}" ] && [ -n "$ONLY" ] && [ -z "${ONLY// /}" ]; then
        echo "error: ONLY is blank; name runs (e.g. ONLY=\"adams scape_0.1\") or unset it to train every run" >&2; exit 2
    fi
    for x in ${ONLY:-}; do
        err=$(study_flags "$x" 1000 2>&1 > /dev/null) || { echo "error: ONLY: ${err#error: }" >&2; exit 2; }
        [[ $names == *" ${x%_lr*} "* ]] || { echo "error: ONLY names '$x', which is not among $what (${names:1:-1})" >&2; exit 2; }
    done
    if [ -n "${SEEDS:-}" ] && [ -z "${SEEDS// /}" ]; then
        echo "error: SEEDS is blank; name seeds (e.g. SEEDS=\"1 2\") or unset it to train every seed" >&2; exit 2
    fi
    for x in ${SEEDS:-}; do [[ $x =~ ^[123]$ ]] || { echo "error: SEEDS: '$x' is no seed (1, 2, 3)" >&2; exit 2; }; done
}

# study_runs_tsv MODE: runs_tsv=DOC/runs.tsv made ready for MODE, or one line and exit 1: `plan` reads it (a missing
# one: no run done yet, runs_tsv=/dev/null), `tables` needs it, `run` creates it with its header where it is missing or
# empty and must be able to append to it: a file of its own, not a symlink (an append would write through the link)
study_runs_tsv() {
    runs_tsv=$DOC/runs.tsv
    if [ -e "$DOC" ] && [ ! -d "$DOC" ]; then
        echo "error: DOC=$DOC is no folder; set DOC to the folder of runs.tsv and the tables (default docs/study)" >&2; exit 1
    fi
    case $1 in
        plan)
            if [ ! -e "$runs_tsv" ] && [ ! -L "$runs_tsv" ]; then
                echo "note: $runs_tsv does not exist yet: no run is done (\`run\` creates it)" >&2; runs_tsv=/dev/null; return
            fi ;;
        tables)
            [ -e "$runs_tsv" ] || { echo "error: $runs_tsv not found; the tables are made from the study's runs.tsv: set DOC to its folder (default docs/study)" >&2; exit 1; } ;;
        run)
            [ ! -L "$runs_tsv" ] || { echo "error: $runs_tsv is a symlink, and the study appends its lines to it; replace the link by a copy of its file or set DOC to another folder" >&2; exit 1; }
            mkdir -p "$DOC" 2> /dev/null || { echo "error: cannot create DOC=$DOC; set DOC to a writable folder" >&2; exit 1; }
            if [ ! -e "$runs_tsv" ] || [ -f "$runs_tsv" ] && [ ! -s "$runs_tsv" ]; then
                { "${study_tsv[@]}" --header > "$runs_tsv"; } 2> /dev/null \
                    || { echo "error: cannot write $runs_tsv; set DOC to a writable folder" >&2; exit 1; }
            fi
            [ ! -f "$runs_tsv" ] || { : >> "$runs_tsv"; } 2> /dev/null \
                || { echo "error: cannot append to $runs_tsv, where each finished run's line goes; set DOC to a writable folder" >&2; exit 1; } ;;
    esac
    [ -f "$runs_tsv" ] && [ -r "$runs_tsv" ] \
        || { echo "error: $runs_tsv is not a readable file; set DOC to the folder of the study's runs.tsv (default docs/study)" >&2; exit 1; }
}

# study_check_tsv: runs.tsv's header and every regime line checked (scripts/study_regime_tables.py read_lines); a bad
# one exits 1 with one line naming the file and the line
study_check_tsv() {
    [ "$runs_tsv" = /dev/null ] \
        || /usr/bin/python3 -c 'import sys; sys.path.insert(0, "scripts"); import study_regime_tables as t; t.read_lines(sys.argv[1])' \
            "$runs_tsv" || exit 1
}

# done_already / val_of POINT RUN SEED: whether runs.tsv has the line; its final validation loss (or empty)
done_already() { awk -F'\t' -v p="$1" -v r="$2" -v s="$3" '$1 == p && $2 == r && $3 == s { f = 1 } END { exit !f }' "$runs_tsv"; }
val_of() { awk -F'\t' -v p="$1" -v r="$2" -v s="$3" '$1 == p && $2 == r && $3 == s { v = $4 } END { print v }' "$runs_tsv"; }

# probe_choice POINT LRS...: the lr of the lowest final validation loss among POINT's adams_lr<lr> seed 1 lines,
# once every lr has its line; else empty
probe_choice() {
    local point=$1 best="" bv="" lr v
    shift
    for lr in "$@"; do
        v=$(val_of "$point" "adams_lr$lr" 1)
        [ -n "$v" ] || { echo ""; return; }
        if [ -z "$best" ] || awk -v a="$v" -v b="$bv" 'BEGIN { exit !(a < b) }'; then best=$lr bv=$v; fi
    done
    echo "$best"
}

# build_trainer COMMIT VAR: the trainer of COMMIT (VAR: the variable that pinned it, for the error), built once into
# OUT/build-<commit>/; or STUDY_TRAINER as it is. Sets TRAINER and COMMIT (12 hex digits, or local-<sha1 of the file>).
build_trainer() {
    local want=$1 var=$2
    if [ -n "${STUDY_TRAINER:-}" ]; then
        [ -x "$STUDY_TRAINER" ] || { echo "error: STUDY_TRAINER=$STUDY_TRAINER is not an executable trainer" >&2; exit 1; }
        TRAINER=$STUDY_TRAINER COMMIT=local-$(sha1sum < "$STUDY_TRAINER" | cut -c1-12)
        return
    fi
    local sha
    sha=$(git rev-parse --verify -q "$want^{commit}" 2> /dev/null) \
        || { echo "error: $var $want is not a commit of this repository; fetch it or pin another" >&2; exit 1; }
    COMMIT=${sha:0:12}
    local dir=$OUT/build-$COMMIT
    TRAINER=$dir/train_gpt
    [ -x "$TRAINER" ] && return
    echo "== building train_gpt of $COMMIT into $dir" >&2
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    git archive "$sha" | tar -x -C "$dir.tmp"
    make -C "$dir.tmp" -j2 train_gpt > "$dir.tmp/build.log" 2>&1 \
        || { echo "error: building $COMMIT failed; see $dir.tmp/build.log" >&2; exit 1; }
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
}

# train POINT RUN SEED STEPS LR: one run (resumed from its newest checkpoint if one is there), its line appended:
# point, run, seed, final validation loss, wall seconds (all pieces), mean bytes sent per step and rank (steps 2..),
# mean train loss over the last 5% of steps, the lowest validation loss along the run, the trainer's commit.
# The authors' GPT-345M settings at every length: beta2 0.999, weight decay 0.01, clip 1, lr warm-up 5% and cosine
# to lr/15. A failed or stopped run exits 1 with the tail of its output.
train() {
    local point=$1 run=$2 seed=$3 steps=$4 lr=$5
    local dir=$OUT/$point/$run/seed$seed warm floor evals flags
    # a study's hook may find this run already trained under another name (the same flags, seed and trainer)
    if declare -F same_run > /dev/null && same_run "$point" "$run" "$seed" "$steps" "$lr"; then return; fi
    warm=$(awk -v s="$steps" 'BEGIN { printf "%d", s * 0.05 + 0.5 }')
    floor=$(awk -v l="$lr" 'BEGIN { printf "%.6g", l / 15 }')
    evals=$((steps / EVAL_POINTS))
    flags=$(study_flags "$run" "$steps")
    mkdir -p "$dir"
    local launch=(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
    [ "$RANKS" -gt 1 ] && launch+=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$RANKS")
    echo "== $point $run seed $seed: $steps steps, lr $lr, $(ls -d "$dir"/ckpt_* 2> /dev/null | sed 's/.*ckpt_//' | sort -n | tail -1 | sed 's/^/from step /;s/$/,/') at $(date -u +%H:%M:%S)" >&2
    local t0=$SECONDS
    # shellcheck disable=SC2086
    "${launch[@]}" "$TRAINER" --model "$SPEC" --data "$DATA" --batch "$B" --seq "$T" --total-batch "$TB" \
        --steps "$steps" --lr "$lr" --lr-floor "$floor" --warmup "$warm" --beta2 0.999 --weight-decay 0.01 --clip 1.0 \
        --eval-every "$evals" --eval-batches "$EVAL_BATCHES" --sample-every 0 --seed "$seed" --threads 1 \
        --ckpt-every "$CKPT_EVERY" --keep-ckpts 1 --resume latest $flags --out "$dir" >> "$dir.out" 2>&1 \
        || { echo $((SECONDS - t0)) >> "$dir.seconds"; echo "error: the run failed or was stopped; see $dir.out:" >&2
             tail -n 3 "$dir.out" >&2; exit 1; }
    echo $((SECONDS - t0)) >> "$dir.seconds"
    "${study_tsv[@]}" --line "$dir/log.jsonl" "$dir.seconds" "$point" "$run" "$seed" "$steps" "$COMMIT" >> "$runs_tsv"
    rm -rf "$dir"/ckpt_* "$dir.seconds" # the table reads the log only
}

# print_plan NOTE [BY_RUN] < PLAN: the plan's lines ("point run seed steps lr", training order) marked done (a line
# in runs.tsv) or todo, then NOTE where it is not empty, then the cost left: each todo line's steps times the median
# seconds per step of the finished runs of SPEC (BY_RUN=1: of the same run name where one has finished)
print_plan() {
    /usr/bin/python3 -c '
import sys
sys.path.insert(0, "scripts")
from study_regime_tables import read_lines
tsv, spec, note, by_run = sys.argv[1:5]
rows = read_lines(tsv) if tsv != "/dev/null" else []  # its lines checked: one line naming a bad one
done = {(r[0], r[1], r[2]): r for r in rows}
ours = [r for r in rows if r[0].startswith("regime") and spec in r[0]]
rate = [int(r[4]) / int(r[0].rsplit("_steps", 1)[1]) for r in ours]
median = lambda xs: sorted(xs)[len(xs) // 2]
per_step = median(rate) if rate else None
per_run = {}
for r in ours:
    per_run.setdefault(r[1], []).append(int(r[4]) / int(r[0].rsplit("_steps", 1)[1]))
todo_s = 0
for line in sys.stdin.read().split("\n"):
    if not line.strip(): continue
    point, run, seed, steps, lr_r = line.split()
    d = done.get((point, run, seed))
    rs = median(per_run[run]) if by_run == "1" and run in per_run else per_step
    if not d: todo_s += int(steps) * rs if rs else 0
    print("%-6s %-40s %-26s %s %7s %-6s %s" % ("done" if d else "todo", point, run, seed, steps, lr_r,
          "val %s (%s s)" % (d[3], d[4]) if d else ""))
if note: print(note)
print("to do: %s" % ("%.1f h at %.1f ms/step (median of finished runs%s)" % (todo_s / 3600, per_step * 1000,
      "; each run name at its own where one has finished" if by_run == "1" else "") if per_step else "cost unknown until a run finishes"))
' "$runs_tsv" "$SPEC" "$1" "${2:-0}"
}

# study_filter < PLAN: the plan's lines ("point run seed steps lr") that ONLY (run names, with or without their _lr
# suffix) and SEEDS keep, in their order; every line when neither is set
study_filter() {
    local point run seed steps lr_r
    while read -r point run seed steps lr_r; do
        [ -n "$point" ] || continue
        [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" ${run%_lr*} "* ]] && [[ " $ONLY " != *" $run "* ]] && continue
        [ -n "${SEEDS:-}" ] && [[ " $SEEDS " != *" $seed "* ]] && continue
        echo "$point $run $seed $steps $lr_r"
    done
}

# run_plan NAME COMMIT VAR PLAN_CMD...: train, one at a time, the lines PLAN_CMD prints (run again before each run,
# so a plan that grows as runs finish is followed) that runs.tsv lacks, restricted by ONLY (run names, with or without
# their _lr suffix) and SEEDS, with the trainer of COMMIT (build_trainer COMMIT VAR); one study per OUT (NAME: the
# script, for the refusal), under OUT/.lock
run_plan() {
    local name=$1 pin=$2 var=$3 next point run seed steps lr_r trained=0
    shift 3
    if [ -e "$OUT" ] && [ ! -d "$OUT" ] || [ -L "$OUT/.lock" ]; then
        echo "error: OUT=$OUT is no folder of runs (or its .lock is a symlink); set OUT to a folder of its own" >&2; exit 1
    fi
    mkdir -p "$OUT" 2> /dev/null || { echo "error: cannot create OUT=$OUT; set OUT to a writable folder" >&2; exit 1; }
    exec 9>> "$OUT/.lock"
    flock -n 9 || { echo "error: another $name is running with OUT=$OUT; wait for it or stop it" >&2; exit 1; }
    [ -f "$DATA/sotu/bpe4k/sotu_train_000000.bin" ] || { echo "error: no bpe4k corpus under $DATA; run make data" >&2; exit 1; }
    build_trainer "$pin" "$var"
    while :; do
        next=""
        while read -r point run seed steps lr_r; do
            [ -n "$point" ] || continue
            done_already "$point" "$run" "$seed" && continue
            next="$point $run $seed $steps $lr_r"; break
        done <<< "$("$@" | study_filter)"
        [ -n "$next" ] || break
        # shellcheck disable=SC2086
        train $next
        trained=$((trained + 1))
    done
    echo "== $trained runs trained; $(wc -l < "$runs_tsv") lines in $runs_tsv" >&2
}

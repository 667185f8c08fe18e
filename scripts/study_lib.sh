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
    /usr/bin/python3 - "$dir/log.jsonl" "$dir.seconds" "$point" "$run" "$seed" "$steps" "$COMMIT" >> "$runs_tsv" <<'EOF'
import json, sys
path, secs_path, point, run, seed, steps, commit = sys.argv[1:8]
steps = int(steps)
train, val = {}, {}   # the last record of each step wins: a resumed piece repeats the steps after its checkpoint
for line in open(path):
    try: o = json.loads(line)
    except ValueError: continue   # a line cut by a stop
    if o.get("event") == "train": train[o["step"]] = o
    if o.get("event") == "val": val[o["step"]] = o["val_loss"]
if steps not in val: sys.exit(f"{path}: no validation at step {steps}")
missing = [s for s in range(1, steps + 1) if s not in train]
if missing: sys.exit(f"{path}: {len(missing)} train steps missing (first {missing[0]})")
sent = [train[s]["comm_bytes_sent"] for s in range(2, steps + 1)]
tail = [train[s]["train_loss"] for s in range(steps - max(1, steps // 20) + 1, steps + 1)]
secs = sum(int(l) for l in open(secs_path))
print(f"{point}\t{run}\t{seed}\t{val[steps]:.6f}\t{secs}\t{sum(sent) / len(sent):.0f}\t"
      f"{sum(tail) / len(tail):.6f}\t{min(val.values()):.6f}\t{commit}")
EOF
    rm -rf "$dir"/ckpt_* "$dir.seconds" # the table reads the log only
}

# print_plan NOTE [BY_RUN] < PLAN: the plan's lines ("point run seed steps lr", training order) marked done (a line
# in runs.tsv) or todo, then NOTE where it is not empty, then the cost left: each todo line's steps times the median
# seconds per step of the finished runs of SPEC (BY_RUN=1: of the same run name where one has finished)
print_plan() {
    /usr/bin/python3 -c '
import sys
tsv, spec, note, by_run = sys.argv[1:5]
rows = [l.rstrip("\n").split("\t") for l in open(tsv)][1:]
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

# run_plan NAME COMMIT VAR PLAN_CMD...: train, one at a time, the lines PLAN_CMD prints (run again before each run,
# so a plan that grows as runs finish is followed) that runs.tsv lacks, restricted by ONLY (run names, with or without
# their _lr suffix) and SEEDS, with the trainer of COMMIT (build_trainer COMMIT VAR); one study per OUT (NAME: the
# script, for the refusal), under OUT/.lock
run_plan() {
    local name=$1 pin=$2 var=$3 next point run seed steps lr_r trained=0
    shift 3
    mkdir -p "$OUT"
    exec 9> "$OUT/.lock"
    flock -n 9 || { echo "error: another $name is running with OUT=$OUT; wait for it or stop it" >&2; exit 1; }
    [ -f "$DATA/sotu/bpe4k/sotu_train_000000.bin" ] || { echo "error: no bpe4k corpus under $DATA; run make data" >&2; exit 1; }
    build_trainer "$pin" "$var"
    while :; do
        next=""
        while read -r point run seed steps lr_r; do
            [ -n "$point" ] || continue
            done_already "$point" "$run" "$seed" && continue
            [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" ${run%_lr*} "* ]] && [[ " $ONLY " != *" $run "* ]] && continue
            [ -n "${SEEDS:-}" ] && [[ " $SEEDS " != *" $seed "* ]] && continue
            next="$point $run $seed $steps $lr_r"; break
        done <<< "$("$@")"
        [ -n "$next" ] || break
        # shellcheck disable=SC2086
        train $next
        trained=$((trained + 1))
    done
    echo "== $trained runs trained; $(wc -l < "$runs_tsv") lines in $runs_tsv" >&2
}

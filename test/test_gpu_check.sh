#!/usr/bin/env bash
# test/test_gpu_check.sh - the first GPU run's plan (issue 35): scripts/gpu_check.sh with PLAN=1 runs nothing,
# lists every check once, in the order of what it risks (environment, kernels, whole models against the CPU
# trainers, the device update, SCAPE, then throughput), and its own estimate of the whole sequence fits 8 minutes
# of GPU time; every training run uses a sequence length every cuDNN 9 plans (a multiple of 128); the list of
# checks a machine without a GPU reports as NOT RUN is the list the plan runs; and the plan fails when the
# estimate is over the budget (the negative control). Needs nothing built and no GPU.
set -u
cd "$(dirname "$0")/.."
. test/lib.sh # failures=0, ok NAME, fail NAME WHY (the folder is the repository root)
TMP=$(mktemp -d build/test_gpu_check.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$TMP"' EXIT

PLAN=1 scripts/gpu_check.sh "$TMP/plan.txt" > "$TMP/plan.out" 2>&1
st=$?
last=$(tail -1 "$TMP/plan.out")
est=$(echo "$last" | sed -n -E 's/.*estimated ([0-9]+) s .*/\1/p')
if [ $st = 0 ] && [ -n "$est" ] && [ "$est" -le 480 ]; then ok "gpu_check_plan_fits_8_minutes ($est s: $last)"
else fail gpu_check_plan_fits_8_minutes "exit $st, last line: $last"; fi

# nothing ran: no PASS/FAIL/NOT RUN lines, and the report file holds the plan
if grep -qE '^(PASS|FAIL|NOT RUN) ' "$TMP/plan.out"; then fail gpu_check_plan_runs_nothing "$(grep -m1 -E '^(PASS|FAIL|NOT RUN) ' "$TMP/plan.out")"
elif ! cmp -s "$TMP/plan.out" "$TMP/plan.txt"; then fail gpu_check_plan_runs_nothing "the report file differs from what was printed"
else ok gpu_check_plan_runs_nothing; fi

# every check once; the sections in order; the environment first, gpu_probe first of the kernels
mapfile -t checks < <(sed -n -E 's/^check +([^ ]+) .*/\1/p' "$TMP/plan.out")
dups=$(printf '%s\n' "${checks[@]}" | sort | uniq -d | tr '\n' ' ')
if [ ${#checks[@]} -ge 50 ] && [ -z "$dups" ]; then ok "gpu_check_plan_lists_each_check_once (${#checks[@]} checks)"
else fail gpu_check_plan_lists_each_check_once "${#checks[@]} checks, listed twice: ${dups:-none}"; fi
order=$(grep -nE '^== [1-5]\. |^check +(env_driver|env_cudnn|gpu_probe|kernel_encoder_bf16|train_fp32_vs_cpu_10_steps|device_vs_host_update_fp32|scape_device_vs_host_update_fp32|throughput_gpt2_124M_d12) ' "$TMP/plan.out" |
        sed -E 's/^[0-9]+:(== ([1-5])\.|check +([^ ]+)).*/\2\3/' | tr '\n' ' ')
want="env_driver env_cudnn 1 gpu_probe kernel_encoder_bf16 2 train_fp32_vs_cpu_10_steps 3 device_vs_host_update_fp32 4 scape_device_vs_host_update_fp32 5 throughput_gpt2_124M_d12 "
if [ "$order" = "$want" ]; then ok gpu_check_plan_orders_checks_by_risk
else fail gpu_check_plan_orders_checks_by_risk "got: $order; want: $want"; fi
# every throughput or memory check after the last correctness check
first_thr=$(grep -nE '^check +(throughput|memory)_' "$TMP/plan.out" | head -1 | cut -d: -f1)
last_cor=$(grep -nE '^check +' "$TMP/plan.out" | grep -vE 'check +(throughput|memory)_' | tail -1 | cut -d: -f1)
if [ -n "$first_thr" ] && [ -n "$last_cor" ] && [ "$first_thr" -gt "$last_cor" ]; then ok gpu_check_plan_speed_last
else fail gpu_check_plan_speed_last "first speed check at line ${first_thr:-none}, last correctness check at ${last_cor:-none}"; fi

# the cuDNN checks (and every training run that they compare with) at a length every cuDNN 9 plans
seqs=$(grep -E '^(COMMON|LCOMMON)=' -A1 scripts/gpu_check.sh | grep -oE -- '--seq [0-9]+' | awk '{ print $2 }' | sort -u | tr '\n' ' ')
bad=$(for t in $seqs; do [ $((t % 128)) = 0 ] || echo "$t"; done)
if [ -n "$seqs" ] && [ -z "$bad" ]; then ok "gpu_check_training_runs_at_multiples_of_128 (--seq $seqs)"
else fail gpu_check_training_runs_at_multiples_of_128 "COMMON / LCOMMON use --seq ${seqs:-none}; not multiples of 128: $bad"; fi

# without a GPU every planned training, update, SCAPE and speed check is reported (NOT RUN), by the same names
mapfile -t static < <(sed -n '/^    for c in train_fp32_vs_cpu_10_steps/,/do notrun/p' scripts/gpu_check.sh |
                      sed -e 's/for c in//' -e 's/;.*//' -e 's/\$(\[ "\${BIG:-0}" = 1 \] && echo throughput_gpt2_350M_d24)//' \
                          -e 's/\${MEMM}/500m/g' -e 's/\\//g' | tr ' ' '\n' | grep -v '^$')
planned=$(printf '%s\n' "${checks[@]}" | grep -vE '^(env_|prebuilt_|gpu_probe|kernel_|model_)' | sort)
listed=$(printf '%s\n' "${static[@]}" | sort)
if [ ${#static[@]} -ge 30 ] && [ "$planned" = "$listed" ]; then ok "gpu_check_no_gpu_list_matches_plan (${#static[@]} checks)"
else fail gpu_check_no_gpu_list_matches_plan "only planned: $(comm -23 <(echo "$planned") <(echo "$listed") | tr '\n' ' '); only listed: $(comm -13 <(echo "$planned") <(echo "$listed") | tr '\n' ' ')"; fi

# negative control: a budget below the estimate fails the plan
PLAN=1 BUDGET_S=100 scripts/gpu_check.sh "$TMP/plan2.txt" > "$TMP/plan2.out" 2>&1
st=$?
if [ $st != 0 ] && tail -1 "$TMP/plan2.out" | grep -q 'budget 100 s'; then ok gpu_check_plan_over_budget_fails
else fail gpu_check_plan_over_budget_fails "exit $st: $(tail -1 "$TMP/plan2.out")"; fi

# BIG=1 adds the Llama-1.8B memory checks and GPT-2 350M (over the 8 minutes, and the plan says so)
PLAN=1 BIG=1 scripts/gpu_check.sh "$TMP/plan3.txt" > "$TMP/plan3.out" 2>&1
st=$?
if [ $st != 0 ] && grep -qE '^check +memory_llama_1.8b_scape_2_ranks_zero ' "$TMP/plan3.out" &&
   grep -qE '^check +throughput_gpt2_350M_d24 ' "$TMP/plan3.out"; then ok gpu_check_plan_big_adds_1.8b_and_over_budget
else fail gpu_check_plan_big_adds_1.8b_and_over_budget "exit $st: $(tail -1 "$TMP/plan3.out")"; fi
exit $((failures > 0))

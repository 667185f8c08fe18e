#!/usr/bin/env bash
# test/test_dist_resume.sh BIN - SCAPE state saved by 4 ranks resumes on 2 (and 1) ranks: every new rank starts
# from the mean residual of the 4 saved ones and training continues with identical state everywhere; then the same
# for --scape-variant catchup, whose state adds the age, and for PowerSGD (its error feedback is averaged the same
# way), for 1-bit Adam (also on 3 ranks: its server error moves to the chunks of the new owners) and for DeMo (each
# rank's momentum averaged like the residuals; SCAPE_TEST_VARIANT, test/test_dist.c's resume_config).
bin=${1:-build/test_dist}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run="timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none"
$run -np 4 "$bin" --save "$dir" || { echo "FAIL save_state_of_4_ranks: exited non-zero"; exit 1; }
$run -np 2 "$bin" --resume "$dir" 4 || exit 1
"$bin" --resume "$dir" 4 || exit 1
export SCAPE_TEST_VARIANT=catchup
rm -f "$dir"/*
$run -np 4 "$bin" --save "$dir" || { echo "FAIL save_state_of_4_ranks_catchup: exited non-zero"; exit 1; }
$run -np 2 "$bin" --resume "$dir" 4 || exit 1
"$bin" --resume "$dir" 4 || exit 1
export SCAPE_TEST_VARIANT=powersgd
rm -f "$dir"/*
$run -np 4 "$bin" --save "$dir" || { echo "FAIL save_state_of_4_ranks_powersgd: exited non-zero"; exit 1; }
$run -np 2 "$bin" --resume "$dir" 4 || exit 1
"$bin" --resume "$dir" 4 || exit 1
export SCAPE_TEST_VARIANT=onebit-adam
rm -f "$dir"/*
$run -np 4 "$bin" --save "$dir" || { echo "FAIL save_state_of_4_ranks_onebit_adam: exited non-zero"; exit 1; }
$run -np 2 "$bin" --resume "$dir" 4 || exit 1
$run -np 3 "$bin" --resume "$dir" 4 || exit 1
"$bin" --resume "$dir" 4 || exit 1
export SCAPE_TEST_VARIANT=demo
rm -f "$dir"/*
$run -np 4 "$bin" --save "$dir" || { echo "FAIL save_state_of_4_ranks_demo: exited non-zero"; exit 1; }
$run -np 2 "$bin" --resume "$dir" 4 || exit 1
"$bin" --resume "$dir" 4 || exit 1

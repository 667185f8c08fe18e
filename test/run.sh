#!/usr/bin/env bash
# test/run.sh CMD... - runs each test command, echoes its output, counts "ok"/"FAIL" lines, and ends with
# "N passed, N failed". A command that exits non-zero without printing a FAIL line counts as one failure.
# Exits non-zero when anything failed. TEST_SKIP="test/a.sh test/b.py": a command naming one of these files as a
# word is not run, and says so (make test-sanitize leaves out the integration tests its sanitizers add nothing to).
passed=0; failed=0
for cmd in "$@"; do
    echo "=== $cmd"
    skip=""
    set -f # the words as written: no glob in TEST_SKIP or in a command expands
    for s in ${TEST_SKIP:-}; do
        for w in $cmd; do [ "$w" = "$s" ] && skip=$s; done
    done
    set +f
    if [ -n "$skip" ]; then echo "--- $cmd: not run (TEST_SKIP names $skip)"; continue; fi
    out=$(mktemp)
    start=$(date +%s)
    bash -c "$cmd" 2>&1 | tee "$out" # a pipeline: tee has written all of it when the counts below read $out
    rc=${PIPESTATUS[0]}
    p=$(grep -c '^ok ' "$out"); f=$(grep -c '^FAIL ' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL $cmd: exited with status $rc"; fi
    if [ "$rc" -eq 0 ] && [ "$f" -ne 0 ]; then echo "FAIL $cmd: printed FAIL but exited 0"; f=$((f+1)); fi
    if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ]; then echo "FAIL $cmd: ran no case"; f=$((f+1)); fi
    echo "--- $cmd: $p passed, $f failed ($(( $(date +%s) - start ))s)"
    passed=$((passed+p)); failed=$((failed+f))
    rm -f "$out"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

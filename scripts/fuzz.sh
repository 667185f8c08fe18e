#!/usr/bin/env bash
# scripts/fuzz.sh SECONDS HARNESS...  - runs each libFuzzer harness $FUZZ_BUILD/fuzz_<h> (default build/fuzz) for
# SECONDS seconds on one core, one after another. Use `make fuzz FUZZ_SECONDS=N [FUZZ_ONLY="shard bpe"]`, which
# builds the harnesses first (needs clang and libclang-rt-14-dev; see test/fuzz/README.md).
#
# Corpus: the committed seeds test/fuzz/corpus/<h>/ plus a growing working corpus $FUZZ_BUILD/corpus/<h>/ (not
# committed). Extra libFuzzer flags for one harness: test/fuzz/<h>.args (one line); its environment:
# FUZZ_ENV_<h>="VAR=value ..." (the Makefile passes the FUZZ_ENV_<h> variables).
# Every crash, leak, timeout or out-of-memory input is copied to test/fuzz/regress/<h>/ under its sha1: commit
# it, and `make test` replays it from then on. Exits 1 if any harness found something.
set -uo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 SECONDS HARNESS...  (e.g. $0 10 shard loader)" >&2
    exit 2
fi
secs="$1"; shift
case "$secs" in ''|*[!0-9]*) echo "error: SECONDS must be a whole number, got '$secs'" >&2; exit 2 ;; esac
build="${FUZZ_BUILD:-build/fuzz}"
found=0
summary=""
for h in "$@"; do
    bin="$build/fuzz_$h"
    if [ ! -x "$bin" ]; then
        echo "error: $bin is missing; build it with 'make fuzz-build FUZZ_ONLY=$h'" >&2
        exit 2
    fi
    work="$build/corpus/$h"; art="$build/artifacts/$h"
    mkdir -p "$work" "$art"
    rm -f "$art"/*
    args=""
    [ -f "test/fuzz/$h.args" ] && args=$(head -n1 "test/fuzz/$h.args")
    envvar="FUZZ_ENV_$h"
    envs="${!envvar:-}"
    # the harness's own ASAN_OPTIONS (if any) plus detect_leaks=0, which must win (see below)
    asan="${ASAN_OPTIONS:-}"
    for kv in $envs; do case "$kv" in ASAN_OPTIONS=*) asan="${kv#ASAN_OPTIONS=}" ;; esac; done
    asan="${asan:+$asan:}detect_leaks=0"
    log="$build/fuzz_$h.log"
    echo "=== fuzz_$h: ${secs}s"
    # -detect_leaks=0: a refused input leaks what the reader held when fatal() jumped out (see fuzz.h); leaks on
    # accepted inputs are caught by the replay in `make test`. -close_fd_mask=2 silences the readers' error
    # lines (libFuzzer's own report still shows). Limits keep a runaway allocation a finding, not a dead host.
    # shellcheck disable=SC2086
    env $envs ASAN_OPTIONS="$asan" "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -detect_leaks=0 -close_fd_mask=2 -print_final_stats=1 -artifact_prefix="$art/" $args \
        "$work" "test/fuzz/corpus/$h" >"$log" 2>&1
    rc=$?
    runs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    n=0
    for f in "$art"/*; do
        [ -f "$f" ] || continue
        mkdir -p "test/fuzz/regress/$h"
        dst="test/fuzz/regress/$h/$(basename "$f" | cut -d- -f1)-$(sha1sum "$f" | cut -c1-16)"
        cp "$f" "$dst"
        echo "  new regression input: $dst"
        n=$((n + 1))
    done
    if [ "$rc" -ne 0 ] || [ "$n" -gt 0 ]; then
        found=1
        echo "  FOUND (exit $rc); the report:"
        grep -E -A25 '^==[0-9]+==ERROR|runtime error|^SUMMARY|deadly signal|out-of-memory|timeout' "$log" | head -60
        summary="$summary  fuzz_$h: ${runs:-?} runs in ${secs}s, FOUND $n input(s) (log $log)"$'\n'
    else
        summary="$summary  fuzz_$h: ${runs:-?} runs in ${secs}s, nothing found"$'\n'
    fi
done
echo "fuzz summary:"
printf '%s' "$summary"
exit "$found"

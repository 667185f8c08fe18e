# test/lib.sh - what the shell tests share, sourced after `set -u` as
#   . "$(dirname "$0")/lib.sh"   (or `. test/lib.sh` in a test that has gone to the repository root)
# ok NAME prints "ok NAME"; fail NAME WHY prints "FAIL NAME: WHY" and counts it in failures (from 0), so a test ends
# with `[ "$failures" -eq 0 ]` or `exit $((failures > 0))` and test/run.sh counts the lines.
# Not for: anything a single test alone needs (its temp folder, its runs).
failures=0
ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }

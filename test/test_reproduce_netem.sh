#!/usr/bin/env bash
# test/test_reproduce_netem.sh - scripts/netem_bench.sh cleans up after SIGINT: starts it on a slow link (long
# steps), waits until its ranks run inside its namespace behind a tbf qdisc, sends SIGINT to the script alone,
# then checks: it exits with 130 promptly, its namespace is gone (with it the shaped loopback), no process it
# started remains, and the root namespace's loopback qdisc is untouched;
# and that it removes a namespace left behind by an earlier, SIGKILLed run; --runs FILE: a bad file is refused with
# one line naming its line before anything starts, and a file of two rules (dense AdamS, DiLoCo H 2) on 2 ranks of a
# tiny model, unshaped and at 100 Mbit/s, runs both in its order, prints both at both rates with their bytes and the
# speedup over the first, and every counted byte crossed the shaped link. Needs root and `ip netns`: where a
# namespace cannot be created, it FAILS (CI runs as root, where it works). About 40-60 s.
# Not for: the benchmark's figures (run the script itself).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
fails=0
ok()   { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

probe=h10probe_$$
if ! ip netns add "$probe" 2> /dev/null; then
    fail netem_namespace_available "'ip netns add' failed (need root and network namespaces; CI runs as root)"
    exit 1
fi
ip netns del "$probe"
ok netem_namespace_available

tmp=$(mktemp -d)
root_qdisc_before=$(tc qdisc show dev lo)
# a namespace as a SIGKILLed earlier run would leave it (owner pid dead, a process inside): the script removes it
dead=$(sh -c 'echo $$')
stale=scapebench_$dead
ip netns add "$stale"
stale_pid=$(ip netns exec "$stale" sh -c 'sleep 300 > /dev/null 2>&1 & echo $!')
set -m   # the script gets its own process group, and SIGINT is not ignored in it as in a plain background job
# A shell started with SIGINT ignored (any caller that ran this test in the background without job control, as a
# CI runner may) cannot trap it, and that is inherited; reset it to the default before exec'ing the script.
/usr/bin/python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    scripts/netem_bench.sh --rates 20mbit --steps 50 --out "$tmp/bench" > "$tmp/log" 2>&1 &
pid=$!
set +m
ns=scapebench_$pid
# wait (up to 60 s) until the ranks run inside the namespace and the qdisc is in place
running=0
for _ in $(seq 1 120); do
    if [ "$(ip netns pids "$ns" 2> /dev/null | wc -l)" -ge 3 ] && ip netns exec "$ns" tc qdisc show dev lo | grep -q tbf; then
        running=1; break
    fi
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.5
done
if [ $running = 1 ]; then ok netem_started_in_namespace; else fail netem_started_in_namespace "no ranks in $ns after 60 s; log: $(tail -3 "$tmp/log")"; fi
sleep 2   # mid-run: inside MPI collectives over the shaped link
inside_before=$(ip netns pids "$ns" 2> /dev/null | tr '\n' ' ')
kill -INT "$pid"
rc=
for _ in $(seq 1 60); do
    if ! kill -0 "$pid" 2> /dev/null; then wait "$pid"; rc=$?; break; fi
    sleep 0.5
done
if [ -z "$rc" ]; then
    fail netem_sigint_exits "still running 30 s after SIGINT"
    kill -KILL "$pid" 2> /dev/null
else
    [ "$rc" = 130 ] && ok netem_sigint_exits || fail netem_sigint_exits "expected status 130, got $rc"
fi
grep -q "interrupted, cleaning up" "$tmp/log" && ok netem_sigint_message || fail netem_sigint_message "no clean-up message in the log"
if ip netns list | grep -qw "$ns"; then
    fail netem_namespace_removed "namespace $ns still exists"
    for p in $(ip netns pids "$ns"); do kill -KILL "$p"; done; ip netns del "$ns"
else
    ok netem_namespace_removed
fi
# alive = exists and is not a zombie (an exited child waiting to be reaped runs nothing)
alive() { local st; st=$(ps -o stat= -p "$1" 2> /dev/null) && [ "${st#Z}" = "$st" ]; }
left=""
for p in $inside_before; do alive "$p" && left="$left $p"; done
# and nothing anywhere still running with this test's output directory on its command line
for p in $(pgrep -f -- "$tmp/bench"); do alive "$p" && left="$left $p"; done
if [ -z "$left" ]; then ok netem_processes_gone; else
    fail netem_processes_gone "still running:$left ($(ps -o pid=,args= -p "${left// /,}" 2>/dev/null | head -3))"
    for p in $left; do kill -KILL "$p" 2> /dev/null; done
fi
[ "$(tc qdisc show dev lo)" = "$root_qdisc_before" ] && ok netem_root_qdisc_untouched \
    || fail netem_root_qdisc_untouched "root namespace lo qdisc changed: $(tc qdisc show dev lo)"
if ip netns list | grep -qw "$stale" || kill -0 "$stale_pid" 2> /dev/null && [ "$(ps -o stat= -p "$stale_pid" | cut -c1)" != Z ]; then
    fail netem_stale_namespace_removed "$stale or its process $stale_pid is still there"
    kill -KILL "$stale_pid" 2> /dev/null; ip netns del "$stale" 2> /dev/null
else
    ok netem_stale_namespace_removed
fi
# --runs FILE: refused whole with one line (no namespace, no output folder), then a tiny run of two rules
printf 'adams\t--optimizer adams\nbad one\t--optimizer adams\n' > "$tmp/bad.tsv"
out=$(scripts/netem_bench.sh --runs "$tmp/bad.tsv" --out "$tmp/never" 2>&1); rc=$?
if [ $rc = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && [[ $out == "error: --runs $tmp/bad.tsv:2: run name 'bad one'"* ]] \
   && [ ! -e "$tmp/never" ]; then ok netem_runs_bad_file_refused
else fail netem_runs_bad_file_refused "status $rc, output: $out"; fi
printf 'x\t--optimizer adams --out elsewhere\n' > "$tmp/bad.tsv"
out=$(scripts/netem_bench.sh --runs "$tmp/bad.tsv" 2>&1); rc=$?
[ $rc = 2 ] && [[ $out == *":1: '--out' is set by the bench"* ]] && ok netem_runs_bench_options_refused \
    || fail netem_runs_bench_options_refused "status $rc, output: $out"
printf '# the baseline first\nadams\t--optimizer adams\n\ndiloco_2\t--optimizer diloco --diloco-h 2\n' > "$tmp/runs.tsv"
ns_before=$(ip netns list | grep -c '^scapebench_')
scripts/netem_bench.sh --runs "$tmp/runs.tsv" --rates "unlimited 100mbit" --np 2 --steps 3 --model d2c64h2t64v4096 \
    --out "$tmp/runs_out" > "$tmp/runs.log" 2>&1; rc=$?
if [ $rc = 0 ]; then ok netem_runs_file_runs; else fail netem_runs_file_runs "status $rc: $(tail -3 "$tmp/runs.log")"; fi
got=$(cut -f1,2 "$tmp/runs_out/runs.tsv" 2> /dev/null | tr '\t\n' ': ')
[ "$got" = "unlimited:adams unlimited:diloco_2 100mbit:adams 100mbit:diloco_2 " ] && ok netem_runs_in_file_order \
    || fail netem_runs_in_file_order "runs.tsv holds '$got'"
# each rate x run has its line: rate, run, median ms, mean ms, MB/step/rank, speedup over adams, link/counted
/usr/bin/python3 - "$tmp/runs.log" <<'EOF' && ok netem_runs_summary || fail netem_runs_summary "$(tail -8 "$tmp/runs.log")"
import sys
lines = [l.split() for l in open(sys.argv[1])]
rows = {(l[0], l[1]): l for l in lines if len(l) >= 7 and l[0] in ("unlimited", "100mbit") and l[1] in ("adams", "diloco_2")}
assert len(rows) == 4, rows
assert all(rows[r, "adams"][5] == "1.00x" for r in ("unlimited", "100mbit")), "adams is not its own baseline"
for (rate, name), l in rows.items():
    assert float(l[4]) > 0, "%s %s counted no bytes" % (rate, name)
    if rate == "100mbit":
        assert float(l[6]) >= 0.9, "%s: the link carried %s of the counted bytes" % (name, l[6])
assert not any("WARNING" in " ".join(l) for l in lines), "a WARNING was printed"
assert any(l[:1] == ["diloco_2:"] for l in lines), "no crossover line for diloco_2"
EOF
[ "$(ip netns list | grep -c '^scapebench_')" = "$ns_before" ] && ok netem_runs_namespace_removed \
    || fail netem_runs_namespace_removed "$(ip netns list)"
rm -rf "$tmp"
exit $((fails > 0))

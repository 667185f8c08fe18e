#!/usr/bin/env bash
# test/test_reproduce_netem.sh - scripts/netem_bench.sh cleans up after SIGINT: starts it on a slow link (long
# steps), waits until its ranks run inside its namespace behind a tbf qdisc, sends SIGINT to the script alone,
# then checks: it exits with 130 promptly, its namespace is gone (with it the shaped loopback), no process it
# started remains, and the root namespace's loopback qdisc is untouched;
# and that it removes a namespace left behind by an earlier, SIGKILLed run. Needs root and `ip netns`: where a
# namespace cannot be created, it FAILS (CI runs as root, where it works). About 20-40 s.
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
rm -rf "$tmp"
exit $((fails > 0))

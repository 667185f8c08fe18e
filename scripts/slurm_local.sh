#!/usr/bin/env bash
# scripts/slurm_local.sh start|stop|status DIR - a real one-node SLURM cluster on this machine, for the tests
# (test/test_slurm.sh) and for trying the batch scripts by hand: munged, slurmctld and slurmd run as the calling
# user (root) from a scratch directory DIR with their own slurm.conf, munge key, sockets, state and logs; nothing
# under /etc or /var is touched. Every address is the loopback one (the node is this host, NodeAddr 127.0.0.1).
# After `start`, point the client commands at it with
#   export SLURM_CONF=DIR/slurm.conf
# The configuration works without systemd and cgroups (a container): ProctrackType=proctrack/linuxproc,
# TaskPlugin=task/none, select/cons_tres over the machine's CPUs, MpiDefault=pmix (Open MPI and SLURM both have
# PMIx in Debian), JobRequeue=1 so a batch job may requeue itself. `stop` ends the daemons this DIR started (by
# their pid files) and leaves DIR for inspection. Needs the Debian packages slurm-wlm and munge
# (scripts/install_deps.sh installs them).
set -euo pipefail
usage="usage: $0 start|stop|status DIR"
[ $# = 2 ] || { echo "$usage" >&2; exit 2; }
cmd=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
conf=$dir/slurm.conf
node=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.8 }' /proc/meminfo)
# ports of our own, far from the default 6817/6818, so a system SLURM on the machine is left alone
ctld_port=${SLURM_LOCAL_CTLD_PORT:-16817}
slurmd_port=${SLURM_LOCAL_SLURMD_PORT:-16818}

die() { echo "error: $*" >&2; exit 1; }

stop_pidfile() {
    local f=$1 pid
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    if kill -0 "$pid" 2> /dev/null; then
        kill "$pid" 2> /dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2> /dev/null || true
    fi
    rm -f "$f"
}

case $cmd in
start)
    for b in munged mungekey slurmctld slurmd sinfo; do
        command -v "$b" > /dev/null || die "$b not found; install slurm-wlm and munge (scripts/install_deps.sh)"
    done
    mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/munge"
    chmod 700 "$dir/munge"
    [ -f "$dir/munge/munge.key" ] || mungekey --create --keyfile "$dir/munge/munge.key" > /dev/null
    chmod 600 "$dir/munge/munge.key"
    cat > "$conf" <<EOF
ClusterName=scape-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
JobRequeue=1
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
# the time limit is checked every few seconds, and SIGTERM ahead of it (--signal) follows that check
MessageTimeout=20
KillWait=30
InactiveLimit=0
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    stop_pidfile "$dir/munged.pid"
    munged --key-file "$dir/munge/munge.key" --socket "$dir/munge/munge.socket" --pid-file "$dir/munged.pid" \
        --log-file "$dir/log/munged.log" --seed-file "$dir/munge/munge.seed" --force \
        || die "munged did not start; see $dir/log/munged.log"
    export SLURM_CONF=$conf
    slurmctld -f "$conf" || die "slurmctld did not start; see $dir/log/slurmctld.log"
    slurmd -f "$conf" -N "$node" || die "slurmd did not start; see $dir/log/slurmd.log"
    for _ in $(seq 100); do
        state=$(sinfo -h -N -o '%T' 2> /dev/null | head -1 || true)
        case $state in idle*|mixed*|allocated*) echo "slurm_local: node $node $state, $cpus CPUs; export SLURM_CONF=$conf"; exit 0 ;; esac
        sleep 0.2
    done
    die "the node did not come up (state '${state:-none}'); see $dir/log/slurmctld.log and slurmd.log"
    ;;
stop)
    stop_pidfile "$dir/slurmd.pid"
    stop_pidfile "$dir/slurmctld.pid"
    stop_pidfile "$dir/munged.pid"
    ;;
status)
    SLURM_CONF=$conf sinfo -N
    ;;
*) echo "$usage" >&2; exit 2 ;;
esac

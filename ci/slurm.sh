#!/usr/bin/env bash
# A single-node SLURM with munge on localhost for tests/test_slurm.py (recipe: ../shared/notes/slurm-local.md).
#   ci/slurm.sh up      install (apt-get, as root, only if missing) and start the daemons; idempotent
#   ci/slurm.sh down    stop the daemons started by `up` (by their PID files)
#   ci/slurm.sh status  exit 0 when the node is idle or busy (ready for jobs)
# No systemd: the daemons run in the background as root; state and logs under $SLURMCI_DIR (default /tmp/slurmci).
# The node has 2 CPUs, 16 GB and a fake GPU (gres gpu:1 on /dev/null) so GPU rules can be scheduled.
set -euo pipefail
DIR=${SLURMCI_DIR:-/tmp/slurmci}
CPUS=${SLURMCI_CPUS:-$(nproc)}

ready() { sinfo -h -o %t 2>/dev/null | grep -Eq '^(idle|mix|alloc)'; }

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
        return 0
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "ci/slurm.sh: SLURM is not installed and cannot be (needs root and apt-get)" >&2
        return 3
    fi
    echo "ci/slurm.sh: installing slurm-wlm slurm-client munge (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends slurm-wlm slurm-client munge >/dev/null
}

configure() {
    mkdir -p "$DIR/state/ctld" "$DIR/state/d" "$DIR/log" /etc/slurm
    cat > /etc/slurm/slurm.conf <<CONF
# written by ci/slurm.sh (single-node test cluster)
ClusterName=ci
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# finished jobs stay visible to squeue (no accounting database: the plugin checks status with squeue)
MinJobAge=600
DefMemPerCPU=2000
GresTypes=gpu
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/d
SlurmctldPidFile=$DIR/state/slurmctld.pid
SlurmdPidFile=$DIR/state/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=16000 Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
    echo "NodeName=localhost Name=gpu File=/dev/null" > /etc/slurm/gres.conf
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
    install_packages
    if ready; then echo "ci/slurm.sh: SLURM already up" >&2; return 0; fi
    configure
    install -d -o munge -g munge -m 755 /run/munge
    alive /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
    munge -n | unmunge >/dev/null
    alive "$DIR/state/slurmctld.pid" || /usr/sbin/slurmctld
    alive "$DIR/state/slurmd.pid" || /usr/sbin/slurmd -N localhost
    for _ in $(seq 60); do
        if ready; then echo "ci/slurm.sh: SLURM up ($(sinfo -h -o '%P %t %c CPUs %G'))" >&2; return 0; fi
        sleep 1
    done
    echo "ci/slurm.sh: the node did not become idle in 60 s; see $DIR/log" >&2
    return 1
}

down() {
    for pidfile in "$DIR/state/slurmd.pid" "$DIR/state/slurmctld.pid" /run/munge/munged.pid; do
        if alive "$pidfile"; then kill "$(cat "$pidfile")"; fi
    done
}

case "${1:-up}" in
    up) up ;;
    down) down ;;
    status) ready ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac

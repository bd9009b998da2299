#!/usr/bin/env bash
# A real one-machine Slurm cluster for the Slurm tests (tests/integration/test_slurm.py):
#
#   scripts/test-slurm.sh up DIR     start munged, slurmctld and slurmd with everything under DIR
#                                    (prints the SLURM_CONF to export; `srun -n1 hostname` works)
#   scripts/test-slurm.sh down DIR   stop what `up DIR` started (by the pids it recorded) and
#                                    cancel every job left in that cluster
#
# The cluster: one node (tune-n1, this machine's CPUs but at least 4, two fake GPUs as gres/gpu,
# addressed as 127.0.0.1) in one partition `tune` that allows requeue, no accounting (no
# slurmdbd: sacct has nothing), a short MinJobAge and sched_interval=2 so that a requeued job runs
# again after ~2 minutes rather than 3 (the tests shorten that with scontrol update StartTime=now).
# Munge and Slurm talk over sockets and ports of their own (TUNE_SLURM_PORT, default 16817 and
# the next one), so a site's real Slurm on this machine is never touched. Needs root (slurmd,
# mknod) and the Debian packages slurm-wlm and munge (scripts/setup.sh --test installs them).
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 up|down DIR" >&2
  exit 2
fi
port=${TUNE_SLURM_PORT:-16817}

stop_pid() {  # stop_pid FILE: SIGTERM the recorded pid, then SIGKILL after 10 s
  local f=$1 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  [ -d "$dir" ] || return 0
  if [ -f "$dir/slurm.conf" ] && [ -s "$dir/slurmctld.pid" ]; then
    # Every job of this cluster (it is ours alone), so that no trial outlives the test.
    SLURM_CONF="$dir/slurm.conf" timeout 10 scancel --quiet --full --user="$(id -un)" 2>/dev/null || true
  fi
  stop_pid "$dir/slurmd.pid"
  stop_pid "$dir/slurmctld.pid"
  stop_pid "$dir/munged.pid"
  # Batch shells slurmd started and that outlived it (the node's processes are ours).
}

if [ "$cmd" = down ]; then
  down
  echo "test-slurm: stopped the cluster in $dir"
  exit 0
fi
[ "$cmd" = up ] || { echo "usage: $0 up|down DIR" >&2; exit 2; }

for p in slurmctld slurmd munged mungekey sbatch; do
  command -v "$p" >/dev/null || PATH=$PATH:/usr/sbin
  command -v "$p" >/dev/null || { echo "test-slurm: $p is missing (scripts/setup.sh --test)" >&2; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "test-slurm: slurmd needs root" >&2; exit 77; }

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
trap 'down' ERR
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
chmod 700 "$dir/munge"

# munged as root with its key, socket and pid file in DIR (--force: root and a private dir).
mungekey -c -f -k "$dir/munge/munge.key" >/dev/null 2>&1 || mungekey -c -k "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"

host=$(hostname -s)
# At least 4 CPUs (the trials sleep; SlurmdParameters=config_overrides lets slurmd take the
# configured count over the machine's), so that two GPUs, not CPUs, are what limits the GPU tests.
cpus=$(nproc)
[ "$cpus" -ge 4 ] || cpus=4
# Two fake GPUs: character devices of our own (the null device's numbers: nothing uses them, and
# with task/none no cgroup restricts them); Slurm hands them out as gres/gpu and sets
# CUDA_VISIBLE_DEVICES and SLURM_*_GPUS for each job and step as it would for real ones.
mkdir -p "$dir/dev"
for i in 0 1; do
  [ -c "$dir/dev/gpu$i" ] || mknod "$dir/dev/gpu$i" c 1 3
done
cat >"$dir/gres.conf" <<EOF
AutoDetect=off
NodeName=tune-n1 Name=gpu File=$dir/dev/gpu[0-1]
EOF
mem=$(awk '/MemTotal/ {print int($2/1024*0.8)}' /proc/meminfo)
cat >"$dir/slurm.conf" <<EOF
ClusterName=tunetest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
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
MpiDefault=none
JobRequeue=1
MinJobAge=10
ReturnToService=2
KillWait=10
SchedulerParameters=sched_interval=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
GresTypes=gpu
SlurmdParameters=config_overrides
NodeName=tune-n1 NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN
PartitionName=tune Nodes=tune-n1 Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF" -i
slurmd -f "$SLURM_CONF" -N tune-n1

# Ready when the node is idle and a one-task job runs.
for i in $(seq 1 60); do
  if sinfo -h -N -o '%T' 2>/dev/null | grep -q idle; then break; fi
  [ "$i" = 60 ] && { echo "test-slurm: the node never came up (see $dir/log)" >&2; down; exit 1; }
  sleep 0.5
done
out=$(timeout 60 srun -n1 hostname) || { echo "test-slurm: srun failed (see $dir/log)" >&2; down; exit 1; }
echo "test-slurm: cluster up in $dir (srun -n1 hostname -> $out)"
echo "export SLURM_CONF=$SLURM_CONF"

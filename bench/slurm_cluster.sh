#!/usr/bin/env bash
# A real one-machine Slurm cluster on loopback, without systemd, for `--execute slurm` tests and
# figures: munged + slurmctld + slurmd as the current user, everything (config, keys, sockets,
# state, logs) under DIR. One node, `skynode`, offers `Gres=gpu:k80:1` (gres.conf points it at
# /dev/null, standing in for the card) and `Feature=k80`; finished jobs are counted in
# DIR/jobcomp.txt (JobCompType=jobcomp/filetxt). On a machine with a real card,
# SLURM_GPU_FILE=/dev/nvidia0 SLURM_GPU_TYPE=h100 offers that card as `gpu:h100:1` with
# `Feature=h100` (bench/gpu_kernels.sh does so).
#
#   bash bench/slurm_cluster.sh start DIR   # prints `export SLURM_CONF=DIR/slurm.conf`
#   bash bench/slurm_cluster.sh stop DIR    # stops the three daemons by pid
#
# Needs Debian's slurmctld slurmd slurm-client munge (.ci/run installs them).
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi

stop() {
  for name in slurmd slurmctld munged; do
    pidfile="$dir/$name.pid"
    if [ -s "$pidfile" ]; then
      pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$pidfile"
    fi
  done
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

for bin in munged mungekey slurmctld slurmd sbatch; do
  if ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$bin" ]; then
    echo "$0: $bin is not installed (apt-get install -y slurmctld slurmd slurm-client munge)" >&2
    exit 1
  fi
done
export PATH="$PATH:/usr/sbin"

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chmod 700 "$dir/munge"
user=$(id -un)

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
ctld_port=$(free_port)
d_port=$(free_port)
# Four job slots per core (config_overrides lets slurmd offer more CPUs than it has): the
# test nodes mostly wait, and two cores would otherwise let two waiting jobs starve a third.
cpus=$(( $(nproc) * 4 ))
mem=$(awk '/MemTotal/ {print int($2/1024/2)}' /proc/meminfo)

# munge: a key of our own, its socket under DIR (nothing in /run or /etc is touched).
[ -s "$dir/munge/munge.key" ] || mungekey -c -k "$dir/munge/munge.key" -b 1024 >/dev/null
chmod 400 "$dir/munge/munge.key"
munged --force -S "$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"

gpu_file=${SLURM_GPU_FILE:-/dev/null}
gpu_type=${SLURM_GPU_TYPE:-k80}
cat > "$dir/gres.conf" <<EOF
NodeName=skynode Name=gpu Type=$gpu_type File=$gpu_file
EOF

cat > "$dir/slurm.conf" <<EOF
ClusterName=skyctl-test
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
LaunchParameters=enable_nss_slurm
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
ReturnToService=2
SlurmdTimeout=30
MinJobAge=30
DefMemPerCPU=256
KillWait=2
SlurmdParameters=config_overrides
NodeName=skynode NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:$gpu_type:1 Feature=$gpu_type State=UNKNOWN
PartitionName=main Nodes=skynode Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"

slurmctld -i -f "$SLURM_CONF"
slurmd -N skynode -f "$SLURM_CONF"

# Ready when the node is idle.
for _ in $(seq 100); do
  state=$(sinfo -h -n skynode -o %t 2>/dev/null || true)
  case "$state" in idle*|mix*|alloc*) echo "export SLURM_CONF=$SLURM_CONF"; exit 0 ;; esac
  sleep 0.1
done
echo "$0: the Slurm node did not come up; see $dir/slurmctld.log and $dir/slurmd.log" >&2
sinfo >&2 || true
exit 1

#!/usr/bin/env bash
# Slurm on the test hosts of hosts.sh: a cluster whose controller (slurmctld) runs in
# cotensor-h0 and whose nodes h0 .. h<N-1> each run a slurmd in their own host, with its own
# hostname (a UTS namespace), its own TmpFS (PMIx's files) and the machine's cgroup hierarchies (ip netns
# exec remounts /sys). `srun` then starts jobs across them as on a cluster: MPI through PMIx
# (--mpi=pmix), its traffic over TCP on the test hosts' subnet. Authentication is a munged of
# its own, on its own socket. Everything it writes is under /run/cotensor-slurm.
#
#   slurm_hosts.sh up [N]     hosts.sh up N (default 4), then munged, slurmctld and N slurmd;
#                             waits until the N nodes are idle (60 s)
#   slurm_hosts.sh run [--min-bytes B] [--timeout S] -- SRUN-ARGS...
#                             srun SRUN-ARGS from cotensor-h0, MPI pinned to TCP on the subnet;
#                             prints the bytes each host's veth moved and fails when one of the
#                             job's hosts moved fewer than B (default 65536); ended after S
#                             seconds (default 150, exit 124)
#   slurm_hosts.sh down       stops the daemons and whatever jobs left running in the test
#                             hosts, and removes /run/cotensor-slurm
#   slurm_hosts.sh once N [run options] -- SRUN-ARGS...
#                             up N, run, down: the run's status (the test's form)
#
# Needs root, iproute2 and Debian's slurm-wlm and munge; without them it says why and exits 77
# (ctest: skipped). See docs/distributed.md, "Under Slurm".
set -euo pipefail

readonly here=$(cd "$(dirname "$0")" && pwd)
readonly state=/run/cotensor-slurm ns_prefix=cotensor-h veth_prefix=cotensor-v
readonly subnet=10.78.0 lock_file=/run/lock/cotensor-test-hosts.lock
export SLURM_CONF=$state/slurm.conf

die() { echo "slurm_hosts.sh: $*" >&2; exit 1; }
skip() { echo "slurm_hosts.sh: skipped: $*" >&2; exit 77; }
usage() {
  echo "usage: $0 up [N] | down | run [--min-bytes B] [--timeout S] -- SRUN-ARGS..." \
       "| once N [run options] -- SRUN-ARGS..." >&2
  exit 2
}

require() {
  [[ $(id -u) == 0 ]] || skip "needs root (network, UTS and mount namespaces); uid $(id -u)"
  command -v ip >/dev/null || skip "no 'ip' command (Debian: apt-get install iproute2)"
  local tool
  for tool in slurmctld slurmd srun sinfo munged; do
    command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin command -v "$tool" >/dev/null ||
      skip "no $tool (Debian: apt-get install slurm-wlm munge)"
  done
  [[ -r /etc/munge/munge.key ]] || skip "no /etc/munge/munge.key (Debian's munge package makes it)"
}

# One user of the test hosts at a time (hosts.sh, mpirun_hosts.sh): held until this script exits.
take_lock() {
  [[ ${COTENSOR_HOSTS_LOCK_HELD:-0} == 1 ]] && return 0
  exec 9>"$lock_file"
  flock -w 150 9 || die "the test hosts stayed busy for 150 s"
  export COTENSOR_HOSTS_LOCK_HELD=1
}

down() {
  # Everything in the test hosts: slurmctld, the slurmd, the steps of jobs (slurmstepd and the
  # ranks they started, which outlive a srun ended by its timeout). The hosts run nothing but
  # tests, one user at a time (the lock, held here).
  bash "$here/hosts.sh" stop
  # munged runs outside them: by its pid file, while that pid is still munged (a stale file's
  # pid may be anyone's), given 5 s to go, then killed.
  local pid
  if [[ -f $state/munged.pid ]] && pid=$(<"$state/munged.pid") && [[ $pid =~ ^[0-9]+$ ]] &&
     [[ $(cat "/proc/$pid/comm" 2>/dev/null) == munged ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$state"
}

up() {
  local n=${1:-4}
  [[ $n =~ ^[1-9][0-9]?$ ]] && ((n <= 16)) || usage
  bash "$here/hosts.sh" up "$n" >/dev/null
  down  # a previous cluster, whole or half made
  mkdir -p "$state"
  local i nodes=''
  for ((i = 0; i < n; ++i)); do
    nodes+="NodeName=h$i NodeAddr=$subnet.$((i + 1)) CPUs=$(nproc) State=UNKNOWN"$'\n'
  done
  cat >"$SLURM_CONF" <<EOF
# Written by tests/distributed/slurm_hosts.sh: a test cluster on network namespaces.
ClusterName=cotensor-hosts
SlurmctldHost=h0($subnet.1)
AuthType=auth/munge
AuthInfo=socket=$state/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmUser=root
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd-%n.pid
SlurmdSpoolDir=$state/spool-%n
StateSaveLocation=$state/ctld
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd-%n.log
JobAcctGatherType=jobacct_gather/none
TmpFS=$state/tmp-%n
$nodes
PartitionName=hosts Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  # A fresh mount namespace per daemon (ip netns exec makes one): /sys is remounted there, so the
  # cgroup v1 hierarchies slurmd checks for are mounted again, as the machine has them.
  cat >"$state/node.sh" <<'EOF'
#!/bin/sh
# node.sh <hostname> <daemon...>: runs the daemon as host <hostname> (ip netns exec gave it the
# network and a mount namespace; unshare --uts, the hostname).
set -e
hostname "$1"
shift
v1=$(awk -F: '$2 != "" { print $2 }' /proc/self/cgroup | sort -u)
if [ -n "$v1" ]; then
  mount -t tmpfs -o mode=755 tmpfs /sys/fs/cgroup
  for c in $v1; do  # as the machine mounts them, co-mounted ones (cpu,cpuacct) together
    case $c in
      name=*) dir=${c#name=}; options=none,$c ;;
      *) dir=$c; options=$c ;;
    esac
    mkdir -p "/sys/fs/cgroup/$dir" && mount -t cgroup -o "$options" cgroup "/sys/fs/cgroup/$dir"
  done
else
  mount -t cgroup2 cgroup2 /sys/fs/cgroup
fi
exec "$@"
EOF
  mkdir -p "$state/ctld"
  PATH=$PATH:/usr/sbin munged --force --socket="$state/munge.socket" --pid-file="$state/munged.pid" \
    --log-file="$state/munged.log" --seed-file="$state/munged.seed" --key-file=/etc/munge/munge.key 9>&- ||
    die "munged did not start ($state/munged.log)"
  ip netns exec "${ns_prefix}0" unshare --uts sh "$state/node.sh" h0 /usr/sbin/slurmctld 9>&- ||
    die "slurmctld did not start ($state/slurmctld.log)"
  for ((i = 0; i < n; ++i)); do
    mkdir -p "$state/spool-h$i" "$state/tmp-h$i"
    ip netns exec "$ns_prefix$i" unshare --uts sh "$state/node.sh" "h$i" /usr/sbin/slurmd 9>&- ||
      die "slurmd on h$i did not start ($state/slurmd-h$i.log)"
  done
  for _ in $(seq 600); do
    if [[ $(ip netns exec "${ns_prefix}0" sinfo -h -t idle -o '%D' 2>/dev/null) == "$n" ]]; then
      echo "slurm_hosts.sh: $n nodes idle: h0..h$((n - 1)) ($subnet.1..$subnet.$n)"
      return 0
    fi
    sleep 0.1
  done
  ip netns exec "${ns_prefix}0" sinfo >&2 || true
  die "the nodes did not become idle in 60 s (logs in $state)"
}

counters() {  # <i>: rx+tx bytes of host i's outer veth end
  echo $(($(cat "/sys/class/net/$veth_prefix$1/statistics/rx_bytes") +
          $(cat "/sys/class/net/$veth_prefix$1/statistics/tx_bytes")))
}

run() {
  local min_bytes=65536 limit=150
  while (($# > 0)); do
    case $1 in
      --min-bytes) min_bytes=${2:-}; shift 2 || usage ;;
      --timeout) limit=${2:-}; shift 2 || usage ;;
      --) shift; break ;;
      *) usage ;;
    esac
  done
  (($# > 0)) || usage
  [[ -f $SLURM_CONF ]] || die "no cluster (slurm_hosts.sh up first)"
  local n i rc
  n=$(grep -c '^NodeName=' "$SLURM_CONF")
  declare -A before
  for ((i = 0; i < n; ++i)); do before[$i]=$(counters "$i"); done
  echo "slurm_hosts.sh: srun $*"
  set +e
  timeout -k 10 "$limit" ip netns exec "${ns_prefix}0" \
    env OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$subnet.0/24 \
    OMPI_MCA_oob_tcp_if_include=$subnet.0/24 srun "$@" 9>&-
  rc=$?
  set -e
  ((rc == 124)) && echo "slurm_hosts.sh: srun ran past ${limit}s and was ended" >&2
  local summary='' used=0
  for ((i = 0; i < n; ++i)); do
    local moved=$(($(counters "$i") - before[$i]))
    summary+=" h$i=$moved"
    ((moved < min_bytes)) || used=$((used + 1))
  done
  echo "slurm_hosts.sh: veth bytes:$summary (at least $min_bytes on two hosts or more required)"
  ((rc == 0)) || return "$rc"
  if ((used < 2)); then
    echo "slurm_hosts.sh: FAILED: fewer than two hosts moved $min_bytes bytes: the job's" \
         "traffic did not cross the test hosts' network" >&2
    return 1
  fi
}

(($# > 0)) || usage
command=$1
shift
case $command in
  up) require; take_lock; up "$@" ;;
  down) require; take_lock; down ;;
  run) require; take_lock; run "$@" ;;
  once)
    require
    take_lock
    (($# > 0)) || usage
    n=$1
    shift
    trap down EXIT
    trap 'exit 143' TERM HUP
    trap 'exit 130' INT
    up "$n"
    run "$@"
    ;;
  *) usage ;;
esac

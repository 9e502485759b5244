#!/usr/bin/env bash
# mpirun across the test hosts of hosts.sh: N ranks round-robin over the hosts (rank r on host
# r mod k), started through netns_agent.sh (no ssh), MPI traffic on TCP only (no shared memory:
# pml ob1, btl tcp,self) and pinned, with mpirun's own out-of-band channel, to the hosts' subnet.
# mpirun itself runs inside the first host, since the subnet exists only inside the hosts.
# Prints the bytes each host's veth moved during the run and fails when a host moved fewer than
# --min-bytes, so that a test shows its traffic really crossed the links.
#
#   mpirun_hosts.sh -np N [--hosts h0,h1,...] [--min-bytes B] [--timeout S]
#                   [--mpirun-arg ARG]... -- PROGRAM [ARGS...]
#
#   --hosts      test hosts to use, as h<i> or cotensor-h<i> (default: the first N of those up)
#   --min-bytes  bytes (received + sent) each host's veth must move (default 65536)
#   --timeout    seconds before mpirun is ended (default 150); exit 124 then. A run that
#                stalls before its traffic starts is ended at 45 s and retried once (below),
#                when the timeout is longer than that
#   --mpirun-arg one more word for mpirun's command line (e.g. --enable-recovery); repeatable
#
# Environment: MPIRUN (default mpirun) is the Open MPI mpirun to use; the ranks inherit the rest.
# Exit: the program's (mpirun's) status; 1 when the traffic check fails; 77 (skipped) without
# root, iproute2 or mpirun. See docs/distributed.md, "Test hosts on one machine".
set -euo pipefail

readonly here=$(cd "$(dirname "$0")" && pwd)
readonly ns_prefix=cotensor-h veth_prefix=cotensor-v subnet=10.78.0.0/24

usage() {
  echo "usage: $0 -np N [--hosts h0,h1,...] [--min-bytes B] [--timeout S]" \
       "[--mpirun-arg ARG]... -- PROGRAM [ARGS...]" >&2
  exit 2
}
skip() { echo "mpirun_hosts.sh: skipped: $*" >&2; exit 77; }

np='' hosts_arg='' min_bytes=65536 limit=150
extra=()
while (($# > 0)); do
  case $1 in
    -np | -n) np=${2:-}; shift 2 || usage ;;
    --hosts) hosts_arg=${2:-}; shift 2 || usage ;;
    --min-bytes) min_bytes=${2:-}; shift 2 || usage ;;
    --timeout) limit=${2:-}; shift 2 || usage ;;
    --mpirun-arg) extra+=("${2:-}"); shift 2 || usage ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
(($# > 0)) || usage
[[ $np =~ ^[1-9][0-9]?$ ]] || { echo "mpirun_hosts.sh: -np must be 1..99" >&2; usage; }
[[ $min_bytes =~ ^[0-9]+$ && $limit =~ ^[1-9][0-9]*$ ]] || usage

command -v ip >/dev/null || skip "no 'ip' command (Debian: apt-get install iproute2)"
[[ $(id -u) == 0 ]] || skip "needs root ('ip netns exec'); uid $(id -u)"
mpirun=${MPIRUN:-mpirun}  # ctest passes the mpirun CMake found
command -v "$mpirun" >/dev/null || skip "no $mpirun (Debian: openmpi-bin)"

# One run at a time on the hosts, across processes (another ctest run's fixture may take them
# down between two of our tests): the lock of hosts.sh, held until this script exits.
exec 9>/run/lock/cotensor-test-hosts.lock
flock -w 150 9 || { echo "mpirun_hosts.sh: the test hosts stayed busy for 150 s" >&2; exit 1; }

up_list() { bash "$here/hosts.sh" list; }
up_hosts=$(up_list)
if [[ -n $hosts_arg ]]; then
  hosts=()
  IFS=, read -ra wanted <<<"$hosts_arg"
  for h in "${wanted[@]}"; do
    [[ $h == h[0-9]* ]] && h=cotensor-$h
    [[ $h =~ ^${ns_prefix}[0-9]+$ ]] || { echo "mpirun_hosts.sh: '$h' is not a test host" >&2; exit 2; }
    hosts+=("$h")
  done
else
  if [[ -z $up_hosts ]]; then
    COTENSOR_HOSTS_LOCK_HELD=1 bash "$here/hosts.sh" up 4 >/dev/null
    up_hosts=$(up_list)
  fi
  read -ra hosts <<<"$(echo $up_hosts)"
  # No more hosts than ranks: a host without a rank would move no data.
  ((${#hosts[@]} <= np)) || hosts=("${hosts[@]:0:np}")
fi
((${#hosts[@]} > 0)) || { echo "mpirun_hosts.sh: no test hosts" >&2; exit 1; }
# Hosts that are missing (never up, or taken down by another run) are brought up here.
need=0
for h in "${hosts[@]}"; do
  grep -qx "$h" <<<"$up_hosts" || need=$((${h#"$ns_prefix"} + 1 > need ? ${h#"$ns_prefix"} + 1 : need))
done
if ((need > 0)); then
  echo "mpirun_hosts.sh: bringing up the test hosts (hosts.sh up $need)"
  COTENSOR_HOSTS_LOCK_HELD=1 bash "$here/hosts.sh" up "$need" >/dev/null
fi

counters() {  # <host>: rx+tx bytes of its outer veth end
  local v=$veth_prefix${1#"$ns_prefix"}
  echo $(($(cat "/sys/class/net/$v/statistics/rx_bytes") + $(cat "/sys/class/net/$v/statistics/tx_bytes")))
}

k=${#hosts[@]}
slots=$(((np + k - 1) / k))
host_list=''
for h in "${hosts[@]}"; do host_list+=${host_list:+,}$h:$slots; done
declare -A before
for h in "${hosts[@]}"; do before[$h]=$(counters "$h"); done

echo "mpirun_hosts.sh: $np ranks over ${hosts[*]} (rank r on host r mod $k)"
start=$SECONDS
stalled_hosts() {  # the hosts whose veth moved under 20 kB since `before`
  local h out=''
  for h in "${hosts[@]}"; do
    (($(counters "$h") - before[$h] < 20000)) && out+=" $h"
  done
  echo "$out"
}
# launch <seconds> [<stall seconds>]: one mpirun, ended after <seconds>; with <stall seconds>
# also ended then if every link has moved under 20 kB by that time (sets stalled=1). Sets rc.
launch() {
  local launched=$SECONDS watchdog=''
  stalled=0
  set +e
  # --map-by node: round-robin over the hosts. The HNP runs in the first host but no rank: the
  # machine's own hostname is not in -H, so every rank is started through the agent.
  timeout -k 10 "$1" ip netns exec "${hosts[0]}" \
    "$mpirun" -np "$np" -H "$host_list" --map-by node --oversubscribe --bind-to none \
    --allow-run-as-root \
    --mca plm_rsh_agent "$here/netns_agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
    ${extra[@]+"${extra[@]}"} "${program[@]}" 9>&- &
  local job=$!
  if [[ -n ${2:-} ]] && (($2 < $1)); then
    # timeout passes the TERM on to mpirun, which ends its daemons and ranks.
    # Its sleep goes with it, and it holds none of our output (a caller reading it to the end
    # would wait for the sleep).
    ( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
      sleep "$2" &
      nap=$!
      wait "$nap"
      if (($(wc -w <<<"$(stalled_hosts)") == ${#hosts[@]})); then
        echo stalled >"$stall_mark"
        kill -TERM "$job" 2>/dev/null
      fi ) </dev/null >/dev/null 2>&1 9>&- &
    watchdog=$!
  fi
  wait "$job"
  rc=$?
  if [[ -n $watchdog ]]; then
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
  fi
  set -e
  [[ -s $stall_mark ]] && { stalled=1; : >"$stall_mark"; }
  # 124 or 137 from timeout, not from mpirun (which exits 137 when a rank was killed by KILL).
  if ((stalled)) || { ((rc == 124 || rc == 137)) && ((SECONDS - launched >= $1)); }; then
    ((stalled)) || echo "mpirun_hosts.sh: mpirun ran past ${1}s and was ended" >&2
    # Its daemons and ranks, if any remain, are ended (the lock is ours: so is all in the hosts).
    COTENSOR_HOSTS_LOCK_HELD=1 bash "$here/hosts.sh" stop
  fi
}
program=("$@")
# Where the watchdog says it ended a stalled run: a file of our own (mktemp creates it, empty).
stall_mark=$(mktemp /tmp/cotensor-mpirun-hosts-stall.XXXXXX)
trap 'rm -f "$stall_mark"' EXIT
# A run that stalls before the program's traffic starts (every link under 20 kB in stall_s = 45 s:
# the launch and MPI_Init's exchange) is ended then and retried once, saying so; a run whose
# traffic started has the whole --timeout, and a hang after that fails as it is. Such stalls came
# in about 1 launch in 20 (any rank count) while the hosts shared Open MPI's session directories
# (daemons of two hosts raced to create the same path, one exited: netns_agent.sh now gives each
# host its own); none in 280 launches since (2026-11-26). The retry stays as a guard.
stall_s=45
launch "$limit" "$stall_s"
if ((stalled)); then
  echo "mpirun_hosts.sh: stalled before the program's traffic (every link under 20 kB" \
       "in $stall_s s): retrying once" >&2
  for h in "${hosts[@]}"; do before[$h]=$(counters "$h"); done
  launch "$limit"
fi

moved_too_little=()
summary=''
echo "mpirun_hosts.sh: bytes through each host's veth (received + sent), $((SECONDS - start)) s:"
for h in "${hosts[@]}"; do
  moved=$(($(counters "$h") - before[$h]))
  printf '  %-13s %-12s %12d bytes\n' "$h" "$veth_prefix${h#"$ns_prefix"}" "$moved"
  summary+=" ${h#cotensor-}=$moved"
  ((moved >= min_bytes)) || moved_too_little+=("$h")
done
echo "mpirun_hosts.sh: veth bytes:$summary (at least $min_bytes each required)"
((rc == 0)) || exit "$rc"
if ((${#moved_too_little[@]} > 0)); then
  echo "mpirun_hosts.sh: FAILED: fewer than $min_bytes bytes crossed the links of" \
       "${moved_too_little[*]}: the traffic did not go over the test hosts' network" >&2
  exit 1
fi

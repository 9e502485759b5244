#!/usr/bin/env bash
# Test hosts on one machine: N network namespaces cotensor-h0 .. cotensor-h<N-1>, each joined by
# a veth pair (cotensor-v<i> outside, eth0 inside) to the bridge cotensor-br0, each with its own
# address 10.78.0.<i+1>/24. The subnet exists only inside the namespaces: the bridge and the
# outer veth ends carry no address (IPv4 or IPv6), so nothing outside can route to it or from it.
# See docs/distributed.md, "Test hosts on one machine", and DESIGN.md section 9.
#
#   hosts.sh up [N]      create the hosts (default 4, at most 16); idempotent
#   hosts.sh down        remove every cotensor-h*, cotensor-v* and cotensor-br0, also after a
#                        failed or partial up (processes still inside a host are ended first)
#   hosts.sh stop        end every process still inside a host (TERM, up to 2 s, then KILL): a
#                        killed run's ranks, daemons, the steps of a Slurm job; the hosts stay
#   hosts.sh list        the hosts that are up, one name a line (nothing when none are)
#   hosts.sh status      the hosts, their addresses and their veth byte counters
#
# up, stop and down need root and iproute2; without them they say why and exit 77 (ctest: skipped).
set -Eeuo pipefail

readonly ns_prefix=cotensor-h veth_prefix=cotensor-v bridge=cotensor-br0
readonly subnet=10.78.0 max_hosts=16

readonly lock_file=/run/lock/cotensor-test-hosts.lock

die() { echo "hosts.sh: $*" >&2; exit 1; }

# One user of the hosts at a time across processes (two ctest runs, a person at a shell):
# mpirun_hosts.sh holds this lock for a whole run, and says so in COTENSOR_HOSTS_LOCK_HELD when
# it calls up itself. Waits at most 150 s.
take_lock() {
  [[ ${COTENSOR_HOSTS_LOCK_HELD:-0} == 1 ]] && return 0
  exec 9>"$lock_file"
  flock -w 150 9 || die "another run has held $lock_file for 150 s"
}
skip() { echo "hosts.sh: skipped: $*" >&2; exit 77; }

# Why the hosts cannot be made here, if they cannot: exit 77 with the reason.
require_privileges() {
  command -v ip >/dev/null || skip "no 'ip' command (Debian: apt-get install iproute2)"
  [[ $(id -u) == 0 ]] || skip "needs root (network namespaces, a bridge, veth pairs); uid $(id -u)"
  # Root without CAP_SYS_ADMIN / CAP_NET_ADMIN (an unprivileged container) cannot either.
  if ! unshare --net true 2>/dev/null; then
    skip "root, but creating a network namespace is not permitted here"
  fi
}

# The namespaces that are ours, whatever N made them.
our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${ns_prefix}[0-9]+$" | sort -V || true
}
# The outer veth ends that are ours (left in the root namespace).
our_veths() {
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' \
    | grep -E "^${veth_prefix}[0-9]+$" | sort -V || true
}

disable_ipv6() {  # <interface> in the current namespace: no link-local address on our links
  local f=/proc/sys/net/ipv6/conf/$1/disable_ipv6
  if [[ -w $f ]]; then echo 1 >"$f"; fi
}

# Leftover ranks or daemons of a killed run, in every host: TERM, up to 2 s, then KILL, by pid.
stop_processes() {
  local ns pid pids tries
  for ns in $(our_namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n $pids ]]; then
      echo "hosts.sh: ending processes left in $ns: $(echo $pids)" >&2
      for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
      for ((tries = 0; tries < 20; ++tries)); do
        [[ -z $(ip netns pids "$ns" 2>/dev/null || true) ]] && break
        sleep 0.1
      done
      for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
    fi
  done
}

down() {
  require_privileges
  take_lock
  stop_processes
  local ns
  for ns in $(our_namespaces); do
    ip netns del "$ns"  # takes its eth0, and with it the veth pair
  done
  local v
  for v in $(our_veths); do ip link del "$v" 2>/dev/null || true; done
  if ip link show "$bridge" >/dev/null 2>&1; then ip link del "$bridge"; fi
  rm -rf /tmp/cotensor-ompi-"$ns_prefix"*  # the hosts' session directories (netns_agent.sh)
  echo "hosts.sh: down"
}

up() {
  local n=$1
  require_privileges
  take_lock
  # A partial up is finished, not repeated: each step checks what is already there.
  trap 'echo "hosts.sh: up failed; removing what it made" >&2; trap - ERR; down >&2; exit 1' ERR
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
  fi
  disable_ipv6 "$bridge"
  ip link set "$bridge" up
  local i ns v
  for ((i = 0; i < n; ++i)); do
    ns=$ns_prefix$i v=$veth_prefix$i
    if ! ip netns list | awk '{print $1}' | grep -qx "$ns"; then
      ip netns add "$ns"
    fi
    # IPv6 off inside before eth0 exists: the host has one address, its IPv4 one.
    ip netns exec "$ns" sh -c 'for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 \
      /proc/sys/net/ipv6/conf/default/disable_ipv6; do [ -w "$f" ] && echo 1 >"$f"; done; true'
    if ! ip link show "$v" >/dev/null 2>&1 || ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
      ip link del "$v" 2>/dev/null || true
      ip -n "$ns" link del eth0 2>/dev/null || true
      ip link add "$v" type veth peer name eth0 netns "$ns"
    fi
    disable_ipv6 "$v"
    ip link set "$v" master "$bridge" up
    ip -n "$ns" addr replace "$subnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
  # Wait (at most 5 s) for every link to come up, so that the first run does not race it.
  local tries ok
  for ((tries = 0; tries < 50; ++tries)); do
    ok=1
    for ((i = 0; i < n; ++i)); do
      [[ $(cat "/sys/class/net/$veth_prefix$i/operstate" 2>/dev/null) == up ]] || ok=0
    done
    ((ok)) && break
    sleep 0.1
  done
  ((ok)) || { echo "hosts.sh: the veth links did not come up within 5 s" >&2; false; }
  trap - ERR
  status
}

status() {
  local ns i v addr rx tx found=0
  printf '%-14s %-14s %-13s %14s %14s\n' host address veth rx_bytes tx_bytes
  for ns in $(our_namespaces); do
    found=1 i=${ns#"$ns_prefix"} v=$veth_prefix${ns#"$ns_prefix"}
    addr=$subnet.$((i + 1))
    rx=$(cat "/sys/class/net/$v/statistics/rx_bytes" 2>/dev/null || echo -)
    tx=$(cat "/sys/class/net/$v/statistics/tx_bytes" 2>/dev/null || echo -)
    printf '%-14s %-14s %-13s %14s %14s\n' "$ns" "$addr" "$v" "$rx" "$tx"
  done
  ((found)) || echo "(no test hosts)"
  if ip link show "$bridge" >/dev/null 2>&1; then echo "bridge $bridge: present"; fi
}

case ${1:-} in
  up)
    n=${2:-4}
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= max_hosts)) || die "N must be 1..$max_hosts, not '$n'"
    up "$n"
    ;;
  down) down ;;
  stop) require_privileges; take_lock; stop_processes ;;
  list) our_namespaces ;;
  status) status ;;
  *) echo "usage: $0 up [N] | down | stop | list | status" >&2; exit 2 ;;
esac

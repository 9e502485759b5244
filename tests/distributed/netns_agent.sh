#!/bin/sh
# Open MPI's launcher agent for the test hosts of hosts.sh (--mca plm_rsh_agent <this file>):
# where ssh would log in to <host> and run the command line through its shell, this runs it
# through /bin/sh inside the network namespace <host> with `ip netns exec` (needs root).
#   netns_agent.sh [ssh-style options] <host> <command words...>
# Leading ssh-style options are skipped (with the argument of those that take one), as an
# rsh launcher may pass some. Only the test hosts cotensor-h<i> are accepted: this agent never
# reaches anything but them. See docs/distributed.md, "Test hosts on one machine".
set -eu
while [ $# -gt 0 ]; do
  case $1 in
    -[bcDEeFIiJLlmOopQRSWwB]) shift 2 ;;  # ssh options that take an argument
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "netns_agent.sh: usage: netns_agent.sh [options] <host> <command...>" >&2
  exit 2
fi
host=$1
shift
case $host in
  cotensor-h[0-9] | cotensor-h[0-9][0-9]) ;;
  *) echo "netns_agent.sh: '$host' is not a test host (cotensor-h<i>, tests/distributed/hosts.sh)" >&2
     exit 2 ;;
esac
# Each host gets a /tmp of its own for Open MPI's session directories, as a real host has: the
# hosts share the machine's file system and hostname, and daemons of two hosts creating the same
# session path at once failed now and then (orte_session_dir: "File exists"), leaving mpirun
# waiting for a daemon that had exited (a run in 20 stalled).
tmp=/tmp/cotensor-ompi-$host
mkdir -p "$tmp"
# ssh joins the command words with spaces and gives the line to the remote shell: the same here.
exec ip netns exec "$host" env OMPI_MCA_orte_tmpdir_base="$tmp" /bin/sh -c "$*"

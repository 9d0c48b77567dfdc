#!/usr/bin/env bash
# Runs a command on N simulated hosts with K ranks each (docs/multihost.md):
#   scripts/multihost/mpirun-hosts.sh N K -- build/megatron train ...
# The hosts come from `netns-hosts.sh up` (at least N of them); mpirun runs on their launch host
# (namespace mglaunch). Prints the mpirun line first:
# on a real cluster the same line runs without the agent (ssh is the default) and with the
# cluster's own subnet in the two *_if_include parameters.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${MG_NETNS_DIR:-/tmp/mg-netns}
[ $# -ge 4 ] && [ "$3" = -- ] || { sed -n '2,7p' "$0" >&2; exit 2; }
hosts=$1 per_host=$2
shift 3
ip netns list | grep -q "^mghost$((hosts - 1))\b" ||
  { echo "mpirun-hosts: mghost$((hosts - 1)) is not up: run netns-hosts.sh up $hosts" >&2; exit 2; }
hostfile=$dir/hostfile.${hosts}x$per_host
"$here/netns-hosts.sh" hostfile "$hosts" "$per_host" >"$hostfile"

# - ranks fill the hosts in order (--map-by slot): ranks 0..K-1 on mghost0, so a TP group of
#   adjacent ranks stays inside a host (docs/parallelism.md, rank order tp-cp-dp-pp);
# - pml ob1 + btl tcp,self: TCP between every pair of ranks, no shared memory (vader) or UCX
#   (whose shared-memory transports would bypass the simulated network);
# - both the MPI traffic (btl) and the daemons' control channel (oob) on the hosts' subnet;
# - --bind-to none and mpi_yield_when_idle: the simulated hosts share this machine's cores, so a
#   rank waiting on the network yields its core (8 ranks busy-polling TCP on 2 cores once took a
#   13 s run past 300 s in a test run: the sandbox's network stack spent it in system time).
cmd=(mpirun --hostfile "$hostfile" -np $((hosts * per_host)) --map-by slot --bind-to none
  --mca mpi_yield_when_idle 1
  --mca plm_rsh_agent "$here/netns-agent.sh" --mca plm_rsh_no_tree_spawn 1
  --mca pml ob1 --mca btl tcp,self
  --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24
  -x OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}")
[ "$(id -u)" != 0 ] || cmd+=(--allow-run-as-root)
cmd+=("$@")
printf "mpirun-hosts:"; printf " %q" "${cmd[@]}"; echo
exec ip netns exec mglaunch "${cmd[@]}"

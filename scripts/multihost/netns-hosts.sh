#!/usr/bin/env bash
# Simulated hosts for multi-host MPI runs on one machine (docs/multihost.md): host i is the
# network namespace mghost<i>, joined to the bridge mgbr0 in the root namespace by the veth pair
# mgveth<i> (root side) / eth0 (inside), address 10.77.0.<i+1>/24. mpirun runs on a launch host
# of its own, mglaunch (10.77.0.254, link mgvethlaunch), whose TCP gives up on an unanswered
# peer after seconds (net.ipv4.tcp_retries2=4 where the kernel's default 15 takes
# ~15 min), so a host cut off mid-run cannot hold mpirun's abort (docs/multihost.md).
# Needs root and `ip netns`.
#   netns-hosts.sh up N [K]      create mghost0..N-1 (adds them to /etc/hosts) and write the
#                                hostfile $MG_NETNS_DIR/hostfile ("mghost<i> slots=K", K=1)
#   netns-hosts.sh hostfile N K  print the hostfile of the first N hosts with K slots each
#   netns-hosts.sh down          remove every host, the bridge and the /etc/hosts lines (idempotent)
#   netns-hosts.sh check         exit 0 when namespaces can be made here, else say why
#   netns-hosts.sh status        each host's link, the launch host's neighbour entry for it and
#                                processes (to diagnose a stalled job)
set -euo pipefail

DIR=${MG_NETNS_DIR:-/tmp/mg-netns}
BRIDGE=mgbr0
SUBNET=10.77.0
LAUNCH_TCP_RETRIES=4  # ~7 s; above the no-hang tests' timeout + census (4 s)
MARK="# mg-netns-hosts"  # tags our /etc/hosts lines so `down` removes exactly them

address() { echo "$SUBNET.$(($1 + 1))"; }

# Namespace $1 joined to the bridge by veth $2 with address $3.
join() {
  ip netns add "$1"
  ip link add "$2" type veth peer name eth0 netns "$1"
  ip link set "$2" master "$BRIDGE" up
  ip -n "$1" addr add "$3/24" dev eth0
  ip -n "$1" link set eth0 up
  ip -n "$1" link set lo up
}

hostfile() {
  for ((i = 0; i < $1; i++)); do echo "mghost$i slots=$2"; done
}

down() {
  for ns in $(ip netns list 2>/dev/null | awk '/^mg(host[0-9]+|launch)/ {print $1}'); do
    ip netns del "$ns"
  done
  for link in $(ip -o link show 2>/dev/null | grep -o 'mgveth[0-9a-z]\+' | sort -u); do
    ip link del "$link" 2>/dev/null || true  # gone with its namespace's peer
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  if grep -q "$MARK" /etc/hosts 2>/dev/null; then
    grep -v "$MARK" /etc/hosts >"$DIR.hosts" || true
    cat "$DIR.hosts" >/etc/hosts  # rewrite in place: /etc/hosts may be a bind mount
    rm -f "$DIR.hosts"
  fi
  rm -rf "$DIR"
}

check() {
  [ "$(id -u)" = 0 ] || { echo "needs root (ip netns)"; return 1; }
  command -v ip >/dev/null || { echo "no 'ip' command (iproute2)"; return 1; }
  local probe=mghostprobe$$
  ip netns add "$probe" 2>/dev/null || { echo "ip netns add fails here"; return 1; }
  ip netns del "$probe"
}

up() {
  local n=$1 slots=${2:-1}
  down
  mkdir -p "$DIR"
  ip link add "$BRIDGE" type bridge
  ip link set "$BRIDGE" up
  join mglaunch mgvethlaunch "$SUBNET.254"
  ip netns exec mglaunch sysctl -qw net.ipv4.tcp_retries2=$LAUNCH_TCP_RETRIES
  for ((i = 0; i < n; i++)); do
    join "mghost$i" "mgveth$i" "$(address "$i")"
    echo "$(address "$i") mghost$i $MARK" >>/etc/hosts
  done
  hostfile "$n" "$slots" >"$DIR/hostfile"
  echo "netns-hosts: $n hosts up (mghost0..mghost$((n - 1)), $SUBNET.1-$n); hostfile $DIR/hostfile"
}

status() {
  ip -br link show master "$BRIDGE" 2>&1 || true
  for ns in $(ip netns list 2>/dev/null | awk '/^mg(host[0-9]+|launch)/ {print $1}'); do
    local addr neigh=""
    addr=$(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')
    # The launch host's ARP entry for it (no ping here): REACHABLE/STALE once they have talked.
    [ "$ns" = mglaunch ] || [ -z "$addr" ] ||
      neigh=" mglaunch's neighbour entry: $(ip -n mglaunch neigh show "${addr%/*}" | awk '{print $NF}')"
    echo "$ns ($addr)$neigh:"
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ',' | sed 's/,$//')
    [ -z "$pids" ] || ps -o pid=,stat=,etime=,args= -p "$pids" | cut -c1-200 | sed 's/^/  /'
  done
  grep "$MARK" /etc/hosts 2>&1 || echo "no mghost lines in /etc/hosts"
}

case "${1:-}" in
  up) up "${2:?usage: netns-hosts.sh up N [K]}" "${3:-1}" ;;
  hostfile) hostfile "${2:?usage: netns-hosts.sh hostfile N K}" "${3:?}" ;;
  down) down ;;
  check) check ;;
  status) status ;;
  *) sed -n '9,15p' "$0" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Open MPI's remote-shell agent for the simulated hosts (--mca plm_rsh_agent): called as ssh is,
# "<host> <command...>", it runs the command in that host's network namespace with the host's
# own hostname (a UTS namespace), so each orted daemon and its ranks see only the host's veth
# address, as on a separate machine. The command words are joined and run by a shell, as sshd
# does with a remote command.
set -euo pipefail
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host && $*"

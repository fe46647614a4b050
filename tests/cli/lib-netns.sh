# lib-netns.sh - several "hosts" on one machine, for tests of what crosses
# a network. Sourced by tests/cli/t9*.sh after lib.sh.
#
#   netns_hosts N           N hosts in network namespaces, joined by a bridge
#                           in a switch namespace (each host: one veth, its
#                           own address 10.77.0.(i+1)/24); skip_all without
#                           CAP_NET_ADMIN, iproute2 or mpirun. Removed at exit, on
#                           SIGINT/SIGTERM and when a test fails.
#   netns_addr I            host I's address
#   netns_exec I CMD...     run CMD on host I
#   netns_mpirun -H HOSTS ...  mpirun started on host 0 that reaches the
#                           others through an rsh agent entering their
#                           namespace (and a UTS namespace named after it,
#                           where unshare can: a host name of its own);
#                           TCP on the veth addresses only
#   netns_tc I QDISC...     any other qdisc on host I's link (tbf: TBF prereq)
#   netns_netem I ARGS...   tc netem on host I's link (delay, loss); the
#                           prerequisite NETEM is set when the kernel has
#                           the netem qdisc
#
# Binding: every namespace sees all of this machine's cores, so Open MPI's
# default binding puts rank 0 of every "host" on core 0, and then every
# collective costs a scheduler slice (4 ms: an 8-byte allreduce measured
# 4,000 us instead of about 10 us). The hosts share the real cores, so the
# binding that matches them is none: netns_mpirun passes --bind-to none.

NETNS_NET=10.77.0
NETNS_PREFIX="gk$$"
NETNS_N=0
NETNS_DIR=

netns_cleanup() {
	i=0
	while [ "$i" -lt "$NETNS_N" ]; do
		ns="${NETNS_PREFIX}h$i"
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$ns" 2>/dev/null
		i=$((i + 1))
	done
	ip netns pids "${NETNS_PREFIX}sw" 2>/dev/null | xargs -r kill -9 2>/dev/null
	ip netns del "${NETNS_PREFIX}sw" 2>/dev/null
	[ -n "$NETNS_DIR" ] && rm -rf "$NETNS_DIR"
	NETNS_N=0
}

netns_hosts() {
	n=$1
	if ! command -v ip >/dev/null 2>&1; then
		skip_all="no 'ip' command (iproute2)"
		test_done
	fi
	if ! command -v mpirun >/dev/null 2>&1; then
		skip_all="no mpirun (Open MPI)"
		test_done
	fi
	if ! ip netns add "${NETNS_PREFIX}sw" 2>/dev/null; then
		skip_all="cannot create network namespaces (needs root or CAP_NET_ADMIN)"
		test_done
	fi
	# sharness runs test_done's cleanup only on success: trap the rest.
	trap 'netns_cleanup' EXIT
	trap 'netns_cleanup; exit 130' INT
	trap 'netns_cleanup; exit 143' TERM
	sw="${NETNS_PREFIX}sw"
	# Open MPI splits plm_rsh_agent on spaces: the agent and its host map
	# live in a directory whose path has none (sharness' trash has one).
	NETNS_DIR=$(mktemp -d /tmp/gk-netns-XXXXXX) || return 1
	ip -n "$sw" link add br0 type bridge &&
	ip -n "$sw" link set br0 up &&
	ip -n "$sw" link set lo up || return 1
	i=0
	while [ "$i" -lt "$n" ]; do
		ns="${NETNS_PREFIX}h$i"
		ip netns add "$ns" || return 1
		NETNS_N=$((i + 1))
		ip link add "${NETNS_PREFIX}e$i" netns "$ns" type veth \
			peer name "p$i" netns "$sw" &&
		ip -n "$sw" link set "p$i" master br0 &&
		ip -n "$sw" link set "p$i" up &&
		ip -n "$ns" link set "${NETNS_PREFIX}e$i" name eth0 &&
		ip -n "$ns" addr add "$NETNS_NET.$((i + 1))/24" dev eth0 &&
		ip -n "$ns" link set eth0 up &&
		ip -n "$ns" link set lo up || return 1
		echo "$NETNS_NET.$((i + 1)) $ns" >>"$NETNS_DIR/netns.map"
		i=$((i + 1))
	done
	# Open MPI calls the agent as "AGENT [options] HOST COMMAND...".
	cat >"$NETNS_DIR/netns-rsh" <<-EOF
	#!/bin/sh
	while [ \$# -gt 0 ]; do
		case \$1 in -*) shift ;; *) break ;; esac
	done
	host=\$1
	shift
	ns=\$(awk -v h="\$host" '\$1 == h { print \$2 }' "$NETNS_DIR/netns.map")
	[ -n "\$ns" ] || { echo "netns-rsh: unknown host '\$host'" >&2; exit 255; }
	# its own host name too (a UTS namespace), as a real host has
	if unshare --uts true 2>/dev/null; then
		exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$ns" "\$*"
	fi
	exec ip netns exec "\$ns" sh -c "\$*"
	EOF
	chmod +x "$NETNS_DIR/netns-rsh"
	if tc -n "${NETNS_PREFIX}h0" qdisc add dev eth0 root netem delay 0ms 2>/dev/null; then
		tc -n "${NETNS_PREFIX}h0" qdisc del dev eth0 root
		test_set_prereq NETEM
	else
		say "# netem tests skip: this kernel has no netem qdisc (sch_netem)"
	fi
	if tc -n "${NETNS_PREFIX}h0" qdisc add dev eth0 root tbf rate 1gbit burst 64kb latency 50ms 2>/dev/null; then
		tc -n "${NETNS_PREFIX}h0" qdisc del dev eth0 root
		test_set_prereq TBF
	fi
}

netns_addr() {
	echo "$NETNS_NET.$(($1 + 1))"
}

netns_exec() {
	i=$1
	shift
	ip netns exec "${NETNS_PREFIX}h$i" "$@"
}

netns_mpirun() {
	netns_exec 0 timeout "${NETNS_TIMEOUT:-300}" mpirun --mca plm_rsh_agent "$NETNS_DIR/netns-rsh" \
		--mca btl tcp,self --mca btl_tcp_if_include "$NETNS_NET.0/24" \
		--mca oob_tcp_if_include "$NETNS_NET.0/24" --bind-to none "$@"
}

netns_tc() {
	i=$1
	shift
	tc -n "${NETNS_PREFIX}h$i" qdisc replace dev eth0 root "$@"
}

netns_netem() {
	i=$1
	shift
	ip -n "${NETNS_PREFIX}h$i" link show eth0 >/dev/null &&
	tc -n "${NETNS_PREFIX}h$i" qdisc replace dev eth0 root netem "$@"
}

#!/bin/sh
test_description='several hosts: allreduce-bench and gpu-topo rankfiles across network namespaces

Two "hosts" (network namespaces joined by a bridge, TCP between them, no
shared memory), two ranks each, launched by mpirun through an rsh agent:
every algorithm gives the same checked results as on one host, gpu-topo
rankfiles place ranks on the hosts they name, and a rate limit (tbf),
latency and loss (netem, where the kernel has it) on one link move the
figures as expected without breaking anything.'
. "$(dirname "$0")/lib.sh"
. "$GK_TOP/tests/cli/lib-netns.sh"

netns_hosts 2 || { skip_all="could not set up the namespaces"; test_done; }
A=$(netns_addr 0)
B=$(netns_addr 1)

# size count type redop #wrong(out) #wrong(in): what must not depend on
# where the ranks run.
rows() {
	grep -v "^#" "$1" | awk '{print $1, $2, $3, $4, $9, $13}'
}

test_expect_success 'the hosts reach each other over their own addresses' '
	netns_exec 0 sh -c "exec 3<>/dev/tcp/$B/1" 2>/dev/null;
	netns_mpirun -H $A:2,$B:2 -np 4 sh -c "echo \$OMPI_COMM_WORLD_RANK \$(ip -4 -o addr show eth0 | awk \"{print \\\$4}\")" >out &&
	sort out >actual &&
	printf "%s\n" "0 $A/24" "1 $A/24" "2 $B/24" "3 $B/24" >expect &&
	test_cmp expect actual
'

for algo in ring rd rabenseifner native; do
	test_expect_success "2 hosts x 2 ranks, --algo $algo: checked, same rows as one host" "
		netns_mpirun -H $A:2,$B:2 -np 4 allreduce-bench --algo $algo -b 8 -e 256K -f 8 -n 3 -w 1 -c 1 >across &&
		$T mpirun --bind-to none -np 4 allreduce-bench --algo $algo -b 8 -e 256K -f 8 -n 3 -w 1 -c 1 >one &&
		grep '^# Out of bounds values : 0 OK$' across &&
		rows across >actual && rows one >expect && test_cmp expect actual &&
		grep -q '4 ranks' across
	"
done

test_expect_success '2 hosts x 2 ranks: reduce-scatter, allgather, broadcast and compressed allreduce' '
	for c in reduce_scatter all_gather broadcast; do
		netns_mpirun -H $A:2,$B:2 -np 4 allreduce-bench --collective $c -b 8 -e 64K -f 8 -n 2 -w 1 >out &&
		grep "^# Out of bounds values : 0 OK$" out || return 1
	done &&
	for z in bf16 int8; do
		netns_mpirun -H $A:2,$B:2 -np 4 allreduce-bench --compress $z -b 1K -e 64K -f 8 -n 2 -w 1 >out &&
		grep "^# Out of bounds values : 0 OK$" out || return 1
	done
'

test_expect_success 'gpu-topo --rankfile places one rank on each named host' '
	gpu-topo -q --rankfile --hosts $A,$B >ranks &&
	grep -c "^rank " ranks >n && echo 2 >expect && test_cmp expect n &&
	netns_exec 0 timeout 300 mpirun --mca plm_rsh_agent "$NETNS_DIR/netns-rsh" \
		--mca btl tcp,self --mca btl_tcp_if_include $A/24 --mca oob_tcp_if_include $A/24 \
		-np 2 --rankfile ranks sh -c "echo \$OMPI_COMM_WORLD_RANK \$(ip -4 -o addr show eth0 | awk \"{print \\\$4}\")" >out &&
	sort out >actual &&
	printf "%s\n" "0 $A/24" "1 $B/24" >expect &&
	test_cmp expect actual
'

test_expect_success NETEM 'netem: 20 ms on one link puts every small allreduce above 20 ms, results still right' '
	netns_mpirun -H $A:1,$B:1 -np 2 allreduce-bench --algo rd -b 8 -e 8 -n 5 -w 1 >fast &&
	netns_netem 1 delay 20ms &&
	netns_mpirun -H $A:1,$B:1 -np 2 allreduce-bench --algo rd -b 8 -e 8 -n 5 -w 1 >slow &&
	netns_netem 1 delay 0ms &&
	grep "^# Out of bounds values : 0 OK$" slow &&
	fast_us=$(grep -v "^#" fast | awk "{print \$6}") &&
	slow_us=$(grep -v "^#" slow | awk "{print \$6}") &&
	echo "8 B allreduce: $fast_us us without delay, $slow_us us with 20 ms" &&
	awk -v f="$fast_us" -v s="$slow_us" "BEGIN { exit !(s >= 20000 && s > f) }"
'

test_expect_success NETEM 'netem: 2 % loss on one link, 1 MiB allreduces still finish and check out' '
	netns_netem 1 loss 2% &&
	netns_mpirun -H $A:1,$B:1 -np 2 allreduce-bench -b 1M -e 1M -n 5 -w 1 >lossy &&
	netns_netem 1 loss 0% &&
	grep "^# Out of bounds values : 0 OK$" lossy
'

test_expect_success TBF 'tbf: 40 Mbit/s on one link: a 1 MiB allreduce takes at least 1 MiB / 5 MB/s' '
	netns_mpirun -H $A:1,$B:1 -np 2 allreduce-bench --algo ring -b 1M -e 1M -n 3 -w 1 >free &&
	netns_tc 1 tbf rate 40mbit burst 64kb latency 500ms &&
	netns_mpirun -H $A:1,$B:1 -np 2 allreduce-bench --algo ring -b 1M -e 1M -n 3 -w 1 >capped &&
	tc -n ${NETNS_PREFIX}h1 qdisc del dev eth0 root &&
	grep "^# Out of bounds values : 0 OK$" capped &&
	free_us=$(grep -v "^#" free | awk "{print \$6}") &&
	capped_us=$(grep -v "^#" capped | awk "{print \$6}") &&
	echo "1 MiB ring allreduce, 2 hosts: $free_us us free, $capped_us us through 40 Mbit/s (bound: 209715 us)" &&
	awk -v c="$capped_us" "BEGIN { exit !(c >= 0.9 * 209715) }"
'

test_done

#!/bin/sh
test_description='gpu-topo on hand-written hwloc XML fixtures

The nvidia-smi matrix, pairs, JSON, bindings, rankfiles and warnings of
tests/data/topo/*.xml, each written out by hand from the PCIe tree drawn
in the fixture, and clean failures on files that are not hwloc XML.'
. "$(dirname "$0")/lib.sh"

D="$GK_TOP/tests/data/topo"
T="$D/two-socket-switches.xml"

test_expect_success 'fixtures are valid hwloc XML (lstopo reads them)' '
	for f in two-socket-switches uneven-nolocal; do
		lstopo-no-graphics --input "$D/$f.xml" --of console >/dev/null 2>err &&
		test_must_be_empty err || return 1
	done
'

# The matrix by hand: see the drawing in two-socket-switches.xml.
row() { printf '%s' "$1"; shift; for c; do printf '\t%s' "$c"; done; printf '\n'; }
test_expect_success 'matrix in the nvidia-smi topo -m layout' '
	{
		row "" GPU0 GPU1 GPU2 GPU3 GPU4 NIC0 NIC1 NIC2 NIC3 "CPU Affinity" "NUMA Affinity" "GPU NUMA ID"
		row GPU0 " X " NV4 NV2 SYS SYS PIX PHB NODE SYS 0-3,8-11 0 "" N/A
		row GPU1 NV4 " X " PXB SYS SYS PIX PHB NODE SYS 0-3,8-11 0 "" N/A
		row GPU2 NV2 PXB " X " SYS SYS PXB PHB NODE SYS 0-3,8-11 0 "" N/A
		row GPU3 SYS SYS SYS " X " NV12 SYS SYS SYS PIX 4-7,12-15 1 "" N/A
		row GPU4 SYS SYS SYS NV12 " X " SYS SYS SYS PIX 4-7,12-15 1 "" N/A
		row NIC0 PIX PIX PXB SYS SYS " X " PHB NODE SYS "" "" "" ""
		row NIC1 PHB PHB PHB SYS SYS PHB " X " NODE SYS "" "" "" ""
		row NIC2 NODE NODE NODE SYS SYS NODE NODE " X " SYS "" "" "" ""
		row NIC3 SYS SYS SYS PIX PIX SYS SYS SYS " X " "" "" "" ""
		echo
		echo "Legend:"
		echo
		echo "  X    = Self"
		echo "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)"
		echo "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node"
		echo "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"
		echo "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)"
		echo "  PIX  = Connection traversing at most a single PCIe bridge"
		echo "  NV#  = Connection traversing a bonded set of # NVLinks"
		echo
		echo "NIC Legend:"
		echo
		echo "  NIC0: mlx5_0"
		echo "  NIC1: mlx5_1"
		echo "  NIC2: eth2"
		echo "  NIC3: mlx5_2"
		echo
	} >expect &&
	gpu-topo -i "$T" >actual 2>err &&
	test_cmp expect actual &&
	test_must_be_empty err
'

test_expect_success '-m, --matrix and nvidia-smi'\''s "topo -m" print the same matrix' '
	gpu-topo -i "$T" -m >m &&
	test_cmp expect m &&
	gpu-topo -i "$T" --matrix >matrix &&
	test_cmp expect matrix &&
	gpu-topo -i "$T" topo -m >topo &&
	test_cmp expect topo &&
	test_expect_code 2 gpu-topo -i "$T" -m --json 2>err &&
	grep "^gpu-topo: -m, --json, --pairs, --binding, --rankfile, --explain and --health exclude each other$" err &&
	test_expect_code 2 gpu-topo -i "$T" topo --pairs 2>err &&
	grep "^gpu-topo: .topo. is nvidia-smi.s word for the matrix: drop it, or use -m alone$" err &&
	test_expect_code 2 gpu-topo -i "$T" topology 2>err &&
	grep "^gpu-topo: unexpected argument .topology.$" err
'

test_expect_success 'an awk reader of nvidia-smi output finds the PIX NIC of each GPU' '
	awk "/^NIC Legend:/ { l = 1; next }
	     l && /NIC[0-9]+:/ { sub(\":\", \"\", \$1); dev[\$1] = \$2; next }
	     /^GPU[0-9]/ { for (i = 2; i <= 10; i++) if (\$i == \"PIX\") pix[\$1] = \"NIC\" (i - 7) }
	     END { for (g = 0; g < 5; g++) print \"GPU\" g, dev[pix[\"GPU\" g]] }" actual >got &&
	printf "GPU0 mlx5_0\nGPU1 mlx5_0\nGPU2 \nGPU3 mlx5_2\nGPU4 mlx5_2\n" >want &&
	test_cmp want got
'

test_expect_success '--pairs: one line per pair with the PCIe path under NVLink' '
	gpu-topo -i "$T" --pairs >pairs &&
	test $(wc -l <pairs) = 37 &&
	grep -x "GPU0	GPU1	NV4	PIX	4	0000:03:00.0	0000:04:00.0" pairs &&
	grep -x "GPU0	GPU2	NV2	PXB	2	0000:03:00.0	0000:08:00.0" pairs &&
	grep -x "GPU3	NIC3	PIX	PIX	0	0000:83:00.0	0000:85:00.0" pairs &&
	grep -x "NIC1	NIC2	NODE	NODE	0	0000:20:00.0	0000:41:00.0" pairs
'

test_expect_success '--json agrees with the matrix' '
	gpu-topo -i "$T" --json >out.json &&
	jq -r ".pairs[] | select(.a == \"GPU2\") | .b + \" \" + .link" out.json >got &&
	printf "GPU3 SYS\nGPU4 SYS\nNIC0 PXB\nNIC1 PHB\nNIC2 NODE\nNIC3 SYS\n" >want &&
	test_cmp want got &&
	test "$(jq -r ".gpus[0].cpus, .gpus[0].numa[0], .nics[0].rdma, .nics[2].rdma, .nvlink_source" out.json | tr "\n" " ")" = "0-3,8-11 0 true false hwloc " &&
	test "$(jq ".gpus | length" out.json)" = 5 &&
	test "$(jq ".warnings | length" out.json)" = 0
'

test_expect_success '--binding: GPU, nearest RDMA NIC, NUMA node, exclusive cores' '
	cat >expect <<-\EOF &&
	rank	gpu	busid	nic	numa	cpus	cores
	0	0	0000:03:00.0	mlx5_0	0	0,8	0
	1	1	0000:04:00.0	mlx5_0	0	1,9	1
	2	2	0000:08:00.0	mlx5_0	0	2-3,10-11	2-3
	3	3	0000:83:00.0	mlx5_2	1	4-5,12-13	4-5
	4	4	0000:84:00.0	mlx5_2	1	6-7,14-15	6-7
	EOF
	gpu-topo -i "$T" --binding >actual &&
	test_cmp expect actual
'

test_expect_success '--rank past the ranks: exit 2 when -n set them, 1 when the topology did' '
	test_expect_code 2 gpu-topo -i "$T" --binding -n 2 --rank 2 2>err &&
	grep "^gpu-topo: --rank 2: -n says 2 ranks per node$" err &&
	n=$(($(gpu-topo -i "$T" --binding | wc -l) - 1)) &&
	test_expect_code 1 gpu-topo -i "$T" --binding --rank $n 2>err &&
	grep "^gpu-topo: --rank $n: the topology makes $n ranks per node, one per GPU" err &&
	gpu-topo -i "$T" --binding --rank $((n - 1)) >out &&
	test $(wc -l <out) = 2
'

test_expect_success '--binding -n 2 spreads over the GPUs' '
	printf "numactl --physcpubind=0-1,8-9 --membind=0\nnumactl --physcpubind=2-3,10-11 --membind=0\n" >expect &&
	gpu-topo -i "$T" --binding -n 2 --numactl >actual &&
	test_cmp expect actual
'

test_expect_success '--binding --env --rank: one rank, evaluable' '
	gpu-topo -i "$T" --binding --env --rank 3 >actual &&
	echo "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=3 NCCL_IB_HCA==mlx5_2 OMP_NUM_THREADS=2" >expect &&
	test_cmp expect actual &&
	(eval "export $(cat actual)" && test "$CUDA_VISIBLE_DEVICES" = 3 && test "$NCCL_IB_HCA" = =mlx5_2)
'

test_expect_success '--rankfile: Open MPI syntax, ranks numbered across hosts' '
	gpu-topo -i "$T" --rankfile --hosts "node{1..2}" -n 2 >actual &&
	cat >expect <<-\EOF &&
	rank 0=node1 slot=0-1
	rank 1=node1 slot=2-3
	rank 2=node2 slot=0-1
	rank 3=node2 slot=2-3
	EOF
	test_cmp expect actual
'

test_expect_success '--explain: the PCIe path through the nested switch' '
	gpu-topo -i "$T" --explain GPU2 mlx5_0 >actual &&
	head -n 1 actual >first && echo "GPU2 -> NIC0: PXB" >expect && test_cmp expect first &&
	grep -c "^  up " actual >n && echo 4 >expect && test_cmp expect n &&
	grep "common ancestor" actual >anc &&
	grep "0000:01:00.0" anc &&
	grep -c "^  down " actual >n && echo 1 >expect && test_cmp expect n &&
	tail -n 1 actual >last && grep "^  NIC0 .*0000:05:00.0" last
'

test_expect_success '--explain of an unknown device fails cleanly' '
	test_expect_code 1 gpu-topo -i "$T" --explain GPU0 GPU9 >out 2>err &&
	test_must_be_empty out &&
	echo "gpu-topo: explain '"'"'GPU9'"'"': no such GPU or NIC" >expect &&
	test_cmp expect err
'

test_expect_success 'warnings: no NUMA locality, SYS NIC, uneven split' '
	gpu-topo -i "$D/uneven-nolocal.xml" >out 2>err &&
	cat >expect <<-\EOF &&
	gpu-topo: warning: GPU0 (0000:01:00.0): its nearest NIC, NIC0 (mlx5_0), is SYS: network traffic crosses the inter-socket link
	gpu-topo: warning: GPU1 (0000:02:00.0): its nearest NIC, NIC0 (mlx5_0), is SYS: network traffic crosses the inter-socket link
	gpu-topo: warning: GPU2 (0000:03:00.0): its nearest NIC, NIC0 (mlx5_0), is SYS: network traffic crosses the inter-socket link
	gpu-topo: warning: GPU3 (0000:c1:00.0) has no NUMA locality: hwloc attaches it to the whole machine, so no CPU binding is better than another
	gpu-topo: warning: GPU3 (0000:c1:00.0): its nearest NIC, NIC0 (mlx5_0), is SYS: network traffic crosses the inter-socket link
	gpu-topo: warning: GPUs are split unevenly across NUMA nodes: 3 on node 0, 0 on node 1; ranks on the crowded node share its memory bandwidth and cores
	EOF
	test_cmp expect err &&
	grep -x "GPU3	SYS	SYS	SYS	 X 	SYS	0-1	N/A		N/A" out &&
	gpu-topo -q -i "$D/uneven-nolocal.xml" >out 2>err &&
	test_must_be_empty err
'

for f in not-xml nccl-system truncated; do
	test_expect_success "corrupt input $f.xml: exact error, exit 1, no output" "
		test_expect_code 1 gpu-topo -i '$D/$f.xml' >out 2>err &&
		test_must_be_empty out &&
		test \$(wc -l <err) = 1
	"
done
test_expect_success 'the corrupt inputs name the problem' '
	gpu-topo -i "$D/not-xml.xml" 2>&1 | grep -F "not an hwloc XML topology (no <topology> element)" &&
	gpu-topo -i "$D/nccl-system.xml" 2>&1 | grep -F "an NCCL topology file (NCCL_TOPO_FILE), not an hwloc XML" &&
	gpu-topo -i "$D/truncated.xml" 2>&1 | grep -F "hwloc cannot read this XML topology" &&
	gpu-topo -i - <"$T" >stdin.out && gpu-topo -i "$T" >file.out && test_cmp file.out stdin.out &&
	test_expect_code 1 gpu-topo -i no-such.xml 2>err &&
	echo "gpu-topo: open '"'"'no-such.xml'"'"': No such file or directory" >expect &&
	test_cmp expect err
'

# hwloc 2.9 crashes reading this file; a hwloc that checks refuses it or
# repairs it. Either way gpu-topo survives: exit 1 with one line blaming
# hwloc, or exit 0 with a matrix.
test_expect_success 'XML that crashes hwloc: a clean failure or a topology' '
	f="$D/root-no-complete-nodeset.xml" &&
	{ gpu-topo -i "$f" >out 2>err; rc=$?; } &&
	if test $rc = 0; then
		grep "^Legend:" out
	elif test $rc = 1; then
		test_must_be_empty out &&
		test $(wc -l <err) = 1 &&
		grep -E "^gpu-topo: load .*root-no-complete-nodeset.xml.: hwloc (crashed reading|cannot read) this XML topology" err
	else
		echo "exit $rc" && false
	fi
'

test_expect_success '--rankfile hosts: Slurm brackets, the allocation, else this host' '
	gpu-topo -i "$T" --rankfile --hosts "gpu[1-2]" -n 1 >a &&
	SLURM_JOB_NODELIST="gpu[1-2]" gpu-topo -i "$T" --rankfile -n 1 >b &&
	test_cmp a b &&
	printf "rank 0=gpu1 slot=0-3\nrank 1=gpu2 slot=0-3\n" >expect &&
	test_cmp expect a &&
	(unset SLURM_JOB_NODELIST; gpu-topo -i "$T" --rankfile -n 1 >c) &&
	echo "rank 0=$(uname -n) slot=0-3" >expect &&
	test_cmp expect c
'

test_expect_success 'usage errors exit 2' '
	test_expect_code 2 gpu-topo --json --pairs 2>err && grep usage err &&
	test_expect_code 2 gpu-topo --hosts a 2>err && grep "goes with --rankfile" err &&
	test_expect_code 2 gpu-topo --rankfile --hosts "n[1-" 2>err && grep "unmatched" err &&
	test_expect_code 2 gpu-topo --env 2>err && grep "go with --binding" err &&
	test_expect_code 2 gpu-topo --binding -n 0 2>err &&
	test_expect_code 2 gpu-topo --explain GPU0 2>err && grep "two devices" err &&
	test_expect_code 2 gpu-topo --rankfile --hosts "a,,b" 2>err && grep "empty host name" err &&
	test_expect_code 2 gpu-topo --rankfile --hosts "NODE1,node1" 2>err &&
	grep "host .node1. is named twice (host names ignore case)" err &&
	test_expect_code 2 gpu-topo stray 2>err && grep "unexpected argument" err
'

# Each name lands on a rankfile line: nothing may split or extend one.
nl='
'
for h in "a${nl}rank 9=evil slot=0" "a b" "node[5-1]" "node[a-c]" "a_b" "-a" "a..b" "n=1"; do
	test_expect_success "--rankfile --hosts refuses a bad host name, exit 2: $(printf %s "$h" | tr "\n" "|")" '
		test_expect_code 2 gpu-topo -i "$T" --rankfile --hosts "$h" >out 2>err &&
		test_must_be_empty out &&
		grep "^gpu-topo: host list" err && grep usage err
	'
	test_expect_success "SLURM_JOB_NODELIST with it is refused too: $(printf %s "$h" | tr "\n" "|")" '
		(SLURM_JOB_NODELIST="$h" && export SLURM_JOB_NODELIST &&
		 test_expect_code 2 gpu-topo -i "$T" --rankfile >out 2>err) &&
		test_must_be_empty out && grep "^gpu-topo: host list" err
	'
done

test_expect_success 'the messages say what is wrong' '
	test_expect_code 2 gpu-topo -i "$T" --rankfile --hosts "node[5-1]" 2>err &&
	grep -F "host list '"'"'node[5-1]'"'"': range '"'"'5-1'"'"' runs backwards" err &&
	test_expect_code 2 gpu-topo -i "$T" --rankfile --hosts "a${nl}b" 2>err &&
	grep -F "host list: character 0x0a at offset 1" err &&
	test $(wc -l <err) -ge 2 && ! grep -x "b" err &&
	test_expect_code 2 gpu-topo -i "$T" --rankfile --hosts "a_b" 2>err &&
	grep -F "host name '"'"'a_b'"'"': '"'"'_'"'"' is not a letter" err
'

test_expect_success 'good names: FQDNs, leading digits, zero-padded ranges' '
	gpu-topo -i "$T" --rankfile --hosts "gpu1.example.org,10-n,n[08-10]" -n 1 >actual &&
	printf "rank 0=gpu1.example.org slot=0-3\nrank 1=10-n slot=0-3\nrank 2=n08 slot=0-3\nrank 3=n09 slot=0-3\nrank 4=n10 slot=0-3\n" >expect &&
	test_cmp expect actual
'

# GPUs on this machine as hwloc lists them: NVIDIA display-class PCI functions.
ngpu=$(lstopo-no-graphics --only pcidev -v 2>/dev/null |
	awk '/id=10de:/ && /class=03/ { n++ } END { print n + 0 }')
# The checks of the CPU-only picture mean nothing where GPUs are: there
# they skip, and say so, rather than pass having checked nothing.
test "$ngpu" = 0 && test_set_prereq GPU_LESS_MACHINE

test_expect_success 'this machine: the matrix and JSON, exit 0' '
	gpu-topo >out 2>err &&
	grep "^Legend:" out &&
	nnuma=$(lstopo-no-graphics --disallowed --only numanode | wc -l) &&
	gpu-topo --json >j && test "$(jq ".gpus | length" j)" = "$ngpu" &&
	test "$(jq ".numa_nodes | length" j)" = "$nnuma" &&
	test "$(lstopo-no-graphics --only pu | wc -l)" -ge 1
'

test_expect_success GPU_LESS_MACHINE 'GPU-less machine: "No GPUs" and every NUMA node' '
	gpu-topo >out 2>err &&
	grep "^No GPUs" out &&
	nnuma=$(lstopo-no-graphics --disallowed --only numanode | wc -l) &&
	test $(grep -c "^  NUMA[0-9]*: CPUs" out) = "$nnuma"
'

expand() { # "0-2,5" -> one number per line
	tr "," "\n" | awk -F- "NF { for (i = \$1; i <= (NF > 1 ? \$2 : \$1); i++) print i }"
}
test_expect_success GPU_LESS_MACHINE 'GPU-less machine: one rank per core covers the allowed CPUs once' '
	gpu-topo --json >j &&
	n=$(jq .cores j) &&
	gpu-topo -q --binding -n "$n" >b &&
	test $(wc -l <b) = $((n + 1)) &&
	awk -F "\t" "NR > 1 { print \$6 }" b | tr "\n" "," | expand | sort -n >got &&
	jq -r .allowed_cpus j | expand | sort -n >want &&
	test_cmp want got
'

test_expect_success 'the option table, --help and gpu-topo(1) name the same options' '
	# --help is the table (bin/gpu-topo.c): every name at the start of its
	# option lines, "-i, --input FILE" giving -i and --input; the man
	# page: every Fl of an .It line of OPTIONS ("Fl Fl name")
	gpu-topo --help >help &&
	test_help_options help >in-help &&
	test_man_options "$GK_TOP/man/man1/gpu-topo.1" >in-man &&
	test $(wc -l <in-help) -gt 12 &&
	test_cmp in-help in-man &&
	# and getopt takes an argument exactly for the rows whose help line
	# shows one
	test_options_take_args help gpu-topo
'

test_done

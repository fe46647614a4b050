#!/bin/sh
test_description='gpu-topo on real machines'"'"' hwloc XML (../shared/topo-xml)

Expectations come from hwloc'"'"'s own tools run on the same files (lstopo,
hwloc-info) and from the hardware facts in PROVENANCE.md, never from
gpu-topo itself. The files are read in place, never copied.'
. "$(dirname "$0")/lib.sh"

# In a command substitution test_shared_dir's skip lands in $X: pass it on,
# saying why a plain clone of the repository skips here.
X=$(test_shared_dir topo-xml)
case $X in "1..0"*)
	skip_all="${X#*SKIP } (real machines' hwloc XML lives in ../shared beside the checkout, not in the repository)"
	test_done ;;
esac

# GPUs as hwloc lists them: NVIDIA display-class PCI functions.
hwloc_gpus() {
	lstopo-no-graphics -i "$1" --only pcidev -v 2>/dev/null |
	awk '/id=10de:/ && /class=03/ { n++ } END { print n + 0 }'
}
pkg_of() {
	hwloc-info -i "$1" -s --ancestor package "pci=$2" 2>/dev/null | head -n 1
}

for f in "$X"/*.xml; do
	b=$(basename "$f" .xml)
	test_expect_success "$b: loads, one GPU per NVIDIA display function" "
		gpu-topo -q -i '$f' --json >'$b.json' &&
		want=\$(hwloc_gpus '$f') &&
		got=\$(jq '.gpus | length' '$b.json') &&
		if test \$want = 0; then
			# Dumps that lost the PCI ids: GPUs named by GPU-memory NUMA nodes.
			want=\$(lstopo-no-graphics -i '$f' -v | grep -c 'GPUMemory.*PCIBusID=') || :
		fi &&
		test \"\$got\" = \"\$want\"
	"
	test_expect_success "$b: SYS exactly between devices of different packages" "
		# hwloc-info finds a device by bus id: leave out ids the file repeats.
		lstopo-no-graphics -i '$f' --only pcidev -v | sed -n 's/.*busid=\\([^ ]*\\) .*/\\1/p' |
			sort | uniq -d >dups &&
		jq -r '(.gpus + .nics)[] | .label + \" \" + .busid' '$b.json' >all &&
		{ grep -v -F -f dups all || :; } >devs &&
		while read label bus; do
			pkg=\$(pkg_of '$f' \$bus) &&
			echo \"\$label \${pkg:-none}\"
		done <devs >pkgs &&
		jq -r '.pairs[] | .a + \" \" + .b + \" \" + .pci' '$b.json' >pairs &&
		awk 'NR == FNR { p[\$1] = \$2; next }
		     !(\$1 in p) || !(\$2 in p) { next }
		     { cross = p[\$1] == \"none\" || p[\$1] != p[\$2]
		       if (cross != (\$3 == \"SYS\")) { print \"wrong:\", \$0, p[\$1], p[\$2]; bad = 1 } }
		     END { exit bad }' pkgs pairs
	"
done

# NVLink: lstopo prints hwloc's NVLinkBandwidth matrix; a link is 20000 MB/s
# (NVLink 1.0, P100) or 25000 (2.0+, V100), per hwloc's NVML backend.
nvlink_expect() {
	lstopo-no-graphics -i "$1" --distances 2>/dev/null | awk -v per="$2" '
		/NVLinkBandwidth/ { on = 1; next }
		on && /index/ { for (i = 2; i <= NF; i++) col[i] = $i; n = NF; next }
		on && NF == n { for (i = 2; i <= n; i++) v[$1, col[i]] = $i; row[++r] = $1 }
		on && NF != n && r { on = 0 }
		END {
			for (a = 1; a <= r; a++) if (row[a] ~ /^nvml/) {
				for (i = 2; i <= n; i++) if (col[i] !~ /^nvml/ && col[i] !~ /^Package/)
					sw[row[a]] += v[row[a], col[i]] / per
			}
			for (a = 1; a <= r; a++) for (b = a + 1; b <= r; b++) {
				x = row[a]; y = row[b]
				if (x !~ /^nvml/ || y !~ /^nvml/) continue
				k = v[x, y] / per + (sw[x] && sw[y] ? (sw[x] < sw[y] ? sw[x] : sw[y]) : 0)
				print x, y, (k ? "NV" k : "-")
			}
		}' | sort
}
# gpu-topo's GPU pairs named by their NVML OS device, as lstopo names them.
gpu_topo_nvlinks() {
	jq -r '(.gpus | map({(.label): (.os_devices | map(select(startswith("nvml"))) | .[0])}) | add) as $n |
		.pairs[] | select((.a | startswith("GPU")) and (.b | startswith("GPU"))) |
		$n[.a] + " " + $n[.b] + " " + (if .nvlinks > 0 then .link else "-" end)' "$1" | sort
}

test_expect_success 'DGX-2: 16 V100 on NVSwitches, NV6 between every pair' '
	nvlink_expect "$X/nvidiaDGX2.xml" 25000 >expect &&
	test $(wc -l <expect) = 120 &&
	test $(grep -c " NV6\$" expect) = 120 &&
	gpu_topo_nvlinks nvidiaDGX2.json >actual &&
	test_cmp expect actual
'

test_expect_success 'DGX-2: 8 GPUs per socket, NUMA affinity from the package' '
	jq -r ".gpus[] | .busid + \" \" + (.numa[0] | tostring)" nvidiaDGX2.json >got &&
	while read bus numa; do
		echo "$bus $(hwloc-info -i "$X/nvidiaDGX2.xml" -s --ancestor numanode "pci=$bus" 2>/dev/null | head -n 1)"
	done <got >pairs &&
	test $(grep -c " 0\$" got) = 8 && test $(grep -c " 1\$" got) = 8 &&
	awk "{ sub(\"Package:\", \"\", \$2) } 1" pairs >/dev/null
'

test_expect_success 'POWER8 (Minsky): P100 pairs on 2 NVLink 1.0 links each, SYS across sockets' '
	nvlink_expect "$X/power8gpudistances.xml" 20000 >expect &&
	printf "nvml0 nvml1 NV2\nnvml0 nvml2 -\nnvml0 nvml3 -\nnvml1 nvml2 -\nnvml1 nvml3 -\nnvml2 nvml3 NV2\n" >want &&
	test_cmp want expect &&
	gpu_topo_nvlinks power8gpudistances.json >actual &&
	test_cmp expect actual &&
	gpu-topo -i "$X/power8gpudistances.xml" >m &&
	grep -x "GPU0	 X 	NV2	SYS	SYS	.*" m
'

test_expect_success 'POWER9 with GPU memory as NUMA nodes: GPU NUMA ID from PCIBusID' '
	lstopo-no-graphics -i "$X/nvidiagpunumanodes.xml" -v |
		sed -n "s/.*GPUMemory.*(P#\([0-9]*\) .*PCIBusID=\([0-9a-f:.]*\)).*/\2 \1/p" | sort >expect &&
	test $(wc -l <expect) = 6 &&
	jq -r ".gpus[] | .busid + \" \" + (.gpu_numa | tostring)" nvidiagpunumanodes.json | sort >actual &&
	test_cmp expect actual &&
	gpu-topo -i "$X/nvidiagpunumanodes.xml" >m &&
	test "$(awk -F "\t" "/^GPU/ { print \$NF }" m | sort -n | tr "\n" " ")" = "250 251 252 253 254 255 "
'

test_expect_success 'hand-made template: H100 and CX-7 behind one PLX switch are PIX' '
	gpu-topo -q -i "$X/handmade-2pkg-switch-gpu-nic.xml" --pairs >p &&
	grep -x "GPU0	NIC0	PIX	PIX	0	0000:13:00.0	0000:14:00.0" p &&
	grep -x "GPU1	NIC0	SYS	SYS	0	0000:81:00.0	0000:14:00.0" p &&
	gpu-topo -q -i "$X/handmade-2pkg-switch-gpu-nic.xml" --binding >b &&
	grep -x "0	0	0000:13:00.0	mlx5_0	0	0-1	0-1" b &&
	grep -x "1	1	0000:81:00.0	mlx5_0	1	2-3	2-3" b
'

for f in "$X"/nccl/*.xml; do
	test_expect_success "NCCL topology file $(basename "$f") is named as such, exit 1" "
		test_expect_code 1 gpu-topo -i '$f' >out 2>err &&
		test_must_be_empty out &&
		grep -F 'an NCCL topology file (NCCL_TOPO_FILE), not an hwloc XML' err
	"
done

test_done

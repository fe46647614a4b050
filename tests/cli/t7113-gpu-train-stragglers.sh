#!/bin/sh
test_description='gpu-train: a straggler is named, with its host, its slow part and its GPU

GK_TEST_STRAGGLER=RANK:PART:MS makes one rank spend MS more in one part
of every step. Every --straggler-every steps rank 0 reports the spread of
the parts over the ranks (a JSON line "stragglers") and, at the third
exchange in a row that finds the rank slow, and not before, warns once
naming the rank, its host and the part. The other ranks wait for it in
the gradients'"'"' allreduce, so their steps last as long as its own: only
their busy time (the step less that wait) tells them apart. A fake
libnvidia-ml.so.1 (fake-nvml.c), loaded as the real one is, gives each
rank of a CPU run a GPU (GK_TEST_GPU_BUS), one of them power-capped, for
the warning to say so. promtool checks the metrics.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

command -v promtool >/dev/null 2>&1 && test_set_prereq PROMTOOL

# Steps of about a millisecond here, in windows of 5: a rank whose 5 steps
# a loaded machine's scheduler delays by a slice (4 ms) is 1.3 times the
# median for that window, so the runs without a hook state a factor of 2;
# the hook's 40 ms a step are tens of times the median.
A="--data train.bin $TINY --steps 30 --straggler-every 5 --straggler-factor 2 --json"
HOST=$(hostname)
FAKE="$(pwd)/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# ranks N MPIRUN-ARGS...: mpirun with N ranks (-x VAR=VALUE, then the command)
ranks() {
	n=$1
	shift
	timeout 300 mpirun --oversubscribe --bind-to none -np "$n" "$@"
}

# prom FILE NAME [LABELS]: the value of the sample NAME{run=...,LABELS}
prom() {
	sed -n "s/^$2{run=\"[^\"]*\"${3:+,$3}} //p" "$1"
}

test_expect_success 'data and the fake driver' '
	train_data &&
	mkdir fake &&
	${CC:-cc} -shared -fPIC -o fake/libnvidia-ml.so.1 "$GK_TOP/tests/cli/fake-nvml.c"
'

test_expect_success MPI 'rank 1 slow in its data: named at the third exchange, once' '
	ranks 3 -x GK_TEST_STRAGGLER=1:data:40 gpu-train $A --metrics s.prom >s.json 2>s.err &&
	jq -c "select(.event == \"stragglers\")" s.json >ex.json &&
	test "$(wc -l <ex.json)" = 6 &&
	test "$(jq -r "[.step, .steps, .world] | @tsv" ex.json | tr "\t\n" ", ")" = \
		"5,5,3 10,5,3 15,5,3 20,5,3 25,5,3 30,5,3 " &&
	test "$(jq -r "[.slow[] | \"\(.rank):\(.exchanges)\"] | join(\" \")" ex.json | tr "\n" ,)" = \
		"1:1,1:2,1:3,1:4,1:5,1:6," &&
	test "$(jq -r ".straggler.rank // \"-\"" ex.json | tr "\n" ,)" = "-,-,1,-,-,-," &&
	sed -n 3p ex.json >third.json &&
	test "$(jq -r "[.straggler.host, .straggler.part, .straggler.exchanges] | @tsv" third.json)" = \
		"$(printf "%s\tdata\t3" "$HOST")" &&
	test "$(grep -c "^gpu-train: warning: " s.err)" = 1 &&
	grep "^gpu-train: warning: rank 1 on host $HOST: busy [0-9.]*x the median ([0-9.]* ms a step against [0-9.]* ms) for 3 exchanges in a row, most of it in data (+[0-9.]* ms)$" s.err &&
	test "$(jq -r .straggler.warning third.json)" = "$(sed "s/^gpu-train: warning: //" s.err)"
'

# What the JSON states against what the hook did: rank 1 holds the most
# data time and busy time of every exchange, at least the 40 ms a step it
# slept; every extreme is a rank on this host; min <= median <= max.
test_expect_success MPI 'the spread of every part and its extremes' '
	test "$(jq -r "[.parts.data.max_rank, .parts.busy.max_rank] | @tsv" ex.json | sort -u)" = \
		"$(printf "1\t1")" &&
	jq -e ".parts.data.max_ms >= 40 and .parts.busy.max_ms >= 40" ex.json >/dev/null &&
	jq -e "[.parts[] | .min_ms <= .median_ms and .median_ms <= .max_ms] | all" ex.json >/dev/null &&
	test "$(jq -r ".parts[] | .min_host, .max_host" ex.json | sort -u)" = "$HOST" &&
	jq -e "(.parts.busy.max_ms / .parts.busy.median_ms - .straggler.busy_ratio | fabs) < 1e-9" \
		third.json >/dev/null &&
	jq -e "(.parts.busy.skew - .parts.busy.max_ms / .parts.busy.median_ms | fabs) < 1e-9" \
		third.json >/dev/null
'

test_expect_success MPI 'the metrics: the spread, the slow rank, one warning' '
	test "$(prom s.prom gpukit_train_straggler_rank "part=\"busy\",stat=\"max\"")" = 1 &&
	test "$(prom s.prom gpukit_train_straggler_rank "part=\"data\",stat=\"max\"")" = 1 &&
	test "$(prom s.prom gpukit_train_straggler_slow_ranks)" = 1 &&
	test "$(prom s.prom gpukit_train_straggler_reports_total)" = 6 &&
	test "$(prom s.prom gpukit_train_straggler_warnings_total)" = 1 &&
	tail -n 1 ex.json >last.json &&
	python3 - s.prom last.json <<-\EOF
	import json, re, sys
	prom = open(sys.argv[1]).read()
	j = json.load(open(sys.argv[2]))
	for part, s in j["parts"].items():
	    for stat in ("min", "median", "max"):
	        m = re.search(r"^gpukit_train_straggler_seconds\{run=\"s\",part=\"%s\",stat=\"%s\"\} (\S+)$"
	                      % (part, stat), prom, re.M)
	        assert m, (part, stat)
	        got, want = float(m.group(1)), s[stat + "_ms"] / 1e3
	        assert abs(got - want) <= 1e-9 * max(1, want), (part, stat, got, want)
	    m = re.search(r"^gpukit_train_straggler_skew_ratio\{run=\"s\",part=\"%s\"\} (\S+)$" % part,
	                  prom, re.M)
	    assert m and abs(float(m.group(1)) - s["skew"]) <= 1e-9 * s["skew"], part
	EOF
'

test_expect_success PROMTOOL,MPI 'promtool accepts the metrics' '
	promtool check metrics <s.prom
'

test_expect_success NODE_EXPORTER,MPI 'node_exporter serves them: the slow rank and the skew' '
	mkdir tf && cp s.prom tf/ &&
	node_exporter_scrape tf scrape &&
	grep "^gpukit_train_straggler_rank{part=\"data\",run=\"s\",stat=\"max\"} 1$" scrape &&
	skew=$(sed -n "s/^gpukit_train_straggler_skew_ratio{run=\"s\",part=\"data\"} //p" s.prom) &&
	served=$(sed -n "s/^gpukit_train_straggler_skew_ratio{part=\"data\",run=\"s\"} //p" scrape) &&
	test -n "$skew" && test -n "$served" &&
	awk -v a="$skew" -v b="$served" "BEGIN { d = a - b; exit !(d * d <= 1e-18 * a * a) }"
'

test_expect_success MPI 'two exchanges: slow twice, no warning yet' '
	ranks 3 -x GK_TEST_STRAGGLER=1:data:40 gpu-train $A --steps 10 >two.json 2>two.err &&
	test "$(jq -r "select(.event == \"stragglers\") | .slow[0].exchanges" two.json | tr "\n" ,)" = \
		"1,2," &&
	! grep warning two.err &&
	test "$(jq -r "select(.event == \"stragglers\") | .straggler // \"-\"" two.json | sort -u)" = -
'

test_expect_success MPI 'no hook: no straggler, no warning' '
	ranks 3 gpu-train $A >n.json 2>n.err &&
	test "$(jq -c "select(.event == \"stragglers\")" n.json | wc -l)" = 6 &&
	! grep warning n.err &&
	test "$(jq -r "select(.event == \"stragglers\") | .straggler // \"-\"" n.json | sort -u)" = -
'

# GPU i of the fake driver sits at bus 0x18 + 0x20 i; GPU 2 is power-capped
# (reason bit 0x4) and runs its SM at 1980 MHz at 42 C.
test_expect_success MPI 'on GPUs: the slow rank'"'"'s GPU and why its clocks are held down' '
	ranks 3 -x LD_LIBRARY_PATH="$FAKE" -x FAKE_NVML_GPUS=3 -x FAKE_NVML_REASONS_2=0x5 \
		-x GK_TEST_GPU_BUS=0000:18:00.0,0000:38:00.0,0000:58:00.0 \
		-x GK_TEST_STRAGGLER=2:compute:40 gpu-train $A --steps 15 --metrics g.prom >g.json 2>g.err &&
	grep "^gpu-train: warning: rank 2 on host $HOST: .* for 3 exchanges in a row, most of it in compute (+[0-9.]* ms); GPU 2 is power-capped (SM 1980 MHz, 42 C)$" \
		g.err &&
	jq -c "select(.event == \"stragglers\") | .straggler // empty" g.json >gs.json &&
	test "$(jq -r "[.rank, .part, .gpu, .sm_clock_hz, .temperature_c, .clock_event_reasons, .slowdown] | @tsv" gs.json)" = \
		"$(printf "2\tcompute\t2\t1980000000\t42\t5\tpower-capped")" &&
	test "$(prom g.prom gpukit_train_gpu_slowed_ranks)" = 1 &&
	test "$(prom g.prom gpukit_train_gpu_sm_clock_hertz "stat=\"min\"")" = 1980000000
'

test_expect_success PROMTOOL,MPI 'promtool accepts the metrics with GPUs' '
	promtool check metrics <g.prom
'

test_expect_success MPI 'a GPU the driver does not have: the report goes without it' '
	ranks 3 -x LD_LIBRARY_PATH="$FAKE" -x FAKE_NVML_GPUS=1 \
		-x GK_TEST_GPU_BUS=0000:18:00.0,0000:99:00.0 -x GK_TEST_STRAGGLER=1:data:40 gpu-train $A --steps 15 >h.json 2>h.err &&
	grep "^gpu-train: warning: rank 1 on host $HOST: .*most of it in data (+[0-9.]* ms)$" h.err &&
	test "$(jq -r "select(.event == \"stragglers\") | .straggler.gpu // \"none\"" h.json | tail -n 1)" = none
'

test_expect_success MPI '--straggler-every 0: no exchange; one rank: none either' '
	ranks 2 -x GK_TEST_STRAGGLER=1:data:5 gpu-train $A --steps 10 --straggler-every 0 >o.json 2>o.err &&
	test "$(jq -c "select(.event == \"step\")" o.json | wc -l)" = 10 &&
	! grep stragglers o.json && ! grep warning o.err &&
	gpu-train $A --steps 10 >one.json &&
	! grep stragglers one.json
'

test_expect_success 'bad values: usage errors, and a hook that is not RANK:PART:MS' '
	test_expect_code 2 gpu-train $A --straggler-factor 1 2>e1 &&
	grep "straggler-factor" e1 &&
	test_expect_code 2 gpu-train $A --straggler-every -1 2>e2 &&
	grep "straggler-every" e2 &&
	test_expect_code 1 env GK_TEST_STRAGGLER=1:disk:5 gpu-train $A 2>e3 &&
	grep "^gpu-train: GK_TEST_STRAGGLER '"'"'1:disk:5'"'"': not RANK:PART:MS" e3
'

test_done

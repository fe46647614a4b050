#!/bin/sh
test_description='data-pack: the progress line

On a terminal (script(1) gives data-pack one) the line is redrawn in
place a few times a second at most, whatever the number of samples, with
the total and an ETA when the input is files; -q draws nothing; a short
run whose standard error is not a terminal prints nothing (a long one
prints a plain line every 10 s: tests/unit/core_misc.c drives the clock).'
. "$(dirname "$0")/lib.sh"

if command -v script >/dev/null 2>&1; then
	test_set_prereq TTY
fi

test_expect_success 'a corpus of 3000 small samples' '
	python3 - <<-\EOF
	import os
	os.makedirs("raw")
	for i in range(3000):
	    open("raw/s%05d.txt" % i, "w").write("x" * (100 + i % 50))
	EOF
'

# count_redraws FILE: redraws (carriage returns before the text) in a
# typescript; the lines are left in FILE.lines.
count_redraws() {
	tr "\r" "\n" <"$1" | grep "^data-pack: " >"$1.lines"
	wc -l <"$1.lines" | tr -d " "
}

test_expect_success TTY 'on a terminal: at most 4 redraws a second, with total and ETA' '
	t0=$(date +%s%N) &&
	script -qfec "data-pack -c -o out/t-%03d.tar --max-count 500 raw" /dev/null >ts &&
	t1=$(date +%s%N) &&
	n=$(count_redraws ts) &&
	bound=$(( (t1 - t0) / 250000000 + 2 )) &&
	echo "$n redraws in $(( (t1 - t0) / 1000000 )) ms, at most $bound" &&
	test "$n" -ge 2 && test "$n" -le "$bound" &&
	total=$(cat raw/* | wc -c) &&
	python3 - "$total" ts.lines <<-\EOF
	import re, sys
	total, lines = int(sys.argv[1]), open(sys.argv[2]).read().splitlines()
	# the sizes as gpukit prints them: the total from the files, the
	# first state with an ETA, the last one at 100% of the total
	size = re.compile(r"^data-pack: ([0-9.]+ [KMG]?i?B) / ([0-9.]+ [KMG]?i?B) +([0-9]+)%  [0-9.]+ [KMG]?i?B/s(  ETA [0-9]+:[0-9]{2})?\x1b\[K$")
	ms = [size.match(l) for l in lines]
	assert all(ms), [l for l, m in zip(lines, ms) if not m]
	def parse(t):
	    v, u = t.split()
	    return float(v) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[u]
	assert abs(parse(ms[0].group(2)) - total) <= 0.01 * total, (ms[0].group(2), total)
	assert ms[0].group(4), lines[0]
	assert ms[-1].group(3) == "100" and ms[-1].group(1) == ms[-1].group(2), lines[-1]
	EOF
'

test_expect_success TTY 'on a terminal: a tar stream has no total, so rate only' '
	tar -cf in.tar raw &&
	script -qfec "data-pack -c --from-tar in.tar -o s.tar" /dev/null >ts2 &&
	n=$(count_redraws ts2) && test "$n" -ge 1 &&
	! grep "%\|ETA" ts2.lines &&
	grep "^data-pack: .* [KM]iB/s" ts2.lines
'

test_expect_success TTY '-q: no progress on a terminal' '
	script -qfec "data-pack -q -c -o q/t-%03d.tar --max-count 500 raw" /dev/null >tsq &&
	test_must_be_empty tsq
'

test_expect_success 'standard error not a terminal: a short run prints nothing' '
	data-pack -c -o p/t-%03d.tar --max-count 500 raw 2>err &&
	test_must_be_empty err
'

test_done

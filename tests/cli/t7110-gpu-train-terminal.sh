#!/bin/sh
test_description='gpu-train on a terminal: one progress line, redrawn a few times a second

With standard error a terminal (a pseudo-terminal here, through Python'"'"'s
pty module), gpu-train says what it does before its first step, then
draws one line (step/total, loss, tok/s, elapsed, ETA) redrawn in place
at most 4 times a second, clears it before any other message, and ends
it with a newline. Logs and pipes get the step lines they always got.
Under --tp 2 and --pp 2 its tok/s, the JSON lines'"'"' and the metrics'"'"'
count the global batch'"'"'s tokens once (not once per rank of a tensor
group or a pipeline).'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

# onpty.py OUT ERR BOTH CMD...: CMD with stderr on a pseudo-terminal (and
# stdout too when BOTH is 1, else into OUT); what the terminal got into
# ERR; the seconds the run took on stdout
cat >onpty.py <<'EOF'
import os, pty, subprocess, sys, time
out, err, both, cmd = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
m, s = pty.openpty()
t0 = time.monotonic()
with open(out, "wb") as o:
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=s if both else o, stderr=s)
os.close(s)
got = b""
while True:
    try:
        b = os.read(m, 65536)
    except OSError:  # EIO: the last writer is gone
        break
    if not b:
        break
    got += b
rc = p.wait()
open(err, "wb").write(got)
print("%.3f" % (time.monotonic() - t0))
sys.exit(rc)
EOF

# check.py TTY SECONDS STEPS: the redraws of a run of STEPS steps
cat >check.py <<'EOF'
import re, sys
t = open(sys.argv[1], "rb").read().decode()
secs, steps = float(sys.argv[2]), int(sys.argv[3])
t = t.replace("\r\n", "\n")  # the terminal's own line ends
draws = re.findall(r"\rstep (\d+)/(\d+)  (\d+)%  loss (\S+)  (\d+) tok/s  elapsed (\S+)  ETA (\S+)\x1b\[K", t)
# a line put back after a message is the same line: not a redraw
draws = [d for i, d in enumerate(draws) if i == 0 or d != draws[i - 1]]
n = len(draws)
assert n >= 2, "%d redraws: %r" % (n, t[-300:])
# at most one per 0.25 s, plus the first and the last
assert n <= secs / 0.25 + 2, "%d redraws in %.2f s" % (n, secs)
assert [int(d[0]) for d in draws] == sorted(int(d[0]) for d in draws), "steps out of order"
assert draws[-1][0] == str(steps) and all(d[1] == str(steps) for d in draws), draws[-1]
assert draws[-1][2] == "100" and draws[-1][6] == "0:00", draws[-1]
# the last line stays, and ends with its newline
last = t.rindex("\rstep %d/" % steps)
assert t[last:].split("\x1b[K", 1)[1].startswith("\n"), repr(t[last:])
print(n, "redraws in", secs, "s")
EOF

test_expect_success 'setup' '
	train_data
'

test_expect_success 'stderr a terminal, stdout a log: redraws at most 4 a second, and every step line in the log' '
	python3 onpty.py out tty 0 gpu-train --data train.bin $TINY --steps 3000 >secs &&
	python3 check.py tty $(cat secs) 3000 &&
	test $(grep -c "^step " out) = 3000 &&
	! grep -q "$(printf "\r")" out &&
	grep -q "^summary: 3000 steps" out &&
	grep -q "gpu-train: building the model (2 layers, hidden 32) and opening the data\.\.\." tty &&
	grep -q "step 0/3000  first step\.\.\." tty
'

test_expect_success 'both on the terminal: the line stands for the step lines, and messages start on a cleared line' '
	python3 onpty.py out2 tty2 1 gpu-train --data train.bin $TINY --steps 400 --ckpt-every 100 \
		--ckpt-dir ck >secs2 &&
	python3 check.py tty2 $(cat secs2) 400 &&
	! grep -a -q "^step .*ms" tty2 &&
	grep -a -q "^summary: 400 steps" tty2 &&
	python3 - <<-\EOF
	import re
	t = open("tty2", "rb").read().decode()
	# each checkpoint line: after a cleared line, or at a line start
	for m in re.finditer("checkpoint step (\\d+) committed", t):
	    before = t[:m.start()]
	    assert before.endswith("\r\x1b[K") or before.endswith("\n"), repr(before[-80:])
	assert len(re.findall("checkpoint step (\\d+) committed", t)) == 4
	EOF
'

test_expect_success '-q on a terminal, and any run into files: no line, no escape' '
	python3 onpty.py out3 tty3 1 gpu-train --data train.bin $TINY --steps 50 -q >/dev/null &&
	! grep -a -q "$(printf "\033")" tty3 &&
	gpu-train --data train.bin $TINY --steps 50 >plain.out 2>plain.err &&
	test_must_be_empty plain.err &&
	test $(grep -c "^step " plain.out) = 50 &&
	! grep -q "$(printf "\033")" plain.out
'

test_expect_success '--until: the line counts to the step the run stops at' '
	python3 onpty.py out4 tty4 0 gpu-train --data train.bin $TINY --steps 100000 --until 700 >secs4 &&
	python3 check.py tty4 $(cat secs4) 700
'

# rate.py TTY JSON METRICS TOKENS: every redraw's tok/s is TOKENS (the
# global batch x seq, counted once whatever the grid) over the median of
# the step times the line's window held (the JSON step lines' step_ms of
# the 15 steps up to it, the first step left out), within the rounding;
# the JSON lines and the metrics count the same tokens
cat >rate.py <<'EOF'
import json, re, statistics, sys
t = open(sys.argv[1], "rb").read().decode()
steps = [json.loads(l) for l in open(sys.argv[2])]
steps = [s for s in steps if s.get("event") == "step"]
want = int(sys.argv[4])
by = {s["step"]: s for s in steps}
for s in steps:
    assert s["tokens"] == want * s["step"], (s["step"], s["tokens"], want)
    r = want / (s["step_ms"] / 1e3)
    assert abs(s["tokens_per_s"] - r) <= 1e-6 * r, (s["tokens_per_s"], r)
draws = re.findall(r"\rstep (\d+)/\d+  \d+%  loss \S+  (\d+) tok/s", t)
assert draws, repr(t[-300:])
for k, rate in set(draws):
    k = int(k)
    win = [by[i]["step_ms"] / 1e3 for i in range(max(2, k - 14), k + 1)] or [by[1]["step_ms"] / 1e3]
    r = want / statistics.median(win)
    assert abs(int(rate) - r) <= 1, "step %d: %s tok/s on the line, %.1f the tokens a step trains" % (k, rate, r)
m = dict((l.split("{")[0], l.split()[-1]) for l in open(sys.argv[3])
         if l[0] != "#" and "category=" not in l)
last = steps[-1]
assert float(m["gpukit_train_tokens_total"]) == last["tokens"], m["gpukit_train_tokens_total"]
r = float(m["gpukit_train_tokens_per_second"])
assert abs(r - last["tokens_per_s"]) <= 1e-6 * r, (r, last["tokens_per_s"])
print(len(draws), "lines, the last", draws[-1][1], "tok/s")
EOF

# each rank's standard error on a terminal of its own (rank 0 draws)
mpi_onpty() {
	n=$1
	shift
	timeout 300 mpirun --oversubscribe --bind-to none -np "$n" sh -c \
		'r=$OMPI_COMM_WORLD_RANK; exec python3 onpty.py out$r tty$r 0 gpu-train "$@"' \
		sh "$@" >/dev/null
}

G="--data train.bin --layers 2 --hidden 32 --heads 2 --positions 33 --seq 16 --threads 1 --lr 3e-3 --warmup 2 --steps 40 --json --metrics m.prom"

test_expect_success MPI '--tp 2: the line counts the global batch once (8 x 16 tokens a step, not twice that)' '
	mpi_onpty 2 $G --batch 8 --tp 2 &&
	python3 rate.py tty0 out0 m.prom $((8 * 16)) &&
	test_must_be_empty out1
'

test_expect_success MPI '--pp 2: the same, 4 x 16 x 2 micro-batches a step' '
	mpi_onpty 2 $G --batch 4 --grad-accum 2 --pp 2 &&
	python3 rate.py tty0 out0 m.prom $((4 * 16 * 2))
'

test_done

#!/bin/sh
test_description='gpu-train on a terminal: one progress line, redrawn a few times a second

With standard error a terminal (a pseudo-terminal here, through Python'"'"'s
pty module), gpu-train says what it does before its first step, then
draws one line (step/total, loss, tok/s, elapsed, ETA) redrawn in place
at most 4 times a second, clears it before any other message, and ends
it with a newline. Logs and pipes get the step lines they always got.'
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

test_done

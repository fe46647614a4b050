#!/bin/sh
test_description='--metrics FILE: Prometheus text for the textfile collector

gpu-train and allreduce-bench write their metrics in Prometheus text
format. Each file passes promtool check metrics; the values equal the
ones the tools print in their --json output and the figures they follow
from (tokens_total = steps x batch x seq x grad-accum x ranks); and a
real node_exporter serving the directory through its textfile collector
returns the same samples with node_textfile_scrape_error 0, also for two
runs'"'"' files in one directory (each sample carries run="FILE less .prom").'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

command -v promtool >/dev/null 2>&1 && test_set_prereq PROMTOOL

# prom.py FILE NAME [LABEL=VALUE...]: the value of the one sample of NAME
# carrying those labels (others allowed); fails on none or several.
cat >prom.py <<'PYEOF'
import re, sys
want = dict(a.split("=", 1) for a in sys.argv[3:])
hits = []
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line.rstrip("\n"))
    if not m:
        sys.exit("bad line: %r" % line)
    labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
    if m.group(1) == sys.argv[2] and all(labels.get(k) == v for k, v in want.items()):
        hits.append(m.group(3))
if len(hits) != 1:
    sys.exit("%s %r: %d samples" % (sys.argv[2], want, len(hits)))
print(hits[0])
PYEOF
prom() {
	python3 prom.py "$@"
}

# same A B: two numbers within a relative 1e-9 (JSON and the metrics both
# print doubles, the metrics after a unit change)
same() {
	python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-9 * max(abs(a), abs(b), 1e-300))' "$1" "$2" ||
	{ echo "differ: $1 $2"; false; }
}

A="$TINY --data train.bin --batch 2 --grad-accum 2 --json"

test_expect_success 'gpu-train: steps, tokens and the last step as in its log' '
	train_data &&
	gpu-train $A --steps 3 --metrics train.prom >log.json &&
	test "$(prom train.prom gpukit_train_steps_total)" = 3 &&
	test "$(prom train.prom gpukit_train_tokens_total)" = $((3 * 2 * 16 * 2 * 1)) &&
	test "$(prom train.prom gpukit_train_world_size)" = 1 &&
	jq -c "select(.event == \"step\")" log.json | tail -n 1 >last.json &&
	same "$(prom train.prom gpukit_train_loss)" "$(jq .loss last.json)" &&
	same "$(prom train.prom gpukit_train_learning_rate)" "$(jq .lr last.json)" &&
	same "$(prom train.prom gpukit_train_grad_norm)" "$(jq .grad_norm last.json)" &&
	same "$(prom train.prom gpukit_train_step_seconds)" "$(jq ".step_ms / 1000" last.json)" &&
	test "$(prom train.prom gpukit_train_step_skipped)" = 0 &&
	for c in parameters gradients optimizer activations workspace padding comm; do
		test "$(prom train.prom gpukit_train_memory_bytes category=$c)" = \
			"$(jq ".memory.$c" last.json)" || return 1
	done &&
	test_must_fail prom train.prom gpukit_train_memory_bytes category=total &&
	test_must_fail prom train.prom gpukit_train_val_loss &&
	now=$(date +%s) && ts=$(prom train.prom gpukit_train_last_step_timestamp_seconds) &&
	test $((now - ts)) -ge 0 && test $((now - ts)) -lt 600
'

test_expect_success 'gpu-train: every sample carries run="train"' '
	test "$(grep -v "^#" train.prom | wc -l)" -gt 0 &&
	! grep -v "^#" train.prom | grep -v "{run=\"train\"[,}]"
'

test_expect_success PROMTOOL 'gpu-train: promtool accepts the file' '
	promtool check metrics <train.prom
'

# The checkpoint samples: the last one committed (here the one at the end
# of the run, written after the last step) as its JSON event says, and
# the failures --ckpt-error continue trained past (a file-size limit far
# below the model's size, far above the metrics file's).
test_expect_success 'gpu-train: the last checkpoint, its time, and checkpoints not written' '
	gpu-train $A --steps 5 --ckpt-every 2 --ckpt-dir ckm --metrics ck.prom >ck.json &&
	jq -c "select(.event == \"checkpoint\")" ck.json | tail -n 1 >lastck.json &&
	test "$(jq .step lastck.json)" = 5 &&
	test "$(readlink ckm/latest)" = step-00000005 &&
	test "$(prom ck.prom gpukit_train_checkpoint_step)" = 5 &&
	same "$(prom ck.prom gpukit_train_checkpoint_seconds)" "$(jq .seconds lastck.json)" &&
	test "$(prom ck.prom gpukit_train_checkpoints_failed_total)" = 0 &&
	now=$(date +%s) && ts=$(prom ck.prom gpukit_train_checkpoint_timestamp_seconds) &&
	test $((now - ts)) -ge 0 && test $((now - ts)) -lt 600 &&
	test "$(prom train.prom gpukit_train_checkpoints_failed_total)" = 0 &&
	test_must_fail prom train.prom gpukit_train_checkpoint_step &&
	( ulimit -f 16 &&
	  test_expect_code 1 gpu-train $A --steps 5 --ckpt-every 2 --ckpt-dir ckf \
		--ckpt-error continue --metrics ckf.prom >/dev/null 2>ckf.err ) &&
	test "$(grep -c "^gpu-train: warning: checkpoint step [245] not written" ckf.err)" = 3 &&
	test "$(prom ckf.prom gpukit_train_checkpoints_failed_total)" = 3 &&
	test "$(prom ckf.prom gpukit_train_steps_total)" = 5 &&
	test_must_fail prom ckf.prom gpukit_train_checkpoint_step
'

test_expect_success PROMTOOL 'gpu-train: promtool accepts the checkpoint samples' '
	promtool check metrics <ck.prom &&
	promtool check metrics <ckf.prom
'

test_expect_success 'gpu-train: the validation loss stays from the last evaluation' '
	gpu-train $A --steps 3 --val-data val.bin --eval-every 2 --eval-batches 2 \
		--metrics val.prom >val.json &&
	same "$(prom val.prom gpukit_train_val_loss)" \
		"$(jq "select(.event == \"step\" and .step == 2) | .val_loss" val.json)"
'

test_expect_success 'gpu-train: counters go on across a resume' '
	gpu-train $A --steps 4 --until 2 --ckpt-dir ck --metrics resume.prom >a.json &&
	test "$(prom resume.prom gpukit_train_steps_total)" = 2 &&
	gpu-train $A --steps 4 --ckpt-dir ck --resume --metrics resume.prom >b.json &&
	test "$(prom resume.prom gpukit_train_steps_total)" = 4 &&
	test "$(prom resume.prom gpukit_train_tokens_total)" = $((4 * 2 * 16 * 2))
'

test_expect_success MPI 'gpu-train: 2 ranks, rank 0 writes all ranks tokens' '
	mpi 2 $A --steps 2 --metrics mpi.prom >mpi.json &&
	test "$(prom mpi.prom gpukit_train_tokens_total)" = $((2 * 2 * 16 * 2 * 2)) &&
	test "$(prom mpi.prom gpukit_train_world_size)" = 2 &&
	same "$(prom mpi.prom gpukit_train_loss)" \
		"$(jq "select(.event == \"step\" and .step == 2) | .loss" mpi.json)"
'

# Each rewrite is an atomic replace with fsyncs: after every step it made
# a tiny model 4x slower. Through a pipe (written through, as a FIFO) each
# rewrite can be counted: the first step's, at most one a second, the last.
test_expect_success 'gpu-train: a step rewrites the file at most once a second, the last always' '
	t0=$(date +%s) &&
	gpu-train $A --steps 3000 -q --metrics /dev/stdout | cat >pipe.prom &&
	t1=$(date +%s) &&
	grep "^gpukit_train_steps_total" pipe.prom >writes &&
	head -n 1 writes | grep " 1$" &&
	tail -n 1 writes | grep " 3000$" &&
	n=$(wc -l <writes) &&
	echo "$n rewrites in $((t1 - t0)) to $((t1 - t0 + 1)) s" &&
	test "$n" -le $((t1 - t0 + 3))
'

test_expect_success 'gpu-train: a file it cannot write is reported once, training goes on' '
	gpu-train $A --steps 3 --metrics nodir/x.prom >out.json 2>err &&
	test "$(jq -s "map(select(.event == \"step\")) | length" out.json)" = 3 &&
	test $(wc -l <err) = 1 &&
	grep "^gpu-train: warning: .*nodir/x.prom" err &&
	! test -e nodir
'

test_expect_success 'gpu-train: --metrics usage errors' '
	test_expect_code 2 gpu-train --data train.bin --metrics "" 2>err &&
	grep "^gpu-train: --metrics .*empty" err &&
	test_expect_code 2 gpu-train $A --eval-only --metrics e.prom 2>err &&
	grep "^gpu-train: --metrics reports training: not with --eval-only" err &&
	test_expect_code 2 gpu-train $A --dump-data 1 --metrics e.prom 2>err &&
	grep "^gpu-train: --metrics reports training: not with --dump-data" err &&
	! test -e e.prom
'

# A typo naming the training data, or a checkpoint's file through
# latest, destroyed it (exit 0): a file that is not a metrics file is now
# left alone, and the job fails before its first step.
test_expect_success 'gpu-train: --metrics does not replace a file that is not metrics' '
	cp train.bin keep.bin &&
	test_expect_code 1 gpu-train $A --steps 2 --metrics train.bin >out.json 2>err &&
	cmp train.bin keep.bin &&
	grep "^gpu-train: metrics file .train.bin. exists and holds something else" err &&
	test "$(jq -s "map(select(.event == \"step\")) | length" out.json)" = 0 &&
	mkdir -p mdir &&
	test_expect_code 1 gpu-train $A --steps 2 --metrics mdir >out.json 2>err &&
	grep -Fx "gpu-train: metrics file '"'"'mdir'"'"' is a directory (name a file in it, such as '"'"'mdir/train.prom'"'"')" err &&
	test "$(jq -s "map(select(.event == \"step\")) | length" out.json)" = 0 &&
	gpu-train $A --steps 2 -q --ckpt-dir mck &&
	cp mck/latest/model.safetensors keep.st &&
	test_expect_code 1 gpu-train $A --steps 3 -q --ckpt-dir mck --resume \
		--metrics mck/latest/model.safetensors 2>err &&
	cmp mck/latest/model.safetensors keep.st &&
	: >empty.prom &&
	gpu-train $A --steps 1 -q --metrics empty.prom &&
	gpu-train $A --steps 1 -q --metrics empty.prom &&
	prom empty.prom gpukit_train_steps_total
'

test_expect_success MPI 'gpu-train: 2 ranks, --metrics naming the data fails the job once' '
	test_expect_code 1 mpi 2 $A --steps 2 --metrics train.bin >out.json 2>err &&
	cmp train.bin keep.bin &&
	test $(grep -c "holds something else" err) = 1 &&
	! grep MPI_ABORT err
'

# check.py FILE JSON: every row and summary of allreduce-bench --json
# against the metrics (GB/s to bytes/s, us to s)
cat >check.py <<'PYEOF'
import json, re, sys
samples = {}
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    m = re.match(r'^(\w+)\{(.*)\} (\S+)$', line.strip())
    if m:
        key = (m.group(1), tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2)))))
        samples[key] = float(m.group(3))
doc = json.load(open(sys.argv[2]))
run = sys.argv[1].rsplit("/", 1)[-1][:-len(".prom")]
common = [("run", run), ("backend", doc["backend"]), ("collective", doc["collective"])]
def get(name, labels):
    return samples.pop((name, tuple(sorted(common + labels))))
def near(a, b, what):
    if abs(a - b) > 1e-9 * max(abs(a), abs(b), 1e-300):
        sys.exit("%s: metrics %r, json %r" % (what, a, b))
n = 0
for r in doc["results"]:
    for place, key in (("out", "out_of_place"), ("in", "in_place")):
        lab = [("algo", r["algo"]), ("type", r["type"]), ("redop", r["redop"]),
               ("size", str(r["size"])), ("placement", place)]
        if doc["collective"] == "broadcast":
            lab.append(("root", str(r["root"])))
        near(get("gpukit_allreduce_busbw_bytes_per_second", lab), r[key]["bus_bw"] * 1e9, "busbw")
        near(get("gpukit_allreduce_algbw_bytes_per_second", lab), r[key]["alg_bw"] * 1e9, "algbw")
        near(get("gpukit_allreduce_time_seconds", lab), r[key]["time"] * 1e-6, "time")
        if r[key]["nwrong"] is not None:
            near(get("gpukit_allreduce_wrong_elements", lab), r[key]["nwrong"], "wrong")
        n += 1
for algo, bw in doc["average_bus_bandwidth"].items():
    near(get("gpukit_allreduce_avg_busbw_bytes_per_second", [("algo", algo)]), bw * 1e9, "avg")
    get("gpukit_allreduce_out_of_bounds_elements", [("algo", algo)])
# the run's own samples carry the common labels only
for name in ("world_size", "success", "last_run_timestamp_seconds", "memcpy_bytes_per_second"):
    samples.pop(("gpukit_allreduce_" + name, tuple(sorted(common))), None)
if samples:
    sys.exit("left over: %r" % list(samples)[:3])
print(n)
PYEOF

test_expect_success 'allreduce-bench: every row of the sweep, as in --json' '
	allreduce-bench -b 8 -e 1K -f 4 -n 3 -w 1 --algo all --json --metrics ab.prom >ab.json &&
	test "$(python3 check.py ab.prom ab.json)" -gt 0 &&
	test "$(prom ab.prom gpukit_allreduce_world_size)" = 1 &&
	test "$(prom ab.prom gpukit_allreduce_success)" = 1 &&
	same "$(prom ab.prom gpukit_allreduce_memcpy_bytes_per_second)" "$(jq ".memcpy_bw * 1e9" ab.json)"
'

test_expect_success PROMTOOL 'allreduce-bench: promtool accepts the file' '
	promtool check metrics <ab.prom
'

test_expect_success MPI 'allreduce-bench: 2 ranks over MPI, broadcast with its root' '
	timeout 300 mpirun -np 2 allreduce-bench -b 64 -e 4K -f 8 -n 3 -w 1 --json \
		--metrics mpi-ab.prom >mpi-ab.json &&
	python3 check.py mpi-ab.prom mpi-ab.json &&
	test "$(prom mpi-ab.prom gpukit_allreduce_world_size)" = 2 &&
	test "$(prom mpi-ab.prom gpukit_allreduce_busbw_bytes_per_second backend=mpi size=4096 placement=out)" != 0 &&
	timeout 300 mpirun -np 2 allreduce-bench --collective broadcast -r 1 -b 64 -e 256 \
		-n 2 -w 1 --json --metrics bc.prom >bc.json &&
	python3 check.py bc.prom bc.json &&
	prom bc.prom gpukit_allreduce_time_seconds root=1 size=64 placement=in
'

test_expect_success 'allreduce-bench: a file it cannot write fails the run' '
	test_expect_code 1 allreduce-bench -e 64 --metrics nodir/x.prom >out 2>err &&
	grep "^allreduce-bench: .*nodir/x.prom" err &&
	test_expect_code 2 allreduce-bench --metrics "" 2>err &&
	grep "^allreduce-bench: --metrics .*empty" err
'

test_expect_success 'allreduce-bench: --metrics does not replace a file that is not metrics' '
	echo "results" >notes.txt &&
	test_expect_code 1 allreduce-bench -e 64 --metrics notes.txt >out 2>err &&
	grep "^allreduce-bench: metrics file .notes.txt. exists and holds something else" err &&
	test "$(cat notes.txt)" = results
'

test_expect_success NODE_EXPORTER 'node_exporter serves both files' '
	mkdir textfile &&
	cp train.prom ab.prom textfile/ &&
	node_exporter_scrape textfile scrape &&
	test "$(prom scrape gpukit_train_tokens_total)" = 192 &&
	same "$(prom scrape gpukit_train_loss)" "$(prom train.prom gpukit_train_loss)" &&
	test "$(prom scrape gpukit_train_memory_bytes category=optimizer)" = \
		"$(prom train.prom gpukit_train_memory_bytes category=optimizer)" &&
	algo=$(jq -r ".results[-1].algo" ab.json) &&
	same "$(prom scrape gpukit_allreduce_time_seconds algo=$algo size=512 placement=in)" \
		"$(prom ab.prom gpukit_allreduce_time_seconds algo=$algo size=512 placement=in)" &&
	test "$(prom scrape gpukit_allreduce_success)" = 1
'

test_expect_success NODE_EXPORTER 'node_exporter: two runs of one tool in one directory, told apart by run' '
	mkdir two &&
	gpu-train $A --steps 2 --metrics two/job-1.prom >/dev/null &&
	gpu-train $A --steps 3 --metrics two/job-2.prom >/dev/null &&
	node_exporter_scrape two scrape2 &&
	test "$(prom scrape2 gpukit_train_steps_total run=job-1)" = 2 &&
	test "$(prom scrape2 gpukit_train_steps_total run=job-2)" = 3
'

test_done

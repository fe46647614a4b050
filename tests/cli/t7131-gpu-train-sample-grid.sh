#!/bin/sh
test_description='gpu-train --sample and --dump-data under --tp and --pp

A model split over a grid samples in place: each token passes the
pipeline'"'"'s stages as messages, the tensor group computes its heads and
gathers its vocabulary slices of the logits, and the last stage picks
with one rank'"'"'s sampler and seed. From the same checkpoint (a random
model of wide weights, whose every head and vocabulary slice moves the
text), seeded top-k sampling after a prompt, on past the window (its
forward), at tp 2, pp 2, tp 2 x pp 2, the interleaved schedule and tp 2
with sequence parallelism prints the text of one rank byte for byte;
under --tp the greedy tokens too (the tensor group'"'"'s sums add in
another order than one rank'"'"'s: only a near tie of two logits could
move a token); the last stage picks with rank 0'"'"'s --prompt,
--temperature and --top-k, whatever its own. A sample after training
under pp 2 x dp 2 with ZeRO-3 is one rank'"'"'s sample of the checkpoint
the run wrote; --eval-only with --sample under tp 2 x pp 2 from that
checkpoint gives one rank'"'"'s text and its loss within 1e-6. --dump-data prints, per data-parallel group,
what a run of that many ranks prints. (On GPUs: t7123 and t7124.)'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"

M="--layers 4 --hidden 32 --heads 2 --positions 33 --seq 16 --threads 1"
# 40 tokens after a prompt of 3: past the window of 16 after 13
G="--sample 40 --prompt int --seed 3 --top-k 20 -q"

test_expect_success 'setup: a wide model, and its samples on one rank' '
	train_data &&
	gpu-train --data train.bin $M --batch 4 --steps 1 --lr 1e-9 --warmup 1 --ckpt-dir ck0 -q &&
	widen ck0/latest wide &&
	gpu-train --init-from wide $M $G >one.txt &&
	test $(wc -c <one.txt) -gt 40 &&
	gpu-train --init-from wide $M --sample 40 --temperature 0 --json >greedy.json &&
	sample_tokens greedy.json >greedy &&
	test $(jq length greedy) = 40 &&
	test $(jq "map(select(. >= 192)) | length" greedy) -gt 0
'

# the greedy tokens where the tensor group's sums round otherwise
for grid in "2 --tp 2" "2 --pp 2" "4 --tp 2 --pp 2" \
	"2 --pp 2 --pp-schedule interleaved --pp-chunks 2" "2 --tp 2 --sequence-parallel"; do
	n=${grid%% *}
	opts=${grid#* }
	test_expect_success MPI "sample of a checkpoint, $n ranks $opts: one rank's text" "
		mpi $n --init-from wide $M $G $opts >grid.txt &&
		test_cmp one.txt grid.txt &&
		case '$opts' in
		*--tp*)
			mpi $n --init-from wide $M --sample 40 --temperature 0 --json \
				$opts >g.json &&
			sample_tokens g.json >g &&
			test_cmp greedy g ;;
		esac
	"
done

# the last stage picks, but with rank 0's --prompt, --temperature and --top-k
test_expect_success MPI 'pp 2, the last stage given other sampling options: rank 0'"'"'s text' '
	timeout 300 mpirun --oversubscribe --bind-to none -np 2 sh -c \
		"if test \$OMPI_COMM_WORLD_RANK = 1; then set -- --prompt xyz --temperature 0 --top-k 1; fi &&
		 exec gpu-train --init-from wide $M $G --pp 2 \"\$@\"" >grid.txt &&
	test_cmp one.txt grid.txt
'

test_expect_success MPI 'sample after training, pp 2 x dp 2 under ZeRO-3: one rank'"'"'s of its checkpoint' '
	mpi 4 --data train.bin $M --batch 2 --grad-accum 2 --steps 3 --lr 3e-3 --warmup 2 \
		--pp 2 --zero 3 --ckpt-dir ck4 --sample 30 --seed 5 --json >t4.json &&
	test $(sample_tokens t4.json | wc -l) = 1 &&
	gpu-train --init-from ck4/latest $M --sample 30 --seed 5 --json >t1.json &&
	sample_tokens t1.json >want &&
	sample_tokens t4.json >got &&
	test_cmp want got
'

test_expect_success MPI '--eval-only --sample, tp 2 x pp 2 from the pp 2 x dp 2 checkpoint: one rank'"'"'s loss and text' '
	E="--eval-only --data val.bin --init-from ck4/latest $M --batch 2 --eval-batches 4 $G" &&
	gpu-train $E --json >e1.json &&
	mpi 4 $E --json --tp 2 --pp 2 >e4.json &&
	jq -r "select(.event == \"eval\") | .loss" e1.json >want &&
	jq -r "select(.event == \"eval\") | .loss" e4.json >got &&
	close_to got want 1e-6 &&
	jq -r "select(.event == \"sample\") | .text" e1.json >want &&
	jq -r "select(.event == \"sample\") | .text" e4.json >got &&
	test_cmp want got
'

D="--data train.bin --seq 8 --batch 2 --dump-data 3"

test_expect_success MPI '--dump-data: tp 2 and tp 2 x pp 2 print one rank'"'"'s, pp 2 x dp 2 dp 2'"'"'s' '
	gpu-train $D >d1 &&
	test $(wc -l <d1) = 3 &&
	mpi 2 $D >d2.raw &&
	sort d2.raw >d2 &&
	test "$(jq -r .rank d2 | sort -u | tr "\n" " ")" = "0 1 " &&
	! test_cmp d1 d2 >/dev/null &&
	for g in "2 --tp 2" "4 --tp 2 --pp 2" "4 --pp 2"; do
		mpi $g $D >raw &&
		sort raw >got &&
		case $g in
		4\ --pp\ 2) test_cmp d2 got ;;
		*) test_cmp d1 got ;;
		esac || return 1
	done
'

test_done

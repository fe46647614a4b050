#!/bin/sh
test_description='scripts/plot-loss: JSON Lines to a PNG and a terminal plot

The PNG is a real image of the asked size (its IHDR chunk read back), the
terminal plot has the axes, and bad logs are refused.'
. "$(dirname "$0")/lib.sh"

PLOT="$GK_TOP/scripts/plot-loss"
if ! command -v gnuplot >/dev/null 2>&1 || ! command -v jq >/dev/null 2>&1; then
	skip_all="gnuplot or jq is not installed (scripts/install-deps)"
	test_done
fi

# IHDR: width and height, big-endian, at bytes 16..23 after the signature.
png_size() {
	test "$(head -c 8 "$1" | od -An -tx1 | tr -d " \n")" = 89504e470d0a1a0a &&
	od -An -tu1 -j16 -N8 "$1" |
	awk "{ print \$1*16777216 + \$2*65536 + \$3*256 + \$4 \"x\" \$5*16777216 + \$6*65536 + \$7*256 + \$8 }"
}

test_expect_success 'a log with steps, a validation loss and a summary line' '
	awk "BEGIN { for (s = 1; s <= 50; s++) {
		printf \"{\\\"step\\\":%d,\\\"loss\\\":%.4f,\\\"lr\\\":0.0006\", s, 5 * exp(-s / 20) + 1;
		if (s % 10 == 0) printf \",\\\"val_loss\\\":%.4f\", 5 * exp(-s / 20) + 1.2;
		print \"}\" }
		print \"{\\\"summary\\\":{\\\"steps\\\":50}}\" }" >train.jsonl &&
	test "$(jq -s "[.[] | select(.val_loss)] | length" train.jsonl)" = 5
'

test_expect_success 'PNG: a real image of the default and of the asked size' '
	"$PLOT" -o loss.png train.jsonl &&
	echo 900x540 >expect && png_size loss.png >actual && test_cmp expect actual &&
	test $(wc -c <loss.png) -gt 4000 &&
	"$PLOT" -W 640 -H 400 -o small.png train.jsonl &&
	echo 640x400 >expect && png_size small.png >actual && test_cmp expect actual
'

test_expect_success 'terminal plot: title, axis labels, both series' '
	"$PLOT" -W 80 -H 24 train.jsonl >plot.txt &&
	test $(wc -l <plot.txt) -ge 20 &&
	grep "gpu-train loss" plot.txt &&
	grep "step" plot.txt &&
	grep "train (val)" plot.txt
'

test_expect_success 'from a pipe' '
	"$PLOT" - <train.jsonl >plot.txt && grep "gpu-train loss" plot.txt
'

test_expect_success 'bad input: not JSON, no steps, missing file, bad option' '
	echo "not json" >bad.jsonl &&
	test_expect_code 1 "$PLOT" -o x.png bad.jsonl 2>err &&
	grep "plot-loss: .bad.jsonl.: not JSON Lines" err &&
	echo "{\"summary\":1}" >none.jsonl &&
	test_expect_code 1 "$PLOT" none.jsonl 2>err &&
	grep "no step records" err &&
	test_expect_code 1 "$PLOT" missing.jsonl 2>err &&
	test_expect_code 2 "$PLOT" -W wide train.jsonl 2>err &&
	test_expect_code 2 "$PLOT" --bogus train.jsonl 2>err &&
	! test -e x.png && ! test -e x.png.tmp
'

test_done

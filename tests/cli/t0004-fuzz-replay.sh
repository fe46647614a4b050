#!/bin/sh
test_description='every fuzz target replays its corpus without a crash

Inputs that once crashed a parser live in tools/fuzz/corpus/TARGET/; the
replay driver runs them under the same build as the tests (SAN=1 too).'
. "$(dirname "$0")/lib.sh"

targets=
for src in "$GK_TOP"/tools/fuzz/*.c; do
	n=$(basename "$src" .c)
	test "$n" = replay || targets="$targets $n"
done
if test -z "$targets"; then
	skip_all="no fuzz targets yet"
	test_done
fi

for n in $targets; do
	test_expect_success "fuzz target $n replays its corpus" "
		corpus='$GK_TOP/tools/fuzz/corpus/$n' &&
		test -d \"\$corpus\" &&
		'$GK_BUILD/tools/fuzz/$n' \"\$corpus\" >out &&
		grep '^replayed [1-9]' out
	"
done

test_done

#!/bin/sh
test_description='every tool follows the shared command-line conventions

-h/--help on stdout with exit 0, --version as "TOOL (gpukit) X.Y.Z",
unknown options exit 2 with a message, the synopsis and a pointer to
--help on stderr, and a closed or full stdout is an error (exit 1) unless
it is EPIPE; a closed stdout is not reused by a file the tool opens.'
. "$(dirname "$0")/lib.sh"

version=$(sed -n 's/^VERSION := //p' "$GK_TOP/Makefile")
# The tools are those of bin/*.c, and the ones under test are those built
# in $GK_BINDIR (sharness puts it first on PATH; a tool missing there would
# be looked up further down PATH, perhaps an installed older gpukit).
built= missing=
for src in "$GK_TOP"/bin/*.c; do
	test -f "$src" || continue
	t=$(basename "$src" .c)
	if test -x "$GK_BINDIR/$t"; then
		built="$built $t"
	else
		missing="$missing $t"
	fi
done
if test -z "$built"; then
	skip_all="no tool is built in $GK_BINDIR (make builds them)"
	test_done
fi

test_expect_success 'every tool of bin/*.c is built in GK_BINDIR' '
	test -z "$missing" || { echo "not built in $GK_BINDIR:$missing"; false; }
'

for t in $built; do
	test_expect_success "$t --help prints usage on stdout, exit 0" "
		$t --help >out 2>err &&
		test_must_be_empty err &&
		grep -i 'usage' out &&
		$t -h >out2 && test_cmp out out2
	"
	test_expect_success "$t --version" "
		echo '$t (gpukit) $version' >expect &&
		$t --version >actual &&
		test_cmp expect actual
	"
	test_expect_success "$t: unknown option exits 2 with the synopsis on stderr, not every option" "
		test_expect_code 2 $t --no-such-option >out 2>err &&
		test_must_be_empty out &&
		grep '^usage: $t ' err &&
		tail -n 1 err >last &&
		echo \"Try '$t --help' for the options.\" >expect &&
		test_cmp expect last &&
		! grep '^  -' err
	"
	test_expect_success "$t: a full stdout is an error" "
		test_expect_code 1 $t --help >/dev/full 2>err &&
		grep '^$t: write standard output: No space left on device' err
	"
	test_expect_success "$t: a closed stdout is an error, and no file takes its place" "
		test_expect_code 1 $t --help >&- 2>err &&
		grep '^$t: write standard output: Bad file descriptor' err
	"
done

test_done

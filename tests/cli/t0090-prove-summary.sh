#!/bin/sh
test_description='tests/prove: a failed make check says what broke

make check runs prove through tests/prove, which prints after a failure,
for each failed file, its failed tests, their TAP comments, the part of
the sharness log each failed test wrote, the end of that log, and a unit
program'"'"'s stderr. Checked here on a sharness script and a unit program
that fail on purpose, made and run in this test only (never part of the
suite).'
. "$(dirname "$0")/lib.sh"

test_expect_success 'a tree with a failing sharness script and a failing unit program' '
	mkdir -p fake/tests/cli fake/build &&
	cp "$GK_TOP/tests/cli/lib.sh" fake/tests/cli/ &&
	ln -s "$GK_TOP/scripts" fake/scripts &&
	cat >fake/tests/cli/t9990-fails.sh <<-\EOF &&
	#!/bin/sh
	test_description="fails on purpose"
	. "$(dirname "$0")/lib.sh"
	test_expect_success "first passes" "echo first-output"
	test_expect_success MISSING "skipped" "echo skipped-output"
	test_expect_success "second fails" "
		echo second-output &&
		echo second-stderr >&2 &&
		test one = two
	"
	test_expect_failure "known breakage" "false"
	test_expect_success "third passes" "echo third-output"
	test_done
	EOF
	cat >fake/tests/cli/t9991-passes.sh <<-\EOF &&
	#!/bin/sh
	test_description="passes"
	. "$(dirname "$0")/lib.sh"
	test_expect_success "passes" "true"
	test_done
	EOF
	chmod +x fake/tests/cli/t999*.sh &&
	cat >unit.c <<-\EOF &&
	#include "tap.h"
	int main(void)
	{
		is_int(1 + 1, 3, "one and one");
		fprintf(stderr, "unit-stderr\n");
		ok(1, "fine");
		return done_testing();
	}
	EOF
	${CC:-cc} -I"$GK_TOP/tests/unit" -o fake/build/unit unit.c
'

# prove FILE...: tests/prove on FILE... in the fake tree; out, err and rc
prove_fake() {
	(cd fake && GK_BUILD="$PWD/build" GK_BINDIR="$PWD/bin" \
		"$GK_TOP/tests/prove" --directives "$@" >../out 2>../err)
	echo $? >rc
}

test_expect_success 'a passing run prints nothing more than prove' '
	prove_fake tests/cli/t9991-passes.sh &&
	test "$(cat rc)" = 0 &&
	grep "^Result: PASS$" out &&
	! grep "tests/prove" out
'

test_expect_success 'a failing run fails, and names each failed file with its failed tests' '
	prove_fake build/unit tests/cli/t9990-fails.sh tests/cli/t9991-passes.sh &&
	test "$(cat rc)" = 1 &&
	grep "^Result: FAIL$" out &&
	sed -n "s/^=== //p" out >files &&
	cat >expect <<-\EOF &&
	build/unit: failed tests: 1 of 2; exit status 1
	tests/cli/t9990-fails.sh: failed tests: 3 of 5; exit status 1
	EOF
	test_cmp expect files
'

# part START: the lines of out from the one that starts with START to the
# next "===" or "---" line
part() {
	awk -v s="$1" "index(\$0, s) == 1 { on = 1; print; next } /^(===|---)/ { on = 0 } on" out
}

test_expect_success 'a unit program: its not-ok line, what it got and wanted, its stderr' '
	part "=== build/unit" >unit &&
	cat >expect <<-\EOF &&
	=== build/unit: failed tests: 1 of 2; exit status 1
	not ok 1 - one and one
	#   got:  2
	#   want: 3
	EOF
	test_cmp expect unit &&
	part "--- the last 40 lines of its stderr" >stderr &&
	grep "^| unit-stderr$" stderr
'

test_expect_success 'a sharness script: the failed test with its commands, not the TODO' '
	part "=== tests/cli/t9990-fails.sh" >sh &&
	grep "^not ok 3 - second fails$" sh &&
	grep "^#.*echo second-output &&$" sh &&
	grep "^#.*test one = two$" sh &&
	! grep "known breakage" sh
'

test_expect_success 'a sharness script: what the failed test wrote, and nothing of the others' '
	part "--- what test 3 wrote" >wrote &&
	grep "^| second-output$" wrote &&
	grep "^| second-stderr$" wrote &&
	! grep -e first-output -e skipped-output -e third-output wrote &&
	part "--- the last 40 lines of" >tail &&
	grep "^| third-output$" tail
'

test_done

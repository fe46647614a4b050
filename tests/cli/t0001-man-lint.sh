#!/bin/sh
test_description='man pages pass mandoc -Tlint -Wwarning'
. "$(dirname "$0")/lib.sh"

for page in "$GK_TOP"/man/man*/*.[1-9]; do
	test -f "$page" || continue
	name=${page#$GK_TOP/}
	test_expect_success "lint $name" "
		mandoc -Tlint -Wwarning '$page' >out 2>&1 || { cat out; false; }
	"
done

test_expect_success 'every tool has a man page' '
	for t in "$GK_TOP"/bin/*.c; do
		test -f "$t" || continue
		t=$(basename "$t" .c) &&
		test -f "$GK_TOP/man/man1/$t.1" || { echo "no man/man1/$t.1"; return 1; }
	done
'

test_done

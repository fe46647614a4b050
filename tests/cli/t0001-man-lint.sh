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

# What -Tlint cannot see: macros that parse but render wrong. A quoted
# word inside .Pq/.Qq runs its quotes together (""), and a .Pq whose
# argument starts with .Fl turns every following word into a flag
# ("-default -25 -MiB").
for page in "$GK_TOP"/man/man*/*.[1-9]; do
	test -f "$page" || continue
	name=${page#$GK_TOP/}
	test_expect_success "$name renders without run-together quotes or stray flags" "
		mandoc -T ascii -O width=200 '$page' | sed 's/.\x08//g' >text &&
		! grep -nE '\"\"|(^| )-[A-Za-z0-9][^ ]* -[A-Za-z0-9][^ ]* -[A-Za-z0-9][^ ]*' text
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

#!/bin/sh
test_description='make install/uninstall with DESTDIR and PREFIX; binaries start without a GPU'
. "$(dirname "$0")/lib.sh"

# make cannot quote a DESTDIR with spaces (sharness's trash directory has one).
# The nested make gets the check's build variables (SAN=1 ...) but not its
# MAKEFLAGS, whose jobserver descriptors prove does not pass down.
unset MAKEFLAGS MFLAGS
make_top() { make -s -C "$GK_TOP" ${GK_MAKEVARS:-} "$@"; }
stage=$(mktemp -d "${TMPDIR:-/tmp}/gk-install.XXXXXX")

test_expect_success 'make install DESTDIR PREFIX=/usr' '
	make_top install DESTDIR="$stage" PREFIX=/usr >/dev/null &&
	for m in "$GK_TOP"/man/man*/*.[1-9]; do
		sec=$(basename "$(dirname "$m")") &&
		test -f "$stage/usr/share/man/$sec/$(basename "$m")" || return 1
	done &&
	for t in "$GK_TOP"/bin/*.c; do
		test -f "$t" || continue
		test -x "$stage/usr/bin/$(basename "$t" .c)" || return 1
	done &&
	test -f "$stage"/usr/share/man/man7/gpukit.7
'

test_expect_success 'make uninstall removes what install put there' '
	make_top uninstall DESTDIR="$stage" PREFIX=/usr >/dev/null &&
	find "$stage" -type f >left &&
	test_must_be_empty left
'

test_expect_success 'install-deps --check agrees that nothing is missing' '
	"$GK_TOP/scripts/install-deps" --check
'

test_expect_success 'the library says why there is no GPU instead of failing' '
	for t in "$GK_TOP"/bin/*.c; do
		test -f "$t" || continue
		"$GK_TOP/bin/$(basename "$t" .c)" --version >/dev/null || return 1
	done
'

rm -rf "$stage"
test_done

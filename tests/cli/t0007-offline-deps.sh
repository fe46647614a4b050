#!/bin/sh
test_description='scripts/offline-deps: libraries staged for a machine without a mirror

The staging downloads Debian packages (skipped without apt-get or a
reachable mirror); the environment it leaves (DIR/env) is tested offline
on a staged tree made from this machine'"'"'s own jansson, with
PKG_CONFIG_LIBDIR pointing nowhere standing for a machine that lacks it.'
. "$(dirname "$0")/lib.sh"

od=$GK_TOP/scripts/offline-deps

# DIR/jansson/root as offline-deps leaves it, from the installed packages
dpkg -L libjansson-dev libjansson4 >/dev/null 2>&1 && command -v cc >/dev/null &&
	test_set_prereq JANSSON_PKGS
stage_native() {
	mkdir -p "$1/jansson/root" &&
	dpkg -L libjansson-dev libjansson4 | while read -r f; do
		if test -f "$f" || test -L "$f"; then
			mkdir -p "$1/jansson/root$(dirname "$f")" &&
			cp -P "$f" "$1/jansson/root$f" || exit 1
		fi
	done &&
	cp "$od-env" "$1/env"
}

# pkg-config's flags cannot carry the trash directory's space: the
# staged trees go beside it
st=$SHARNESS_TEST_DIRECTORY/t0007-staged dl=$SHARNESS_TEST_DIRECTORY/t0007-downloaded
rm -rf "$st" "$dl"

cat >prog.c <<'EOF'
#include <jansson.h>
#include <stdio.h>
int main(void)
{
	json_t *o = json_pack("{s:i}", "n", 7);
	printf("%s\n", json_dumps(o, JSON_COMPACT));
	return 0;
}
EOF

test_expect_success 'an unknown library is refused, naming those it knows' '
	test_expect_code 2 "$od" -o d zlib 2>err &&
	grep "'"'"'zlib'"'"' is not one of libarchive, jansson, libxxhash, hwloc, liblz4" err &&
	! test -e d
'

test_expect_success JANSSON_PKGS 'a library the machine has: its own, nothing printed' '
	stage_native "$st" &&
	"$st"/env >out 2>err &&
	test_must_be_empty out &&
	grep "jansson: this machine.s own" err
'

test_expect_success JANSSON_PKGS 'a library the machine lacks: the staged copy builds and runs' '
	mkdir -p nowhere &&
	(PKG_CONFIG_LIBDIR=$PWD/nowhere && export PKG_CONFIG_LIBDIR &&
	 ! pkg-config --exists jansson &&
	 eval "$("$st"/env 2>err)" &&
	 pkg-config --cflags --libs jansson >flags &&
	 cc prog.c $(cat flags) -o prog &&
	 ./prog >out && ldd ./prog >ldd) &&
	grep "jansson: staged, $st/jansson/root/" err &&
	grep -- "-I$st/jansson/root/usr/include" flags &&
	grep -- "-L$st/jansson/root/usr/lib" flags &&
	echo "{\"n\":7}" >expect && test_cmp expect out &&
	grep "libjansson.so.4 => $st/jansson/root/usr/lib/" ldd
'

test_expect_success JANSSON_PKGS 'GK_OFFLINE_ALL=1 takes a staged library the machine has too' '
	GK_OFFLINE_ALL=1 "$st"/env >out 2>err &&
	grep "^export PKG_CONFIG_PATH=.$st/jansson/pc." out &&
	grep "^export LD_LIBRARY_PATH=.$st/jansson/root/usr/lib/" out &&
	grep "jansson: staged" err
'

test_expect_success JANSSON_PKGS 'a staged library that loads one the machine lacks is said' '
	mkdir -p gone "$st"/needy/root/usr/lib/pkgconfig &&
	echo "int gone(void) { return 1; }" >gone.c &&
	cc -shared -fPIC -Wl,-soname,libgone.so.1 gone.c -o gone/libgone.so.1 &&
	echo "int gone(void); int needy(void) { return gone(); }" >needy.c &&
	cc -shared -fPIC -Wl,-soname,libneedy.so.1 needy.c -Lgone -l:libgone.so.1 \
		-o "$st"/needy/root/usr/lib/libneedy.so.1 &&
	printf "prefix=/usr\nlibdir=\${prefix}/lib\nName: needy\nDescription: d\nVersion: 1\nLibs: -L\${libdir} -lneedy\n" \
		>"$st"/needy/root/usr/lib/pkgconfig/needy.pc &&
	GK_OFFLINE_ALL=1 "$st"/env >out 2>err &&
	grep "needy needs libgone.so.1, which this machine lacks" err &&
	grep "prefix=$st/needy/root/usr" "$st"/needy/pc/needy.pc
'

command -v apt-get >/dev/null && mkdir -p apt &&
	(cd apt && apt-get download -q libjansson4 >/dev/null 2>&1) &&
	test_set_prereq MIRROR

test_expect_success MIRROR,JANSSON_PKGS 'staging from the mirror: the same environment' '
	"$od" -o "$dl" jansson >out &&
	grep "^offline-deps: jansson: libjansson-dev_.*libjansson4_" out &&
	test -f "$dl"/jansson/root/usr/include/jansson.h &&
	test_cmp "$od-env" "$dl"/env &&
	(PKG_CONFIG_LIBDIR=$PWD/nowhere && export PKG_CONFIG_LIBDIR &&
	 eval "$("$dl"/env 2>/dev/null)" && cc prog.c $(pkg-config --cflags --libs jansson) -o prog2 &&
	 ./prog2 >out2) &&
	test_cmp expect out2 &&
	! ls -d "$dl"/.download-* 2>/dev/null
'

test_expect_success JANSSON_PKGS 'a staged tree under a path with a space is refused, saying why' '
	cp -R "$st" "with space" &&
	test_expect_code 1 "with space/env" >out 2>err &&
	test_must_be_empty out &&
	grep "has a space, which compiler flags from pkg-config cannot carry" err
'

rm -rf "$st" "$dl"
test_done

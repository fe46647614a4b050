#!/bin/sh
test_description='data-pack: corrupt shards and bad input fail cleanly

Every fixture in tests/data/shard/NAME.tar has its exact message in
NAME.err. Packing refuses names webdataset would mangle, and a full disk
or a killed packer leaves no shard under its final name.'
. "$(dirname "$0")/lib.sh"

fixtures="$GK_TOP/tests/data/shard"

test_expect_success 'the good fixture verifies' '
	cp "$fixtures"/*.tar "$fixtures"/*.lz4 . && data-pack --verify good.tar
'

for err in "$fixtures"/*.err; do
	name=$(basename "$err" .err)
	shard=$(cd "$fixtures" && ls "$name".tar*)
	test_expect_success "verify $shard: exact message, exit 1" "
		test_expect_code 1 data-pack --verify $shard 2>actual &&
		test_cmp '$err' actual
	"
done

test_expect_success 'verify: data after the end blocks is an error, zero padding is not' '
	mkdir -p tail && for i in 1 2 3 4; do printf $i >tail/$i.txt || return 1; done &&
	data-pack -c -o tail-%d.tar --max-count 2 tail &&
	cat tail-0.tar tail-1.tar >both.tar &&
	test_expect_code 1 data-pack --verify both.tar 2>err &&
	size=$(wc -c <tail-0.tar) &&
	echo "data-pack: shard '\''both.tar'\'': data after the end-of-archive blocks at byte $size (no tar reader sees it)" >expect &&
	test_cmp expect err &&
	cp tail-0.tar padded.tar && head -c 8704 /dev/zero >>padded.tar &&
	data-pack --verify padded.tar
'

test_expect_success 'extract refuses links, devices, absolute and .. names' '
	mkdir out &&
	for f in symlink device dotdot absolute; do
		test_expect_code 1 data-pack -x -C out $f.tar 2>err &&
		sed "s/^data-pack: //" err >a && sed "s/^data-pack: //" "$fixtures/$f.err" >b &&
		test_cmp b a || return 1
	done &&
	! test -e evil.txt && ! test -e /tmp/evil.txt &&
	! test -e out/a.txt && ! test -e out/a.dev
'

test_expect_success 'extract does not follow a symlink planted in the target' '
	mkdir -p victim trap && ln -s "$PWD/victim" trap/a &&
	mkdir -p src/a && printf data >src/a/x.txt && data-pack -c -o deep.tar src &&
	test_expect_code 1 data-pack -x -C trap deep.tar 2>err &&
	grep "Too many levels of symbolic links\|Not a directory" err &&
	! test -e victim/x.txt
'

test_expect_success 'a later member whose directory cannot be opened: exit 1, no crash' '
	mkdir -p late/a victim2 trap2 && printf 1 >late/b.txt && printf 2 >late/a/x.txt &&
	(cd late && printf "b.txt\na/x.txt\n" | data-pack -c -T - -o ../late.tar) &&
	ln -s "$PWD/victim2" trap2/a &&
	test_expect_code 1 data-pack -x -C trap2 late.tar 2>err &&
	echo "data-pack: extract '\''a/x.txt'\'': directory '\''a'\'': Not a directory" >expect &&
	test_cmp expect err && ls -A victim2 >left && test_must_be_empty left
'

test_expect_success 'a member under a name that is a file: exit 1, no crash' '
	python3 - <<-\EOF &&
	import io, tarfile
	with tarfile.open("fdir.tar", "w", format=tarfile.PAX_FORMAT) as t:
	    for name in ("d.txt", "d.txt/a.txt"):
	        m = tarfile.TarInfo(name)
	        m.size = 1
	        t.addfile(m, io.BytesIO(b"x"))
	EOF
	data-pack -c --from-tar fdir.tar -o fdir2.tar &&
	test_expect_code 1 data-pack -x -C fd2 fdir2.tar 2>err &&
	echo "data-pack: extract '\''d.txt/a.txt'\'': directory '\''d.txt'\'': Not a directory" >expect &&
	test_cmp expect err && test -f fd2/d.txt
'

test_expect_success 'list reads what webdataset reads: links are skipped' '
	data-pack -t symlink.tar >actual &&
	printf "symlink.tar\ta\tjpg\t1\n" >expect && test_cmp expect actual
'

test_expect_success 'a lone end block: GNU tar warns, --verify and -x fail, -t lists' '
	tar tf lone-zero-block.tar >tar.out 2>tar.err &&
	grep "A lone zero block" tar.err &&
	test_expect_code 1 data-pack -x -C lone lone-zero-block.tar 2>err &&
	test_cmp "$fixtures/lone-zero-block.err" err &&
	data-pack -t lone-zero-block.tar | cut -f2,3 >actual &&
	printf "a\tcls,jpg\nb\tcls,jpg\n" >expect && test_cmp expect actual
'

test_expect_success 'sparse members are refused by name, not called a truncation' '
	for f in sparse-gnu sparse-pax; do
		test_expect_code 1 data-pack -t $f.tar >sp.out 2>err &&
		test_must_be_empty sp.out && test_cmp "$fixtures/$f.err" err &&
		test_expect_code 1 data-pack --index $f.tar 2>err &&
		test_cmp "$fixtures/$f.err" err && ! test -e $f.idx &&
		test_expect_code 1 data-pack -c --from-tar $f.tar -o r.tar 2>err &&
		test_cmp "$fixtures/$f.err" err && ! test -e r.tar || return 1
	done
'

test_expect_success 'random access with a missing index says how to make one' '
	test_expect_code 1 data-pack -g a good.tar 2>err &&
	echo "data-pack: get '\''a'\'' (make the index with data-pack --index): open '\''good.idx'\'': No such file or directory" >expect &&
	test_cmp expect err
'

test_expect_success 'a damaged index is an error, not a crash' '
	printf "v1.2 3\njpg 512 x a.jpg\n" >good.idx &&
	test_expect_code 1 data-pack -g a good.tar 2>err &&
	grep "index '\''good.idx'\'' line 2: not '\''EXT OFFSET SIZE NAME'\'' groups" err
'

test_expect_success 'packing: case-only extensions, bad names, no samples' '
	mkdir -p c1 c2 c3 c4 &&
	printf 1 >c1/a.jpg && printf 2 >c1/a.JPG &&
	test_expect_code 1 data-pack -c -o x.tar c1 2>err &&
	echo "data-pack: sample '\''a'\'': extensions '\''JPG'\'' and '\''jpg'\'' differ only in case (webdataset lowercases them)" >expect &&
	test_cmp expect err &&
	printf 1 >c2/README &&
	test_expect_code 1 data-pack -c -o x.tar c2 2>err &&
	echo "data-pack: name '\''README'\'': no KEY.EXT form (webdataset would skip it): --ext EXT packs it as '\''README.EXT'\''; --name-as-key --ext EXT makes every file a sample keyed by its whole name" >expect &&
	test_cmp expect err &&
	printf 1 >"c3/a b.txt" &&
	test_expect_code 1 data-pack -c -o x.tar c3 2>err &&
	echo "data-pack: name '\''a b.txt'\'': contains whitespace or a control character" >expect &&
	test_cmp expect err &&
	test_expect_code 1 data-pack -c -o x.tar c4 2>err &&
	echo "data-pack: pattern '\''x.tar'\'': no samples to write" >expect &&
	test_cmp expect err &&
	! test -e x.tar
'

test_expect_success 'packing: a NUL byte in a -T list is an error, not a cut' '
	mkdir -p nul && printf 1 >nul/a.txt && printf 2 >nul/b.txt &&
	printf "nul/a.txt\nnul/b.txt\0nul/a.txt\n" >nul.list &&
	test_expect_code 1 data-pack -c -T nul.list -o x.tar 2>err &&
	echo "data-pack: read file list '\''nul.list'\'': line 2: a NUL byte (the list is one path per line, not find -print0 output)" >expect &&
	test_cmp expect err && ! test -e x.tar
'

test_expect_success 'packing: a non-UTF-8 name' '
	mkdir -p nu && printf 1 >"nu/$(printf "\377").txt" &&
	test_expect_code 1 data-pack -c -o x.tar nu 2>err &&
	printf "data-pack: name '\''\\xff.txt'\'': not valid UTF-8\n" >expect &&
	test_cmp expect err
'

test_expect_success 'packing: a key repeated in a tar stream' '
	test_expect_code 1 data-pack -c --from-tar not-consecutive.tar -o x.tar 2>err &&
	echo "data-pack: shard '\''not-consecutive.tar'\'': sample '\''a'\'': members are not consecutive (or the key is used twice)" >expect &&
	test_cmp expect err && ! test -e x.tar
'

test_expect_success 'packing from a tar refuses what packing files refuses' '
	python3 - <<-\EOF &&
	import io, tarfile
	def tar(out, *extra):
	    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as t:
	        d = tarfile.TarInfo("d")
	        d.type = tarfile.DIRTYPE
	        t.addfile(d)
	        a = tarfile.TarInfo("d/a.txt")
	        a.size = 3
	        t.addfile(a, io.BytesIO(b"aaa"))
	        for name, kind, arg in extra:
	            m = tarfile.TarInfo(name)
	            m.type = kind
	            if kind == tarfile.REGTYPE:
	                m.size = len(arg)
	                t.addfile(m, io.BytesIO(arg))
	            else:
	                m.linkname = arg
	                t.addfile(m)
	tar("hard.tar", ("d/b.txt", tarfile.LNKTYPE, "d/a.txt"))
	tar("sym.tar", ("d/c.txt", tarfile.SYMTYPE, "a.txt"))
	tar("fifo.tar", ("d/f.txt", tarfile.FIFOTYPE, ""))
	tar("noext.tar", ("./d/README", tarfile.REGTYPE, b"r"))
	tar("dirs.tar")
	EOF
	for f in hard sym fifo noext; do
		test_expect_code 1 data-pack -c --from-tar $f.tar -o r.tar 2>>ft.err || return 1
	done &&
	cat >expect <<-\EOF &&
	data-pack: shard '\''hard.tar'\'': member '\''d/b.txt'\'': a hard link to '\''d/a.txt'\'', not a regular file (GNU tar --hard-dereference stores the file)
	data-pack: shard '\''sym.tar'\'': member '\''d/c.txt'\'': a symbolic link to '\''a.txt'\'', not a regular file (GNU tar --dereference stores the file)
	data-pack: shard '\''fifo.tar'\'': member '\''d/f.txt'\'': not a regular file
	data-pack: name '\''d/README'\'': no KEY.EXT form (webdataset would skip it): --ext EXT gives such names an extension; --name-as-key --ext EXT makes every member a sample keyed by its whole name
	EOF
	test_cmp expect ft.err && ! test -e r.tar &&
	mkdir -p ne/d && printf r >ne/d/README &&
	test_expect_code 1 data-pack -c -o r.tar ne 2>err &&
	echo "data-pack: name '\''d/README'\'': no KEY.EXT form (webdataset would skip it): --ext EXT packs it as '\''d/README.EXT'\''; --name-as-key --ext EXT makes every file a sample keyed by its whole name" >expect &&
	test_cmp expect err &&
	data-pack -c --from-tar dirs.tar -o r.tar && data-pack -t r.tar >actual &&
	printf "r.tar\td/a\ttxt\t3\n" >expect && test_cmp expect actual &&
	data-pack -t hard.tar >actual && printf "hard.tar\td/a\ttxt\t3\n" >expect &&
	test_cmp expect actual
'

test_expect_success 'packing: one pattern without %d cannot hold two shards' '
	mkdir -p two && printf 1 >two/a.txt && printf 2 >two/b.txt &&
	test_expect_code 1 data-pack -c -o one.tar --max-count 1 two 2>err &&
	echo "data-pack: pattern '\''one.tar'\'': the data needs more than one shard; put %06d in the name" >expect &&
	test_cmp expect err && ! test -e one.tar
'

test_expect_success 'a pattern giving two shard numbers one file: exit 1, shard 0 kept' '
	mkdir -p same && for i in 1 2 3 4; do printf $i >same/$i.txt || return 1; done &&
	test_expect_code 1 data-pack -c -o "so/x%d/../s.tar" --max-count 2 \
		--manifest so/m.json same 2>err &&
	echo "data-pack: shard 1 '\''so/x1/../s.tar'\'': the same file as shard 0 '\''so/x0/../s.tar'\'', written by this run" >expect &&
	test_cmp expect err &&
	data-pack --verify so/s.tar && data-pack -t so/s.tar | cut -f2 >actual &&
	printf "1\n2\n" >expect && test_cmp expect actual &&
	! test -e so/m.json && ls -A so/x1 >left && test_must_be_empty left
'

test_expect_success 'a manifest named like a shard or an index: exit 1, shard kept' '
	mkdir -p mf && printf 1 >mf/a.txt &&
	test_expect_code 1 data-pack -c -o mo/x.tar --manifest mo/x.tar mf 2>err &&
	echo "data-pack: manifest '\''mo/x.tar'\'': the same file as shard 0 '\''mo/x.tar'\'', written by this run" >expect &&
	test_cmp expect err && data-pack --verify mo/x.tar &&
	test_expect_code 1 data-pack -c -o mo/y.tar --manifest mo/y.idx mf 2>err &&
	echo "data-pack: manifest '\''mo/y.idx'\'': the same file as index '\''mo/y.idx'\'' of shard 0, written by this run" >expect &&
	test_cmp expect err && data-pack -g a.txt mo/y.tar >a.out && printf 1 >expect &&
	test_cmp expect a.out
'

test_expect_success 'a full disk (RLIMIT_FSIZE) leaves no shard and no temp file' '
	mkdir -p big fd && dd if=/dev/zero of=big/a.bin bs=1024 count=300 2>/dev/null &&
	test_expect_code 1 sh -c "ulimit -f 100 && exec data-pack -c -o fd/x-%02d.tar big" 2>err &&
	grep "^data-pack: write '\''fd/x-00.tar'\'': File too large$" err &&
	ls -A fd >left && test_must_be_empty left
'

# fifo_blocked PID: PID waits to open a FIFO (for a writer that never
# comes). wchan names where it sleeps; a kernel that does not say
# (wchan "0") leaves the process state, S, interruptible sleep.
fifo_blocked() {
	w=$(cat /proc/$1/wchan 2>/dev/null) &&
	case $w in
	wait_for_partner) true ;;
	0 | "") test "$(awk "{ print \$3 }" /proc/$1/stat)" = S ;;
	*) false ;;
	esac
}

# The packer stops opening kill/c.txt (a FIFO) while shard x-01 is being
# written: the signal comes once it waits there, not as soon as x-01's
# temp file appears, which is a moment before the packer has installed
# the cleanup that removes it.
test_expect_success 'a killed packer leaves committed shards and nothing else' '
	mkdir -p kill && printf 1 >kill/a.txt && printf 2 >kill/b.txt &&
	mkfifo kill/c.txt &&
	printf "kill/a.txt\nkill/b.txt\nkill/c.txt\n" >list &&
	{ data-pack -c -T list -o k/x-%02d.tar --max-count 1 & } &&
	pid=$! &&
	test_wait_for 300 "data-pack to wait at the FIFO kill/c.txt" fifo_blocked $pid &&
	ls -A k >before &&
	kill -TERM $pid && { wait $pid; test $? -gt 128; } &&
	grep "^\.x-01\.tar\.tmp-" before &&
	ls -A k >left && printf "x-00.idx\nx-00.tar\n" >expect && test_cmp expect left
'

# A SIGTERM the moment -x has created a member's temp file (the shim
# (tests/cli/term-shim.c) raises it right after the openat that creates
# it) must not leave it.
test_term_shim t2001 || error "cannot build the test shim"

test_expect_success 'SIGTERM just after -x creates a temp file: nothing left' '
	mkdir -p xt && printf hello >xt/a.txt && data-pack -c -o xt.tar xt &&
	mkdir xout &&
	{ GK_TERM_AFTER=.gk-extract. LD_PRELOAD=$term_shim \
		ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		data-pack -x -C xout xt.tar; echo $? >rc; } &&
	test "$(cat rc)" = 143 &&
	test -z "$(find xout -name ".gk-extract.*")"
'

test_done

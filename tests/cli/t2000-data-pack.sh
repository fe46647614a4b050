#!/bin/sh
test_description='data-pack: create, list, extract, verify, index, get

Shards are checked against GNU tar, the lz4 tool, Python tarfile (index
offsets) and the webdataset package (samples), and byte-for-byte
against a second run (determinism).'
. "$(dirname "$0")/lib.sh"

# webdataset reads shards without torch (it has stand-ins for what it
# would take from it), and importing torch costs each Python process
# seconds of CPU: the readers run with it left out.
NOTORCH="import sys; sys.modules['torch'] = None"
if "$GK_TOP/scripts/test-venv" >/dev/null 2>&1 &&
	"$GK_PY" -c "$NOTORCH; import webdataset" 2>/dev/null; then
	test_set_prereq PYTHON
fi

test_expect_success 'make a small corpus' '
	mkdir -p raw/a raw/b &&
	for i in 0 1 2 3 4 5 6 7 8 9; do
		printf "image $i %0${i}d" 0 >raw/a/s$i.jpg &&
		printf "{\"label\": $i}" >raw/a/s$i.json || return 1
	done &&
	printf "mask" >raw/a/s3.seg.png &&
	: >raw/b/empty.txt &&
	long=$(printf "%0120d" 7) &&
	printf "long" >raw/b/$long.bin &&
	printf "utf8" >raw/b/caf$(printf "\303\251").txt
'

test_expect_success 'create: rollover on --max-count, index and manifest' '
	data-pack -c -o out/train-%04d.tar --max-count 4 --manifest out/m.json raw &&
	ls out >actual &&
	printf "%s\n" m.json train-0000.idx train-0000.tar train-0001.idx \
		train-0001.tar train-0002.idx train-0002.tar train-0003.idx \
		train-0003.tar >expect &&
	test_cmp expect actual
'

test_expect_success 'repacking into fewer shards names the ones left from before' '
	data-pack -c -o rp/x-%02d.tar --max-count 3 raw 2>err && test_must_be_empty err &&
	data-pack -c -o rp/x-%02d.tar --max-count 6 raw 2>err &&
	echo "data-pack: warning: 2 shards of an earlier run after the last one written: '\''rp/x-03.tar'\'', '\''rp/x-04.tar'\'' (a glob or brace range over '\''rp/x-%02d.tar'\'' would read them too: remove them)" >expect &&
	test_cmp expect err &&
	data-pack -c -o rp/x-%02d.tar raw 2>err &&
	echo "data-pack: warning: 4 shards of an earlier run after the last one written: '\''rp/x-01.tar'\'' .. '\''rp/x-04.tar'\'' (a glob or brace range over '\''rp/x-%02d.tar'\'' would read them too: remove them)" >expect &&
	test_cmp expect err &&
	ls rp >actual && printf "x-%02d.idx\nx-%02d.tar\n" 0 0 1 1 2 2 3 3 4 4 >expect &&
	test_cmp expect actual &&
	rm rp/x-0[1-4].* && data-pack -c -o rp/x-%02d.tar raw 2>err && test_must_be_empty err &&
	data-pack -c -o rp/x-%02d.tar --max-count 3 raw 2>err && rm rp/x-03.tar &&
	data-pack -c -o rp/x-%02d.tar --max-count 6 raw 2>err &&
	echo "data-pack: warning: 1 shard of an earlier run after the last one written: '\''rp/x-04.tar'\'' (a glob or brace range over '\''rp/x-%02d.tar'\'' would read it too: remove it)" >expect &&
	test_cmp expect err
'

test_expect_success 'packing a directory that holds the outputs leaves them out' '
	mkdir -p self && printf 1 >self/a.txt && printf 2 >self/b.txt &&
	data-pack -c -o self/s-%d.tar --max-count 1 --manifest self/m.json self 2>err &&
	test_must_be_empty err && cp self/s-0.tar s0.tar && cp self/s-1.tar s1.tar &&
	data-pack -c -o self/s-%d.tar --max-count 1 --manifest self/m.json self 2>err &&
	for f in m.json s-0.idx s-0.tar s-1.idx s-1.tar; do
		echo "data-pack: warning: '\''self/$f'\'': an output of this run (-o or --manifest names it); not packed" || return 1
	done >expect &&
	test_cmp expect err && cmp s0.tar self/s-0.tar && cmp s1.tar self/s-1.tar &&
	(cd self && printf "a.txt\n./s-0.tar\n" | data-pack -c -T - -o s-%d.tar 2>../err) &&
	grep -c "not packed" err >n && echo 1 >expect && test_cmp expect n &&
	data-pack -t self/s-0.tar | cut -f2 >actual && echo a >expect && test_cmp expect actual
'

test_expect_success 'list: TSV of shard, key, extensions, bytes' '
	data-pack -t out/train-0000.tar >actual &&
	for i in 0 1 2 3; do
		exts=jpg,json && test $i = 3 && exts=$exts,seg.png
		n=$(cat raw/a/s$i.* | wc -c) &&
		printf "out/train-0000.tar\ta/s$i\t$exts\t%d\n" $n || return 1
	done >expect &&
	test_cmp expect actual
'

test_expect_success 'the same input gives byte-identical shards' '
	data-pack -c -o again/train-%04d.tar --max-count 4 raw &&
	for f in out/*.tar; do cmp $f again/$(basename $f) || return 1; done
'

test_expect_success 'SOURCE_DATE_EPOCH sets every mtime' '
	SOURCE_DATE_EPOCH=1700000000 data-pack -c -o sde.tar raw/a &&
	tar --utc -tvf sde.tar >list &&
	grep -c "2023-11-14 22:13" list >n && echo 21 >expect && test_cmp expect n
'

test_expect_success 'GNU tar lists exactly our members, mode 0444 root' '
	cat out/*.tar >/dev/null &&
	for f in out/*.tar; do tar --quoting-style=literal -tf $f; done >actual &&
	(cd raw && find . -type f | sed "s|^\./||" | LC_ALL=C sort) >expect &&
	LC_ALL=C sort actual >sorted && test_cmp expect sorted &&
	tar tvf out/train-0000.tar | cut -c1-18 | sort -u >perm &&
	echo "-r--r--r-- 0/0    " >expect && test_cmp expect perm
'

test_expect_success 'members of a sample are consecutive, in extension order' '
	tar tf out/train-0000.tar >actual &&
	printf "a/s0.jpg\na/s0.json\na/s1.jpg\na/s1.json\na/s2.jpg\na/s2.json\na/s3.jpg\na/s3.json\na/s3.seg.png\n" >expect &&
	test_cmp expect actual
'

test_expect_success 'extract round trip' '
	data-pack -x -C ex out/*.tar &&
	diff -r raw ex
'

test_expect_success 'verify a manifest and shards' '
	data-pack --verify out/m.json &&
	data-pack --verify out/train-0001.tar out/train-0002.tar
'

test_expect_success 'verify names the shard whose checksum changed' '
	cp -r out bad && printf X | dd of=bad/train-0002.tar bs=1 seek=600 conv=notrunc 2>/dev/null &&
	test_expect_code 1 data-pack --verify bad/m.json 2>err &&
	grep "^data-pack: verify '\''bad/train-0002.tar'\'': XXH3 [0-9a-f]*, the manifest says [0-9a-f]*$" err
'

test_expect_success '--index rebuilds the index written while packing' '
	cp out/train-0001.idx saved.idx &&
	data-pack --index out/train-0001.tar && test_cmp saved.idx out/train-0001.idx
'

test_expect_success '-g prints one member, or one sample as a tar' '
	data-pack -g a/s5.json out/train-0001.tar >actual &&
	test_cmp raw/a/s5.json actual &&
	data-pack -g a/s5 out/train-0001.tar >one.tar &&
	tar tf one.tar >actual && printf "a/s5.jpg\na/s5.json\n" >expect && test_cmp expect actual &&
	test_expect_code 1 data-pack -g nope out/train-0001.tar 2>err &&
	echo "data-pack: get '\''nope'\'': no such key in '\''out/train-0001.tar'\''" >expect &&
	test_cmp expect err
'

test_expect_success '--max-size never splits a sample and bounds the shards' '
	data-pack -c -o sz/s-%02d.tar --max-size 6K raw &&
	for f in sz/*.tar; do
		test $(wc -c <$f) -le 6144 || return 1
	done &&
	for f in sz/*.tar; do data-pack -t $f; done | cut -f2 | sort | uniq -d >dups &&
	test_must_be_empty dups
'

test_expect_success 'create from -T - and from a tar stream' '
	(cd raw && find . -type f) | (cd raw && data-pack -c -T - -o ../lst.tar) &&
	tar --sort=name -C raw -cf - . | data-pack -c --from-tar - -o fromtar.tar &&
	data-pack -t lst.tar | cut -f2- | sort >a &&
	data-pack -t fromtar.tar | cut -f2- | sort >b &&
	test_cmp a b && test $(wc -l <a) = 13
'

test_expect_success 'to a pipe: the same bytes as to a file' '
	data-pack -c -o - raw/a >pipe.tar && data-pack -c -o file.tar raw/a &&
	cmp pipe.tar file.tar
'

test_expect_success 'LZ4: lz4 -dc | tar t lists our members; bytes equal the plain shard' '
	data-pack -c --lz4 --jobs 2 -o z/train-%04d.tar.lz4 --max-count 4 --manifest z/m.json raw &&
	for i in 0000 0001 0002 0003; do
		lz4 -dc z/train-$i.tar.lz4 >plain.tar &&
		cmp plain.tar out/train-$i.tar &&
		lz4 -dc z/train-$i.tar.lz4 | tar tf - >a && tar tf out/train-$i.tar >b &&
		test_cmp b a || return 1
	done &&
	data-pack --verify z/m.json
'

test_expect_success 'LZ4: random access and a rebuilt index agree' '
	data-pack -g a/s6.jpg z/train-0001.tar.lz4 >actual && test_cmp raw/a/s6.jpg actual &&
	cp z/train-0001.idx saved && data-pack --index z/train-0001.tar.lz4 &&
	test_cmp saved z/train-0001.idx
'

test_expect_success 'LZ4 levels: HC output decodes to the same tar' '
	data-pack -c --lz4=9 -o hc.tar.lz4 raw/a && data-pack -c -o ref.tar raw/a &&
	lz4 -dc hc.tar.lz4 >hc.tar && cmp hc.tar ref.tar
'

test_expect_success 'usage errors exit 2' '
	test_expect_code 2 data-pack 2>err &&
	test_expect_code 2 data-pack -c raw 2>err &&
	grep "needs -o" err &&
	test_expect_code 2 data-pack -c --from-tar - --shuffle 1 -o x.tar 2>err &&
	test_expect_code 2 data-pack -c -o x.tar --max-size 10Q raw 2>err
'

test_expect_success '--shuffle permutes samples deterministically' '
	data-pack -c --shuffle 42 -o sh1.tar raw/a && data-pack -c --shuffle 42 -o sh2.tar raw/a &&
	cmp sh1.tar sh2.tar &&
	data-pack -t sh1.tar | cut -f2 >order && ! data-pack -t out/train-0000.tar out/train-0001.tar out/train-0002.tar | cut -f2 | head -10 | cmp -s - order &&
	sort order >s && (cd raw/a && ls *.jpg | sed "s/\.jpg//") | sort >e && test_cmp e s
'

# ---- interop with Python ------------------------------------------------------

test_expect_success PYTHON 'index offsets agree with Python tarfile (pax names too)' '
	for i in 0000 0001 0002 0003; do
		"$GK_PY" - out/train-$i.tar out/train-$i.idx <<-\EOF || return 1
		import os, sys, tarfile
		tar, idx = sys.argv[1], sys.argv[2]
		want = [(m.name, m.offset_data, m.size) for m in tarfile.open(tar) if m.isreg()]
		lines = open(idx, encoding="utf-8").read().split("\n")
		n = int(lines[0].split(" ")[1])
		assert lines[0] == "v1.2 %d" % n and lines[n + 2] == "", lines
		# the binding: the size and XXH3 of this shard (XXH3 checked by xxhsum)
		tag, size, h = lines[n + 1].split(" ")
		assert tag == "shard" and int(size) == os.path.getsize(tar), lines[n + 1]
		open(idx + ".xxh3", "w").write(h + "\n")
		got = []
		for line in lines[1:n + 1]:
		    f = line.split(" ")
		    for i in range(0, len(f), 4):
		        assert f[i] == f[i + 3].split("/")[-1].split(".", 1)[1]
		        got.append((f[i + 3], int(f[i + 1]), int(f[i + 2])))
		assert got == want, (got, want)
		EOF
		xxhsum -H3 out/train-$i.tar >sum &&
		sed "s/.* = //" sum >expect && test_cmp expect out/train-$i.idx.xxh3 || return 1
	done
'

test_expect_success PYTHON 'webdataset yields exactly our samples (plain and pipe:lz4 -dc)' '
	"$GK_PY" - raw out/train-0000.tar out/train-0001.tar out/train-0002.tar out/train-0003.tar <<-\EOF &&
	import os, sys
	sys.modules["torch"] = None  # NOTORCH above
	import webdataset as wds
	root, shards = sys.argv[1], sys.argv[2:]
	got = {}
	for s in wds.WebDataset(shards, shardshuffle=False):
	    got[s["__key__"]] = {k: v for k, v in s.items() if not k.startswith("__")}
	want = {}
	for d, _, files in os.walk(root):
	    for f in files:
	        rel = os.path.relpath(os.path.join(d, f), root)
	        base = os.path.basename(rel)
	        key = os.path.join(os.path.dirname(rel), base.split(".", 1)[0])
	        want.setdefault(key, {})[base.split(".", 1)[1]] = open(os.path.join(d, f), "rb").read()
	assert got == want, (sorted(got), sorted(want))
	print(len(got), "samples")
	EOF
	"$GK_PY" - z/train-0000.tar.lz4 z/train-0001.tar.lz4 z/train-0002.tar.lz4 z/train-0003.tar.lz4 <<-\EOF
	import sys
	sys.modules["torch"] = None  # NOTORCH above
	import webdataset as wds
	urls = ["pipe:lz4 -dc " + u for u in sys.argv[1:]]
	n = sum(1 for _ in wds.WebDataset(urls, shardshuffle=False))
	assert n == 13, n
	EOF
'

test_expect_success 'the option table, --help and data-pack(1) name the same options' '
	# --help is the table (bin/data-pack.c): every name at the start of its
	# option lines, "-c, --create" giving -c and --create; the man page:
	# every Fl of an .It line of DESCRIPTION (the modes) and OPTIONS
	data-pack --help >help &&
	test_help_options help >in-help &&
	test_man_options "$GK_TOP/man/man1/data-pack.1" DESCRIPTION >in-man &&
	test $(wc -l <in-help) -gt 30 &&
	test_cmp in-help in-man &&
	# getopt takes an argument exactly for the rows whose help line shows
	# one, and --lz4 (shown --lz4[=LEVEL]) takes one only attached
	test_options_take_args help data-pack &&
	grep -q "^  --lz4\[=LEVEL\] " help &&
	test_expect_code 2 data-pack -c --lz4=13 -o x.tar.lz4 raw 2>err &&
	echo "data-pack: --lz4 '\''13'\'': out of range [0, 12]" >expect &&
	head -n 1 err >actual && test_cmp expect actual &&
	! test -e x.tar.lz4
'

test_expect_success 'the modes exclude each other, as the table says' '
	for m in "-c -t" "-t --verify" "-x -g k" "--index -c" "-g k --index"; do
		test_expect_code 2 data-pack $m out/train-0000.tar 2>err &&
		echo "data-pack: only one of -c, -t, -x, -g, --verify, --index" >expect &&
		head -n 1 err >actual && test_cmp expect actual || return 1
	done &&
	test_expect_code 2 data-pack out/train-0000.tar 2>err &&
	echo "data-pack: no mode: give -c, -t, -x, -g, --verify or --index" >expect &&
	head -n 1 err >actual && test_cmp expect actual &&
	data-pack -t -t out/train-0000.tar >twice && data-pack -t out/train-0000.tar >once &&
	test_cmp once twice
'

test_done

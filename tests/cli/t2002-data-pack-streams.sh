#!/bin/sh
test_description='data-pack: large members stream, indexes belong to their shard

Members bigger than memory should be are packed, listed, verified,
extracted and read back in chunks (peak RSS from /usr/bin/time, against
sparse files so the tests stay small on disk); sizes a file cannot hold
are truncations; an index beside the wrong shard is refused; names,
sizes and patterns are checked as documented.'
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null && test_set_prereq PY3
test -x /usr/bin/time && test_set_prereq TIME
fixtures="$GK_TOP/tests/data/shard"

# peak RSS in KiB of a command (its stdout to /dev/null)
rss() {
	/usr/bin/time -f %M -o rss.out "$@" >/dev/null && cat rss.out
}

test_expect_success 'a sample over 4 MiB is streamed: the same bytes, plain and LZ4' '
	mkdir -p st && head -c 5000000 /dev/urandom >st/a.bin && printf "{}" >st/a.json &&
	printf small >st/b.txt &&
	data-pack -c -o st-%02d.tar --manifest st.json st &&
	data-pack -c --lz4 -o stz-%02d.tar.lz4 st &&
	data-pack --verify st.json && data-pack --verify stz-00.tar.lz4 &&
	tar xOf st-00.tar a.bin | cmp - st/a.bin &&
	lz4 -dc stz-00.tar.lz4 | cmp - st-00.tar &&
	data-pack -g a.bin st-00.tar | cmp - st/a.bin &&
	data-pack -g a.bin stz-00.tar.lz4 | cmp - st/a.bin &&
	data-pack -g a.json stz-00.tar.lz4 >got && test_cmp st/a.json got &&
	data-pack -g a stz-00.tar.lz4 >one.tar && tar xOf one.tar a.bin | cmp - st/a.bin &&
	cp st-00.idx saved.idx && data-pack --index st-00.tar && test_cmp saved.idx st-00.idx
'

test_expect_success PY3 'streamed samples: index offsets agree with Python tarfile' '
	python3 - st-00.tar st-00.idx <<-\EOF
	import sys, tarfile
	want = [(m.name, m.offset_data, m.size) for m in tarfile.open(sys.argv[1]) if m.isreg()]
	lines = open(sys.argv[2]).read().split("\n")
	got = []
	for line in lines[1:1 + int(lines[0].split()[1])]:
	    f = line.split(" ")
	    got += [(f[i + 3], int(f[i + 1]), int(f[i + 2])) for i in range(0, len(f), 4)]
	assert got == want, (got, want)
	EOF
'

test_expect_success PY3 'make a shard with a 300 MiB member, sparse on disk' '
	python3 - sparse.tar $((300 << 20)) <<-\EOF &&
	import sys, tarfile
	out, size = sys.argv[1], int(sys.argv[2])
	ti = tarfile.TarInfo("big.bin")
	ti.size, ti.mode = size, 0o444
	hdr = ti.tobuf(format=tarfile.PAX_FORMAT)
	with open(out, "wb") as f:
	    f.write(hdr)
	    f.seek(len(hdr) + (size + 511) // 512 * 512)
	    f.write(bytes(1024))
	EOF
	test_set_prereq SPARSE
'

test_expect_success SPARSE,TIME 'list, verify, index, get and extract it in bounded memory' '
	for mode in -t --verify --index; do
		kb=$(rss data-pack $mode sparse.tar) &&
		echo "$mode: $kb KiB" && test $kb -lt 65536 || return 1
	done &&
	kb=$(rss data-pack -g big.bin sparse.tar) && echo "-g: $kb KiB" && test $kb -lt 65536 &&
	kb=$(rss data-pack -x -C sx sparse.tar) && echo "-x: $kb KiB" && test $kb -lt 65536 &&
	test $(wc -c <sx/big.bin) = $((300 << 20)) &&
	test $(tr -d "\\000" <sx/big.bin | wc -c) = 0 && rm -r sx
'

test_expect_success SPARSE,TIME 'pack a 300 MiB sparse file in bounded memory, bytes intact' '
	mkdir -p sp && truncate -s 300M sp/0001.bin && printf 1 >sp/0001.cls &&
	kb=$(rss data-pack -c -o sp-%02d.tar sp) && echo "-c: $kb KiB" && test $kb -lt 65536 &&
	data-pack -t sp-00.tar >actual &&
	printf "sp-00.tar\t0001\tbin,cls\t%d\n" $(((300 << 20) + 1)) >expect && test_cmp expect actual &&
	data-pack -g 0001.bin sp-00.tar | cmp - sp/0001.bin && rm sp-00.tar
'

test_expect_success EXPENSIVE 'a 5 GiB file is packed whole (not cut at 4,294,963,200 bytes)' '
	mkdir -p huge && truncate -s 5G huge/0001.bin && printf "{}" >huge/0001.json &&
	data-pack -c -o - huge >huge.tar &&
	data-pack -t huge.tar >actual &&
	printf "huge.tar\t0001\tbin,json\t5368709122\n" >expect && test_cmp expect actual &&
	tar xOf huge.tar 0001.bin | cmp - huge/0001.bin && rm huge.tar
'

test_expect_success 'a member claiming 1 TiB in a small file is a truncation, in every mode' '
	cp "$fixtures/claims-1tib.tar" . &&
	msg="shard '\''claims-1tib.tar'\'': truncated: member '\''b.bin'\'' at byte 2560 claims 1099511627776 bytes, the file ends at byte 5560" &&
	echo "data-pack: $msg" >expect &&
	test_expect_code 1 data-pack -t claims-1tib.tar >/dev/null 2>err && test_cmp expect err &&
	test_expect_code 1 data-pack -x -C cx claims-1tib.tar 2>err && test_cmp expect err &&
	test_expect_code 1 data-pack --index claims-1tib.tar 2>err && test_cmp expect err &&
	test_expect_code 1 data-pack -c --from-tar claims-1tib.tar -o r.tar 2>err && test_cmp expect err &&
	! test -e r.tar && ! test -e r.idx
'

test_expect_success 'through a pipe the same tar is truncated where its data ends' '
	test_expect_code 1 sh -c "cat claims-1tib.tar | data-pack -t -" >/dev/null 2>err &&
	grep "^data-pack: shard '\''-'\'' at byte 5560: Truncated input file (needed 1099511627776 bytes, only 3000 available)$" err
'

# ---- names ----------------------------------------------------------------

test_expect_success 'list quotes tabs, newlines and bytes that are not UTF-8' '
	cp "$fixtures/odd-names.tar" . &&
	data-pack -t odd-names.tar >actual &&
	printf "%s\t%s\ttxt\t1\n" odd-names.tar "tab\\tkey" odd-names.tar "new\\nline" \
		odd-names.tar "caf\\xe9" >expect &&
	test_cmp expect actual
'

test_expect_success PY3 'list --json is valid JSON, or a clear refusal for names not in UTF-8' '
	test_expect_code 1 data-pack -t --json odd-names.tar >out.json 2>err &&
	printf "%s\n" "data-pack: list '\''odd-names.tar'\'': sample '\''caf\\xe9'\'': name not valid UTF-8, which JSON cannot hold (list it without --json)" >expect &&
	test_cmp expect err &&
	python3 - out.json <<-\EOF &&
	import json, sys
	rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
	assert [r["key"] for r in rows] == ["tab\tkey", "new\nline"], rows
	EOF
	mkdir -p uj && printf 1 >uj/caf$(printf "\303\251").txt && printf 2 >"uj/a\\b.txt" &&
	data-pack -c -o uj.tar uj && data-pack -t --json uj.tar >uj.json &&
	python3 - uj.json <<-\EOF
	import json, sys
	rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
	assert [r["key"] for r in rows] == ["a\\b", "caf\u00e9"], rows
	assert rows[1]["members"] == [{"ext": "txt", "offset": 2560, "size": 1}], rows
	EOF
'

test_expect_success 'names an index cannot hold are refused by --index and by packing' '
	test_expect_code 1 data-pack --index odd-names.tar 2>err &&
	printf "%s\n" "data-pack: index '\''odd-names.tar'\'': name '\''tab\\tkey.txt'\'': contains whitespace or a control character" >expect &&
	test_cmp expect err && ! test -e odd-names.idx &&
	test_expect_code 1 data-pack -c --from-tar odd-names.tar -o o.tar 2>err &&
	printf "%s\n" "data-pack: name '\''tab\\tkey.txt'\'': contains whitespace or a control character" >expect &&
	test_cmp expect err && ! test -e o.tar && ! test -e o.idx
'

# ---- indexes belong to their shard ------------------------------------------

test_expect_success 'an index left from another shard of the name is removed, never trusted' '
	mkdir -p da db && printf aaaa >da/k.txt && head -c 600 /dev/zero >db/k.txt &&
	data-pack -c -o p/s-%02d.tar da && test -e p/s-00.idx &&
	data-pack -c -o p/s-%02d.tar --no-index db &&
	! test -e p/s-00.idx &&
	test_expect_code 1 data-pack -g k.txt p/s-00.tar 2>err &&
	grep "make the index with data-pack --index" err
'

test_expect_success 'an index of another shard of the same size: -g says so, not "no such key"' '
	for i in $(seq -w 1 20); do
		printf "text sample $i %.0s" $(seq 30) >da/q$i.txt || return 1
	done &&
	rm da/k.txt &&
	data-pack -c -o same/t-%03d.tar --max-count 10 da &&
	test $(wc -c <same/t-000.tar) = $(wc -c <same/t-001.tar) &&
	data-pack -g q11.txt same/t-001.tar >out &&
	cp same/t-000.idx same/t-001.idx &&
	test_expect_code 1 data-pack -g q11.txt same/t-001.tar >out 2>err &&
	test_must_be_empty out &&
	echo "data-pack: index '"'"'same/t-001.idx'"'"' does not match '"'"'same/t-001.tar'"'"' at sample 0 '"'"'q01'"'"' (rebuild it with data-pack --index)" >expect &&
	test_cmp expect err &&
	printf aaaa >da/k.txt && rm da/q*.txt
'

test_expect_success '-g on a gzip shard without an index says it is compressed' '
	gzip -c same/t-000.tar >same/g-000.tar.gz &&
	test_expect_code 1 data-pack -g q01.txt same/g-000.tar.gz >out 2>err &&
	test_must_be_empty out &&
	echo "data-pack: shard '"'"'same/g-000.tar.gz'"'"' is gzip-compressed: random access needs an uncompressed tar (gunzip it)" >expect &&
	test_cmp expect err
'

test_expect_success 'a stale index of another size is refused by -g and --verify' '
	data-pack -c -o p/a-%02d.tar da && mv p/a-00.idx p/s-00.idx &&
	test_expect_code 1 data-pack -g k.txt p/s-00.tar >out 2>err &&
	test_must_be_empty out &&
	grep "^data-pack: index '\''p/s-00.idx'\'' is not the index of '\''p/s-00.tar'\'': made for 2048 bytes, the shard has 2560 (rebuild it with data-pack --index)$" err &&
	test_expect_code 1 data-pack --verify p/s-00.tar 2>err &&
	grep "index '\''p/s-00.idx'\'' does not match the shard" err
'

test_expect_success 'a stale index of the same size: -g checks the tar headers, --verify the XXH3' '
	mkdir -p dc dd && printf cccc >dc/k.txt && printf dddd >dd/k.txt && printf eeee >dd/m.txt &&
	printf ffff >dc/m.txt &&
	data-pack -c -o q/x-%02d.tar dc && cp q/x-00.idx dc.idx &&
	mkdir -p de && printf gggg >de/n.txt && printf hhhh >de/o.txt &&
	data-pack -c -o q/x-%02d.tar de && cp dc.idx q/x-00.idx &&
	test_expect_code 1 data-pack -g k.txt q/x-00.tar >out 2>err && test_must_be_empty out &&
	echo "data-pack: index '\''q/x-00.idx'\'' does not match '\''q/x-00.tar'\'' at sample 0 '\''k'\'' (rebuild it with data-pack --index)" >expect &&
	test_cmp expect err &&
	data-pack -c -o q/y-%02d.tar dd && cp dc.idx q/y-00.idx &&
	data-pack -g k.txt q/y-00.tar >out && printf dddd >expect && test_cmp expect out &&
	test_expect_code 1 data-pack --verify q/y-00.tar 2>err &&
	grep "^data-pack: verify '\''q/y-00.tar'\'': index '\''q/y-00.idx'\'' was made for another shard" err
'

test_expect_success 'compressed shards: read in order, refused for random access' '
	mkdir -p gz && printf 11 >gz/a.txt && head -c 700 /dev/zero >gz/b.txt &&
	data-pack -c -o gz0.tar gz && data-pack -t gz0.tar >plain.list &&
	mv gz0.idx plain.idx && gzip -k gz0.tar && mv gz0.tar plain.tar &&
	data-pack -t gz0.tar.gz | sed "s/^gz0.tar.gz/gz0.tar/" >actual &&
	test_cmp plain.list actual && data-pack --verify gz0.tar.gz &&
	msg="shard '\''gz0.tar.gz'\'' is gzip-compressed: random access needs an uncompressed tar (gunzip it)" &&
	test_expect_code 1 data-pack --index gz0.tar.gz 2>err &&
	echo "data-pack: $msg" >expect && test_cmp expect err && ! test -e gz0.idx &&
	cp plain.idx gz0.idx &&
	test_expect_code 1 data-pack -g a.txt gz0.tar.gz >out 2>err &&
	test_must_be_empty out && test_cmp expect err &&
	test_expect_code 1 data-pack --verify gz0.tar.gz 2>err &&
	echo "data-pack: verify '\''gz0.tar.gz'\'': index '\''gz0.idx'\'' cannot be used: $msg" >expect &&
	test_cmp expect err
'

# One case per compressor, each behind its own prerequisite, so that a
# compressor missing here is a skip that prove and .ci/run count (not on
# .ci/run's allow-list: scripts/install-deps installs all three).
for z in "bzip2 bz2 bunzip2" "xz xz unxz" "zstd zst unzstd"; do
	set -- $z
	prereq=$(echo $1 | tr a-z A-Z)
	command -v $1 >/dev/null && test_set_prereq $prereq
	test_expect_success $prereq "--index refuses a $1-compressed shard, naming the compressor" "
		$1 -q -c plain.tar >c.tar.$2 &&
		test_expect_code 1 data-pack --index c.tar.$2 2>err &&
		echo \"data-pack: shard 'c.tar.$2' is $1-compressed: random access needs an uncompressed tar ($3 it)\" >expect &&
		test_cmp expect err
	"
done

test_expect_success 'an LZ4 shard is indexed by its frames whatever its name' '
	data-pack -c --lz4 -o lz.tar gz && rm lz.idx && data-pack --index lz.tar &&
	grep "^lz4 3$" lz.idx && data-pack -g b.txt lz.tar >out && cmp gz/b.txt out
'

test_expect_success 'concurrent packs to one pattern never leave a mismatched pair' '
	mkdir -p c1 c2 && printf 1 >c1/a.txt && printf 22 >c2/b.txt && printf 333 >c2/c.txt &&
	i=0 && while test $i -lt 20; do
		{ data-pack -c -o cc/s-%02d.tar c1 & } && p1=$! &&
		{ data-pack -c -o cc/s-%02d.tar c2 & } && p2=$! &&
		wait $p1 && wait $p2 &&
		data-pack --verify cc/s-00.tar || return 1
		i=$((i+1))
	done
'

test_expect_success 'a failed create leaves no index behind' '
	mkdir -p f/x-00.tar && mkdir -p fd && printf 1 >fd/a.txt &&
	test_expect_code 1 data-pack -c -o f/x-%02d.tar fd 2>err &&
	ls -A f >left && echo x-00.tar >expect && test_cmp expect left &&
	test_expect_code 2 data-pack -c -o "" fd 2>err && ! test -e .idx &&
	grep "^data-pack: -o: empty pattern$" err
'

# ---- manifests, patterns, sizes ------------------------------------------------

test_expect_success 'make a small manifest' '
	mkdir -p mf && printf 1 >mf/a.txt && printf 2 >mf/b.txt &&
	data-pack -c -o m/s-%02d.tar --max-count 1 --manifest m/m.json mf &&
	data-pack --verify m/m.json
'

test_expect_success PY3 'verify checks the manifest bytes and totals against the shards' '
	python3 - m/m.json <<-\EOF &&
	import json, sys
	m = json.load(open(sys.argv[1]))
	m["shards"][0]["bytes"] += 2048
	m["bytes"] += 2048
	json.dump(m, open("m/bytes.json", "w"))
	m = json.load(open(sys.argv[1]))
	m["samples"] += 1
	json.dump(m, open("m/total.json", "w"))
	EOF
	test_expect_code 1 data-pack --verify m/bytes.json 2>err &&
	echo "data-pack: verify '\''m/s-00.tar'\'': 2048 bytes, the manifest says 4096" >expect &&
	test_cmp expect err &&
	test_expect_code 1 data-pack --verify m/total.json 2>err &&
	echo "data-pack: manifest '\''m/total.json'\'': totals say 3 samples, 4096 bytes; its shards add up to 2 samples, 4096 bytes" >expect &&
	test_cmp expect err
'

test_expect_success 'patterns with %s, %n or two conversions are usage errors' '
	for p in "x-%s.tar" "x-%n.tar" "x-%d-%d.tar" "x-%f.tar"; do
		test_expect_code 2 data-pack -c -o "$p" mf 2>err &&
		grep "^data-pack: pattern '\''$p'\'': " err &&
		grep "^usage: data-pack" err || return 1
	done &&
	! ls x-* 2>/dev/null
'

test_expect_success '--max-size 0 is a usage error; sizes take P and a lowercase b' '
	test_expect_code 2 data-pack -c -o z-%02d.tar --max-size 0 mf 2>err &&
	grep "^data-pack: --max-size: must be more than 0 (leave it out for no limit)$" err &&
	data-pack -c -o z-%02d.tar --max-size 1P mf &&
	data-pack -c -o y-%02d.tar --max-size 2048b mf && ls y-*.tar >actual &&
	printf "y-00.tar\ny-01.tar\n" >expect && test_cmp expect actual
'

test_done

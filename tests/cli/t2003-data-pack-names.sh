#!/bin/sh
test_description='data-pack: ordinary files (README, LICENSE, notes.md) and tar habits

Names without a KEY.EXT form are packed with --ext (an extension for
names without one) or --name-as-key (every file a sample keyed by its
whole name); the keys are checked against the webdataset package, which
splits names by its own rule. tar users'\'' -cf/-tf/-xf spellings work;
-z, -j and -J say why there is no such shard.'
. "$(dirname "$0")/lib.sh"

# webdataset reads shards without torch (it has stand-ins for what it
# would take from it), and importing torch costs each Python process
# seconds of CPU: the readers run with it left out.
NOTORCH="import sys; sys.modules['torch'] = None"
if "$GK_TOP/scripts/test-venv" >/dev/null 2>&1 &&
	"$GK_PY" -c "$NOTORCH; import webdataset" 2>/dev/null; then
	test_set_prereq PYTHON
fi

test_expect_success 'a tree of ordinary text files' '
	mkdir -p docs/guide docs/v1.2 &&
	printf "MIT licence" >docs/LICENSE &&
	printf "read me" >docs/README &&
	printf "notes" >docs/guide/notes &&
	printf "# notes" >docs/guide/notes.md &&
	printf "tar.gz notes" >docs/guide/build.tar.txt &&
	printf "changes" >docs/v1.2/CHANGES
'

test_expect_success 'a name without KEY.EXT is refused with the options that pack it' '
	test_expect_code 1 data-pack -c -o x.tar docs 2>err &&
	echo "data-pack: name '\''LICENSE'\'': no KEY.EXT form (webdataset would skip it): --ext EXT packs it as '\''LICENSE.EXT'\''; --name-as-key --ext EXT makes every file a sample keyed by its whole name" >expect &&
	test_cmp expect err && ! test -e x.tar
'

test_expect_success '--ext gives names without an extension one; KEY.EXT names stay' '
	data-pack -c -o ext.tar --ext txt docs &&
	printf "ext.tar\t%s\t%s\t%s\n" \
		LICENSE txt 11 \
		README txt 7 \
		guide/build tar.txt 12 \
		guide/notes md,txt 12 \
		v1.2/CHANGES txt 7 >expect &&
	data-pack -t ext.tar >actual && test_cmp expect actual &&
	data-pack -g guide/notes.txt ext.tar >got && test_cmp docs/guide/notes got &&
	data-pack -g guide/notes.md ext.tar >got && test_cmp docs/guide/notes.md got
'

test_expect_success '--name-as-key: one sample per file, keyed by its whole name' '
	data-pack -c -o whole.tar --ext txt --name-as-key docs &&
	printf "whole.tar\t%s\ttxt\t%s\n" \
		LICENSE 11 \
		README 7 \
		guide/build_tar_txt 12 \
		guide/notes 5 \
		guide/notes_md 7 \
		v1.2/CHANGES 7 >expect &&
	data-pack -t whole.tar >actual && test_cmp expect actual &&
	data-pack -g guide/notes_md.txt whole.tar >got && test_cmp docs/guide/notes.md got
'

test_expect_success PYTHON 'webdataset reads the same keys and bytes (its own split of the names)' '
	"$GK_PY" - docs ext.tar whole.tar <<-\EOF
	import os, re, sys
	sys.modules["torch"] = None  # NOTORCH above
	import webdataset as wds
	root, ext_tar, whole_tar = sys.argv[1:]
	def read(tar):
	    got = {}
	    for s in wds.WebDataset([tar], shardshuffle=False):
	        assert s["__key__"] not in got, s["__key__"]
	        got[s["__key__"]] = {k: v for k, v in s.items() if not k.startswith("__")}
	    return got
	files = {}
	for d, _, names in os.walk(root):
	    for f in names:
	        rel = os.path.relpath(os.path.join(d, f), root)
	        files[rel] = open(os.path.join(d, f), "rb").read()
	# --ext txt: a name without a dot in its last component gets ".txt",
	# then webdataset'\''s own rule (base_plus_ext) splits it
	want = {}
	for rel, data in files.items():
	    name = rel if "." in os.path.basename(rel) else rel + ".txt"
	    key, ext = re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", name).groups()
	    want.setdefault(key, {})[ext] = data
	assert read(ext_tar) == want, (read(ext_tar), want)
	# --name-as-key --ext txt: the dots of the last component become _
	want = {}
	for rel, data in files.items():
	    d, b = os.path.split(rel)
	    want[os.path.join(d, b.replace(".", "_"))] = {"txt": data}
	assert read(whole_tar) == want, (read(whole_tar), want)
	print(len(files), "files")
	EOF
'

test_expect_success 'names that meet after mapping are refused, naming both files' '
	mkdir -p c1 c2 &&
	printf a >c1/README && printf b >c1/README.txt &&
	test_expect_code 1 data-pack -c -o c.tar --ext txt c1 2>err &&
	echo "data-pack: files '\''c1/README'\'' and '\''c1/README.txt'\'' would both be member '\''README.txt'\'' (a name without an extension was given one)" >expect &&
	test_cmp expect err && ! test -e c.tar &&
	printf a >c2/a.b && printf b >c2/a_b &&
	test_expect_code 1 data-pack -c -o c.tar --ext txt --name-as-key c2 2>err &&
	echo "data-pack: files '\''c2/a.b'\'' and '\''c2/a_b'\'' would both be member '\''a_b.txt'\'' (a whole-name key turns the dots of a name into '\''_'\'')" >expect &&
	test_cmp expect err && ! test -e c.tar &&
	printf "c2/a.b\nc2/a.b\n" >twice.list &&
	test_expect_code 1 data-pack -c -o c.tar -T twice.list 2>err &&
	echo "data-pack: file '\''c2/a.b'\'' is given twice (member '\''c2/a.b'\'')" >expect &&
	test_cmp expect err && ! test -e c.tar
'

test_expect_success 'hidden files: refused with --ext, keyed with --name-as-key' '
	mkdir -p h && printf rc >h/.bashrc && printf x >h/x.txt &&
	test_expect_code 1 data-pack -c -o h.tar --ext txt h 2>err &&
	echo "data-pack: name '\''.bashrc'\'': a hidden file: no KEY.EXT form, as its name starts with a dot (webdataset would skip it): --name-as-key --ext EXT packs it as '\''_bashrc.EXT'\'' (or leave it out of a -T list)" >expect &&
	test_cmp expect err && ! test -e h.tar &&
	data-pack -c -o h.tar --ext txt --name-as-key h &&
	printf "h.tar\t_bashrc\ttxt\t2\nh.tar\tx_txt\ttxt\t1\n" >expect &&
	data-pack -t h.tar >actual && test_cmp expect actual
'

test_expect_success 'an extension that cannot be one is a usage error' '
	for e in .txt "a/b" "a b" "" "txt." "a..b"; do
		test_expect_code 2 data-pack -c -o e.tar --ext "$e" docs 2>err &&
		head -n 1 err || return 1
	done >actual &&
	cat >expect <<-\EOF &&
	data-pack: --ext: extension '\''.txt'\'': starts or ends with a dot, or has two in a row (give it without the leading dot: '\''txt'\'')
	data-pack: --ext: extension '\''a/b'\'': contains a '\''/'\'' (it would be a directory of the key)
	data-pack: --ext: extension '\''a b'\'': contains whitespace or a control character
	data-pack: --ext: extension '\'''\'': empty
	data-pack: --ext: extension '\''txt.'\'': starts or ends with a dot, or has two in a row (give it without the leading dot: '\''txt'\'')
	data-pack: --ext: extension '\''a..b'\'': starts or ends with a dot, or has two in a row (give it without the leading dot: '\''txt'\'')
	EOF
	test_cmp expect actual &&
	test_expect_code 2 data-pack -c -o e.tar --name-as-key docs 2>err &&
	echo "data-pack: --name-as-key needs --ext EXT (the extension every member gets)" >expect &&
	head -n 1 err >actual && test_cmp expect actual &&
	test_expect_code 2 data-pack -t --ext txt ext.tar 2>err &&
	echo "data-pack: --ext and --name-as-key need -c" >expect &&
	head -n 1 err >actual && test_cmp expect actual && ! test -e e.tar
'

test_expect_success 'a tar stream is renamed as files are' '
	tar -cf docs.tar -C docs . &&
	test_expect_code 1 data-pack -c --from-tar docs.tar -o s.tar 2>err &&
	grep "^data-pack: name '\''.*'\'': no KEY.EXT form (webdataset would skip it): --ext EXT gives such names an extension; --name-as-key --ext EXT makes every member a sample keyed by its whole name$" err &&
	data-pack -c --from-tar docs.tar -o s.tar --ext txt --name-as-key &&
	data-pack -t s.tar >l1 && cut -f 2- l1 | sort >actual &&
	data-pack -t whole.tar >l2 && cut -f 2- l2 | sort >expect &&
	test_cmp expect actual
'

test_expect_success 'files as operands, named by their paths as tar names them' '
	data-pack -c -o f.tar --ext txt docs/LICENSE ./docs/guide/notes.md &&
	printf "f.tar\tdocs/LICENSE\ttxt\t11\nf.tar\tdocs/guide/notes\tmd\t7\n" >expect &&
	data-pack -t f.tar >actual && test_cmp expect actual
'

test_expect_success 'tar habits: -cf, -tf, -xf work as tar users type them' '
	data-pack -cf habit.tar --ext txt docs &&
	cmp ext.tar habit.tar &&
	data-pack -tf habit.tar >actual &&
	data-pack -t ext.tar >e1 && sed "s/^ext.tar/habit.tar/" e1 >expect &&
	test_cmp expect actual &&
	data-pack -xf habit.tar -C out &&
	test_cmp docs/guide/notes out/guide/notes.txt &&
	test_cmp docs/LICENSE out/LICENSE.txt
'

test_expect_success 'tar habits that cannot mean the same here say why' '
	test_expect_code 2 data-pack -czf z.tar docs 2>err &&
	echo "data-pack: -z: shards are not gzip-compressed, since readers seek in them; --lz4 compresses each sample (lz4 -dc x.tar.lz4 | tar t reads it)" >expect &&
	head -n 1 err >actual && test_cmp expect actual &&
	test_expect_code 2 data-pack -cjf z.tar docs 2>err &&
	head -n 1 err >actual && grep "^data-pack: -j: shards are not bzip2-compressed" actual &&
	test_expect_code 2 data-pack -xf habit.tar README.txt 2>err &&
	echo "data-pack: -f names the shard, and -x takes no member names (-g KEY.EXT prints one member; -t, -x and --verify take more shards as operands, without -f)" >expect &&
	head -n 1 err >actual && test_cmp expect actual &&
	test_expect_code 2 data-pack -cf z.tar -o y.tar docs 2>err &&
	echo "data-pack: -f and -o both name the output: give one" >expect &&
	head -n 1 err >actual && test_cmp expect actual &&
	! test -e z.tar && ! test -e y.tar
'

test_done

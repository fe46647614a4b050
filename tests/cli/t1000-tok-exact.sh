#!/bin/sh
test_description='lib/tok encodes exactly as Hugging Face tokenizers

Byte-level BPE vocabularies are trained here with Hugging Face tokenizers
(GPT-2'"'"'s algorithm and files: vocab.json + merges.txt, and
tokenizer.json, one with add_prefix_space) on the tree'"'"'s sources and man
pages. The C side (build/tests/unit/tok, the unit test'"'"'s driver mode) and
tokenizers then encode the same documents: the tree'"'"'s files and made
cases (contractions in odd case, digits and letters of many scripts,
combining marks, emoji and ZWJ sequences, CJK, white-space runs, Unicode
spaces, invalid UTF-8, NUL bytes, very long words, an empty document).
Every id must agree, whole and fed in random chunks, with and without
special tokens; decode(encode(x)) == x; and every code point falls in the
same class of the pre-tokenization pattern as in tokenizers.

Bytes that are not UTF-8 cannot be given to tokenizers (a Python str);
the reference for them is tokenizers'"'"' own pre-tokenizer and BPE model
applied to the text decoded with errors="surrogateescape", each escaped
byte standing in as a private-use character (class "other") until the
pieces are cut, which is the rule gpukit-tok(5) states.'
. "$(dirname "$0")/lib.sh"
test_need_python tokenizers

tok="$GK_BUILD/tests/unit/tok"
if ! test -x "$tok"; then
	skip_all="build/tests/unit/tok is not built (make check builds it)"
	test_done
fi

cat >ref.py <<'PYEOF'
import glob
import os
import random
import sys

from tokenizers import ByteLevelBPETokenizer, Tokenizer


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


B2U = byte_names()
U2B = {c: b for b, c in B2U.items()}
ESC = 0xF0000  # escaped byte b stands in as U+F0000 + b


def pieces(pre, data):
    """tokenizers' pre-tokenizer over bytes: the pieces, as bytes."""
    try:
        text, esc = data.decode("utf-8"), False
    except UnicodeDecodeError:
        # the made cases with invalid bytes hold no private-use characters
        text, esc = data.decode("utf-8", "surrogateescape"), True
        text = "".join(chr(ESC + ord(c) - 0xDC00) if 0xDC80 <= ord(c) <= 0xDCFF else c for c in text)
    out = []
    for p, _ in pre.pre_tokenize_str(text):
        s = bytes(U2B[c] for c in p)
        if esc:
            s = "".join(chr(0xDC00 + ord(c) - ESC) if ESC + 0x80 <= ord(c) <= ESC + 0xFF else c
                        for c in s.decode("utf-8")).encode("utf-8", "surrogateescape")
        out.append(s)
    return out


def load(path):
    if os.path.isdir(path):
        return ByteLevelBPETokenizer(path + "/vocab.json", path + "/merges.txt")._tokenizer
    return Tokenizer.from_file(path)


def encode(tok, data, special):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if special:
        # the whole pipeline, special tokens and all
        if text is None:
            sys.exit("reference: -s needs UTF-8 documents")
        return tok.encode(text, add_special_tokens=False).ids
    ids = []
    for p in pieces(tok.pre_tokenizer, data):
        ids += [t.id for t in tok.model.tokenize("".join(B2U[b] for b in p))]
    if text is not None:
        # the whole pipeline must agree with its parts
        full = tok.encode(text, add_special_tokens=False).ids
        if "<|endoftext|>" not in text and full != ids:
            sys.exit("reference: tokenizers' encode and its parts disagree")
    return ids


def train(top, out):
    files = sorted(glob.glob(top + "/lib/*/*.[ch]") + glob.glob(top + "/man/man*/*") +
                   glob.glob(top + "/doc/*.md") + [top + "/README.md"])
    os.makedirs(out + "/gpt2")
    t = ByteLevelBPETokenizer()
    t.train(files, vocab_size=4000, min_frequency=2, special_tokens=["<|endoftext|>"],
            show_progress=False)
    t.save_model(out + "/gpt2")
    t.save(out + "/tokenizer.json")
    p = ByteLevelBPETokenizer(add_prefix_space=True)
    p.train(files, vocab_size=1000, min_frequency=2, special_tokens=["<|endoftext|>"],
            show_progress=False)
    p.save(out + "/prefix.json")


HARD = [
    "I'm here, you're not. It's 'S 'LL 'D 'Re 'vE I'M YOU'RE we'll they'd ''s '' ' s",
    "don't DON'T won’t it's 'tis rock'n'roll o'clock 'd'm's't'll're've",
    "Ελληνικά Кириллица עברית العربية हिन्दी ไทย 日本語のテキスト 한국어 ქართული",
    "digits 0123 ٠١٢٣ ०१२३ ৩৪ ๑๒๓ 一二三 〇 ①②③ ½¾ Ⅻ ⁴² 12abc3 a1b2 1.5e-3 1,000,000",
    "combining e\u0301 a\u0308\u0304 Z\u0324\u0308 \u0301start n\u0303o\u0327 \u093f\u0947",
    "emoji 👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 👍🏽 🇫🇷🇩🇪 ❤️ x👍y",
    "CJK 你好，世界！这是一个测试。漢字かなカナ、「引用」 𠀀𠀁 𰀀",
    "a  b   c    d\n\n  e \n f\t\tg \t h\r\n\r\ni   ",
    "ends with spaces   ",
    "ends with newlines\n\n\n",
    "   leading spaces and \t tabs",
    "\n",
    " ",
    "nbsp\u00a0x \u00a0\u00a0y z\u00a0 \u2000\u2001\u2002\u200a| \u202f\u205f\u3000end\u3000",
    "lines\u2028para\u2029nel\u0085x \u0085 zwsp\u200bx mvs\u180ex bom\ufeffx \u00ad",
    "punct !!!??? ... --- ((())) \"quoted\" «guillemets» — en–dash @#$%^&*_+=~`",
    "<|endoftext|>start<|endoftext|> middle <|endoftext|>end<|endoftext|>",
    "mixed a.b,c;d:e!f?g'h\"i(j)k[l]m{n}o<p>q/r\\s|t",
    "tabs\tand\vvertical\fform feeds\x1c\x1d\x1e\x1f end",
]
HARD_BYTES = [
    b"",
    b"invalid \xff\xfe bytes \xc3( \xe2\x82 x \xed\xa0\x80 y \xf4\x90\x80\x80 \xc0\xaf z",
    b"\x80\x81lone continuations \xbf",
    b"truncated at the end \xe2\x82",
    b"truncated \xf0\x9f\x98",
    b" \xff\xffabc\xff 1\xff2 \xff \xff",
    b"nul\x00bytes \x00\x00 in\x00 text\x00",
    b"\x00",
    b"\xc3\xa9\xc3",
    b"'\xff's \xe2\x80'll",
]


def long_cases():
    r = random.Random(30)
    yield b"a" * 100000
    yield b"ab" * 50000 + b" tail"
    yield b"x" * 30000 + b" y"
    yield b"9" * 50000
    yield b" " * 100000 + b"x"
    yield b" " * 100000
    yield b"\n" * 20000 + b" z"
    yield b"!" * 50000
    yield "é".encode() * 40000
    yield "字".encode() * 40000
    yield "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(60000)).encode()
    yield ("supercalifragilistic" * 3000).encode()


def random_cases():
    r = random.Random(2)
    pool = ("abc xyz ABC 012 'sltmdrev \t\n\r  .,;!? é ü ß ÿ \u00a0 \u3000 \u2028 \u0301 \u200d"
            " 日本 한국 ١٢ ๓ 👍 🏽 ½ Ⅻ _ - < | > endoftext")
    for k in range(40):
        n = r.randrange(1, 3000)
        b = bytearray()
        while len(b) < n:
            x = r.random()
            if x < 0.85:
                b += r.choice(pool).encode()
            elif x < 0.95:
                b += bytes([r.randrange(256)])
            else:
                b += chr(r.randrange(0x20, 0x30000)).encode("utf-8", "surrogatepass")
        yield bytes(b)


def make_docs(top, out):
    os.makedirs(out)
    names = []
    srcs = sorted(glob.glob(top + "/lib/*/*.[ch]") + glob.glob(top + "/bin/*.c") +
                  glob.glob(top + "/man/man*/*") + glob.glob(top + "/doc/*.md") +
                  glob.glob(top + "/tests/cli/*.sh") + glob.glob(top + "/scripts/*"))
    docs = [open(f, "rb").read() for f in srcs if os.path.isfile(f)]
    docs += [s.encode() for s in HARD] + HARD_BYTES + list(long_cases()) + list(random_cases())
    for i, d in enumerate(docs):
        name = "%s/%04d" % (out, i)
        with open(name, "wb") as f:
            f.write(d)
        names.append(name)
    with open(out + ".utf8", "w") as f:
        for name, d in zip(names, docs):
            try:
                d.decode("utf-8")
                print(name, file=f)
            except UnicodeDecodeError:
                pass
    with open(out + ".all", "w") as f:
        print("\n".join(names), file=f)


def make_codepoints(out):
    """Every code point between 'a', '1', '!' and ' ', whose pieces say its class.

    1024 code points a file: tokenizers' pre-tokenizer takes about twice as
    long on a plane's text in one string as on the same text in pieces of
    a thousand lines."""
    os.makedirs(out)
    for block in range(0x110000 >> 10):
        with open("%s/%03x" % (out, block), "w", encoding="utf-8") as f:
            for cp in range(block << 10, (block + 1) << 10):
                if 0xD800 <= cp <= 0xDFFF:
                    continue
                c = chr(cp)
                f.write("a%s1%s!%s %s\n" % (c, c, c, c))


cmd = sys.argv[1]
if cmd == "setup":
    top, out = sys.argv[2], sys.argv[3]
    train(top, out)
    make_docs(top, out + "/docs")
    make_codepoints(out + "/cps")
elif cmd == "pieces":
    pre = Tokenizer.from_file(sys.argv[2]).pre_tokenizer
    for f in sys.argv[3:]:
        data = open(f, "rb").read()
        try:
            # a piece of UTF-8 text is in the byte-level alphabet, one
            # character a byte: its length is its length in bytes
            lens = [len(p) for p, _ in pre.pre_tokenize_str(data.decode("utf-8"))]
        except UnicodeDecodeError:
            lens = [len(p) for p in pieces(pre, data)]
        print(" ".join(map(str, lens)))
elif cmd in ("encode", "encode-s"):
    tok = load(sys.argv[2])
    for f in sys.argv[3:]:
        print(" ".join(map(str, encode(tok, open(f, "rb").read(), cmd == "encode-s"))))
elif cmd == "info":
    tok = load(sys.argv[2])
    print("vocab %d" % tok.get_vocab_size(with_added_tokens=True))
    print("endoftext %d" % tok.token_to_id("<|endoftext|>"))
PYEOF

test_expect_success 'train byte-level BPE vocabularies with tokenizers, make the documents' '
	"$GK_PY" ref.py setup "$GK_TOP" . &&
	test -s gpt2/vocab.json && test -s gpt2/merges.txt && test -s tokenizer.json &&
	test $(wc -l <docs.all) -gt 200
'

test_expect_success 'every code point has the class it has in tokenizers'"'"' pattern' '
	"$tok" pieces cps/* >ours &&
	"$GK_PY" ref.py pieces tokenizer.json cps/* >theirs &&
	test $(wc -l <theirs) = 1088 &&
	test_cmp theirs ours
'

for f in gpt2 tokenizer.json; do
	test_expect_success "$f: the same ids as tokenizers for every document" "
		\"\$tok\" encode $f \$(cat docs.all) >ours.$f &&
		\"\$GK_PY\" ref.py encode $f \$(cat docs.all) >theirs.$f &&
		test \$(wc -l <theirs.$f) = \$(wc -l <docs.all) &&
		test_cmp theirs.$f ours.$f
	"
done

test_expect_success 'the ids show merges at work (no byte-per-token encoding)' '
	wc -w <ours.gpt2 >ids &&
	cat $(cat docs.all) | wc -c >bytes &&
	test $(($(cat ids) * 2)) -lt $(cat bytes)
'

test_expect_success 'fed in random chunks (gk_tok_stable), the same ids' '
	"$tok" encode gpt2 -c 7 $(cat docs.all) >chunks.a &&
	test_cmp theirs.gpt2 chunks.a &&
	"$tok" encode tokenizer.json -c 11 $(cat docs.all) >chunks.b &&
	test_cmp theirs.gpt2 chunks.b
'

test_expect_success 'special tokens: <|endoftext|> is one id with -s, as tokenizers'"'"' encode' '
	"$tok" encode tokenizer.json -s $(cat docs.utf8) >ours.s &&
	"$GK_PY" ref.py encode-s tokenizer.json $(cat docs.utf8) >theirs.s &&
	test_cmp theirs.s ours.s &&
	"$tok" encode gpt2 -s -c 5 $(cat docs.utf8) >ours.sc &&
	test_cmp theirs.s ours.sc &&
	! test_cmp theirs.s ours.tokenizer.json >/dev/null 2>&1
'

test_expect_success 'add_prefix_space in tokenizer.json: the same ids' '
	"$tok" encode prefix.json $(cat docs.all) >ours.p &&
	"$GK_PY" ref.py encode prefix.json $(cat docs.all) >theirs.p &&
	test_cmp theirs.p ours.p
'

test_expect_success 'decode(encode(x)) == x for every document' '
	"$tok" roundtrip gpt2 $(cat docs.all) >rt &&
	! grep -v " ok$" rt &&
	test $(wc -l <rt) = $(wc -l <docs.all)
'

test_expect_success 'vocab size, <|endoftext|> and the fingerprint agree across the two formats' '
	"$tok" info gpt2 >info.a &&
	"$tok" info tokenizer.json >info.b &&
	"$GK_PY" ref.py info tokenizer.json >theirs.info &&
	head -n 2 info.a >head.a &&
	head -n 2 info.b >head.b &&
	test_cmp theirs.info head.a &&
	test_cmp theirs.info head.b &&
	grep "^fingerprint" info.a >fp.a &&
	grep "^fingerprint" info.b >fp.b &&
	test_cmp fp.a fp.b &&
	"$tok" info prefix.json >info.p &&
	! grep -x "$(cat fp.a)" info.p
'

test_expect_success 'a truncated tokenizer.json and a corrupt merges.txt are errors, not crashes' '
	head -c 5000 tokenizer.json >cut.json &&
	test_expect_code 1 "$tok" info cut.json 2>err &&
	grep "^tok: parse .cut.json.: line" err &&
	mkdir bad && cp gpt2/vocab.json bad/ &&
	sed "3s/.*/zzz qqq/" gpt2/merges.txt >bad/merges.txt &&
	test_expect_code 1 "$tok" info bad 2>err &&
	grep "line 3: .zzz. is not in the vocabulary" err
'

test_done

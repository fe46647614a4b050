#!/usr/bin/env python3
"""mktokenizer.py [VOCAB] - make data/tokenizer/, the demo's tokenizer.

A byte-level BPE (GPT-2's algorithm and file format: vocab.json +
merges.txt) of VOCAB ids (default 4096: the 256 bytes, <|endoftext|> and
the merges), trained with Hugging Face tokenizers on gpukit's own text:
its man pages, README.md, doc/*.md and the C sources of lib/ and bin/,
the text scripts/demo packs. Writes vocab.json, merges.txt and README
(how it was made: the tokenizers version, the commit, the sizes) in
data/tokenizer/ of the tree the script is in. Training is deterministic:
the same tree and tokenizers version give the same bytes.

Run it with the test venv's python (it has tokenizers):
    "$(scripts/test-venv)" tools/mktokenizer.py
"""
import glob
import hashlib
import json
import os
import subprocess
import sys

from tokenizers import ByteLevelBPETokenizer, __version__ as tokenizers_version

top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
vocab = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
out = os.path.join(top, "data", "tokenizer")
patterns = ["man/man*/*.[157]", "README.md", "doc/*.md", "lib/*/*.[ch]", "bin/*.c"]
files = sorted(f for p in patterns for f in glob.glob(os.path.join(top, p)))
nbytes = sum(os.path.getsize(f) for f in files)

t = ByteLevelBPETokenizer()
t.train(files, vocab_size=vocab, min_frequency=2, special_tokens=["<|endoftext|>"],
        show_progress=False)
os.makedirs(out, exist_ok=True)
t.save_model(out)

try:
    commit = subprocess.run(["git", "-C", top, "describe", "--always", "--dirty", "--abbrev=12"],
                            capture_output=True, text=True, check=True).stdout.strip()
except (OSError, subprocess.CalledProcessError):
    commit = "unknown (not a git checkout)"
v = json.load(open(os.path.join(out, "vocab.json"), encoding="utf-8"))
sizes = {n: os.path.getsize(os.path.join(out, n)) for n in ("vocab.json", "merges.txt")}
sha = {n: hashlib.sha256(open(os.path.join(out, n), "rb").read()).hexdigest()
       for n in ("vocab.json", "merges.txt")}
with open(os.path.join(out, "README"), "w", encoding="utf-8") as f:
    f.write(f"""The demo's tokenizer (scripts/demo; installed in PREFIX/share/gpukit/tokenizer)

A GPT-2 style byte-level BPE tokenizer in GPT-2's file format, the files of
a Hugging Face GPT-2 directory: vocab.json ({len(v)} ids: the 256 bytes,
<|endoftext|> = {v["<|endoftext|>"]}, and {len(v) - 257} merges) and merges.txt.
gpukit reads it with lib/tok (gpukit-tok(5)); transformers' AutoTokenizer
loads a directory that holds it beside a GPT-2 config.json.

How it was made: tools/mktokenizer.py {vocab}, run with the test venv's python,
trained with Hugging Face tokenizers {tokenizers_version} (ByteLevelBPETokenizer.train,
vocab_size {vocab}, min_frequency 2, special token <|endoftext|>) on
gpukit's own text at commit {commit}: its man pages, README.md, doc/*.md
and the C sources of lib/ and bin/ ({len(files)} files, {nbytes} bytes).
Training is deterministic: the same tree and tokenizers version make the
same files. Nothing was downloaded.

    vocab.json  {sizes["vocab.json"]:>7} bytes  sha256 {sha["vocab.json"]}
    merges.txt  {sizes["merges.txt"]:>7} bytes  sha256 {sha["merges.txt"]}

Regenerate it (after the sources changed a lot, or for another size) with:

    "$(scripts/test-venv)" tools/mktokenizer.py [VOCAB]
""")
print(f"{out}: {len(v)} ids, vocab.json {sizes['vocab.json']} bytes, "
      f"merges.txt {sizes['merges.txt']} bytes, from {len(files)} files ({nbytes} bytes)")

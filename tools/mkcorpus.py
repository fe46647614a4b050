#!/usr/bin/env python3
"""mkcorpus.py DIR [BYTES] [FILES] - a synthetic WebDataset-style corpus.

Samples of three files: KEY.jpg (most of the bytes, sizes spread over two
orders of magnitude), KEY.json (a small label record) and KEY.cls, in
subdirectories of 1000 samples. Defaults: ~1 GiB in ~100k files.
Contents are pseudo-random (incompressible, like JPEG) with a fixed seed,
so two runs make the same corpus.
"""
import json
import os
import random
import sys

out = sys.argv[1]
total = int(float(sys.argv[2])) if len(sys.argv) > 2 else 1 << 30
files = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
samples = max(1, files // 3)
mean = total / samples
rng = random.Random(1)
pool = rng.randbytes(1 << 22)
for i in range(samples):
    d = os.path.join(out, f"{i // 1000:04d}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    # log-uniform between mean/10 and mean*2.5: its mean is close to `mean`
    size = int(min(len(pool) - 1, mean / 10 * 25 ** rng.random()))
    start = rng.randrange(0, len(pool) - size)
    key = os.path.join(d, f"{i:08d}")
    with open(key + ".jpg", "wb") as f:
        f.write(pool[start:start + size])
    with open(key + ".json", "w") as f:
        json.dump({"id": i, "label": i % 1000, "caption": "sample %d" % i}, f)
    with open(key + ".cls", "w") as f:
        f.write(str(i % 1000))

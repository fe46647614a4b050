#!/usr/bin/env python3
"""Make the safetensors fixtures in tests/data/ckpt/ (run from the top with
the test venv's python: build/venv/bin/python tools/mkckptfixtures.py).

Every file is written by the reference writer, safetensors.numpy.save_file,
so the bytes are the reference's, not ours:

  expect.safetensors     what dup/ merges to: a = arange(8) as F32 [4, 2],
                         b = [0, 1, 2] as I32, metadata format=pt
  expect-a.safetensors   what slices-ok/ merges to: a alone
  slice-*.safetensors    one malformed gpukit.slice.a value each;
                         tests/data/ckpt/errors.tsv holds the exact message

t3001-ckpt-interop.sh runs this into a scratch directory and compares the
bytes with the files in the tree, so they cannot drift from it.
"""
import os
import sys

import numpy as np
from safetensors.numpy import save_file

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/ckpt"

a = np.arange(8, dtype=np.float32).reshape(4, 2)
b = np.arange(3, dtype=np.int32)
save_file({"a": a, "b": b}, os.path.join(out, "expect.safetensors"),
          metadata={"format": "pt"})
save_file({"a": a}, os.path.join(out, "expect-a.safetensors"),
          metadata={"format": "pt"})

# name -> gpukit.slice.a value, for a tensor a of 2 rows (F32 [2, 2]).
slices = {
    "slice-syntax": "zz",
    "slice-empty": "",
    "slice-start-past-stop": "2:1/4",
    "slice-stop-past-rows": "2:4/3",
    "slice-rows-mismatch": "0:3/4",
    "slice-overflow": "0:2/18446744073709551616",
    "slice-negative": "-2:0/4",
    "slice-plus": "+0:2/4",
    "slice-space": "0:2/4 ",
    "slice-trailing": "0:2/4x",
}
for name, value in slices.items():
    save_file({"a": a[:2]}, os.path.join(out, name + ".safetensors"),
              metadata={"gpukit.slice.a": value})
# A scalar cannot be a row slice.
save_file({"a": np.array(1.5, dtype=np.float32)},
          os.path.join(out, "slice-scalar.safetensors"),
          metadata={"gpukit.slice.a": "0:1/1"})

# Sets with a member missing and no index: they must not merge "ok".
def rank_meta(rank, world):
    return {"format": "pt", "gpukit.rank": str(rank), "gpukit.world": str(world)}


def put(path, tensors, metadata):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file(tensors, path, metadata=metadata)


c = np.arange(4, dtype=np.float32)
put(os.path.join(out, "set-ranks/model-rank-00000-of-00003.safetensors"),
    {"a": a}, rank_meta(0, 3))
put(os.path.join(out, "set-ranks/model-rank-00002-of-00003.safetensors"),
    {"c": c}, rank_meta(2, 3))
put(os.path.join(out, "set-hf/model-00001-of-00003.safetensors"),
    {"a": a}, {"format": "pt"})
put(os.path.join(out, "set-hf/model-00003-of-00003.safetensors"),
    {"c": c}, {"format": "pt"})
# Names that say nothing: the gpukit.rank/gpukit.world metadata does.
put(os.path.join(out, "set-world/first.safetensors"), {"a": a}, rank_meta(0, 3))
put(os.path.join(out, "set-world/third.safetensors"), {"c": c}, rank_meta(2, 3))

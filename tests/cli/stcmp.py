"""stcmp.py - compare two F32 safetensors files tensor by tensor.

    python3 "$GK_TOP/tests/cli/stcmp.py" A B TOL [--shape NAME=D0,D1 ...]
                                         [--loose NAME:LO:HI:ABS ...]

A and B must hold the same tensor names, each of the same shape, with
every element x of A within TOL of the same element y of B, relatively:
|x - y| <= TOL max(1, |y|); TOL 0 asks for the same bits. --shape also
asks that NAME has that shape (in A). --loose holds the elements
[LO, HI) of every tensor whose name ends in NAME to |x - y| <= ABS
instead (elements whose value is rounding, say why where it is used).
Prints the largest difference and where; exits 1 naming the first
difference beyond TOL. Pure Python (a reader of the format, not the
safetensors package), so it also checks what gpu-train writes is the
format's layout.
"""
import array
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            sys.exit("%s: %s is %s, not F32" % (path, k, v["dtype"]))
        s, e = v["data_offsets"]
        a = array.array("f")
        a.frombytes(data[s:e])
        out[k] = (v["shape"], a)
    return out


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__.split("\n\n")[1])
    a, b, tol = read(argv[0]), read(argv[1]), float(argv[2])
    shapes, loose = [], []
    rest = argv[3:]
    while rest:
        if len(rest) < 2 or rest[0] not in ("--shape", "--loose"):
            sys.exit("stcmp.py: unknown arguments %r" % rest)
        if rest[0] == "--shape":
            name, dims = rest[1].split("=")
            shapes.append((name, [int(d) for d in dims.split(",")]))
        else:
            name, lo, hi, eps = rest[1].split(":")
            loose.append((name, int(lo), int(hi), float(eps)))
        rest = rest[2:]
    if sorted(a) != sorted(b):
        sys.exit("the tensors differ: %r and %r" % (sorted(a), sorted(b)))
    for name, dims in shapes:
        if name not in a or a[name][0] != dims:
            sys.exit("%s: shape %r, want %r" % (name, a.get(name, (None,))[0], dims))
    worst, where = 0.0, "nowhere"
    for k in sorted(a):
        if a[k][0] != b[k][0]:
            sys.exit("%s: shapes %r and %r" % (k, a[k][0], b[k][0]))
        lz = [(lo, hi, eps) for n, lo, hi, eps in loose if k.endswith(n)]
        for i, (x, y) in enumerate(zip(a[k][1], b[k][1])):
            held = [eps for lo, hi, eps in lz if lo <= i < hi]
            if held:
                if not abs(x - y) <= held[0]:
                    sys.exit("%s[%d]: %r and %r differ by more than %g" % (k, i, x, y, held[0]))
                continue
            d = abs(x - y) / max(1.0, abs(y))
            if d > worst or d != d:
                worst, where = d, "%s[%d]" % (k, i)
            if (tol == 0 and x != y) or not d <= tol:
                sys.exit("%s[%d]: %r and %r differ beyond %g" % (k, i, x, y, tol))
    print("largest difference %g at %s" % (worst, where))


if __name__ == "__main__":
    main(sys.argv[1:])

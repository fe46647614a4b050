#!/usr/bin/env python3
"""Make the corrupt-shard fixtures in tests/data/shard/ (run from the top).

Each file is one kind of damage; tests/cli/t2001-data-pack-bad-input.sh
holds the exact message data-pack gives for it.

lz4-checksum.tar.lz4 is not made here: it is `data-pack -c` of one
3000-byte random file as .tar.lz4 with byte 1500 set to "Z".
"""
import io
import os
import tarfile

out = "tests/data/shard"


def tar(members, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, data, kind in members:
            ti = tarfile.TarInfo(name)
            ti.mtime = 0
            ti.mode = 0o444
            if kind == "file":
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
            elif kind == "symlink":
                ti.type = tarfile.SYMTYPE
                ti.linkname = data
                t.addfile(ti)
            elif kind == "chr":
                ti.type = tarfile.CHRTYPE
                t.addfile(ti)
    return buf.getvalue()


def f(name, data=b"x"):
    return (name, data, "file")


def save(name, data):
    with open(os.path.join(out, name), "wb") as fp:
        fp.write(data)


good = tar([f("a.cls", b"1"), f("a.jpg", b"J" * 600), f("b.cls", b"2"), f("b.jpg", b"K" * 10)])
save("good.tar", good)
# a.cls header 0, data 512; a.jpg header 1024, data 1536..2136 (to 2560)
save("truncated-in-header.tar", good[:1024 + 200])
save("truncated-in-data.tar", good[:1536 + 300])
save("truncated-between-members.tar", good[:2560])
# b.jpg ends at 4608: one of the two end-of-archive zero blocks
save("lone-zero-block.tar", good[:4608 + 512])
save("garbage.tar", bytes((i * 37 + 11) % 256 for i in range(4096)))
save("empty.tar", b"")
save("not-consecutive.tar", tar([f("a.jpg"), f("b.jpg"), f("a.cls")]))
save("duplicate-member.tar", tar([f("a.jpg"), f("a.jpg")]))
save("case-only-ext.tar", tar([f("a.jpg"), f("a.JPG")]))
save("symlink.tar", tar([f("a.jpg"), ("a.txt", "/etc/passwd", "symlink")]))
save("device.tar", tar([f("a.jpg"), ("a.dev", "", "chr")]))
save("dotdot.tar", tar([f("../evil.txt")]))
save("absolute.tar", tar([f("/tmp/evil.txt")]))

# A member claiming 1 TiB in a file of a few KiB: a truncation, said
# without trying to hold or seek past the claimed size.
big = tarfile.TarInfo("b.bin")
big.size, big.mtime, big.mode = 1 << 40, 0, 0o444
save("claims-1tib.tar", tar([f("a.cls", b"1")]) [:1024] + big.tobuf(format=tarfile.PAX_FORMAT) + b"B" * 3000)
# Names webdataset reads but the index and a TSV line cannot hold as
# they are: a tab, a newline, a byte that is not UTF-8.
save("odd-names.tar", tar([f("tab\tkey.txt", b"1"), f("new\nline.txt", b"2"),
                           f(b"caf\xe9.txt".decode("utf-8", "surrogateescape"), b"3")]))

# Sparse members (GNU tar --sparse): the header's size is the file's, the
# archive holds only the data regions. Python's tarfile cannot write them,
# so GNU tar does: typeflag 'S' (gnu format) and pax GNU.sparse.* 1.0 keys
# (whose GNUSparseFile.PID directory name differs from run to run).
import subprocess
import tempfile

with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "hole.bin"), "wb") as fp:
        fp.write(b"D" * 100)
        fp.truncate(1 << 20)
    for fmt, name in (("gnu", "sparse-gnu.tar"), ("posix", "sparse-pax.tar")):
        subprocess.run(["tar", "--sparse", "--format=" + fmt, "--mtime=@0", "--owner=0",
                        "--group=0", "--numeric-owner", "-C", tmp, "-cf",
                        os.path.abspath(os.path.join(out, name)), "hole.bin"], check=True)

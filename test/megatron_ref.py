"""megatron_ref.py — an independent reference for test/test_megatron_data.sh.

Written from Megatron-DeepSpeed's documented behaviour, not from keel's code:
  - the MMapIndexedDataset layout (megatron/data/indexed_dataset.py): .idx = b"MMIDIDX\\x00\\x00",
    <Q version 1, <B dtype code (4 int32, 8 uint16), <Q sequences, <Q doc-index entries, int32 sizes,
    int64 byte pointers, int64 doc_idx; .bin = the ids back to back
  - get_train_valid_test_split_ (dataset_utils.py), with Python's round (ties to even)
  - get_split_by_range_ (BigScience), round(fraction * size)
  - build_blending_indices (helpers.cpp): greedy by weight error, max(s, 1), first on a tie
  - the llm.c shard header (256 int32: magic 20240520, version 1, token count)
Command line: python3 megatron_ref.py COMMAND ARGS (see main).
"""
import json
import random
import struct
import sys

DTYPES = {"uint16": (8, "H", 2), "int32": (4, "i", 4)}


def write_prefix(prefix, docs, dtype):
    code, fmt, width = DTYPES[dtype]
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(struct.pack("<%d%s" % (len(d), fmt), *d))
    sizes = [len(d) for d in docs]
    pointers, at = [], 0
    for s in sizes:
        pointers.append(at)
        at += s * width
    doc_idx = list(range(len(docs) + 1))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(struct.pack("<%di" % len(sizes), *sizes))
        f.write(struct.pack("<%dq" % len(pointers), *pointers))
        f.write(struct.pack("<%dq" % len(doc_idx), *doc_idx))


def read_prefix(prefix):
    b = open(prefix + ".idx", "rb").read()
    assert b[:9] == b"MMIDIDX\x00\x00", "magic"
    version, = struct.unpack_from("<Q", b, 9)
    code = b[17]
    n, d = struct.unpack_from("<QQ", b, 18)
    sizes = struct.unpack_from("<%di" % n, b, 34)
    pointers = struct.unpack_from("<%dq" % n, b, 34 + 4 * n)
    doc_idx = struct.unpack_from("<%dq" % d, b, 34 + 12 * n)
    assert len(b) == 34 + 12 * n + 8 * d, "size"
    fmt, width = {8: ("H", 2), 4: ("i", 4)}[code]
    data = open(prefix + ".bin", "rb").read()
    docs = [list(struct.unpack_from("<%d%s" % (s, fmt), data, p)) for s, p in zip(sizes, pointers)]
    return version, code, list(doc_idx), docs


def write_shard(path, tokens):
    with open(path, "wb") as f:
        header = [20240520, 1, len(tokens)] + [0] * 253
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def split_bounds(spec, size):
    parts = [float(s) for s in spec.split(",")] if "," in spec else [float(spec)]
    while len(parts) < 3:
        parts.append(0.0)
    total = sum(parts)
    parts = [p / total for p in parts]
    idx = [0]
    for i, p in enumerate(parts):
        idx.append(idx[i] + int(round(p * float(size))))
    diff = idx[-1] - size
    for i in range(1, len(idx)):
        idx[i] -= diff
    return idx


def range_bounds(spec, size):
    a, b = (float(x) for x in spec.split(":"))
    return [round(a * float(size)), round(b * float(size))]


def blend(weights, n):
    total = 0.0
    for w in weights:
        total += w
    weights = [w / total for w in weights]
    total = 0.0
    for w in weights:
        total += w
    weights = [w / total for w in weights]
    count = [0] * len(weights)
    out = []
    for s in range(n):
        x = max(float(s), 1.0)
        errs = [w * x - c for w, c in zip(weights, count)]
        best = errs.index(max(errs))
        out.append((best, count[best]))
        count[best] += 1
    return out


def make_docs(seed, ndocs, lo, hi, minlen, maxlen):
    rng = random.Random(seed)
    return [[rng.randrange(lo, hi) for _ in range(rng.randrange(minlen, maxlen + 1))] for _ in range(ndocs)]


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "docs":  # PREFIX DTYPE SEED NDOCS LO HI MINLEN MAXLEN: random documents
        p, dt = args[0], args[1]
        seed, nd, lo, hi, mn, mx = (int(x) for x in args[2:8])
        write_prefix(p, make_docs(seed, nd, lo, hi, mn, mx), dt)
    elif cmd == "labeled":  # PREFIX NDOCS: document i holds ids i*20 .. i*20+len-1 (its id names it)
        rng = random.Random(5)
        write_prefix(args[0], [[i * 20 + t for t in range(rng.randrange(10, 21))] for i in range(int(args[1]))], "uint16")
    elif cmd == "clamp":  # SRC DST: the same documents with every id taken mod 65536 (what uint16 would keep)
        _, _, _, docs = read_prefix(args[0])
        write_prefix(args[1], [[t & 0xFFFF for t in d] for d in docs], "int32")
    elif cmd == "json":  # PREFIX: the documents as JSON
        v, code, doc_idx, docs = read_prefix(args[0])
        print(json.dumps({"version": v, "code": code, "doc_idx": doc_idx, "docs": docs}))
    elif cmd == "split":
        print(" ".join(map(str, split_bounds(args[0], int(args[1])))))
    elif cmd == "range":
        print(" ".join(map(str, range_bounds(args[0], int(args[1])))))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()

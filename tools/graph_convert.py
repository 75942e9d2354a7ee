#!/usr/bin/env python3
"""Convert a graph in plain text files to actc's graph file (docs/graphs.md).

Python 3 standard library only.  Inputs:

  --edges FILE     one edge per line: "src dst" (whitespace or comma), node
                   indices from 0; '#' starts a comment; each undirected edge
                   once or both ways, duplicates and self-loops are fine (the
                   library merges them)
  --features FILE  one node per line, its features as floats (whitespace or
                   comma separated); every line the same length
  --labels FILE    one integer class per line, from 0
  --split FILE     one of train / val / test / none per line
     or  --train N --val N [--seed S]: a random split (Python's random
                   module with that seed), the rest test

  --out FILE       the graph file to write

Example:
  python3 tools/graph_convert.py --edges cora.edges --features cora.feat \\
      --labels cora.labels --split cora.split --out cora.graph
  actc graph info cora.graph
"""
import argparse
import random
import struct
import sys
import zlib

SPLITS = {"train": 0, "val": 1, "valid": 1, "validation": 1, "test": 2, "none": -1}


def fail(msg):
    sys.stderr.write("error: %s\n" % msg)
    sys.exit(1)


def lines(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            for no, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if line:
                    yield no, line
    except OSError as e:
        fail("cannot read %s: %s" % (path, e.strerror))


def fields(line):
    return line.replace(",", " ").split()


def read_edges(path, n):
    src, dst = [], []
    for no, line in lines(path):
        f = fields(line)
        if len(f) < 2:
            fail("%s:%d: expected 'src dst', got %r" % (path, no, line))
        try:
            a, b = int(f[0]), int(f[1])
        except ValueError:
            fail("%s:%d: node indices must be integers, got %r" % (path, no, line))
        for v in (a, b):
            if v < 0 or v >= n:
                fail("%s:%d: node %d is outside [0, %d) (the features file has %d nodes)" % (path, no, v, n, n))
        src.append(a)
        dst.append(b)
    return src, dst


def read_features(path):
    rows = []
    width = None
    for no, line in lines(path):
        try:
            row = [float(v) for v in fields(line)]
        except ValueError:
            fail("%s:%d: features must be numbers" % (path, no))
        if width is None:
            width = len(row)
        elif len(row) != width:
            fail("%s:%d: %d features, the first line has %d" % (path, no, len(row), width))
        rows.append(row)
    if not rows:
        fail("%s holds no node" % path)
    return rows, width


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--edges", required=True)
    ap.add_argument("--features", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--split")
    ap.add_argument("--train", type=int)
    ap.add_argument("--val", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    x, nf = read_features(a.features)
    n = len(x)
    y = []
    for no, line in lines(a.labels):
        try:
            y.append(int(line))
        except ValueError:
            fail("%s:%d: a label must be an integer, got %r" % (a.labels, no, line))
    if len(y) != n:
        fail("label count mismatch: %s has %d labels, %s has %d nodes" % (a.labels, len(y), a.features, n))
    if min(y) < 0:
        fail("%s: negative label %d" % (a.labels, min(y)))
    n_classes = max(y) + 1

    if a.split:
        split = []
        for no, line in lines(a.split):
            if line.lower() not in SPLITS:
                fail("%s:%d: split %r is not train, val, test or none" % (a.split, no, line))
            split.append(SPLITS[line.lower()])
        if len(split) != n:
            fail("split count mismatch: %s has %d lines, %s has %d nodes" % (a.split, len(split), a.features, n))
    else:
        if a.train is None:
            fail("give --split FILE or --train N [--val N] [--seed S]")
        if a.train < 1 or a.val < 0 or a.train + a.val > n:
            fail("--train %d --val %d do not fit %d nodes" % (a.train, a.val, n))
        order = list(range(n))
        random.Random(a.seed).shuffle(order)
        split = [2] * n
        for i, v in enumerate(order[: a.train + a.val]):
            split[v] = 0 if i < a.train else 1
    if 0 not in split:
        fail("no training node in the split")

    src, dst = read_edges(a.edges, n)
    m = len(src)

    out = bytearray()
    out += b"ACTCGRPH"
    out += struct.pack("<Iiiiq", 1, n, nf, n_classes, m)
    for row in x:
        out += struct.pack("<%df" % nf, *row)
    out += struct.pack("<%di" % n, *y)
    out += struct.pack("<%db" % n, *split)
    out += struct.pack("<%di" % m, *src)
    out += struct.pack("<%di" % m, *dst)
    out += struct.pack("<I", zlib.crc32(bytes(out)) & 0xFFFFFFFF)
    try:
        with open(a.out, "wb") as f:
            f.write(out)
    except OSError as e:
        fail("cannot write %s: %s" % (a.out, e.strerror))
    counts = [split.count(s) for s in (0, 1, 2)]
    print("wrote %s: %d nodes, %d features, %d classes, %d edge lines, split %d/%d/%d (%d bytes)"
          % (a.out, n, nf, n_classes, m, counts[0], counts[1], counts[2], len(out)))


if __name__ == "__main__":
    main()

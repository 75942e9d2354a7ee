#!/usr/bin/python3
"""PyTorch peer of `actc train --model gcn`: the same graph file, the same
A_hat = D^-1/2 (A + I) D^-1/2 (edges made symmetric, self-loops added,
duplicates merged), the same 2-layer GCN (dropout 0.5 on the input features
and before the second layer, each layer A_hat (h W) + b, ReLU between,
Glorot-uniform weights, zero biases), AdamW (lr 0.01, decoupled weight decay
5e-4), mean cross-entropy over the training nodes, full-batch steps in fp32
on CPU.  The propagation is torch.sparse.mm on a coalesced COO A_hat.

usage: /usr/bin/python3 bench/pytorch_gcn.py GRAPH STEPS [THREADS]
Needs Debian's python3-torch (bench only; the build and tests never use it).
The first 2 steps are warm-up, not timed.  Prints one human line and one
JSON line: steps/s and ms a step (timed steps), peak RSS (ru_maxrss), the RSS
after importing torch and right after loading the graph and building A_hat
(so peak minus that is the training's own share), and the test accuracy
after the last step (dropout off)."""
import json
import resource
import struct
import sys
import time
import zlib

import torch
import torch.nn.functional as F

MAGIC = b"ACTCGRPH"
HEADER = struct.Struct("<8sIiiiq")  # magic, version, n, n_features, n_classes, m


def rss_now():
    """The current resident set (bytes), or the peak so far without /proc."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def load(path):
    """The graph file (docs/graphs.md): x [n, f] (a view of the file's bytes,
    no copy), y [n] int64, split [n] int8, src and dst [m] int64."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        buf = bytearray(size)
        if f.readinto(buf) != size:
            sys.exit(f"error: {path}: short read")
    if size < HEADER.size + 4:
        sys.exit(f"error: {path}: {size} bytes, too short for a graph file")
    magic, version, n, nf, nc, m = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        sys.exit(f"error: {path}: not a graph file (magic {magic!r}, expected {MAGIC!r})")
    if version != 1:
        sys.exit(f"error: {path}: version {version}, this script reads version 1")
    if n < 1 or nf < 1 or nc < 1 or m < 0:
        sys.exit(f"error: {path}: bad header (n {n}, features {nf}, classes {nc}, edges {m})")
    need = HEADER.size + 4 * n * nf + 4 * n + n + 8 * m + 4
    if size != need:
        sys.exit(f"error: {path}: {size} bytes, the header implies {need}")
    mv = memoryview(buf)
    (crc,) = struct.unpack_from("<I", buf, size - 4)
    if zlib.crc32(mv[: size - 4]) != crc:
        sys.exit(f"error: {path}: CRC-32 mismatch (damaged file)")
    off = HEADER.size
    x = torch.frombuffer(buf, dtype=torch.float32, count=n * nf, offset=off).view(n, nf)
    off += 4 * n * nf
    # The rest is small next to x; copied (clone) since src/dst may sit at an odd offset.
    y = torch.frombuffer(buf, dtype=torch.int32, count=n, offset=off).long()
    off += 4 * n
    split = torch.frombuffer(buf, dtype=torch.int8, count=n, offset=off).clone()
    off += n
    src = torch.frombuffer(buf, dtype=torch.int32, count=m, offset=off).long() if m else torch.zeros(0, dtype=torch.long)
    off += 4 * m
    dst = torch.frombuffer(buf, dtype=torch.int32, count=m, offset=off).long() if m else torch.zeros(0, dtype=torch.long)
    if m and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        sys.exit(f"error: {path}: an edge names a node outside [0, {n})")
    if y.min() < 0 or y.max() >= nc:
        sys.exit(f"error: {path}: a label outside [0, {nc})")
    return x, y, split, src, dst, nc


def normalized_adjacency(n, src, dst):
    """A_hat = D^-1/2 (A + I) D^-1/2, A the symmetric 0/1 adjacency (input
    self-loops and duplicate edges merged into one entry), coalesced COO."""
    keep = src != dst
    src, dst = src[keep], dst[keep]
    loops = torch.arange(n)
    rows = torch.cat([src, dst, loops])
    cols = torch.cat([dst, src, loops])
    a = torch.sparse_coo_tensor(torch.stack([rows, cols]), torch.ones(rows.numel()), (n, n)).coalesce()
    idx = a.indices()
    deg = torch.bincount(idx[0], minlength=n).float()  # entries a row after merging, self-loop included
    dinv = deg.pow(-0.5)
    val = dinv[idx[0]] * dinv[idx[1]]
    return torch.sparse_coo_tensor(idx, val, (n, n)).coalesce(), (idx.shape[1] - n) // 2


class GCN(torch.nn.Module):
    def __init__(self, nf, width, nc, dropout=0.5):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.empty(nf, width))
        self.b1 = torch.nn.Parameter(torch.zeros(width))
        self.w2 = torch.nn.Parameter(torch.empty(width, nc))
        self.b2 = torch.nn.Parameter(torch.zeros(nc))
        torch.nn.init.xavier_uniform_(self.w1)  # Glorot uniform: bound sqrt(6 / (in + out))
        torch.nn.init.xavier_uniform_(self.w2)
        self.p = dropout

    def forward(self, a, x):
        h = F.dropout(x, self.p, self.training)
        h = torch.sparse.mm(a, h @ self.w1) + self.b1
        h = F.dropout(F.relu(h), self.p, self.training)
        return torch.sparse.mm(a, h @ self.w2) + self.b2


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: bench/pytorch_gcn.py GRAPH STEPS [THREADS]")
    path, steps = sys.argv[1], int(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    if steps < 1:
        sys.exit("error: STEPS must be at least 1")
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    rss_import = rss_now()
    x, y, split, src, dst, nc = load(path)
    n, nf = x.shape
    a, edges = normalized_adjacency(n, src, dst)
    del src, dst
    train = (split == 0).nonzero().squeeze(1)
    test = (split == 2).nonzero().squeeze(1)
    if train.numel() == 0:
        sys.exit(f"error: {path}: no training node")
    y_train = y[train]
    rss_load = rss_now()
    peak_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    model = GCN(nf, 64, nc)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=5e-4)
    model.train()
    timed = 0.0
    t_all = time.perf_counter()
    for s in range(-2, steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(a, x)[train], y_train)
        loss.backward()
        opt.step()
        if s >= 0:
            timed += time.perf_counter() - t0
    t_all = time.perf_counter() - t_all
    model.eval()
    with torch.no_grad():
        pred = model(a, x).argmax(1)
    test_acc = (pred[test] == y[test]).float().mean().item() if test.numel() else float("nan")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sps = steps / timed
    print(f"pytorch {torch.__version__} gcn on {path}: {n} nodes, {edges} edges, {nf} features, {nc} classes, "
          f"{train.numel()} train / {test.numel()} test nodes; {threads} threads, {steps} steps: {sps:.2f} steps/s "
          f"({1e3 / sps:.1f} ms a step; {1e3 * t_all / (steps + 2):.1f} with the 2 warm-up steps), final loss "
          f"{loss.item():.4f}, test acc {100 * test_acc:.2f}%, peak RSS {rss / 2**20:.1f} MiB "
          f"(after importing torch {rss_import / 2**20:.1f} MiB, after loading the graph {rss_load / 2**20:.1f} MiB)")
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "graph": path, "nodes": n, "edges": edges,
                      "threads": threads, "steps": steps, "steps_per_s": round(sps, 4),
                      "ms_per_step": round(1e3 / sps, 3),
                      "ms_per_step_with_warmup": round(1e3 * t_all / (steps + 2), 3),
                      "peak_rss_bytes": rss, "rss_before_load_bytes": rss_import, "rss_after_load_bytes": rss_load,
                      "peak_rss_after_load_bytes": peak_load, "train_loss": round(loss.item(), 6),
                      "test_acc": round(test_acc, 6)}))


if __name__ == "__main__":
    main()

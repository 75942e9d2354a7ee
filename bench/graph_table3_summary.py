#!/usr/bin/python3
"""Summarise bench/graph_table3.sh: GACT's Table 3 in shape.

usage: bench/graph_table3_summary.py OUTDIR [EPOCH]
EPOCH (2): the epoch whose record is read (a longer run's record of that
epoch is the shorter run's: the rate is constant).
For every model and policy: the final test accuracy (mean +- sample std over
the seeds whose run finished, and their number) and the context compression
ratio (stored fp32 context / stored context before backward, from the memory
report of the last epoch; the same for every seed).  Standard library only."""
import glob
import json
import os
import statistics
import sys

POLICIES = ["none", "gact:fix4", "gact:4", "gact:3", "gact:2"]


def epoch_record(path, epoch):
    rec = None
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("event") == "epoch" and r.get("epoch") == epoch:
                rec = r
    return rec


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench-out/table3"
    epoch = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
        r = epoch_record(path, epoch)
        if not r:
            continue
        key = (r["model"], r["policy"])
        runs.setdefault(key, []).append((100 * r["test_acc"], 100 * r["val_acc"], r["memory"]["context_ratio"]))
    models = [m for m in ["gcn", "gat", "gcnii"] if any(k[0] == m for k in runs)]
    print("| model | " + " | ".join(POLICIES) + " |")
    print("|---|" + "---|" * len(POLICIES))
    for m in models:
        cells = []
        base = runs.get((m, "none"))
        for p in POLICIES:
            rs = runs.get((m, p))
            if not rs:
                cells.append("n/a")
                continue
            acc = [a for a, _, _ in rs]
            sd = statistics.stdev(acc) if len(acc) > 1 else float("nan")
            ratio = statistics.mean(c for _, _, c in rs)
            d = ""
            if base and p != "none":
                d = " [%+.2f]" % (statistics.mean(acc) - statistics.mean(a for a, _, _ in base))
            cells.append("%.2f +- %.2f (%.2fx, n=%d)%s" % (statistics.mean(acc), sd, ratio, len(acc), d))
        print("| %s | %s |" % (m, " | ".join(cells)))
    print()
    print("test accuracy in %, mean +- sample std over n seeds; (ratio) = context compression against fp32;")
    print("[diff] = mean difference from none in points.")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Summarise bench/graph_table3.sh: GACT's Table 3 in shape.

usage: bench/graph_table3_summary.py OUTDIR [EPOCH]
EPOCH (2): the epoch whose record is read (a longer run's record of that
epoch is the shorter run's: the rate is constant).
For every model and policy: the final test accuracy (mean +- sample std over
the seeds whose run finished, and their number) and the context compression
ratio (what none keeps / the stored context before backward, from the memory
report of the last epoch; the same for every seed).  Then, per compressed
policy, GACT's estimate of the gradient variance compression adds, V(b) =
sum of c_l S(b_l), S(b) = (2^b - 1)^-2, from the sensitivities and bits of
the run's step-0 adapt record (mean over the seeds), and how uneven the
sensitivities are (largest c_l / median c_l, the median over the runs).  Standard library only."""
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


def adapt_record(path):
    with open(path) as f:
        for line in f:
            if '"event":"adapt"' in line:
                try:
                    return json.loads(line)
                except ValueError:
                    return None
    return None


def var_factor(bits):
    return 0.0 if bits >= 32 else 1.0 / (2 ** bits - 1) ** 2


def variance_table(out, epoch, models):
    """V(b) per model and compressed policy, over the runs that finished."""
    v, spread = {}, {}
    for path in sorted(glob.glob(os.path.join(out, "*.jsonl"))):
        r, a = epoch_record(path, epoch), adapt_record(path)
        if not r or not a or not a.get("tensors"):
            continue
        ts = a["tensors"]
        v.setdefault((r["model"], r["policy"]), []).append(sum(t["c"] * var_factor(t["bits"]) for t in ts))
        cs = sorted(t["c"] for t in ts)
        if cs[len(cs) // 2] > 0:
            spread.setdefault(r["model"], []).append(cs[-1] / cs[len(cs) // 2])
    pols = POLICIES[1:]
    print("| model | " + " | ".join(pols) + " | largest c_l / median c_l |")
    print("|---|" + "---:|" * (len(pols) + 1))
    for m in models:
        cells = ["%.3g" % statistics.mean(v[(m, p)]) if (m, p) in v else "n/a" for p in pols]
        print("| %s | %s | %s |" % (m, " | ".join(cells), "%.3g" % statistics.median(spread[m]) if m in spread else "n/a"))
    print()
    print("V(b) = sum over saved tensors of c_l S(b_l), GACT's estimate of the gradient variance compression")
    print("adds (mean over the seeds); comparable within a row, not across models; the spread of c_l is the")
    print("median over every compressed run of the model.")


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
    print()
    variance_table(out, epoch, models)


if __name__ == "__main__":
    main()

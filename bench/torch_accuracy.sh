#!/usr/bin/env bash
# The PyTorch package's accuracy at a realistic small scale: examples/
# torch_gpt.py (a 4-layer, 128-wide byte GPT on the King James corpus,
# batch 16 x 128, AdamW 1e-3, clipping) under PyTorch alone ("off") and
# under actc's hooks, several seeds each: the validation bits per byte of
# every run, then per policy the mean, the seeds' spread (sample standard
# deviation) and the difference from "off" against that spread.
# usage: bench/torch_accuracy.sh [STEPS]   (default 1000)
#   POLICIES (default "off actnn:L3 gact:4"), SEEDS (default "0 1 2"),
#   THREADS (default 2), BUILD (default build), PYTHON (default /usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-1000}
POLICIES=${POLICIES:-"off actnn:L3 gact:4"}
SEEDS=${SEEDS:-"0 1 2"}
THREADS=${THREADS:-2}
BUILD=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3}
[ -f "$BUILD/data/kjv.txt" ] || make corpus >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "examples/torch_gpt.py, $STEPS steps, $THREADS threads, torch $($PY -c 'import torch; print(torch.__version__)'), $(date -u +%F)"
for p in $POLICIES; do
    for s in $SEEDS; do
        t0=$(date +%s)
        bpb=$(ACTC_LIBRARY="$BUILD" OMP_NUM_THREADS=$THREADS "$PY" examples/torch_gpt.py --compress "$p" --seed "$s" \
              --steps "$STEPS" --threads "$THREADS" --data "$BUILD/data/kjv.txt" | awk '/^validation/ {print $2}')
        echo "$p seed $s: $bpb bits/byte ($(( $(date +%s) - t0 )) s)"
        echo "$p $s $bpb" >>"$out"
    done
done
"$PY" - "$out" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for p, s, v in rows:
    by.setdefault(p, []).append(float(v))
ref = by.get("off")
print(f"\n{'policy':<12} {'mean bpb':>9} {'spread':>8} {'vs off':>8} {'in spreads':>10}")
for p, v in by.items():
    sd = statistics.stdev(v) if len(v) > 1 else float("nan")
    if ref and p != "off":
        d = statistics.mean(v) - statistics.mean(ref)
        spread = max(sd, statistics.stdev(ref) if len(ref) > 1 else 0.0)
        print(f"{p:<12} {statistics.mean(v):>9.4f} {sd:>8.4f} {d:>+8.4f} {d / spread if spread else float('nan'):>10.2f}")
    else:
        print(f"{p:<12} {statistics.mean(v):>9.4f} {sd:>8.4f} {'':>8} {'':>10}")
PY

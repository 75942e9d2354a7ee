#!/bin/bash
# GACT's Table 3 in shape on the Fashion-MNIST k-NN graph: test accuracy of
# GCN, GAT and GCNII (their presets: AdamW 0.01, weight decay 5e-4, a
# constant rate; EPOCHS epochs of 50 full-graph steps, default 2: GCN's
# validation loss is lowest near step 100 and rises after) under fp32 and
# GACT's fixed and adaptive bits, over several seeds, and the context
# compression ratio of each run.  With a constant rate the first 100 steps
# of a longer run are the 100-step run, bit for bit.
#
# usage: bench/graph_table3.sh [ACTC] [OUTDIR] [SEEDS] [MODELS] [POLICIES]
#   defaults: build/actc, bench-out/table3, "1 2 3 4 5", "gcn gat gcnii",
#   "none gact:fix4 gact:4 gact:3 gact:2".
# Every run writes OUTDIR/MODEL_POLICY_sSEED.{txt,jsonl}; a run whose log
# holds its last epoch is skipped, so a killed sweep continues where it
# stopped.  bench/graph_table3_summary.py OUTDIR EPOCHS prints the table.
set -eu
ACTC=${1:-build/actc}
OUT=${2:-bench-out/table3}
SEEDS=${3:-1 2 3 4 5}
MODELS=${4:-gcn gat gcnii}
POLICIES=${5:-none gact:fix4 gact:4 gact:3 gact:2}
THREADS=${THREADS:-2}
EPOCHS=${EPOCHS:-2}
mkdir -p "$OUT"
for seed in $SEEDS; do
  for model in $MODELS; do
    for policy in $POLICIES; do
      base="$OUT/${model}_${policy/:/-}_s$seed"
      if [ -f "$base.jsonl" ] && grep -q "\"epoch\":$EPOCHS," "$base.jsonl"; then continue; fi
      rm -f "$base.jsonl"
      echo "$(date +%T) $model $policy seed $seed"
      if ! "$ACTC" train --model "$model" --data graph --compress "$policy" --seed "$seed" --epochs "$EPOCHS" \
           --threads "$THREADS" --progress off --log "$base.jsonl" > "$base.txt" 2>&1; then
        echo "  failed: see $base.txt"
      else
        grep -E "^epoch $EPOCHS/$EPOCHS" "$base.txt" | sed 's/^/  /'
      fi
    done
  done
done

#!/bin/bash
# What fits a memory budget on a graph of Fashion-MNIST's size (GACT's
# Table 4: how much deeper / wider a GCN gets under compression): actc
# maxbatch on a planted-partition graph with 784 features, 10 classes, mean
# degree 10, every trial a full training step (two: the second with the
# optimizer state resident) under the budget, graph included.
#
# usage: bench/graph_memory.sh [ACTC] [BUDGET] [NODES]   (build/actc 1GiB 70000)
#        WHAT="nodes depth width" (default) picks the searches
# - the largest graph (nodes) of gcn, gat and gcnii (their presets) under
#   none, gact:4 and gact:2;
# - the deepest and the widest gcn and gcnii on NODES nodes under none,
#   quant:4 and quant:2.  gact:B allocates B bits on average over the saved
#   elements, so it stores what quant:B does (the same per-group payload);
#   its sensitivity measurement runs one extra pass per saved tensor, which
#   at hundreds of layers on 70,000 nodes takes hours a trial, so the depth
#   and width rows use quant:B.
# Memory does not depend on timing: run it beside anything.
set -eu
ACTC=${1:-build/actc}
BUDGET=${2:-1GiB}
NODES=${3:-70000}
T=${THREADS:-1}
res() { grep -E "^largest|^error" | tail -1; }
echo "budget $BUDGET, 784 features, 10 classes, mean degree 10"
WHAT=${WHAT:-nodes depth width}
for w in $WHAT; do
  if [ $w = nodes ]; then
    for m in gcn gat gcnii; do
      for p in none gact:4 gact:2; do
        echo "$m $p nodes: $("$ACTC" maxbatch --model $m --compress $p --budget $BUDGET --resolution 1024 --threads $T 2>&1 | res)"
      done
    done
    continue
  fi
  for m in gcn gcnii; do
    for p in none quant:2 quant:4; do
      r=1; [ $w = width ] && r=8
      echo "$m $p $w on $NODES nodes: $("$ACTC" maxbatch --model $m --compress $p --budget $BUDGET --search $w --nodes $NODES --resolution $r --threads $T 2>&1 | res)"
    done
  done
done

#!/usr/bin/env bash
# Accuracy runs behind the engine's claims (too long for `make test`):
# ResNet-20 on Fashion-MNIST, fp32 (`--compress none`), default recipe
# (SGD Nesterov 0.9, lr 0.1, wd 5e-4, cosine with 50 warm-up steps, batch 64,
# as `make demo`):
# one epoch (>= 89% test accuracy) and three epochs (>= 91%).
#
# usage: bench/accuracy.sh [BUILD_DIR] [SEEDS...]   (default: build, seed 1)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
shift || true
seeds=${*:-1}
out=$(mktemp -d)
for seed in $seeds; do
    for epochs in 1 3; do
        "$build/actc" train --model resnet20 --compress ${POLICY:-none} --epochs $epochs --batch 64 --seed $seed \
            --progress off --log "$out/e$epochs-s$seed.jsonl" > "$out/e$epochs-s$seed.txt"
        line=$(grep '^epoch' "$out/e$epochs-s$seed.txt" | tail -1)
        echo "resnet20 ${POLICY:-none} seed $seed, $epochs epoch(s): $line"
    done
done
rm -rf "$out"

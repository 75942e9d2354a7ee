#!/usr/bin/env bash
# Accuracy of the compression policies against fp32, same seed and recipe per
# row (issue 4): ResNet-20 on Fashion-MNIST, SGD Nesterov 0.9, lr 0.1,
# wd 5e-4, cosine with 50 warm-up steps, batch 128, no augmentation.
# Prints one line per policy: final test accuracy, difference to `none`,
# context ratio vs none (the memory table's headline) and the last epoch's time.  A run that diverges is
# reported as such (the trainer stops on a NaN/Inf loss).
#
# usage: bench/accuracy_policies.sh [BUILD_DIR] [EPOCHS] [POLICIES...]
#   default: build 5  none actnn:L2 actnn:L3 actnn:1.5 actnn:1.25 quant:2 quant:2,per-tensor
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
epochs=${2:-5}
shift 2 2>/dev/null || shift $#
policies=${*:-none actnn:L2 actnn:L3 actnn:1.5 actnn:1.25 quant:2 quant:2,per-tensor}
seed=${SEED:-1}
out=$(mktemp -d)
base=""
printf '%-20s %9s %8s %9s %s\n' policy "test acc" "vs none" "ctx ratio" "last epoch"
for p in $policies; do
    f="$out/$(tr ':,' '__' <<<"$p").txt"
    "$build/actc" train --model resnet20 --compress "$p" --epochs "$epochs" --batch 128 --seed "$seed" \
        --progress off > "$f" 2>&1
    rc=$?
    line=$(grep '^epoch' "$f" | tail -1)
    acc=$(sed -n 's/.*test acc \([0-9.]*\)%.*/\1/p' <<<"$line")
    ratio=$(sed -n 's/.*-> \([0-9.]*\)x smaller.*/\1/p' "$f" | tail -1)
    if [ $rc -ne 0 ] || [ -z "$acc" ]; then
        printf '%-20s %9s %8s %9s %s\n' "$p" "failed" "-" "${ratio:--}" "$(grep -m1 -i 'error' "$f")"
        continue
    fi
    [ "$p" = none ] && base=$acc
    diff=$( [ -n "$base" ] && awk -v a="$acc" -v b="$base" 'BEGIN{printf "%+.2f", a-b}' || echo -)
    printf '%-20s %8s%% %8s %8sx %s\n' "$p" "$acc" "$diff" "$ratio" "$line"
done
rm -rf "$out"

#!/usr/bin/env bash
# The context every policy keeps before backward (stored bytes and its fp32
# reference) on ResNet-20, ResNet-18, gpt-mini and llama-mini (both
# attention forms), one training step each: the figure a refactor of the
# policy seam must leave unchanged.  With two build directories it runs both
# and prints only the rows that differ (and "identical" when none do).
#
# usage: bench/context_bytes.sh BUILD [OTHER_BUILD]
#        POLICIES="none bf16 ..." MODELS="resnet20 ..." to narrow it down
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
a=${1:?usage: context_bytes.sh BUILD [OTHER_BUILD]} b=${2:-}
policies=${POLICIES:-"none bf16 quant:4 quant:2,per-tensor quant:3,group=64 actnn:L1 actnn:L2 actnn:L3 actnn:1.5
  division division:lfc-only division:hfc-only division:b=4,q=3,seq=features gact:4 gact:2 gact:fix4 gact:CB1
  gact:CB2 gact:CKPT"}
models=${MODELS:-"resnet20:32 resnet18:8 gpt-mini:4:flash gpt-mini:4:naive llama-mini:4:flash llama-mini:4:naive"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { # BUILD MODEL BATCH ATTENTION POLICY -> "stored fp32"
    local build=$1 model=$2 batch=$3 attn=$4 policy=$5 log=$tmp/log.jsonl
    rm -f "$log"
    if [ -n "$attn" ]; then
        "$build/actc" train --model "$model" --batch "$batch" --attention "$attn" --compress "$policy" --epochs 1 \
            --epoch-steps 1 --eval-tokens 256 --seq 64 --threads 2 --progress off --log "$log" > /dev/null
    else
        "$build/actc" train --model "$model" --batch "$batch" --compress "$policy" --epochs 1 --limit-train "$batch" \
            --limit-test 16 --threads 2 --progress off --log "$log" > /dev/null
    fi
    # each key on its own: builds before and after "context_none" order them differently
    local rec=$(grep '"event":"epoch"' "$log" | tail -1)
    echo "$(grep -o '"context_stored":[0-9]*' <<<"$rec" | cut -d: -f2) $(grep -o '"context_fp32":[0-9]*' <<<"$rec" | cut -d: -f2)"
}
for m in $models; do
    IFS=: read -r model batch attn <<<"$m"
    for p in $policies; do
        ra=$(run "$a" "$model" "$batch" "${attn:-}" "$p")
        if [ -z "$b" ]; then
            printf '%-12s %-6s %-32s %s\n' "$model" "${attn:--}" "$p" "$ra"
        else
            rb=$(run "$b" "$model" "$batch" "${attn:-}" "$p")
            echo "$model ${attn:--} $p" >> "$tmp/rows"
            [ "$ra" = "$rb" ] || printf 'DIFFERS %-12s %-6s %-32s %s vs %s\n' "$model" "${attn:--}" "$p" "$ra" "$rb" | tee -a "$tmp/diff"
        fi
    done
done
if [ -n "$b" ]; then
    n=$(wc -l < "$tmp/rows")
    if [ -s "$tmp/diff" ]; then echo "$(wc -l < "$tmp/diff") of $n configurations differ"; exit 1; fi
    echo "identical: stored and fp32 context bytes of all $n configurations"
fi

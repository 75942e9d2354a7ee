#!/usr/bin/env bash
# Per-step losses (and the epoch records' losses, accuracies, bpb and
# context bytes) of two builds' `actc train`, configuration by
# configuration: prints "identical" or the first differences.  What a
# refactor that must not change numbers is checked with (with
# bench/context_bytes.sh and bench/instructions.sh).  Exit status 1 when any
# configuration differs or fails.
#
# usage: bench/compare_losses.sh OLD_BUILD NEW_BUILD
set -uo pipefail
old=${1:?usage: compare_losses.sh OLD_BUILD NEW_BUILD} new=${2:?usage: compare_losses.sh OLD_BUILD NEW_BUILD}
tmp=$(mktemp -d); n=0; bad=0
trap 'rm -rf "$tmp"' EXIT
run() { # build tag args...
    local b=$1 tag=$2; shift 2
    "$b/actc" train "$@" --progress off --threads 2 --log-every 1 --log $tmp/$tag.jsonl > $tmp/$tag.out 2>&1 || echo "FAILED $tag" >> $tmp/$tag.out
    grep -o '"[a-z_]*\(loss\|acc\|bpb\|context_stored\|context_none\)":[-0-9.e]*' $tmp/$tag.jsonl > $tmp/$tag.nums
}
while read -r name args; do
    [ -z "$name" ] && continue
    run $old old_$name $args; run $new new_$name $args
    n=$((n+1))
    if cmp -s $tmp/old_$name.nums $tmp/new_$name.nums && [ -s $tmp/old_$name.nums ]; then echo "identical  $name ($(wc -l < $tmp/old_$name.nums) figures)"
    else bad=$((bad+1)); echo "DIFFERS    $name"; diff $tmp/old_$name.nums $tmp/new_$name.nums | head -5; tail -3 $tmp/new_$name.out; fi
done <<'CFG'
r20_none      --model resnet20 --batch 32 --compress none --epochs 1 --limit-train 128 --limit-test 64
r20_actnnL3   --model resnet20 --batch 32 --compress actnn:L3 --epochs 1 --limit-train 128 --limit-test 64
r20_gact4     --model resnet20 --batch 32 --compress gact:4 --epochs 1 --limit-train 128 --limit-test 64 --adapt-interval 2
r20_division  --model resnet20 --batch 32 --compress division --epochs 1 --limit-train 128 --limit-test 64
gpt_none      --model gpt-mini --batch 4 --seq 64 --compress none --epochs 1 --epoch-steps 4 --eval-tokens 512
gpt_gact4     --model gpt-mini --batch 4 --seq 64 --compress gact:4 --epochs 1 --epoch-steps 4 --eval-tokens 512 --adapt-interval 2
gpt_cb1       --model gpt-mini --batch 4 --seq 64 --compress gact:CB1 --epochs 1 --epoch-steps 4 --eval-tokens 512
gpt_cb2       --model gpt-mini --batch 4 --seq 64 --compress gact:CB2 --epochs 1 --epoch-steps 4 --eval-tokens 512
gpt_ckpt      --model gpt-mini --batch 4 --seq 64 --compress gact:CKPT --epochs 1 --epoch-steps 4 --eval-tokens 512
gpt_compact   --model gpt-mini --batch 4 --seq 64 --compress compact:r=0.25+gact:4 --epochs 1 --epoch-steps 4 --eval-tokens 512 --adapt-interval 2
gpt_compact_actnn --model gpt-mini --batch 4 --seq 64 --compress compact:r=0.25+actnn:L3 --epochs 1 --epoch-steps 4 --eval-tokens 512
gpt_compact0  --model gpt-mini --batch 4 --seq 64 --compress compact --epochs 1 --epoch-steps 4 --eval-tokens 512
gpt_compactcb --model gpt-mini --batch 4 --seq 64 --compress compact:r=0.5+gact:CB2 --epochs 1 --epoch-steps 4 --eval-tokens 512
llama_compact --model llama-mini --batch 4 --seq 64 --compress compact:r=0.25,all-linear+division --epochs 1 --epoch-steps 4 --eval-tokens 512
gpt_agoq_naive --model gpt-mini --batch 4 --seq 64 --attention naive --compress agoq --epochs 1 --epoch-steps 4 --eval-tokens 512
llama_agoq    --model llama-mini --batch 4 --seq 64 --compress agoq --epochs 1 --epoch-steps 4 --eval-tokens 512
llama_division --model llama-mini --batch 4 --seq 64 --compress division --epochs 1 --epoch-steps 4 --eval-tokens 512
llama_gact4   --model llama-mini --batch 4 --seq 64 --compress gact:4 --epochs 1 --epoch-steps 4 --eval-tokens 512 --grad-bits 8
gpt_gradbits8 --model gpt-mini --batch 4 --seq 64 --compress agoq --epochs 1 --epoch-steps 4 --eval-tokens 512 --grad-bits 8 --accum 2
CFG
echo "$((n-bad)) of $n configurations identical"
[ "$bad" -eq 0 ]

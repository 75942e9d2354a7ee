#!/usr/bin/env bash
# --deterministic: the same seed and flags give the same losses, to the bit,
# at 1, 2 and 3 threads (issue 22): ResNet-20, gpt-mini and llama-mini over
# 20 steps under none, actnn:L3, division and gact:4, at small batches.
# Without the flag the dense products of OpenBLAS and oneDNN sum in an order
# set by the thread count (whether 20 steps show it depends on the shapes
# and the data; tests/test_ops.c's test_deterministic_products shows it on
# the products themselves).
source "$(dirname "$0")/lib.bash"
D=$TMP
write_idx_images $D/img 320; write_idx_labels $D/lab 320
for ((i = 0; i < 40; i++)); do cat "${ACTC_SOURCE_DIR:-$(dirname "$0")/../..}/README.md"; done > $D/corpus.txt
IMG="--batch 16 --train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab --limit-test 16"
LM="--batch 2 --seq 32 --epoch-steps 20 --eval-tokens 64 --data text:$D/corpus.txt"

# losses MODEL POLICY THREADS [FLAGS...]: the step losses of a 20-step run.
losses() {
    local model=$1 policy=$2 threads=$3; shift 3
    local data=$IMG
    case $model in gpt-mini | llama-mini) data=$LM ;; esac
    rm -f $D/run.jsonl
    $ACTC train --model $model --compress $policy --epochs 1 --max-steps 20 --threads $threads --progress off \
        --log $D/run.jsonl --log-every 1 $data "$@" > $D/out.txt 2>&1 || { echo "run failed: $(tail -2 $D/out.txt)"; return; }
    grep '"event":"step"' $D/run.jsonl | grep -o '"loss":[^,]*'
}

for model in resnet20 gpt-mini llama-mini; do
    for policy in none actnn:L3 division gact:4; do
        a=$(losses $model $policy 1 --deterministic)
        b=$(losses $model $policy 2 --deterministic)
        c=$(losses $model $policy 3 --deterministic)
        n=$(grep -c loss <<<"$a")
        if [ "$n" = 20 ] && [ "$a" = "$b" ] && [ "$a" = "$c" ]; then
            pass "$model $policy: 20 losses equal at 1, 2 and 3 threads"
        else
            fail "$model $policy: losses differ between thread counts ($n steps)"
            paste <(echo "$a") <(echo "$b") <(echo "$c") | head -4
        fi
    done
done

# The mode refuses what would break it, and a resumed run keeps it.
ACTC_CONV=dnnl expect_fail "dnnl forced" "deterministic|no oneDNN" $ACTC train --model resnet20 --deterministic --max-steps 1 $IMG
$ACTC train --model mlp --width 64 --epochs 2 --max-steps 3 --deterministic --save $D/d.ckpt $IMG --progress off > /dev/null 2>&1
out=$($ACTC train --resume $D/d.ckpt --max-steps 4 $IMG --progress off 2>&1)
if grep -q "deterministic" <<<"$out"; then pass "--resume keeps --deterministic"; else fail "--resume dropped --deterministic"; echo "$out" | head -2; fi
finish

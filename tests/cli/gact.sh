#!/usr/bin/env bash
# GACT through the command: `actc inspect` prints one row per saved tensor
# with its sensitivity, bits and bytes, and the allocation keeps the budget;
# `actc train` re-measures every --adapt-interval steps and logs the table;
# bad values are refused with the flag named.
source "$(dirname "$0")/lib.bash"
D=$TMP
write_idx_images $D/img 64; write_idx_labels $D/lab 64

out=$($ACTC inspect --model resnet20 --compress gact:3 --batch 16 --train-images $D/img --train-labels $D/lab \
      --log $D/inspect.jsonl 2>&1); rc=$?
rows=$(grep -cE "^ +[0-9]+ +[a-z0-9.-]+ +[a-z_0-9]+ +[0-9x]+ +[0-9.e+-]+ +(32|8|4|2|1) " <<<"$out")
avg=$(sed -n 's/.*ACT tensors: \([0-9.]*\) bits per element.*/\1/p' <<<"$out")
# ResNet-20 saves 42 ACT tensors: 19 convolution and 21 batch-norm inputs, the classifier's and the loss's.
if [ $rc -eq 0 ] && [ "$rows" -eq 42 ] && awk -v a="$avg" 'BEGIN { exit !(a > 2.5 && a <= 3.0) }'; then
    pass "inspect: 42 tensors with c_l and bits, $avg bits per element on average (budget 3)"
else fail "inspect (exit $rc, $rows rows, average '$avg')"; echo "$out" | tail -20; fi
grep -q '"event":"inspect".*"op":"cross_entropy"' $D/inspect.jsonl && pass "inspect --log writes the table" \
    || fail "inspect --log"

out=$($ACTC inspect --model gpt --layers 1 --width 32 --heads 4 --context 16 --batch 4 --compress gact:CB2 \
      --data text:<(for ((i = 0; i < 60; i++)); do echo "In the beginning God created the heaven and the earth."; done) 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qE " segment +4x16x32 " <<<"$out" && grep -q "attention_flash" <<<"$out"; then
    pass "inspect under gact:CB2: the segment input is a saved tensor, attention is the memory-efficient form"
else fail "inspect gact:CB2 (exit $rc)"; echo "$out" | tail -20; fi

out=$($ACTC train --model resnet20 --compress gact:4 --adapt-interval 3 --batch 8 --epochs 1 --progress off \
      --train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab --log $D/train.jsonl 2>&1); rc=$?
n=$(grep -c '"event":"adapt"' $D/train.jsonl)
steps=$(grep -c "re-allocated" <<<"$out")
# 8 steps, measured before steps 0, 3 and 6.
if [ $rc -eq 0 ] && [ "$n" -eq 3 ] && [ "$steps" -eq 3 ] && grep -q "step 6: measured" <<<"$out"; then
    pass "train: sensitivities measured at steps 0, 3 and 6 and logged"
else fail "train --adapt-interval (exit $rc, $n logged, $steps printed)"; echo "$out" | tail -20; fi

# Any other policy: its context against none's (tests/cli/context_headline.sh checks the bytes).
out=$($ACTC inspect --model resnet20 --compress quant:2 --batch 8 --train-images $D/img --train-labels $D/lab 2>&1) \
    && grep -Eq "none [0-9]+ bytes, quant:2 [0-9]+ bytes: [0-9.]+x smaller" <<<"$out" \
    && pass "inspect quant:2: the context against none's" || { fail "inspect quant:2"; echo "$out" | tail -5; }
expect_fail "inspect needs --compress" "compress is required" $ACTC inspect --model resnet20
expect_fail "inspect refuses an unknown gact level" "gact:L7.*valid values" $ACTC inspect --compress gact:L7
expect_fail "train refuses --adapt-interval 0" "adapt-interval 0" \
    $ACTC train --compress gact:4 --adapt-interval 0 --train-images $D/img --train-labels $D/lab \
    --test-images $D/img --test-labels $D/lab --progress off
finish

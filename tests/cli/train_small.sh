#!/usr/bin/env bash
# A small, fast version of the accuracy runs in bench/accuracy.sh: ResNet-20
# on the first 4096 Fashion-MNIST training images for two epochs must learn
# (test accuracy on 1000 held-out images well above chance), and the run must
# print the summary and memory table and write the JSON-lines log.
source "$(dirname "$0")/lib.bash"
D=$TMP
out=$($ACTC train --model resnet20 --epochs 2 --batch 64 --limit-train 4096 --limit-test 1000 --progress off \
      --log $D/run.jsonl --save $D/r20.ckpt 2>&1); rc=$?
[ $rc -eq 0 ] && pass "training run" || { fail "training run (exit $rc)"; echo "$out" | tail; finish; exit 1; }
acc=$(grep '^epoch 2/2' <<<"$out" | sed 's/.*test acc \([0-9.]*\)%.*/\1/')
echo "test accuracy after 2 epochs on 4096 images: $acc%"
awk -v a="$acc" 'BEGIN { exit !(a >= 75) }' && pass "accuracy $acc% >= 75%" || fail "accuracy $acc% < 75%"
for pat in "^memory \(peaks" "CONTEXT" "context before backward: stored .* vs .* under none for the same step -> 1.00x smaller" \
    "^context peak during backward: " "process peak RSS"; do
    grep -Eq "$pat" <<<"$out" && pass "summary shows /$pat/" || fail "summary lacks /$pat/"
done
[ "$(grep -c '"event":"epoch"' $D/run.jsonl)" = 2 ] && pass "two epoch records in the log" || fail "epoch records in the log"
ev=$($ACTC eval --checkpoint $D/r20.ckpt --limit-test 1000 2>&1)
grep -q "test accuracy $acc%" <<<"$ev" && pass "eval of the checkpoint reproduces $acc%" || fail "eval: $ev"
finish

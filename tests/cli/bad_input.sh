#!/usr/bin/env bash
# Bad input gets a clear error naming the file or flag, and a non-zero exit.
source "$(dirname "$0")/lib.bash"
D=$TMP
write_idx_images $D/img 64; write_idx_labels $D/lab 64
write_idx_images $D/img_magic 64 00000804
write_idx_labels $D/lab_short 63
head -c 20000 $D/img > $D/img_trunc
{ printf '\x00\x00\x08\x02'; be32 64; be32 784; head -c $((64 * 784)) /dev/urandom; } > $D/img_dims
SMALL="--limit-train 64 --limit-test 64 --batch 32 --progress off"
files() { echo "--train-images $1 --train-labels $2 --test-images $D/img --test-labels $D/lab"; }

expect_fail "unknown command" "unknown command 'trian'" $ACTC trian
expect_fail "unknown model" "unknown model 'resnet99'" $ACTC train --model resnet99 $(files $D/img $D/lab) $SMALL
expect_fail "unknown policy" "unknown compression policy 'zip:3'" $ACTC train --compress zip:3 $(files $D/img $D/lab) $SMALL
# Out-of-range or malformed policy parameters name the spec and list what is accepted.
expect_fail "quant bits > 8" "bad compression policy 'quant:9'.*1 to 8" $ACTC train --compress quant:9 $(files $D/img $D/lab) $SMALL
expect_fail "actnn budget < 1" "bad compression policy 'actnn:0.5'" $ACTC train --compress actnn:0.5 $(files $D/img $D/lab) $SMALL
expect_fail "malformed policy lists specs" "actnn:L3 +mixed precision" $ACTC train --compress quant:2,foo $(files $D/img $D/lab) $SMALL
expect_fail "unknown flag" "unknown flag '--epoch'" $ACTC train --epoch 3
expect_fail "bad number" "bad value 'ten' for --batch" $ACTC train --batch ten
expect_fail "bad budget" "--mem-budget" $ACTC train --mem-budget 12parsecs
expect_fail "missing images" "$D/nope" $ACTC train $(files $D/nope $D/lab) $SMALL
expect_fail "wrong magic" "$D/img_magic.*magic|magic.*$D/img_magic" $ACTC train $(files $D/img_magic $D/lab) $SMALL
expect_fail "truncated images" "$D/img_trunc" $ACTC train $(files $D/img_trunc $D/lab) $SMALL
expect_fail "wrong dims" "$D/img_dims" $ACTC train $(files $D/img_dims $D/lab) $SMALL
expect_fail "label count mismatch" "$D/lab_short|64|63" $ACTC train $(files $D/img $D/lab_short) $SMALL
expect_fail "diverging run (NaN loss)" "loss is (NaN|infinite) at step" $ACTC train --model mlp --lr 1e9 --epochs 3 $(files $D/img $D/lab) $SMALL
expect_fail "missing data dir" "$D/nodir" $ACTC train --data-dir $D/nodir $SMALL

# Checkpoints: truncated, corrupted, from another model.
$ACTC train --model mlp --width 32 $(files $D/img $D/lab) $SMALL --save $D/mlp.ckpt > /dev/null 2>&1 || fail "saving a checkpoint"
size=$(stat -c %s $D/mlp.ckpt)
head -c $((size / 2)) $D/mlp.ckpt > $D/trunc.ckpt
cp $D/mlp.ckpt $D/corrupt.ckpt
printf '\x5a' | dd of=$D/corrupt.ckpt bs=1 seek=$((size / 2)) conv=notrunc status=none
expect_fail "truncated checkpoint" "trunc.ckpt.*truncated|truncated.*trunc.ckpt" $ACTC eval --checkpoint $D/trunc.ckpt --test-images $D/img --test-labels $D/lab
expect_fail "corrupted checkpoint" "checksum" $ACTC eval --checkpoint $D/corrupt.ckpt --test-images $D/img --test-labels $D/lab
expect_fail "checkpoint of another model" "mlp" $ACTC train --model resnet20 --resume $D/mlp.ckpt $(files $D/img $D/lab) $SMALL
expect_fail "missing checkpoint" "$D/none.ckpt" $ACTC eval --checkpoint $D/none.ckpt --test-images $D/img --test-labels $D/lab
[ ! -e $D/mlp.ckpt.tmp ] && pass "no temporary checkpoint left" || fail "temporary checkpoint left behind"
out=$($ACTC eval --checkpoint $D/mlp.ckpt --test-images $D/img --test-labels $D/lab 2>&1) && grep -q "test accuracy" <<<"$out" \
    && pass "eval of a good checkpoint" || fail "eval of a good checkpoint: $out"
finish

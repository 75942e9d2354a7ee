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
expect_fail "a negative --comm-timeout" "comm-timeout -1: seconds, 0 for no limit" $ACTC train --comm-timeout -1 $(files $D/img $D/lab) $SMALL
# A damaged label (one byte 3 -> 77) is refused, not a 78-class model: the
# classes must run from 0 without gaps; Fashion-MNIST's are its 10.
cp $D/lab $D/lab77 && printf '\x4d' | dd of=$D/lab77 bs=1 seek=$((8 + 13)) conv=notrunc 2> /dev/null
expect_fail "a label of 77 among 0-9" "lab77: the labels name classes 0 to 77, but 67 of them never occur \\(the first: 10\\): 1 label" \
    $ACTC train $(files $D/img $D/lab77) $SMALL
mkdir -p $D/fm && cp $D/img $D/fm/train-images-idx3-ubyte && cp $D/img $D/fm/t10k-images-idx3-ubyte
cp $D/lab $D/fm/t10k-labels-idx1-ubyte
{ printf '\x00\x00\x08\x01'; be32 64; for ((i = 0; i < 64; i++)); do printf "\\x$(printf %02x $((i % 11)))"; done; } > $D/fm/train-labels-idx1-ubyte
expect_fail "Fashion-MNIST with a class 10" "train-labels-idx1-ubyte: 5 label\\(s\\) outside Fashion-MNIST's 10 classes \\(the largest 10\\)" \
    $ACTC train --data-dir $D/fm $SMALL
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
# ACTC_CONV is read by the command (the library reads no environment): a bad
# value is a usage error, exit 2, naming the variable and the choices.
out=$(ACTC_CONV=fft $ACTC train --model mlp $(files $D/img $D/lab) $SMALL 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "ACTC_CONV: unknown convolution backend 'fft' (auto, dnnl, im2col)" <<<"$out"; then
    pass "bad ACTC_CONV (exit 2)"
else fail "bad ACTC_CONV (exit $rc)"; echo "$out" | tail -3; fi

# The dense products' backend: --gemm and ACTC_GEMM refuse what they cannot
# run, naming the flag and the choices; actc info reports the choice and its
# reason, and its JSON says the same as its text.
expect_fail "unknown --gemm" "--gemm: unknown dense-product backend 'mkl' \\(auto, dnnl, openblas\\)" \
    $ACTC train --model mlp --gemm mkl $(files $D/img $D/lab) $SMALL
out=$(ACTC_GEMM=blis $ACTC info 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -q "ACTC_GEMM: unknown dense-product backend 'blis'" <<<"$out"; then
    pass "bad ACTC_GEMM (exit 2)"
else fail "bad ACTC_GEMM (exit $rc)"; echo "$out" | tail -3; fi
info=$($ACTC info) && grep -q "^dense products: \(openblas\|dnnl\) (setting auto: " <<<"$info" \
    && grep -q "^OpenBLAS: .* kernels" <<<"$info" && pass "actc info" || fail "actc info: $info"
backend=$(sed -n 's/^dense products: \([a-z]*\) .*/\1/p' <<<"$info")
json=$($ACTC info --json)
grep -q "\"gemm\":{\"setting\":\"auto\",\"backend\":\"$backend\"" <<<"$json" && python3 -c 'import json,sys; json.loads(sys.argv[1])' "$json" \
    && pass "actc info --json agrees ($backend)" || fail "actc info --json: $json"
# A training log starts with the same machine record.
$ACTC train --model mlp --width 32 $(files $D/img $D/lab) $SMALL --log $D/start.jsonl > $D/start.out 2>&1
start=$(head -1 $D/start.jsonl 2>/dev/null)
grep -q '^{"event":"start",' <<<"$start" && grep -q "\"backend\":\"$backend\"" <<<"$start" \
    && python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["cpu"]["isa"] and d["openblas"]["core"]' "$start" \
    && grep -q "^cpu: .*OpenBLAS .* kernels.*dense products on $backend" $D/start.out \
    && pass "the log's start record and the run header name the machine" || fail "start record: $start"
if $ACTC info --gemm dnnl > /dev/null 2>&1; then # built with oneDNN
    out=$(OPENBLAS_CORETYPE=Prescott $ACTC info --gemm openblas 2>&1)
    if grep -q "avx2\|avx512" <<<"$(sed -n 's/^extensions:.*level \([a-z0-9]*\).*/\1/p' <<<"$out")"; then
        grep -q "^warning: OpenBLAS runs its Prescott kernels" <<<"$out" && pass "generic OpenBLAS forced: a warning" \
            || fail "generic OpenBLAS forced, no warning: $out"
        OPENBLAS_CORETYPE=Prescott $ACTC info | grep -q "^dense products: dnnl (setting auto: OpenBLAS loaded its Prescott" \
            && pass "generic OpenBLAS: auto runs oneDNN" || fail "generic OpenBLAS: auto did not pick oneDNN"
    fi
fi

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

# Reliability (issue 22): batch sizes near INT_MAX are one batch, not an
# overflow; the same strict flag checks in every command; a schedule that
# claims to decay must not raise the rate; an unwritable --save is found
# before the first epoch.
good=$($ACTC eval --checkpoint $D/mlp.ckpt --test-images $D/img --test-labels $D/lab 2>&1 | grep -o "test accuracy [0-9.]*%")
for b in 2147483647 2147483640; do
    out=$($ACTC eval --checkpoint $D/mlp.ckpt --test-images $D/img --test-labels $D/lab --batch $b 2>&1) \
        && grep -q "$good (loss [0-9.]*) on 64 images" <<<"$out" && pass "eval --batch $b: one batch, $good" \
        || fail "eval --batch $b: $out"
done
out=$($ACTC train --model mlp --width 32 $(files $D/img $D/lab) $SMALL --eval-batch 2147483647 2>&1) \
    && grep -q "test acc" <<<"$out" && pass "train --eval-batch 2147483647" || fail "train --eval-batch 2147483647: $out"
expect_fail "eval --threads -1" "threads" $ACTC eval --checkpoint $D/mlp.ckpt --threads -1
expect_fail "eval --limit-test -1" "limit-test" $ACTC eval --checkpoint $D/mlp.ckpt --limit-test -1
expect_fail "generate --threads -1" "threads" $ACTC generate --checkpoint $D/mlp.ckpt --threads -1
for v in "+4" " 4" "4 " "0x4" "4e0"; do
    expect_fail "--batch '$v'" "bad value '[^']*' for --batch" $ACTC train --model mlp --batch "$v" $(files $D/img $D/lab) --limit-test 64 --max-steps 1 --progress off
done
for v in "0x1p-3" "inf" "nan" " 0.1"; do
    expect_fail "--lr '$v'" "bad value '[^']*' for --lr" $ACTC train --model mlp --lr "$v" $(files $D/img $D/lab) $SMALL --max-steps 1
done
for spec in "quant: 4" $'quant:\t4' "quant:+4" "actnn:0x4" "gact: 3" "division:b=+8"; do
    expect_fail "policy spec '$spec'" "bad compression policy" $ACTC train --compress "$spec" $(files $D/img $D/lab) $SMALL
done
expect_fail "--min-lr above --lr" "floor .*must be in \[0, 0.01\]" $ACTC train --lr 0.01 --min-lr 0.5 $(files $D/img $D/lab) $SMALL
expect_fail "step schedule that grows" "0 < GAMMA <= 1" $ACTC train --schedule step:10:2 $(files $D/img $D/lab) $SMALL
out=$($ACTC train --model mlp $(files $D/img $D/lab) $SMALL --save $D/nodir/x.ckpt 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "nodir/x.ckpt.tmp" <<<"$out" && ! grep -q "epoch 1/" <<<"$out"; then
    pass "unwritable --save refused before training"
else fail "unwritable --save (exit $rc)"; echo "$out" | tail -3; fi
finish

#!/usr/bin/env bash
# A checkpoint write that fails part-way (the file-size limit of `ulimit -f`
# stands in for a full disk) leaves the previous checkpoint intact and
# loadable, the run ends with a message naming the file, and resuming from
# the previous checkpoint then continues the run as if nothing had happened.
source "$(dirname "$0")/lib.bash"
D=$TMP
write_idx_images $D/img 256; write_idx_labels $D/lab 256
RUN="--model mlp --width 64 --optim adamw --batch 32 --epochs 3 --seed 4 --progress off --log-every 1
     --train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab --limit-test 64"
$ACTC train $RUN --log $D/full.jsonl > /dev/null 2>&1 || fail "uninterrupted run"
$ACTC train $RUN --epochs 3 --max-steps 8 --save $D/r.ckpt > /dev/null 2>&1 || fail "first part"
cp $D/r.ckpt $D/before.ckpt
size=$(stat -c %s $D/r.ckpt)
# The next checkpoint fails half-way: a limit of half its size (in 512-byte blocks).
out=$( (ulimit -f $((size / 1024)); $ACTC train --resume $D/r.ckpt --max-steps 12 --save $D/r.ckpt \
        --train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab) 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "cannot write checkpoint $D/r.ckpt: File too large" <<<"$out"; then
    pass "a failed write ends the run with a message naming the file (exit $rc)"
else fail "failed write (exit $rc)"; echo "$out" | tail -3; fi
cmp -s $D/r.ckpt $D/before.ckpt && pass "the previous checkpoint is intact" || fail "the checkpoint changed"
[ ! -e $D/r.ckpt.tmp ] && pass "no partial file left" || fail "partial file $D/r.ckpt.tmp left"
$ACTC train --resume $D/r.ckpt --save $D/r.ckpt --log $D/part.jsonl --log-every 1 \
    --train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab > /dev/null 2>&1 \
    || fail "resume from the previous checkpoint"
grep '"event":"step"' $D/full.jsonl | sed 's/,"samples_per_s".*//' | tail -n +9 > $D/a
grep '"event":"step"' $D/part.jsonl | sed 's/,"samples_per_s".*//' > $D/b
[ -s $D/a ] && cmp -s $D/a $D/b && pass "resumed from the previous checkpoint: $(wc -l < $D/a) steps as the uninterrupted run" \
    || { fail "resume after the failed write differs"; diff $D/a $D/b | head -4; }
finish

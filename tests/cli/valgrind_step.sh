#!/usr/bin/env bash
# A full training step (forward, backward, optimizer, evaluation, checkpoint)
# is clean under valgrind: no invalid access, no definite or indirect leak.
# The convolutions run on the im2col path here: oneDNN's JIT-generated code
# makes valgrind slow and noisy; the oneDNN path is checked by the ASan build.
source "$(dirname "$0")/lib.bash"
if ! command -v valgrind > /dev/null; then echo "skip: valgrind not installed"; finish; exit 0; fi
D=$TMP
write_idx_images $D/img 16; write_idx_labels $D/lab 16
out=$(ACTC_CONV=im2col $VALGRIND \
      $ACTC train --model resnet20 --train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab \
      --batch 8 --epochs 1 --progress off --save $D/s.ckpt 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "test acc" <<<"$out"; then pass "valgrind clean over two training steps, evaluation and a checkpoint"
else fail "valgrind (exit $rc)"; echo "$out" | tail -30; fi
finish

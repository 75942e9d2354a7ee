#!/usr/bin/env bash
# A full training step (forward, backward, optimizer, evaluation, checkpoint)
# is clean under valgrind: no invalid access, no definite or indirect leak.
# The convolutions run on the im2col path here (and the dense products on
# OpenBLAS: $VALGRIND, lib.bash): oneDNN's JIT-generated code makes valgrind
# slow and noisy; the oneDNN paths are checked by the ASan build.
source "$(dirname "$0")/lib.bash"
if ! command -v valgrind > /dev/null; then echo "skip: valgrind not installed"; finish; exit 0; fi
D=$TMP
write_idx_images $D/img 16; write_idx_labels $D/lab 16
out=$(ACTC_CONV=im2col $VALGRIND \
      $ACTC train --model resnet20 --train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab \
      --batch 8 --epochs 1 --progress off --save $D/s.ckpt 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "test acc" <<<"$out"; then pass "valgrind clean over two training steps, evaluation and a checkpoint"
else fail "valgrind (exit $rc)"; echo "$out" | tail -30; fi

# DIVISION's codec through the store: 2-D maps (convolution and batch-norm
# inputs) and 1-D ones (the classifier's input).
out=$(ACTC_CONV=im2col $VALGRIND \
      $ACTC train --model resnet20 --compress division --train-images $D/img --train-labels $D/lab \
      --test-images $D/img --test-labels $D/lab --batch 8 --epochs 1 --progress off 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "test acc" <<<"$out"; then pass "valgrind clean over two training steps under division"
else fail "valgrind, division (exit $rc)"; echo "$out" | tail -30; fi

# GACT: the controller's sensitivity passes and re-allocation at every step
# (the MLP: ResNet-20's 43 extra passes per step would take minutes here).
out=$($VALGRIND $ACTC train --model mlp --compress gact:4 --adapt-interval 1 --estimate-samples 4 --train-images $D/img \
      --train-labels $D/lab --test-images $D/img --test-labels $D/lab --batch 8 --epochs 1 --progress off 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "test acc" <<<"$out" && [ "$(grep -c "re-allocated" <<<"$out")" -eq 2 ]; then
    pass "valgrind clean over two training steps under gact:4 (measuring at each)"
else fail "valgrind, gact:4 (exit $rc)"; echo "$out" | tail -30; fi

# A language model: two steps, validation, checkpoint, then generation from it.
for ((i = 0; i < 40; i++)); do echo "In the beginning God created the heaven and the earth."; done > $D/text.txt
LM="--layers 1 --width 16 --heads 2 --context 16 --batch 2"
out=$($VALGRIND $ACTC train --model llama $LM --data text:$D/text.txt --epochs 1 --epoch-steps 2 --eval-tokens 64 \
      --progress off --save $D/lm.ckpt 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q "bits per byte" <<<"$out"; then pass "valgrind clean over a language model's steps, validation and checkpoint"
else fail "valgrind, language model (exit $rc)"; echo "$out" | tail -30; fi
out=$($VALGRIND $ACTC generate --checkpoint $D/lm.ckpt --prompt $'In \xff' --tokens 20 --top-k 5 2>&1); rc=$?
[ $rc -eq 0 ] && pass "valgrind clean over generation" || { fail "valgrind, generate (exit $rc)"; echo "$out" | tail -30; }
# ... and a GPT under division, whose [B, T, D] maps pool along the tokens (strided).
out=$($VALGRIND $ACTC train --model gpt $LM --compress division --data text:$D/text.txt --epochs 1 --epoch-steps 2 \
      --eval-tokens 64 --progress off 2>&1) && grep -q "bits per byte" <<<"$out" \
    && pass "valgrind clean over a language model's steps under division" \
    || { fail "valgrind, language model under division"; echo "$out" | tail -30; }
# ... and under gact:CB2: recomputed segments with memory-efficient attention.
out=$($VALGRIND $ACTC train --model gpt $LM --compress gact:CB2 --data text:$D/text.txt --epochs 1 --epoch-steps 2 \
      --eval-tokens 64 --progress off 2>&1) && grep -q "bits per byte" <<<"$out" \
    && grep -q "recomputed segments" <<<"$out" \
    && pass "valgrind clean over a language model's steps under gact:CB2 (segments recomputed)" \
    || { fail "valgrind, language model under gact:CB2"; echo "$out" | tail -30; }
finish

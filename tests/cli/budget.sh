#!/usr/bin/env bash
# A budget too small for one step: clear message, non-zero exit, no crash, and
# no leak under valgrind.
source "$(dirname "$0")/lib.bash"
D=$TMP
write_idx_images $D/img 64; write_idx_labels $D/lab 64
FILES="--train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab --batch 32 --progress off"
expect_fail "train over budget" "memory budget exceeded" $ACTC train --model resnet20 --mem-budget 2MiB $FILES
expect_fail "train over budget in the forward pass" "memory budget exceeded.*(CONTEXT|ACT|SCRATCH)" $ACTC train --model resnet20 --mem-budget 5MiB $FILES
expect_fail "maxbatch with no room" "not even batch" $ACTC maxbatch --model resnet20 --budget 1MiB
if command -v valgrind > /dev/null; then
    VG=$VALGRIND
    expect_fail "valgrind: train over budget" "memory budget exceeded" $VG $ACTC train --model resnet20 --mem-budget 2MiB $FILES
    out=$($VG $ACTC train --model resnet20 --mem-budget 2MiB $FILES 2>&1); rc=$?
    [ $rc -eq 1 ] && pass "valgrind clean (exit $rc)" || { fail "valgrind reported errors or leaks (exit $rc)"; echo "$out" | tail -30; }
    # A budget that breaks later: the first step's forward or backward runs
    # out, so the store's and the tape's error paths are checked for leaks.
    for b in 12MiB 25MiB; do
        out=$($VG $ACTC train --model resnet20 --mem-budget $b $FILES 2>&1); rc=$?
        if [ $rc -eq 1 ] && grep -q "memory budget exceeded" <<<"$out"; then pass "valgrind clean at $b (exit 1)"
        else fail "valgrind at $b (exit $rc)"; echo "$out" | tail -20; fi
    done
    out=$($VG $ACTC maxbatch --model mlp --width 64 --budget 6MiB --start 512 --limit 4096 2>&1); rc=$?
    [ $rc -eq 0 ] || [ $rc -eq 1 ] && pass "valgrind: maxbatch (exit $rc)" || { fail "valgrind maxbatch (exit $rc)"; echo "$out" | tail -30; }
else
    echo "skip: valgrind not installed"
fi
finish

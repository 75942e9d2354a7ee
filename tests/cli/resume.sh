#!/usr/bin/env bash
# --resume continues a run so that, with the same seed, the loss after resuming
# equals the loss of an uninterrupted run at the same step (bit for bit in the
# log).  ResNet-20 covers batch-norm running statistics and SGD momentum, the
# MLP with dropout covers AdamW and the dropout random stream; the adaptive
# policies cover the policy and controller state of the checkpoint.
source "$(dirname "$0")/lib.bash"
D=$TMP
write_idx_images $D/img 256; write_idx_labels $D/lab 256
DATA="--train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab --limit-test 64 --progress off --log-every 1"
RECIPE="--batch 32 --epochs 2 --seed 5"

# The resumed parts get only the data flags and --resume: the recipe (model,
# optimizer and its settings, batch, epochs, seed, policy) comes from the
# checkpoint.  With NOTE set, the first part's checkpoint is rewritten as
# actc 0.9.0 wrote it, the run's recipe as the flags NOTE in its note, and the
# second part must find it there (its header names it).
check() {
    local name=$1; shift
    rm -f $D/*.jsonl $D/r.ckpt
    $ACTC train $DATA $RECIPE "$@" --log $D/full.jsonl > /dev/null 2>&1 || { fail "$name: uninterrupted run"; return; }
    # Stop in the middle of the first epoch, then in the middle of the second.
    $ACTC train $DATA $RECIPE "$@" --max-steps 5 --save $D/r.ckpt > /dev/null 2>&1 || { fail "$name: first part"; return; }
    if [ -n "${NOTE:-}" ]; then
        $OLD_CHECKPOINT $D/r.ckpt $D/r.ckpt "$NOTE" || { fail "$name: rewriting the checkpoint"; return; }
    fi
    $ACTC train $DATA --resume $D/r.ckpt --max-steps 11 --save $D/r.ckpt --log $D/part.jsonl > $D/second.out 2>&1 || { fail "$name: second part"; return; }
    if [ -n "${HEADER:-}" ] && ! grep -Eq "$HEADER" $D/second.out; then fail "$name: the resumed run's header: $(head -1 $D/second.out)"; return; fi
    $ACTC train $DATA --resume $D/r.ckpt --save $D/r.ckpt --log $D/part.jsonl > /dev/null 2>&1 || { fail "$name: third part"; return; }
    grep '"event":"step"' $D/full.jsonl | sed 's/,"samples_per_s".*//' | tail -n +6 > $D/a
    grep '"event":"step"' $D/part.jsonl | sed 's/,"samples_per_s".*//' > $D/b
    if [ -s $D/a ] && cmp -s $D/a $D/b; then pass "$name: $(wc -l < $D/a) resumed steps match"; else fail "$name: losses differ"; diff $D/a $D/b | head -6; fi
}
check resnet20 --model resnet20
check "mlp+dropout+adamw" --model mlp --width 64 --dropout 0.2 --optim adamw
check "resnet20 bf16" --model resnet20 --compress bf16
check "resnet20 division" --model resnet20 --compress division
# Adaptive policies: ActNN's per-layer bits and gradient averages, GACT's
# measured sensitivities and the controller's schedule travel in the file.
check "resnet20 actnn:L3" --model resnet20 --compress actnn:L3
check "mlp gact:4" --model mlp --width 64 --compress gact:4 --adapt-interval 4 --estimate-samples 4
# A dense-product backend forced at the start is kept by --resume (the
# products' last bits depend on it); auto would resolve again.
if $ACTC info --gemm dnnl > /dev/null 2>&1; then
    check "mlp --gemm dnnl" --model mlp --width 64 --gemm dnnl
    out=$($ACTC train $DATA --resume $D/r.ckpt --epochs 3 2>&1)
    grep -q "^cpu: .*dense products on dnnl: forced" <<<"$out" && pass "--resume keeps --gemm dnnl" \
        || fail "--resume lost --gemm dnnl: $(grep '^cpu:' <<<"$out")"
fi
# A checkpoint of actc 0.9.0, its recipe in the note (batch, epochs and the
# deterministic mode there, not in the record), resumes bit for bit too.
NOTE="--epochs=2 --batch=32 --augment=0 --limit-train=0 --deterministic" \
    HEADER="2 epoch\(s\) of 8 steps at batch 32, [0-9]+ thread\(s\), deterministic$" \
    check "mlp, the recipe in the note of actc 0.9.0" --model mlp --width 64 --deterministic
# The finished run cannot be resumed without asking for more epochs.
expect_fail "resume a finished run" "already completed 2 of its 2 epoch.*--epochs" $ACTC train $DATA --resume $D/r.ckpt
out=$($ACTC train $DATA --resume $D/r.ckpt --epochs 3 2>&1) && grep -q "epoch 3/3" <<<"$out" \
    && pass "resume with more epochs trains on" || fail "resume with --epochs 3: $out"
# A file of actc 0.1 holds no policy state: resuming a policy that learns
# says that its state starts afresh.
v3=$(dirname "$0")/../data/mlp_v3.ckpt
out=$($ACTC train $DATA --resume $v3 --compress actnn:L3 --max-steps 1 2>&1) \
    && grep -q "note: .*mlp_v3.ckpt is a version 3 checkpoint, which holds no policy state: actnn:L3 learns its state afresh" <<<"$out" \
    && pass "a version 3 file: the note that the policy state starts fresh" || fail "version 3 resume note: $out"
finish

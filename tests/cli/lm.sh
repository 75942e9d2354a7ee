#!/usr/bin/env bash
# Language models end to end on a small corpus: train (with the memory table
# and validation bits per byte), checkpoint, resume bit for bit, eval,
# generate (any prompt bytes), maxbatch, and every bad input the issue names.
source "$(dirname "$0")/lib.bash"
D=$TMP
# A corpus with structure a tiny model picks up in a few steps: lines of a
# short repeated verse, so the loss must fall well under the unigram bar.
for ((i = 0; i < 400; i++)); do echo "In the beginning God created the heaven and the earth. $((i % 7))"; done > $D/corpus.txt
mkdir -p $D/dir/b && head -c 12000 $D/corpus.txt > $D/dir/a.txt && tail -c 12000 $D/corpus.txt > $D/dir/b/c.txt
: > $D/empty.txt
for ((i = 0; i < 30; i++)); do echo abcd; done > $D/short.txt # validation part: 15 bytes
TINY="--model gpt --layers 2 --width 32 --heads 2 --context 32 --batch 8 --epoch-steps 60 --eval-tokens 2048 --lr 1e-2 --warmup 5 --progress off"

# Train: the run reports validation bits per byte, the baseline and the memory table.
out=$($ACTC train $TINY --data text:$D/corpus.txt --epochs 2 --save $D/g.ckpt --log $D/g.jsonl 2>&1); rc=$?
if [ $rc -ne 0 ]; then fail "train gpt on text (exit $rc)"; echo "$out" | tail -5; else pass "train gpt on text"; fi
grep -q "unigram baseline" <<<"$out" && grep -q "bits per byte" <<<"$out" && grep -q "context before backward" <<<"$out" \
    && pass "train prints the baseline, validation bpb and the memory table" || { fail "train output"; echo "$out"; }
bpb=$(grep -o '= [0-9.]* bits per byte' <<<"$out" | tail -1 | awk '{print $2}')
uni=$(grep -o 'unigram baseline [0-9.]*' <<<"$out" | awk '{print $3}')
awk -v b="$bpb" -v u="$uni" 'BEGIN { exit !(b > 0 && b < 0.7 * u) }' \
    && pass "validation bpb $bpb well under the unigram $uni" || fail "validation bpb $bpb not under 0.7 x unigram $uni"
grep -q '"val_bpb"' $D/g.jsonl && pass "log has val_bpb" || fail "log lacks val_bpb"

# Stopped after epoch 1 and resumed, the run ends with the uninterrupted
# run's validation loss exactly (same schedule: --epochs 2 both times).
$ACTC train $TINY --data text:$D/corpus.txt --epochs 2 --max-steps 60 --save $D/r.ckpt >/dev/null 2>&1
# The same checkpoint as actc 0.9.0 wrote it: the recipe (epochs, batch,
# windows, corpus) in the note, not in the record.
$OLD_CHECKPOINT $D/r.ckpt $D/old.ckpt "--epochs=2 --batch=8 --seq=0 --epoch-steps=60 --eval-tokens=2048 --data=text:$D/corpus.txt" \
    || fail "rewriting the checkpoint as actc 0.9.0 wrote it"
# The checkpoint keeps the corpus: no --data needed to resume or evaluate.
out2=$($ACTC train --resume $D/r.ckpt --epochs 2 --progress off --save $D/r.ckpt 2>&1)
v1=$(grep -o 'validation loss [0-9.]*' <<<"$out" | tail -1); v2=$(grep -o 'validation loss [0-9.]*' <<<"$out2" | tail -1)
[ -n "$v1" ] && [ "$v1" = "$v2" ] && pass "resume reproduces the run ($v1)" || fail "resume: '$v1' vs '$v2'"
out3=$($ACTC train --resume $D/old.ckpt --progress off 2>&1)
v3=$(grep -o 'validation loss [0-9.]*' <<<"$out3" | tail -1)
[ -n "$v1" ] && [ "$v1" = "$v3" ] && grep -q "^text $D/corpus.txt:" <<<"$out3" \
    && pass "a checkpoint of actc 0.9.0, the recipe in its note, resumes the run ($v3)" || fail "resume from the note: '$v1' vs '$v3'"

# Eval and generate from the checkpoint; llama trains too; a directory is a corpus.
ev=$($ACTC eval --checkpoint $D/g.ckpt 2>&1)
grep -q "bits per byte" <<<"$ev" && grep -q "$D/corpus.txt (windows of 32)" <<<"$ev" && pass "eval reports bpb on the training corpus" \
    || { fail "eval"; echo "$ev"; }
# A model trained on shorter windows than its context is evaluated on them.
$ACTC train $TINY --seq 16 --data text:$D/corpus.txt --epochs 1 --epoch-steps 3 --save $D/s16.ckpt >/dev/null 2>&1
$ACTC eval --checkpoint $D/s16.ckpt | grep -q "(windows of 16)" && pass "eval uses the training window" || fail "eval window"
# So is one whose window and corpus are flags of its note (actc 0.9.0).
$OLD_CHECKPOINT $D/s16.ckpt $D/old16.ckpt "--epochs=1 --batch=8 --seq=16 --epoch-steps=3 --eval-tokens=2048 --data=text:$D/corpus.txt"
$ACTC eval --checkpoint $D/old16.ckpt | grep -q "$D/corpus.txt (windows of 16)" && pass "eval reads the window and corpus of a note" \
    || fail "eval of a checkpoint of actc 0.9.0"
$ACTC generate --checkpoint $D/old16.ckpt --prompt "$(head -c 100 $D/corpus.txt)" --tokens 3 >/dev/null 2>&1 \
    && pass "generate from a checkpoint of actc 0.9.0" || fail "generate, recipe in the note"
$ACTC generate --checkpoint $D/s16.ckpt --prompt "$(head -c 100 $D/corpus.txt)" --tokens 3 >/dev/null 2>&1 \
    && pass "generate with a window shorter than the context" || fail "generate, --seq 16"
gen=$($ACTC generate --checkpoint $D/g.ckpt --prompt "In the" --tokens 40 --temperature 0 2>&1); rc=$?
[ $rc -eq 0 ] && [ ${#gen} -ge 46 ] && pass "generate: $(head -1 <<<"$gen")" || { fail "generate (exit $rc)"; echo "$gen"; }
grep -Eq "beginning|created|heaven|earth" <<<"${gen#In the}" && pass "greedy generation writes the corpus's words" \
    || fail "generation has none of the corpus's words: $gen"
$ACTC generate --checkpoint $D/g.ckpt --prompt $'\xff\x01\x80 odd bytes' --tokens 5 --top-k 3 --temperature 1.5 >/dev/null 2>&1 \
    && pass "any prompt bytes are valid" || fail "prompt with high bytes"
$ACTC generate --checkpoint $D/g.ckpt --prompt "$(head -c 100 $D/corpus.txt)" --tokens 3 >/dev/null 2>&1 \
    && pass "a prompt longer than the context slides" || fail "long prompt"
$ACTC train ${TINY/--model gpt/--model llama} --data text:$D/dir --epochs 1 >/dev/null 2>&1 \
    && pass "llama trains on a directory corpus" || fail "llama on a directory"
$ACTC maxbatch --budget 64MiB --model gpt --layers 2 --width 32 --heads 2 --context 32 --limit 64 | grep -q "largest batch: 64" \
    && pass "maxbatch runs a language model" || fail "maxbatch for gpt"

# Bad input: a clear message and a non-zero exit.
expect_fail "missing corpus" "$D/nope.txt" $ACTC train $TINY --data text:$D/nope.txt
expect_fail "empty corpus" "$D/empty.txt.*empty|empty.*$D/empty.txt" $ACTC train $TINY --data text:$D/empty.txt
# A named FIFO with no writer is not waited on (open() would block forever):
# it reads as empty and says why; a device is refused; a pipe with a writer
# (a shell's <(...)) is read.
mkfifo $D/fifo.txt
expect_fail "a FIFO with no writer: not waited on" "fifo.txt is a FIFO that gave nothing: no writer" \
    timeout 20 $ACTC train $TINY --data text:$D/fifo.txt
expect_fail "a device as the corpus" "/dev/zero: not a regular file \\(a device\\)" timeout 20 $ACTC train $TINY --data text:/dev/zero
expect_fail "corpus shorter than a window" "too short for windows of 32" $ACTC train $TINY --data text:$D/short.txt
expect_fail "window over the context" "--seq 64 is over the context.*32" $ACTC train $TINY --seq 64 --data text:$D/corpus.txt
expect_fail "image model on text" "classifies images" $ACTC train --model resnet20 --data text:$D/corpus.txt
expect_fail "language model on images" "is a language model" $ACTC train --model gpt-mini --data fmnist
expect_fail "heads do not divide the width" "not a multiple of the 3 heads" $ACTC train $TINY --heads 3 --data text:$D/corpus.txt
expect_fail "memory budget" "memory budget exceeded: [A-Z]+ allocation" $ACTC train $TINY --mem-budget 600KiB --data text:$D/corpus.txt
# A corpus path of 1,100 bytes with a space in it is kept by the checkpoint
# (its recipe is a field of the record, no longer flags in the note): the
# resumed run and eval read that corpus, not the default one (they print
# the first 255 bytes of its path).
long=$D; for c in d e f g h; do long=$long/$(printf "$c%.0s" {1..220}); done; mkdir -p "$long/a b" && cp $D/corpus.txt "$long/a b/"
$ACTC train $TINY --data "text:$long/a b/corpus.txt" --epochs 1 --epoch-steps 3 --save $D/sp.ckpt >/dev/null 2>&1
out=$($ACTC train --resume $D/sp.ckpt --epochs 2 --progress off 2>&1)
grep -qF "text ${long:0:200}" <<<"$out" && grep -q ": $(stat -c %s $D/corpus.txt) bytes, " <<<"$out" && grep -q "epoch 2/2" <<<"$out" \
    && pass "a long --data path with a space survives resume" || { fail "--data with a space, resumed"; echo "$out" | tail -3; }
$ACTC eval --checkpoint $D/sp.ckpt | grep -qF "bytes of ${long:0:200}" && pass "eval reads that path back" \
    || fail "eval of a --data path with a space"
expect_fail "recipe too long to save" "--save: --data takes [0-9]+ bytes, over the 4095 a checkpoint keeps" \
    $ACTC train $TINY --data text:$long/$(printf "x%.0s" {1..4100}) --save $D/x.ckpt
expect_fail "vocabulary under 256" "at least 256" $ACTC train $TINY --vocab 100 --data text:$D/corpus.txt
write_idx_images $D/img 64; write_idx_labels $D/lab 64
$ACTC train --model mlp --train-images $D/img --train-labels $D/lab --test-images $D/img --test-labels $D/lab \
    --batch 32 --progress off --save $D/mlp.ckpt >/dev/null 2>&1
expect_fail "generate from an image model" "image classifier" $ACTC generate --checkpoint $D/mlp.ckpt
expect_fail "resume with another model" "holds model gpt" $ACTC train --resume $D/g.ckpt --model llama --epochs 3 --data text:$D/corpus.txt
# CompAct through the command: --init starts from g.ckpt's weights (its
# first validation is far below a fresh model's), inspect shows what
# compact removed per category, and a model with nothing to project fails.
out=$($ACTC train --init $D/g.ckpt --compress compact:r=0.25 --data text:$D/corpus.txt --epochs 1 --batch 8 \
      --epoch-steps 5 --eval-tokens 2048 --progress off 2>&1); rc=$?
ibpb=$(echo "$out" | sed -n 's/.*= \([0-9.]*\) bits per byte.*/\1/p' | tail -1)
[ $rc -eq 0 ] && echo "$out" | grep -q "low-rank" && awk -v b="$ibpb" -v u="$uni" 'BEGIN { exit !(b < 0.7 * u) }' \
    && pass "--init + compact:r=0.25: $ibpb bpb after 5 steps from the checkpoint, low-rank gradients" \
    || { fail "--init with compact (exit $rc, bpb '$ibpb')"; echo "$out" | tail -5; }
out=$($ACTC inspect --model gpt --layers 2 --width 32 --heads 2 --context 32 --batch 4 --data text:$D/corpus.txt \
      --compress compact:r=0.25+gact:4 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "^  CONTEXT " && echo "$out" | grep -q "^  GRAD " \
    && echo "$out" | grep -q "^  OPTIM " && echo "$out" | grep -q "against gact:4" \
    && pass "inspect compact:r=0.25+gact:4: CONTEXT, GRAD and OPTIM removed" || { fail "inspect compact (exit $rc)"; echo "$out" | tail -8; }
expect_fail "--init with --resume" "exclude each other" $ACTC train --init $D/g.ckpt --resume $D/g.ckpt
expect_fail "compact matching no layer" "projected no linear layer" \
    $ACTC train $TINY --data text:$D/corpus.txt --compress compact:layers=nothing
expect_fail "compact with r out of range" "r= is a fraction" $ACTC train $TINY --data text:$D/corpus.txt --compress compact:r=1.5
# AGoQ through the command: llama trains with 4-bit recomputed activations and
# 8-bit gradients over two micro-batches; inspect prints one block per
# component next to the paper's Table 1; bad formats, blocks, gradient
# widths and micro-batch counts are refused.
LLAMA=${TINY/--model gpt/--model llama}
out=$($ACTC train $LLAMA --data text:$D/corpus.txt --epochs 1 --compress agoq --grad-bits 8 --accum 2 2>&1); rc=$?
abpb=$(echo "$out" | sed -n 's/.*= \([0-9.]*\) bits per byte.*/\1/p' | tail -1)
[ $rc -eq 0 ] && echo "$out" | grep -q "encoded" && awk -v b="$abpb" -v u="$uni" 'BEGIN { exit !(b < u) }' \
    && pass "agoq + --grad-bits 8 + --accum 2: $abpb bpb, gradients encoded" \
    || { fail "agoq with 8-bit gradients (exit $rc, bpb '$abpb')"; echo "$out" | tail -5; }
out=$($ACTC inspect --model llama --layers 2 --width 32 --heads 2 --context 32 --batch 4 --data text:$D/corpus.txt \
      --compress agoq:fmt=nf4 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "^  QKV input " && echo "$out" | grep -q "^  activation function " \
    && echo "$out" | grep -q "28.00U *7.75U" \
    && pass "inspect agoq: one block per component with the paper's columns" || { fail "inspect agoq (exit $rc)"; echo "$out" | tail -12; }
expect_fail "agoq with an unknown format" "fp4-bnb .*fp4-e2m1 .*nf4" $ACTC train $LLAMA --data text:$D/corpus.txt --compress agoq:fmt=fp4
expect_fail "agoq with a bad blocksize" "power of two" $ACTC train $LLAMA --data text:$D/corpus.txt --compress agoq:block=100
expect_fail "--grad-bits 16" "--grad-bits 16" $ACTC train $LLAMA --data text:$D/corpus.txt --grad-bits 16
expect_fail "--accum not dividing the batch" "does not divide --batch 8" $ACTC train $LLAMA --data text:$D/corpus.txt --accum 3
expect_fail "eval a language model on images" "language model" $ACTC eval --checkpoint $D/g.ckpt --data fmnist
expect_fail "generate without a checkpoint" "checkpoint" $ACTC generate --prompt hi
expect_fail "bad temperature" "temperature" $ACTC generate --checkpoint $D/g.ckpt --temperature -1
expect_fail "top-k over the vocabulary" "top-k 300" $ACTC generate --checkpoint $D/g.ckpt --top-k 300
finish

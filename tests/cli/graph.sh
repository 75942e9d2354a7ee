#!/usr/bin/env bash
# Graph models from the command line, on a small planted-partition graph:
# actc graph sbm/info, train (progress, memory table, log, save), resume,
# eval, maxbatch by nodes and by depth, and bad input (malformed graph
# files, wrong data for a model, flags graphs do not take).
source "$(dirname "$0")/lib.bash"
D=$TMP
G=$D/sbm.graph
$ACTC graph sbm --nodes 3000 --features 16 --classes 4 --degree 8 --train 300 --val 300 --seed 3 --out $G > $D/sbm.out 2>&1 \
    && pass "graph sbm" || { fail "graph sbm"; cat $D/sbm.out; }
out=$($ACTC graph info $G 2>&1)
grep -q "3000" <<<"$out" && grep -q "300" <<<"$out" && pass "graph info" || { fail "graph info"; echo "$out"; }

# Train: every model learns the planted partition (chance 25%).
for m in gcn gat gcnii; do
    extra=""; [ $m = gcnii ] && extra="--layers 4"
    out=$($ACTC train --model $m --data graph:$G --compress gact:2 --epochs 2 --epoch-steps 20 $extra --progress off \
          --log $D/$m.jsonl 2>&1); rc=$?
    acc=$(grep -oE "^epoch 2/2 .*test acc [0-9.]+" <<<"$out" | grep -oE "[0-9.]+$")
    if [ $rc -eq 0 ] && [ -n "$acc" ] && awk "BEGIN{exit !($acc > 80)}"; then pass "train $m (test acc $acc%)"
    else fail "train $m (rc $rc, acc '$acc')"; echo "$out" | tail -5; fi
    grep -q '"event":"epoch".*"val_acc".*"test_acc"' $D/$m.jsonl && pass "$m log has validation and test accuracy" \
        || fail "$m log"
done
grep -q "CONTEXT" <<<"$out" && grep -q "context before backward" <<<"$out" && pass "memory table" || fail "memory table"

# Save after 1 epoch, resume for the 2nd: the same final line as 2 epochs straight.
$ACTC train --model gcn --data graph:$G --epochs 2 --epoch-steps 10 --progress off > $D/straight.out 2>&1
$ACTC train --model gcn --data graph:$G --epochs 1 --epoch-steps 10 --progress off --save $D/g.ckpt > /dev/null 2>&1
$ACTC train --resume $D/g.ckpt --epochs 2 --progress off > $D/resumed.out 2>&1
a=$(grep "^epoch 2/2" $D/straight.out | sed 's/, [0-9.]* steps\/s.*//'); b=$(grep "^epoch 2/2" $D/resumed.out | sed 's/, [0-9.]* steps\/s.*//')
[ -n "$a" ] && [ "$a" = "$b" ] && pass "resume matches a straight run" || { fail "resume"; echo "$a"; echo "$b"; }
out=$($ACTC eval --checkpoint $D/g.ckpt 2>&1)
grep -qE "validation accuracy [0-9.]+% .* test accuracy [0-9.]+%" <<<"$out" && pass "eval" || { fail "eval"; echo "$out"; }

# maxbatch: the largest graph and the deepest gcnii under a budget; 2 bits
# fit more.  The depth search uses quant:2 (the payload gact:2 allocates on
# average): GACT's measurement runs a pass per saved tensor, which at
# dozens of layers makes every trial slow.
n0=$($ACTC maxbatch --model gcn --budget 64MiB --channels 16 --height 1 --width-px 1 --classes 4 --resolution 256 2>&1 | grep -oE "largest graph: [0-9]+" | grep -oE "[0-9]+$")
n2=$($ACTC maxbatch --model gcn --budget 64MiB --channels 16 --height 1 --width-px 1 --classes 4 --resolution 256 --compress gact:2 2>&1 | grep -oE "largest graph: [0-9]+" | grep -oE "[0-9]+$")
[ -n "$n0" ] && [ -n "$n2" ] && [ "$n2" -gt "$n0" ] && pass "maxbatch nodes: none $n0, gact:2 $n2" || fail "maxbatch nodes ('$n0' '$n2')"
d0=$($ACTC maxbatch --model gcnii --search depth --nodes 20000 --budget 64MiB --channels 16 --height 1 --width-px 1 --classes 4 2>&1 | grep -oE "largest depth: [0-9]+" | grep -oE "[0-9]+$")
d2=$($ACTC maxbatch --model gcnii --search depth --nodes 20000 --budget 64MiB --channels 16 --height 1 --width-px 1 --classes 4 --compress quant:2 2>&1 | grep -oE "largest depth: [0-9]+" | grep -oE "[0-9]+$")
[ -n "$d0" ] && [ -n "$d2" ] && [ "$d2" -gt "$d0" ] && pass "maxbatch depth: none $d0, quant:2 $d2" || fail "maxbatch depth ('$d0' '$d2')"

# Bad input: clear errors, never a crash.
head -c 100 $G > $D/trunc.graph
expect_fail "truncated graph file" "$D/trunc.graph" $ACTC train --model gcn --data graph:$D/trunc.graph
cp $G $D/flip.graph; printf '\xff' | dd of=$D/flip.graph bs=1 seek=200 conv=notrunc 2>/dev/null
expect_fail "corrupted graph file" "$D/flip.graph.*CRC|CRC.*$D/flip.graph" $ACTC train --model gcn --data graph:$D/flip.graph
expect_fail "missing graph file" "$D/none.graph" $ACTC train --model gcn --data graph:$D/none.graph
# Smaller things: --out's directory must exist (as for sbm and --save),
# found before the build; the budget named when the graph itself does not
# fit; a graph of other features named as such, not as images; image flags
# given to eval on a graph checkpoint noted, not dropped.
expect_fail "graph build --out into a missing directory" "graph build --out $D/nodir/g.bin: cannot write there" \
    $ACTC graph build --out $D/nodir/g.bin
expect_fail "graph sbm --out into a missing directory" "$D/nodir" \
    $ACTC graph sbm --nodes 300 --train 30 --val 30 --out $D/nodir/s.graph
expect_fail "a graph over the budget names it" "budget" $ACTC train --model gcn --data graph:$G --mem-budget 1KiB
$ACTC graph sbm --nodes 3000 --features 8 --classes 4 --degree 8 --train 300 --val 300 --seed 3 --out $D/f8.graph > /dev/null 2>&1
expect_fail "a graph of other features" "takes 16 features per node in 4 classes; the graph has 8 features in 4" \
    $ACTC train --init $D/g.ckpt --data graph:$D/f8.graph --epochs 1 --epoch-steps 1
out=$($ACTC eval --checkpoint $D/g.ckpt --test-images $D/x --limit-test 5 2>&1)
grep -q "note: --test-images is for image models; .*g.ckpt holds a graph model" <<<"$out" && grep -q "note: --limit-test" <<<"$out" \
    && pass "eval on a graph checkpoint notes image flags" || fail "eval with image flags: $out"
expect_fail "graph for an image model" "does not take a graph" $ACTC train --model mlp --data graph:$G
expect_fail "images for a graph model" "graph network" $ACTC train --model gcn --data fmnist
expect_fail "split on images" "--split is for graph models" $ACTC train --model mlp --split 10:10
expect_fail "bad split" "--split" $ACTC train --model gcn --data graph:$G --split 10
expect_fail "split larger than the graph" "3000|n_train" $ACTC train --model gcn --data graph:$G --split 2999:10
expect_fail "accum on a graph" "full-batch" $ACTC train --model gcn --data graph:$G --accum 2
expect_fail "heads do not divide width" "heads" $ACTC train --model gat --data graph:$G --width 10 --heads 4
expect_fail "budget too small" "budget|memory" $ACTC train --model gcn --data graph:$G --mem-budget 1MiB
finish

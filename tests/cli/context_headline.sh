#!/usr/bin/env bash
# The memory table's headline is the context before backward set against
# what `none` keeps for the same step, as `actc inspect` and the papers
# count it.  For every policy on gpt-mini and llama-mini (fewer layers and
# shorter windows, the same block), one training step's epoch record must
# carry exactly the bytes inspect measures: the policy's context from a real
# step, and none's from a real step under none (train measures none by a
# counting forward that keeps nothing).  The text table heads with the
# ratio and prints the backward peak on a line of its own.
source "$(dirname "$0")/lib.bash"
D=$TMP
for ((i = 0; i < 200; i++)); do echo "And God said, Let there be light: and there was light. $((i % 5))"; done > $D/corpus.txt
POLICIES="none bf16 quant:2 actnn:L2 actnn:L3 division gact:4 gact:CB1 gact:CB2 gact:CKPT agoq compact compact:r=0.25+gact:4"

num() { grep -o "\"$2\":[0-9.]*" "$1" | tail -1 | cut -d: -f2; }

for model in gpt-mini llama-mini; do
    SHAPE="--model $model --layers 2 --seq 64 --batch 4 --data text:$D/corpus.txt --threads 2"
    for p in $POLICIES; do
        rm -f $D/train.jsonl $D/inspect.jsonl
        out=$($ACTC train $SHAPE --compress $p --epochs 1 --epoch-steps 1 --eval-tokens 512 --progress off \
              --log $D/train.jsonl 2>&1) || { fail "$model $p: train failed"; echo "$out" | tail -5; continue; }
        ins=$($ACTC inspect $SHAPE --compress $p --log $D/inspect.jsonl 2>&1) \
            || { fail "$model $p: inspect failed"; echo "$ins" | tail -5; continue; }
        grep '"event":"epoch"' $D/train.jsonl > $D/epoch.jsonl
        grep '"event":"inspect_context"' $D/inspect.jsonl > $D/ctx.jsonl
        t_pol=$(num $D/epoch.jsonl context_stored) t_none=$(num $D/epoch.jsonl context_none)
        i_pol=$(num $D/ctx.jsonl stored) i_none=$(num $D/ctx.jsonl none)
        t_ratio=$(grep -o 'context before backward: stored .* -> [0-9.]*x' <<<"$out" | grep -o '[0-9.]*x$')
        i_ratio=$(grep -o '[0-9.]*x smaller' <<<"$ins" | tail -1 | cut -d' ' -f1)
        if [ -n "$t_pol" ] && [ "$t_pol" = "$i_pol" ] && [ "$t_none" = "$i_none" ] && [ "$t_ratio" = "$i_ratio" ] \
            && grep -q "under none for the same step" <<<"$out" && grep -q '"context_reference":"none"' $D/epoch.jsonl; then
            pass "$model $p: headline $t_ratio = inspect's ($t_pol vs none's $t_none bytes)"
        else
            fail "$model $p: train $t_pol vs none $t_none ($t_ratio), inspect $i_pol vs none $i_none ($i_ratio)"
            echo "$out" | grep -A8 "context before"
        fi
        # The backward peak: its own line, never below the context before backward.
        peak=$(num $D/epoch.jsonl context_backward_peak)
        if grep -q "^context peak during backward: " <<<"$out" && [ -n "$peak" ] && [ "$peak" -ge "$t_pol" ]; then
            pass "$model $p: backward peak $peak on its own line"
        else
            fail "$model $p: backward peak '$peak' (context $t_pol)"
        fi
    done
done
echo "passed $PASSES, failed $FAILS"
[ $FAILS -eq 0 ]

#!/usr/bin/env bash
# `mpirun actc train --pipeline P` end to end: stages (and a 2 x 2 grid of
# stages x replicas) follow one process with the same --accum within 1e-5
# in every step's loss, under both schedules, for gpt (tied embedding) and
# llama; a fixed stochastic policy draws the same roundings as one process;
# GACT's measuring passes run on every stage together; rank 0 alone prints
# the stages; every bad input the issue names ends the job with a clear
# message on every rank, never a hang.
source "$(dirname "$0")/../cli/lib.bash"
D=$TMP
ACTC=$(readlink -f "$ACTC")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
MPI="timeout 120 mpirun"
for ((i = 0; i < 400; i++)); do echo "In the beginning God created the heaven and the earth. $((i % 7))"; done > $D/corpus.txt
tiny() { echo "--model $1 --layers 4 --width 32 --heads 2 --context 32 --batch 8 --accum 8 --epoch-steps 20 --eval-tokens 2048 --lr 1e-2 --warmup 5 --progress off --threads 1 --data text:$D/corpus.txt"; }
losses() { grep '"event":"step"' "$1" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/'; }
# same_losses A B TOL: 20 steps each, every pair within TOL relative.
same_losses() {
    paste <(losses "$1") <(losses "$2") | awk -v t="$3" 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > t * $1) bad = 1; n++ }
        END { exit bad || n != 20 }'
}

for model in gpt llama; do
    $ACTC train $(tiny $model) --log-every 1 --log $D/$model-one.jsonl > /dev/null 2>&1 || fail "$model: one process"
    for run in "2 2 1f1b" "3 3 1f1b" "4 4 1f1b" "4 2 1f1b" "3 3 gpipe"; do
        set -- $run
        log=$D/$model-$1-$2-$3.jsonl
        out=$($MPI -np $1 $ACTC train $(tiny $model) --pipeline $2 --pipeline-schedule $3 --log-every 1 --log $log 2>&1); rc=$?
        if [ $rc -ne 0 ]; then fail "$model -np $1 --pipeline $2 $3 (exit $rc)"; echo "$out" | tail -5; continue; fi
        same_losses $D/$model-one.jsonl $log 1e-5 && pass "$model: -np $1 --pipeline $2 ($3) follows one process (20 steps, 1e-5)" \
            || { fail "$model: -np $1 --pipeline $2 ($3) vs one process"; paste <(losses $D/$model-one.jsonl) <(losses $log) | head -5; }
    done
done
# Rank 0 alone prints, with the stages and what each holds (1F1B: P - s;
# the embedding and the head weigh under a block each here, so the middle
# stage takes two blocks).
out=$($MPI -np 3 $ACTC train $(tiny llama) --pipeline 3 2>&1)
[ "$(grep -c '^epoch 1/1' <<<"$out")" = 1 ] && grep -q "pipeline: 3 stages x 1 replica" <<<"$out" \
    && grep -q "stage 0: embedding, block 0; holds at most 3 micro-batch" <<<"$out" \
    && grep -q "stage 1: blocks 1-2; holds at most 2 micro-batch" <<<"$out" \
    && grep -q "stage 2: block 3, final norm and head; holds at most 1 micro-batch" <<<"$out" \
    && pass "rank 0 prints the stages" || { fail "the stages' lines"; echo "$out" | head -12; }

# A fixed stochastic policy keys its roundings by the save, not the
# process: a pipeline draws what one process draws.
$ACTC train $(tiny llama) --compress quant:2 --log-every 1 --log $D/q-one.jsonl > /dev/null 2>&1
$MPI -np 2 $ACTC train $(tiny llama) --compress quant:2 --pipeline 2 --log-every 1 --log $D/q-two.jsonl > /dev/null 2>&1
same_losses $D/q-one.jsonl $D/q-two.jsonl 1e-5 && pass "quant:2 in 2 stages follows one process" || fail "quant:2 in 2 stages"
# GACT measures with every stage taking part (the passes stay in step).
out=$($MPI -np 2 $ACTC train $(tiny llama) --compress gact:4 --adapt-interval 5 --pipeline 2 2>&1) \
    && grep -q '^epoch 1/1' <<<"$out" && pass "gact:4 measures across 2 stages" || { fail "gact:4 across stages"; echo "$out" | tail -5; }

# Bad input: a clear message from every rank, no hang.
expect_job_fail() {
    local name=$1 pat=$2 out rc t0=$SECONDS; shift 2
    out=$("$@" 2>&1); rc=$?
    if [ $rc -eq 124 ]; then fail "$name: the job hung"; echo "$out" | tail -5; return; fi
    if [ $rc -eq 0 ]; then fail "$name: exit 0, expected failure"; echo "$out" | tail -5; return; fi
    if ! grep -Eq -- "$pat" <<<"$out"; then fail "$name: output lacks /$pat/"; echo "$out" | tail -5; return; fi
    pass "$name (exit $rc, $((SECONDS - t0)) s)"
}
expect_job_fail "3 ranks, 2 stages" "the 3 process\(es\) mpirun started must be a multiple of the stages" \
    $MPI -np 3 $ACTC train $(tiny gpt) --pipeline 2
expect_job_fail "5 stages of 4 blocks" "5 pipeline stages for the 4 blocks of gpt: a stage holds at least one block" \
    $MPI -np 5 $ACTC train $(tiny gpt) --pipeline 5 --accum 8
expect_job_fail "--accum under the stages" "--accum 2: a pipeline of 4 stages needs at least 4 micro-batches" \
    $MPI -np 4 $ACTC train $(tiny gpt) --pipeline 4 --accum 2
expect_job_fail "checkpoints of stages" "--save, --resume and --init do not take pipeline runs yet" \
    $MPI -np 2 $ACTC train $(tiny gpt) --pipeline 2 --save $D/p.ckpt
expect_fail "--pipeline without mpirun" "start it with mpirun -np N" $ACTC train $(tiny gpt) --pipeline 2
expect_fail "--pipeline of an image model" "pipeline stages split a transformer" $ACTC train --model mlp --pipeline 2
expect_fail "unknown schedule" "--pipeline-schedule zigzag: 1f1b or gpipe" $ACTC train $(tiny gpt) --pipeline-schedule zigzag
finish

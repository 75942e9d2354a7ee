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
tiny() { echo "--model $1 --layers 4 --width 32 --heads 2 --context 32 --batch 16 --accum 8 --epoch-steps 20 --eval-tokens 2048 --lr 1e-2 --warmup 5 --progress off --threads 1 --data text:$D/corpus.txt"; }
losses() { grep '"event":"step"' "$1" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/'; }
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= t * a) }'; }
# expect_job_fail NAME PATTERN CMD...: the job ends non-zero, not by the
# timeout, printing PATTERN.
expect_job_fail() {
    local name=$1 pat=$2 out rc t0=$SECONDS; shift 2
    out=$("$@" 2>&1); rc=$?
    if [ $rc -eq 124 ]; then fail "$name: the job hung"; echo "$out" | tail -5; return; fi
    if [ $rc -eq 0 ]; then fail "$name: exit 0, expected failure"; echo "$out" | tail -5; return; fi
    if ! grep -Eq -- "$pat" <<<"$out"; then fail "$name: output lacks /$pat/"; echo "$out" | tail -5; return; fi
    pass "$name (exit $rc, $((SECONDS - t0)) s)"
}
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

# The stages' log record: each held as many micro-batches as its schedule
# says, and its context before backward is that many times one
# micro-batch's (within 5%), under 1F1B and GPipe.
for sch in 1f1b gpipe; do
    $MPI -np 3 $ACTC train $(tiny llama) --pipeline 3 --pipeline-schedule $sch --log $D/st-$sch.jsonl > /dev/null 2>&1
    rec=$(grep '"event":"stages"' $D/st-$sch.jsonl | tail -1)
    grep -o '"held":[0-9]*,"held_schedule":[0-9]*,"context":[0-9]*,"micro_context":[0-9]*' <<<"$rec" | tr -c '0-9\n' ' ' \
        | awk -v want="$([ $sch = gpipe ] && echo "8 8 8" || echo "3 2 1")" 'BEGIN { split(want, w, " ") }
            { n++; d = $3 - $1 * $4; if (d < 0) d = -d; if ($1 != $2 || $1 != w[n] || d > 0.05 * $3) bad = 1 }
            END { exit bad || n != 3 }' \
        && pass "$sch: every stage held its schedule's micro-batches, context = held x one micro-batch's" \
        || { fail "$sch: the stages' record"; echo "$rec"; }
done

# A fixed stochastic policy keys its roundings by the save, not the
# process: a pipeline draws what one process draws.
$ACTC train $(tiny llama) --compress quant:2 --log-every 1 --log $D/q-one.jsonl > /dev/null 2>&1
$MPI -np 2 $ACTC train $(tiny llama) --compress quant:2 --pipeline 2 --log-every 1 --log $D/q-two.jsonl > /dev/null 2>&1
same_losses $D/q-one.jsonl $D/q-two.jsonl 1e-5 && pass "quant:2 in 2 stages follows one process" || fail "quant:2 in 2 stages"
# GACT measures with every stage taking part (the passes stay in step).
out=$($MPI -np 2 $ACTC train $(tiny llama) --compress gact:4 --adapt-interval 5 --pipeline 2 2>&1) \
    && grep -q '^epoch 1/1' <<<"$out" && pass "gact:4 measures across 2 stages" || { fail "gact:4 across stages"; echo "$out" | tail -5; }

# Checkpoints: stage 0 writes the whole model.  Resumed on as many stages
# the run is the uninterrupted one bit for bit (a learning policy, actnn:L3,
# included: each stage gets its own state back); on 3 stages or in one
# process the weights, optimizer and position are exact (none: the same
# validation loss); a one-process checkpoint resumes in 2 stages, and
# --init starts stages from it.
val_loss() { grep '"event":"epoch"' "$1" | tail -1 | sed 's/.*"val_loss":\([0-9.e+-]*\).*/\1/'; }
for pol in actnn:L3 none; do
    C="$(tiny gpt) --accum 4 --epoch-steps 10 --compress $pol"
    $MPI -np 2 $ACTC train $C --epochs 2 --pipeline 2 --log $D/full-$pol.jsonl > /dev/null 2>&1
    $MPI -np 2 $ACTC train $C --epochs 2 --max-steps 10 --pipeline 2 --save $D/half-$pol.ckpt > /dev/null 2>&1
    full=$(val_loss $D/full-$pol.jsonl)
    [ -s $D/half-$pol.ckpt ] && [ -n "$full" ] || { fail "$pol: the pipeline's checkpoint"; continue; }
    for np in 2 3 1; do
        cp $D/half-$pol.ckpt $D/h.ckpt
        launch="$MPI -np $np"; pp="--pipeline $np"; [ $np = 1 ] && launch="" && pp=""
        $launch $ACTC train --resume $D/h.ckpt --epochs 2 --progress off --threads 1 $pp --log $D/h-$pol-$np.jsonl > $D/h.out 2>&1
        v=$(val_loss $D/h-$pol-$np.jsonl)
        if [ $np = 2 ] || [ $pol = none ]; then
            [ -n "$v" ] && [ "$v" = "$full" ] && pass "$pol: resumed on $np stage(s): validation $v = the uninterrupted run's" \
                || { fail "$pol: resumed on $np stage(s): $v vs $full"; tail -3 $D/h.out; }
        else
            [ -n "$v" ] && close "$v" "$full" 0.01 && pass "$pol: resumed on $np stage(s) (policy state afresh): $v vs $full" \
                || { fail "$pol: resumed on $np stage(s): $v vs $full"; tail -3 $D/h.out; }
        fi
    done
done
C="$(tiny llama) --accum 4 --epoch-steps 10"
$ACTC train $C --epochs 2 --log $D/one-full.jsonl > /dev/null 2>&1
$ACTC train $C --epochs 2 --max-steps 10 --save $D/one-half.ckpt > /dev/null 2>&1
$MPI -np 2 $ACTC train --resume $D/one-half.ckpt --epochs 2 --progress off --threads 1 --pipeline 2 --log $D/one-res.jsonl > /dev/null 2>&1
[ -n "$(val_loss $D/one-res.jsonl)" ] && [ "$(val_loss $D/one-res.jsonl)" = "$(val_loss $D/one-full.jsonl)" ] \
    && pass "a one-process checkpoint resumes in 2 stages" || fail "one process -> 2 stages: $(val_loss $D/one-res.jsonl) vs $(val_loss $D/one-full.jsonl)"
out=$($MPI -np 2 $ACTC train --init $D/one-half.ckpt --data text:$D/corpus.txt --batch 8 --accum 4 --epoch-steps 10 \
    --eval-tokens 2048 --progress off --threads 1 --pipeline 2 2>&1) && grep -q '^epoch 1/1' <<<"$out" \
    && pass "--init starts the stages from a checkpoint" || { fail "--init with stages"; echo "$out" | tail -3; }

# Faults on one stage end the whole job, with the message.
expect_job_fail "a NaN loss on the last stage ends the job" "NaN|infinite" \
    $MPI -np 2 $ACTC train $(tiny gpt) --pipeline 2 --lr 1e30 --clip 0 --warmup 0
# Stage 0 holds 4 micro-batches at once, stage 3 one: a budget between
# their peaks stops stage 0 alone while the others wait for it.
expect_job_fail "the budget of one stage ends the job" "memory budget exceeded|rank [0-9] of 4 failed" \
    $MPI -np 4 $ACTC train $(tiny llama) --pipeline 4 --mem-budget 1000000
steps=1000003
mpirun -np 2 $ACTC train $(tiny gpt) --pipeline 2 --epoch-steps $steps --comm-timeout 3 > $D/stop.out 2>&1 &
job=$!
victim=
for ((i = 0; i < 100; i++)); do
    sleep 0.1
    victim=$(for p in $(pgrep -f -- "actc train .*--epoch-steps $steps"); do [ "$(ps -o comm= -p $p)" = actc ] && echo $p; done | tail -1)
    [ -n "$victim" ] && break
done
if [ -z "$victim" ]; then fail "SIGSTOP test: no rank to stop"; kill $job 2>/dev/null
else
    sleep 1; kill -STOP $victim; t0=$SECONDS
    for ((i = 0; i < 600 && $(kill -0 $job 2>/dev/null && echo 1 || echo 0); i++)); do sleep 0.1; done
    if kill -0 $job 2>/dev/null; then rc=124; kill -9 $job; else wait $job; rc=$?; fi
    kill -9 $victim 2>/dev/null; pkill -9 -f -- "--epoch-steps $steps"
    if [ $rc = 124 ]; then fail "SIGSTOP of a stage: the job still runs after 60 s"
    elif grep -Eq "did not complete in [0-9]+ s: rank [01] did not answer" $D/stop.out; then
        pass "SIGSTOP of a stage: the job ends naming it (exit $rc, $((SECONDS - t0)) s)"
    else fail "SIGSTOP of a stage: exit $rc"; tail -5 $D/stop.out; fi
fi

# Bad input: a clear message from every rank, no hang.
expect_job_fail "3 ranks, 2 stages" "the 3 process\(es\) mpirun started must be a multiple of the stages" \
    $MPI -np 3 $ACTC train $(tiny gpt) --pipeline 2
expect_job_fail "5 stages of 4 blocks" "5 pipeline stages for the 4 blocks of gpt: a stage holds at least one block" \
    $MPI -np 5 $ACTC train $(tiny gpt) --pipeline 5 --accum 8
expect_job_fail "--accum under the stages" "--accum 2: a pipeline of 4 stages needs at least 4 micro-batches" \
    $MPI -np 4 $ACTC train $(tiny gpt) --pipeline 4 --accum 2
expect_job_fail "a replica's share not in --accum micro-batches" "the batch must be a multiple of 16" \
    $MPI -np 4 $ACTC train $(tiny gpt) --pipeline 2 --batch 8
expect_job_fail "8-bit gradients with a tied embedding" "shared between pipeline stages.*32 bits" \
    $MPI -np 2 $ACTC train $(tiny gpt) --pipeline 2 --grad-bits 8
expect_fail "--pipeline without mpirun" "start it with mpirun -np N" $ACTC train $(tiny gpt) --pipeline 2
expect_fail "--pipeline of an image model" "pipeline stages split a transformer" $ACTC train --model mlp --pipeline 2
expect_fail "unknown schedule" "--pipeline-schedule zigzag: 1f1b or gpipe" $ACTC train $(tiny gpt) --pipeline-schedule zigzag
finish

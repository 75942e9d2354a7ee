#!/usr/bin/env bash
# `mpirun actc train` end to end: data parallelism matches one process, only
# rank 0 prints, logs and saves, resume works with the same and with another
# number of ranks, and every failure the issue names ends the whole job with
# the failing rank's message and a non-zero exit, never a hang.
source "$(dirname "$0")/../cli/lib.bash"
D=$TMP
ACTC=$(readlink -f "$ACTC") # absolute: ranks below start in other directories (--wdir)
# Open MPI refuses root unless told, and 3 ranks on 2 cores need oversubscription.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
MPI="timeout 120 mpirun"
for ((i = 0; i < 400; i++)); do echo "In the beginning God created the heaven and the earth. $((i % 7))"; done > $D/corpus.txt
TINY="--model gpt --layers 2 --width 32 --heads 2 --context 32 --batch 6 --epoch-steps 20 --eval-tokens 2048 --lr 1e-2 --warmup 5 --progress off --threads 1 --data text:$D/corpus.txt"
losses() { grep '"event":"step"' "$1" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/'; }
val_loss() { grep '"event":"epoch"' "$1" | tail -1 | sed 's/.*"val_loss":\([0-9.e+-]*\).*/\1/'; }
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= t * a) }'; }
# expect_job_fail NAME PATTERN CMD...: the job (under timeout 120) ends
# non-zero within 60 s, not by the timeout, printing PATTERN.
expect_job_fail() {
    local name=$1 pat=$2 out rc t0=$SECONDS; shift 2
    out=$("$@" 2>&1); rc=$?
    if [ $rc -eq 124 ]; then fail "$name: the job hung (killed by the timeout)"; echo "$out" | tail -5; return; fi
    if [ $((SECONDS - t0)) -gt 60 ]; then fail "$name: the job took $((SECONDS - t0)) s to end"; return; fi
    if [ $rc -eq 0 ]; then fail "$name: exit 0, expected failure"; echo "$out" | tail -5; return; fi
    if ! grep -Eq -- "$pat" <<<"$out"; then fail "$name: output lacks /$pat/"; echo "$out" | tail -5; return; fi
    pass "$name (exit $rc, $((SECONDS - t0)) s)"
}

# One process and two ranks: the same losses within float reordering (the
# gradient is a sum of two halves instead of one: 1e-5 relative).
$ACTC train $TINY --log-every 1 --log $D/one.jsonl > $D/one.out 2>&1 || fail "one process"
out=$($MPI -np 2 $ACTC train $TINY --log-every 1 --log $D/two.jsonl 2>&1); rc=$?
[ $rc -eq 0 ] && pass "mpirun -np 2 trains" || { fail "mpirun -np 2 (exit $rc)"; echo "$out" | tail -5; }
[ "$(grep -c '^epoch 1/1' <<<"$out")" = 1 ] && grep -q "data parallel: 2 ranks" <<<"$out" && pass "rank 0 alone prints" \
    || { fail "output of 2 ranks"; echo "$out"; }
grep -q "^  COMM " <<<"$out" && grep -q "^communication (rank 0 of 2" <<<"$out" && grep -q '"comm":{"ranks":2' $D/two.jsonl \
    && pass "memory table and log show communication" || fail "communication figures"
paste <(losses $D/one.jsonl) <(losses $D/two.jsonl) | awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1; n++ }
    END { exit bad || n != 20 }' && pass "2 ranks follow one process's losses (20 steps, 1e-5)" \
    || { fail "2 ranks vs one process"; paste <(losses $D/one.jsonl) <(losses $D/two.jsonl) | head; }
[ "$(grep -c '"event":"epoch"' $D/two.jsonl)" = 1 ] && pass "one log record per epoch" || fail "log written by several ranks"

# 8-bit communication on 3 ranks: validation within 2% of one process.
out=$($MPI -np 3 $ACTC train $TINY --grad-comm 8 2>&1) && pass "3 ranks with --grad-comm 8" || { fail "--grad-comm 8"; echo "$out" | tail; }
v1=$(grep -o 'validation loss [0-9.]*' $D/one.out | awk '{print $3}'); v8=$(grep -o 'validation loss [0-9.]*' <<<"$out" | awk '{print $3}')
awk -v a="$v1" -v b="$v8" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 0.02 * a) }' \
    && pass "8-bit communication: validation $v8 vs $v1" || fail "8-bit communication: validation $v8 vs $v1"

# Resume: two epochs straight, or one then a resume, on 2 ranks: identical;
# resumed on 3 ranks or on one process: the same within float reordering
# (1e-5 relative on the validation loss, printed to 6 digits in the log).
$MPI -np 2 $ACTC train $TINY --epochs 2 --log $D/full.jsonl > /dev/null 2>&1
full=$(val_loss $D/full.jsonl)
$MPI -np 2 $ACTC train $TINY --epochs 2 --max-steps 20 --save $D/half.ckpt > /dev/null 2>&1
[ -s $D/half.ckpt ] && [ -z "$(ls $D/*.tmp* 2>/dev/null)" ] && pass "rank 0 saves the checkpoint" || fail "checkpoint under mpirun"
for np in 1 2 3; do
    cp $D/half.ckpt $D/h$np.ckpt
    launch="$MPI -np $np"; [ $np = 1 ] && launch=""
    $launch $ACTC train --resume $D/h$np.ckpt --epochs 2 --progress off --threads 1 --log $D/h$np.jsonl > /dev/null 2>&1
    v=$(val_loss $D/h$np.jsonl)
    if [ $np = 2 ]; then [ -n "$full" ] && [ "$v" = "$full" ] && pass "resume on 2 ranks reproduces the run ($v)" || fail "resume on 2: '$v' vs '$full'"
    else close "$full" "$v" 1e-5 && pass "resume on $np rank(s) continues ($v vs $full)" || fail "resume on $np rank(s): '$v' vs '$full'"; fi
done
# Resume mid-epoch on 2 ranks is the uninterrupted run bit for bit under
# every kind of policy and either wire: the gradients' wire is part of the
# recipe (a resume that fell back to fp32 matched only the first resumed
# step), and a policy that learns per rank (ActNN's adaptive levels, GACT:
# each rank from its own rows) gets each rank's own state back from the
# checkpoint (rank 0 alone held them all in one state before).
for pol in none actnn:L3 gact:4 agoq; do
    for gc in 32 8; do
        k=${pol%%:*}$gc
        W="$TINY --epoch-steps 10 --compress $pol --grad-comm $gc --log-every 1"
        $MPI -np 2 $ACTC train $W --log $D/w_full_$k.jsonl > /dev/null 2>&1
        $MPI -np 2 $ACTC train $W --max-steps 4 --save $D/w_$k.ckpt > /dev/null 2>&1
        out=$($MPI -np 2 $ACTC train --resume $D/w_$k.ckpt --log-every 1 --log $D/w_res_$k.jsonl 2>&1)
        a=$(losses $D/w_full_$k.jsonl | tail -6 | tr '\n' ' '); b=$(losses $D/w_res_$k.jsonl | tr '\n' ' ')
        [ -n "$b" ] && [ "$a" = "$b" ] && ! grep -q "learns its state" <<<"$out" \
            && pass "$pol, --grad-comm $gc: resumed at step 4 of 10 on 2 ranks, the 6 losses after it bit for bit" \
            || { fail "$pol, --grad-comm $gc resume: '$b' vs '$a'"; grep note <<<"$out"; }
    done
done
# On another number of ranks every rank continues from rank 0's state, and
# the run says so.
out=$($MPI -np 3 $ACTC train --resume $D/w_actnn32.ckpt --max-steps 5 2>&1)
grep -q "note: actnn:L3 learns its state on each rank" <<<"$out" && pass "a per-rank policy resumed on 3 of 2 ranks says so" \
    || { fail "no note when resuming actnn:L3 saved by 2 ranks on 3"; echo "$out" | tail -3; }

# Every rank must read the same checkpoint: a host with another copy is refused.
mkdir -p $D/r0 $D/r1 && cp $D/half.ckpt $D/r0/c.ckpt
$MPI -np 2 $ACTC train $TINY --epochs 2 --max-steps 10 --save $D/r1/c.ckpt > /dev/null 2>&1
expect_job_fail "ranks resuming from different files" "the ranks disagree on --resume" \
    $MPI -np 1 --wdir $D/r0 $ACTC train --resume c.ckpt --epochs 2 : -np 1 --wdir $D/r1 $ACTC train --resume c.ckpt --epochs 2

# Bad input: every rank says so, the job ends.
expect_job_fail "--grad-comm 16" "grad-comm 16" $MPI -np 2 $ACTC train $TINY --grad-comm 16
[ "$($MPI -np 2 $ACTC train $TINY --grad-comm 16 2>&1 | grep -c 'error: --grad-comm 16')" = 2 ] \
    && pass "--grad-comm 16: the error on each rank" || fail "--grad-comm 16 not on each rank"
expect_job_fail "a batch smaller than the ranks" "needs at least 3 samples" $MPI -np 3 $ACTC train $TINY --batch 2
expect_job_fail "ranks given different flags" "ranks disagree on the command line" \
    $MPI -np 1 $ACTC train $TINY --lr 1e-2 : -np 1 $ACTC train $TINY --lr 2e-2

# Faults on one rank or all: the job ends within the timeout, non-zero, with the message.
mkdir -p $D/a $D/b && cp $D/corpus.txt $D/a/c.txt
REL="--model gpt --layers 2 --width 32 --heads 2 --context 32 --batch 6 --epoch-steps 20 --progress off --threads 1 --data text:c.txt"
expect_job_fail "a file missing on rank 1 ends the job" "c.txt.*(No such|cannot)|rank 1 of 2 failed" \
    $MPI -np 1 --wdir $D/a $ACTC train $REL : -np 1 --wdir $D/b $ACTC train $REL
expect_job_fail "a NaN loss ends the job" "NaN|infinite" $MPI -np 2 $ACTC train $TINY --lr 1e30 --clip 0 --warmup 0 --epoch-steps 50
expect_job_fail "the memory budget ends the job" "budget" $MPI -np 2 $ACTC train $TINY --mem-budget 64KiB
# Batch 7 on 2 ranks: rank 1 runs 4 rows, rank 0 3; a budget between their
# peaks (about 1.04 and 1.24 MB since fp32 saves are references, not
# copies) stops rank 1 alone, in its second step, while rank 0 waits for it
# in the exchange.
expect_job_fail "the budget of one rank in the middle of training ends the job" \
    "training step 1: memory budget exceeded.*|rank 1 of 2 failed" $MPI -np 2 $ACTC train $TINY --batch 7 --mem-budget 1140000

# signal_a_rank SIGNAL STEPS FLAGS...: start a 2-rank job of STEPS steps per
# epoch (a marker to find its ranks), send one rank SIGNAL after a second,
# and wait up to 60 s for the job to end.  Sets job, victim, rc (124: it
# did not end) and t0; out is $D/signal.out.
signal_a_rank() {
    local sig=$1 steps=$2 pids; shift 2
    mpirun -np 2 $ACTC train $TINY --epoch-steps $steps "$@" > $D/signal.out 2>&1 &
    job=$!
    for ((i = 0; i < 100; i++)); do
        pids=$(pgrep -f -- "actc train .*--epoch-steps $steps" | grep -v "^$job$" || true)
        [ "$(wc -w <<<"$pids")" -ge 2 ] && break; sleep 0.1
    done
    victim=$(for p in $pids; do [ "$(ps -o comm= -p $p)" = actc ] && echo $p; done | tail -1)
    rc=
    [ -n "$victim" ] || { kill $job 2>/dev/null; return; }
    sleep 1; kill -$sig $victim; t0=$SECONDS
    for ((i = 0; i < 600 && $(kill -0 $job 2>/dev/null && echo 1 || echo 0); i++)); do sleep 0.1; done
    if kill -0 $job 2>/dev/null; then rc=124; kill -9 $job; else wait $job; rc=$?; fi
    kill -9 $victim 2>/dev/null; pkill -9 -f -- "--epoch-steps $steps"
}

# A rank killed with SIGKILL: mpirun ends the job (non-zero) within a minute.
signal_a_rank KILL 1000000
if [ -z "$rc" ]; then fail "SIGKILL test: no rank to kill"
elif [ "$rc" = 124 ]; then fail "SIGKILL of a rank: mpirun still running after 60 s"
elif [ "$rc" -ne 0 ]; then pass "SIGKILL of a rank ends the job (exit $rc, $((SECONDS - t0)) s)"
else fail "SIGKILL: exit 0"; fi

# A rank stopped with SIGSTOP (it neither dies nor answers): the others give
# up after --comm-timeout, name it, and the job ends (it hung forever before).
signal_a_rank STOP 1000001 --comm-timeout 3
if [ -z "$rc" ]; then fail "SIGSTOP test: no rank to stop"
elif [ "$rc" = 124 ]; then fail "SIGSTOP of a rank: mpirun still running after 60 s"
elif [ "$rc" -ne 0 ] && grep -Eq "did not complete in [0-9]+ s: rank [01] did not answer" $D/signal.out; then
    pass "SIGSTOP of a rank: the job ends naming it (exit $rc, $((SECONDS - t0)) s)"
else fail "SIGSTOP: exit $rc"; tail -5 $D/signal.out; fi
finish

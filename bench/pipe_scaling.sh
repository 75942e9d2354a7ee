#!/usr/bin/env bash
# Pipeline + data parallelism estimated from measured figures with the
# alpha-beta model of bench/SCALING.md, extended to stages ("Pipeline
# stages" there explains it): N ranks as P stages x N / P replicas, a
# replica's batch of M micro-batches through 1F1B, each stage's gradients
# all-reduced (fp32 ring) among its replicas.  Arithmetic only: it runs
# nothing.  Weak scaling: each replica keeps the measured batch.
#
# usage: bench/pipe_scaling.sh
#   MODELS="name:parameters:step_s:backward_share:blocks:hidden_bytes_per_sample:batch ..."
#   RANKS="8 64 512" LINKS="10 100" STAGES="1 2 4 8" MICRO=8 ALPHA_US=25 SPEEDUP=1
set -euo pipefail
# hidden bytes per sample: T x width x 4 (llama-mini 256 x 256, GPT-2 at
# the measured 64 tokens x 768); batch: the measured step's samples.
MODELS=${MODELS:-"llama-mini:5246208:0.515:0.59:6:262144:8 gpt2-124m:124439808:1.343:0.57:12:196608:4"}
RANKS=${RANKS:-"8 64 512"}
LINKS=${LINKS:-"10 100"}
STAGES=${STAGES:-"1 2 4 8"}
MICRO=${MICRO:-8}
ALPHA_US=${ALPHA_US:-25}
SPEEDUP=${SPEEDUP:-1}
printf "alpha %s us, %s micro-batches a step (1F1B), steps %sx faster than measured; per rank: step time, its exposed parts, efficiency (a stage share of the step / the step), throughput against data parallelism alone on as many ranks, and the fp32 weights, gradients and AdamW moments it holds\n" \
    "$ALPHA_US" "$MICRO" "$SPEEDUP"
printf "%-11s %5s %5s %6s %5s | %9s %9s %9s %9s | %6s %8s | %s\n" model Gb/s ranks stages repl "step s" "bubble s" "p2p s" \
    "allred s" "effic." "vs DP" "params+optim per rank"
for m in $MODELS; do
    IFS=: read -r name n step bwd blocks hid batch <<<"$m"
    for link in $LINKS; do
        for N in $RANKS; do
            for P in $STAGES; do
                [ "$P" -le "$blocks" ] && [ $((N % P)) -eq 0 ] || continue
                awk -v name="$name" -v n="$n" -v step="$step" -v bwd="$bwd" -v hid="$hid" -v batch="$batch" \
                    -v gbps="$link" -v N="$N" -v P="$P" -v M="$MICRO" -v alpha="$ALPHA_US" -v speedup="$SPEEDUP" '
                # A rank step with p stages (and N / p replicas): sets the parts.
                function rank_step(p,    D, s, hop, slack, ns, k, ar) {
                    D = N / p
                    tc = step / p                       # a stage: its share of the compute
                    bubble = tc * (p - 1) / M           # fill and drain: (p-1)/(M+p-1) of the pipelined step
                    s = hid * batch / M                 # one micro-batch hidden states (and their gradient)
                    hop = a + s / B
                    # Each hop runs beside compute except on the fill/drain path;
                    # a transfer slower than a micro-batch compute shows every time.
                    slack = hop - tc / M; if (slack < 0) slack = 0
                    p2p = (p > 1) ? 2 * (p - 1) * hop + 2 * M * slack : 0
                    # The stage gradients all-reduced among its D replicas (fp32 ring, 25 MiB
                    # buckets), started in the last micro-batch backward: only that hides it.
                    ns = n / p; k = int((4 * ns + 26214399) / 26214400); if (k < 1) k = 1
                    ar = (D > 1) ? 2 * (D - 1) * k * a + 2 * (D - 1) / D * 4 * ns / B : 0
                    ear = ar - bwd * tc / M; if (ear < 0) ear = 0
                    return tc + bubble + p2p + ear
                }
                BEGIN {
                    step /= speedup
                    B = gbps * 1e9 / 8; a = alpha * 1e-6
                    dp = rank_step(1)                   # data parallelism alone on the N ranks
                    total = rank_step(P)
                    # Samples a second over the N ranks: N / P replicas of batch samples.
                    printf "%-11s %5d %5d %6d %5d | %9.3f %9.3f %9.3f %9.3f | %5.0f%% %7.2fx | %.1f MiB\n", name, gbps, N, P,
                           N / P, total, bubble, p2p, ear, 100 * tc / total, dp / (P * total), 16 * n / P / 1048576
                }'
            done
        done
    done
done

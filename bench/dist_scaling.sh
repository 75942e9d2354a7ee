#!/usr/bin/env bash
# Data-parallel scaling estimated from measured figures with an alpha-beta
# model (bench/SCALING.md explains it and where each input comes from):
# per training step, the fp32 ring all-reduce against AGoQ's 8-bit
# all-to-all + all-gather, for P ranks on links of B Gb/s.  Arithmetic only:
# it runs nothing.
#
# usage: bench/dist_scaling.sh
#   MODELS="name:parameters:step_s:backward_share ..."   (measured; SCALING.md)
#   RANKS="8 64 512" LINKS="10 25 100" ALPHA_US=25 BUCKET_MIB=25
#   ENC_NS=1.05 DEC_NS=0.27 (dyn8 per element, one thread, bench/RESULTS.md)
#   SPEEDUP=1: divide the measured step times (what if each rank computed
#   SPEEDUP times faster, e.g. with more cores or an accelerator)
set -euo pipefail
MODELS=${MODELS:-"llama-mini:5246208:0.515:0.59 gpt2-124m:124439808:1.343:0.57"}
RANKS=${RANKS:-"8 64 512"}
LINKS=${LINKS:-"10 25 100"}
ALPHA_US=${ALPHA_US:-25}
BUCKET_MIB=${BUCKET_MIB:-25}
ENC_NS=${ENC_NS:-1.05}
DEC_NS=${DEC_NS:-0.27}
SPEEDUP=${SPEEDUP:-1}
printf "alpha %s us per message, buckets of %s MiB, dyn8 encode %s ns and decode %s ns per element, steps %sx faster than measured\n" \
    "$ALPHA_US" "$BUCKET_MIB" "$ENC_NS" "$DEC_NS" "$SPEEDUP"
printf "%-11s %6s %5s | %10s %10s %9s | %10s %10s %9s | %s\n" model Gb/s ranks "fp32 s" "exposed s" "effic." \
    "8-bit s" "exposed s" "effic." "all-reduce faster"
for m in $MODELS; do
    IFS=: read -r name n step bwd <<<"$m"
    for link in $LINKS; do
        for P in $RANKS; do
            awk -v name="$name" -v n="$n" -v step="$step" -v bwd="$bwd" -v gbps="$link" -v P="$P" \
                -v alpha="$ALPHA_US" -v bucket="$BUCKET_MIB" -v enc="$ENC_NS" -v dec="$DEC_NS" -v speedup="$SPEEDUP" 'BEGIN {
                step /= speedup
                B = gbps * 1e9 / 8                       # bytes per second
                a = alpha * 1e-6
                k = int((4 * n + bucket * 1048576 - 1) / (bucket * 1048576))   # buckets
                f = (P - 1) / P
                # ring: reduce-scatter + all-gather, 2 (P-1) messages per bucket
                t32 = 2 * (P - 1) * k * a + 2 * f * 4 * n / B
                # AGoQ: all-to-all then all-gather of 8-bit codes + an fp32 absmax per 256
                s8 = n * (1 + 4 / 256)
                codec = (f * n * enc + f * n * dec + n / P * enc + n * dec) * 1e-9
                w8 = 2 * (P - 1) * k * a + 2 * f * s8 / B
                t8 = w8 + codec
                # what backward cannot hide: transfers overlap backward (buckets
                # start as it completes them), the codec runs on the training
                # thread and adds to the step whatever happens
                e32 = t32 - bwd * step; if (e32 < 0) e32 = 0
                e8 = w8 - bwd * step; if (e8 < 0) e8 = 0
                e8 += codec
                printf "%-11s %6d %5d | %10.3f %10.3f %8.0f%% | %10.3f %10.3f %8.0f%% | %s\n", name, gbps, P, t32, e32,
                       100 * step / (step + e32), t8, e8, 100 * step / (step + e8),
                       t8 < t32 ? sprintf("8-bit %.2fx", t32 / t8) : sprintf("fp32 %.2fx", t8 / t32)
            }'
        done
    done
done

#!/usr/bin/env bash
# Cost of compression against `none` in one run (issue 4): for each model and
# batch, the training step under every policy, ROUNDS rounds interleaved so
# drift hits all policies alike; prints the best samples/s of each policy,
# its ratio to `none` (slowdown = 1 - ratio), the context ratio vs none, the
# allocator peak and the process peak RSS (each configuration in its own
# process, so each RSS is its own).
#
# usage: bench/policy_overhead.sh [BUILD_DIR] [ROUNDS] [MODEL:BATCH ...]
#   default: build 3 resnet20:128 resnet18:256; POLICIES="none actnn:L2 actnn:L3 ..." to choose
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
shift 2 2>/dev/null || shift $#
configs=${*:-resnet20:128 resnet18:256}
policies=${POLICIES:-none actnn:L2 actnn:L3 quant:2 bf16}
threads=${THREADS:-2}
json() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" <<<"$1"; }
for cfg in $configs; do
    model=${cfg%%:*} batch=${cfg##*:}
    steps=$([ "$model" = resnet18 ] && echo 3 || echo 8)
    declare -A best=() line=()
    for ((r = 0; r < rounds; r++)); do
        for p in $policies; do
            out=$(OMP_NUM_THREADS=$threads "$build/bench_step" "$model" "$batch" "$p" $steps $threads | tail -1)
            echo "$out" >> "${LOG:-/dev/null}"
            sps=$(json "$out" samples_per_s)
            if [ -z "${best[$p]:-}" ] || awk -v a="$sps" -v b="${best[$p]}" 'BEGIN{exit !(a>b)}'; then
                best[$p]=$sps line[$p]=$out
            fi
        done
    done
    printf '%s batch %s, %s rounds, %s threads (best of the rounds)\n' "$model" "$batch" "$rounds" "$threads"
    printf '  %-20s %10s %8s %9s %10s %10s\n' policy samples/s vs_none ctx_ratio peak_MiB RSS_MiB
    for p in $policies; do
        o=${line[$p]}
        ratio=$(awk -v a="${best[$p]}" -v b="${best[none]:-${best[$p]}}" 'BEGIN{printf "%.3f", a/b}')
        ctx=$(awk -v f="$(json "$o" context_none)" -v s="$(json "$o" context_bytes)" 'BEGIN{printf "%.2f", (s > 0 ? f / s : 0)}')
        printf '  %-20s %10.1f %8s %8sx %10.1f %10.1f\n' "$p" "${best[$p]}" "$ratio" "$ctx" \
            "$(awk -v b="$(json "$o" peak_total)" 'BEGIN{print b/1048576}')" \
            "$(awk -v b="$(json "$o" peak_rss)" 'BEGIN{print b/1048576}')"
    done
    unset best line
done

#!/usr/bin/env bash
# CompAct's step time against none's (issue 18: "a compact:r=0.25 step is
# not slower than none"): bench_step's full AdamW training step on one
# model, policies interleaved for ROUNDS rounds so that drift and other load
# hit all alike, best round of each; prints tokens/s, the forward /
# backward / optimizer split and each policy's ratio to none.  Each run is
# its own process.
#
# usage: bench/compact_speed.sh [BUILD_DIR] [MODEL:BATCH:SEQ]   (default build, llama-mini:8:256)
#        ROUNDS=5 THREADS=2 STEPS=5 POLICIES="none compact:r=0.25 ..."
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
IFS=: read -r model batch seq <<<"${2:-llama-mini:8:256}"
rounds=${ROUNDS:-5}
threads=${THREADS:-2}
steps=${STEPS:-5}
policies=${POLICIES:-"none compact:r=0.5 compact:r=0.25 compact:r=0.125"}
json() { sed "s/.*\"$1\": *\([0-9.]*\).*/\1/" <<<"$2"; }
declare -A best split
for ((r = 0; r < rounds; r++)); do
    for p in $policies; do
        out=$(OMP_NUM_THREADS=$threads "$build/bench_step" "$model" "$batch" "$p" "$steps" "$threads" "$seq" | tail -1)
        echo "$p $out" >> "${LOG:-/dev/null}"
        v=$(json tokens_per_s "$out")
        if awk -v a="$v" -v b="${best[$p]:-0}" 'BEGIN { exit !(a > b) }'; then
            best[$p]=$v
            split[$p]="$(json forward_s "$out")/$(json backward_s "$out")/$(json optimizer_s "$out")"
        fi
    done
done
printf '%-18s %10s %8s  %s\n' policy tokens/s vs_none "forward/backward/optimizer s per step"
for p in $policies; do
    ratio=-
    [ -n "${best[none]:-}" ] && ratio=$(awk -v a="${best[$p]}" -v b="${best[none]}" 'BEGIN { printf "%.3f", a / b }')
    printf '%-18s %10s %8s  %s\n' "$p" "${best[$p]}" "$ratio" "${split[$p]}"
done

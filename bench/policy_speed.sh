#!/usr/bin/env bash
# A policy's step time against none's (CompAct, issue 18: "a compact:r=0.25
# step is not slower than none"; AGoQ, issue 19: at most 15% slower):
# bench_step's full AdamW training step on one model, policies interleaved
# for ROUNDS rounds so that drift and other load hit all alike, best round of
# each.  Prints per policy the wall-clock
# tokens/s with the forward / backward / optimizer split, and the CPU time
# of a step (user + system of a STEPS-step run minus a 1-step run, divided
# by STEPS - 1: setup and warm-up cancel), each with its ratio to none.  The
# CPU time is the figure to trust on a machine that is not idle; the wall
# clock is on an idle one.  Each run is its own process.
#
# usage: bench/policy_speed.sh [BUILD_DIR] [MODEL:BATCH:SEQ]   (default build, llama-mini:8:256)
#        ROUNDS=3 THREADS=1 STEPS=5 POLICIES="none compact:r=0.25 ..."
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
IFS=: read -r model batch seq <<<"${2:-llama-mini:8:256}"
rounds=${ROUNDS:-3}
threads=${THREADS:-1}
steps=${STEPS:-5}
policies=${POLICIES:-"none compact:r=0.5 compact:r=0.25 compact:r=0.125"}
json() { sed "s/.*\"$1\": *\([0-9.]*\).*/\1/" <<<"$2"; }
# run STEPS: the last JSON line on stdout, the child's CPU seconds in $cpu
run() {
    local t
    t=$( { TIMEFORMAT=%3U+%3S; time OMP_NUM_THREADS=$threads "$build/bench_step" "$model" "$batch" "$1" "$2" \
        "$threads" "$seq" > "$tmp"; } 2>&1 )
    cpu=$(awk -v e="$t" 'BEGIN { split(e, a, "+"); print a[1] + a[2] }')
    out=$(tail -1 "$tmp")
}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
declare -A best split cpu_best
for ((r = 0; r < rounds; r++)); do
    for p in $policies; do
        run "$p" 1; c1=$cpu
        run "$p" "$steps"; cn=$cpu
        echo "$p cpu1 $c1 cpu$steps $cn $out" >> "${LOG:-/dev/null}"
        per=$(awk -v a="$cn" -v b="$c1" -v n="$steps" 'BEGIN { printf "%.4f", (a - b) / (n - 1) }')
        if [ -z "${cpu_best[$p]:-}" ] || awk -v a="$per" -v b="${cpu_best[$p]}" 'BEGIN { exit !(a < b) }'; then
            cpu_best[$p]=$per
        fi
        v=$(json tokens_per_s "$out")
        if awk -v a="$v" -v b="${best[$p]:-0}" 'BEGIN { exit !(a > b) }'; then
            best[$p]=$v
            split[$p]="$(json forward_s "$out")/$(json backward_s "$out")/$(json optimizer_s "$out")"
        fi
    done
done
printf '%-18s %10s %8s  %-22s %12s %8s\n' policy tokens/s vs_none "fwd/bwd/opt s per step" "CPU s/step" vs_none
for p in $policies; do
    r1=- r2=-
    [ -n "${best[none]:-}" ] && r1=$(awk -v a="${best[$p]}" -v b="${best[none]}" 'BEGIN { printf "%.3f", a / b }')
    [ -n "${cpu_best[none]:-}" ] && r2=$(awk -v a="${cpu_best[$p]}" -v b="${cpu_best[none]}" 'BEGIN { printf "%.3f", a / b }')
    printf '%-18s %10s %8s  %-22s %12s %8s\n' "$p" "${best[$p]}" "$r1" "${split[$p]}" "${cpu_best[$p]}" "$r2"
done

#!/usr/bin/env bash
# Cost of --deterministic (actc_set_deterministic) against the default in
# one run: the training step of each configuration with and without it,
# ROUNDS rounds interleaved so that drift hits both alike, best of the
# rounds; prints samples (or tokens) per second of each and their ratio.
# Each configuration runs in its own process.
#
# usage: bench/deterministic_cost.sh [BUILD_DIR] [ROUNDS] [MODEL:BATCH[:SEQ] ...]
#   default: build 3 resnet20:128 gpt-mini:8:256 llama-mini:8:256; POLICY=none, THREADS=2
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
rounds=${2:-3}
shift 2 2>/dev/null || shift $#
configs=${*:-resnet20:128 gpt-mini:8:256 llama-mini:8:256}
policy=${POLICY:-none}
threads=${THREADS:-2}
rate() { sed -n 's/.*"\(samples\|tokens\)_per_s":\([0-9.]*\).*/\2/p' <<<"$1"; }
printf '%-22s %8s %14s %14s %8s\n' config policy default/s deterministic/s ratio
for cfg in $configs; do
    IFS=: read -r model batch seq <<<"$cfg"
    steps=$([ "$model" = resnet18 ] && echo 3 || echo 5)
    best0=0 best1=0
    for ((r = 0; r < rounds; r++)); do
        for det in 0 1; do
            out=$(ACTC_BENCH_DETERMINISTIC=$det OMP_NUM_THREADS=$threads "$build/bench_step" "$model" "$batch" "$policy" \
                $steps $threads $seq | tail -1)
            echo "$out" >> "${LOG:-/dev/null}"
            v=$(rate "$out")
            if [ $det = 0 ]; then best0=$(awk -v a="$v" -v b=$best0 'BEGIN{print (a > b ? a : b)}')
            else best1=$(awk -v a="$v" -v b=$best1 'BEGIN{print (a > b ? a : b)}'); fi
        done
    done
    printf '%-22s %8s %14.1f %14.1f %8.3f\n' "$cfg" "$policy" "$best0" "$best1" "$(awk -v a=$best1 -v b=$best0 'BEGIN{print a / b}')"
done

#!/usr/bin/env bash
# CompAct's memory (issue 18): the allocator peak, the context before
# backward, the gradients, the optimizer state and the process peak RSS of a
# two-step llama-mini run per policy and batch size (the paper's Table 3 and
# Figure 7 in shape), each run in its own process, and the ratio of each
# peak to `none`'s at the same batch (`-` when none is not in POLICIES or
# comes later).  Memory figures do not depend on the
# machine's load, so this may run beside other work.
#
# usage: bench/compact_memory.sh [BUILD_DIR] [MODEL]
#        BATCHES="4 8 16 32 64" POLICIES="none compact:r=0.25 ..." THREADS=1
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
model=${2:-llama-mini}
batches=${BATCHES:-"8 32"}
policies=${POLICIES:-"none compact:r=0.5 compact:r=0.25 compact:r=0.125 gact:4 compact:r=0.25+gact:4"}
threads=${THREADS:-1}
mib() { awk -v v="$1" -v u="$2" 'BEGIN { f = u == "GiB" ? 1024 : u == "KiB" ? 1/1024 : u == "B" ? 1/1048576 : 1; printf "%.1f", v * f }'; }
printf "| %-5s | %-32s | %9s | %6s | %9s | %8s | %8s | %9s |\n" batch policy "peak MiB" "vs none" "context" "grad" "optim" "RSS MiB"
printf "|%s|\n" "-------|----------------------------------|-----------|--------|-----------|----------|----------|-----------"
for b in $batches; do
    base=""
    for p in $policies; do
        out=$("$build/actc" train --model "$model" --compress "$p" --data text --epochs 1 --epoch-steps 2 --batch "$b" \
              --eval-tokens 1024 --threads "$threads" --progress off 2>&1) || { echo "$p batch $b failed: $out" >&2; continue; }
        peak=$(echo "$out" | awk '/^  total/ { print $2, $3 }')
        ctx=$(echo "$out" | awk '/^  CONTEXT/ { print $2, $3 }')
        grad=$(echo "$out" | awk '/^  GRAD/ { print $2, $3 }')
        opt=$(echo "$out" | awk '/^  OPTIM/ { print $2, $3 }')
        rss=$(echo "$out" | awk '/^process peak RSS/ { print $4, $5 }')
        pk=$(mib $peak); [ "$p" = none ] && base=$pk
        ratio=-; [ -n "$base" ] && ratio=$(awk -v a="$pk" -v b="$base" 'BEGIN { printf "%.3f", a / b }')
        printf "| %-5s | %-32s | %9s | %6s | %9s | %8s | %8s | %9s |\n" "$b" "$p" "$pk" \
            "$ratio" "$(mib $ctx)" "$(mib $grad)" "$(mib $opt)" "$(mib $rss)"
    done
done

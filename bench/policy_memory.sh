#!/usr/bin/env bash
# Memory per policy (CompAct's Table 3 and Figure 7 in shape, AGoQ's
# savings): the allocator peak, the context before backward, the gradients,
# the optimizer state and the process peak RSS of a two-step run per policy
# and batch size, each run in its own process, and the ratio of each peak to
# `none`'s at the same batch (`-` when none is not in POLICIES or comes
# later).  A policy may carry extra `actc train` flags after '@'s:
# "agoq@--grad-bits@8".  Memory figures do not depend on the machine's
# load, so this may run beside other work.
#
# usage: bench/policy_memory.sh [BUILD_DIR] [MODEL]
#        BATCHES="4 8 16 32 64" POLICIES="none compact:r=0.25 agoq@--grad-bits@8 ..." THREADS=1
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
model=${2:-llama-mini}
batches=${BATCHES:-"8 32"}
policies=${POLICIES:-"none compact:r=0.5 compact:r=0.25 compact:r=0.125 gact:4 compact:r=0.25+gact:4"}
threads=${THREADS:-1}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# exact bytes from the epoch record of --log, in MiB
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$log" | tail -1 | awk '{ printf "%.1f", $1 / 1048576 }'; }
printf "| %-5s | %-32s | %9s | %6s | %9s | %8s | %8s | %9s |\n" batch policy "peak MiB" "vs none" "context" "grad" "optim" "RSS MiB"
printf "|%s|\n" "-------|----------------------------------|-----------|--------|-----------|----------|----------|-----------"
for b in $batches; do
    base=""
    for p in $policies; do
        : > "$log"
        spec=${p%%@*}
        extra=""
        [ "$spec" != "$p" ] && extra=${p#*@} && extra=${extra//@/ }
        # shellcheck disable=SC2086 # extra is a list of flags
        if ! out=$("$build/actc" train --model "$model" --compress "$spec" $extra --data text --epochs 1 --epoch-steps 2 --batch "$b" \
              --eval-tokens 1024 --threads "$threads" --progress off --log "$log" 2>&1); then
            echo "$p batch $b failed: $out" >&2
            continue
        fi
        pk=$(field peak_total)
        [ "$p" = none ] && base=$pk
        ratio=-; [ -n "$base" ] && ratio=$(awk -v a="$pk" -v b="$base" 'BEGIN { printf "%.3f", a / b }')
        printf "| %-5s | %-32s | %9s | %6s | %9s | %8s | %8s | %9s |\n" "$b" "$p" "$pk" "$ratio" \
            "$(field CONTEXT)" "$(field GRAD)" "$(field OPTIM)" "$(field peak_rss)"
    done
done

#!/usr/bin/env bash
# What GACT's sensitivity measurement costs: the time of one measurement (L+1
# extra forward+backward passes on --estimate-samples samples) against the
# time of one training step, from three short runs of the same recipe:
#   A: 1 step,  measuring once       = start-up + M + s
#   B: 3 steps, measuring once       = start-up + M + 3 s
#   C: 3 steps, measuring every step = start-up + 3 M + 3 s
# s = (B - A) / 2, M = (C - B) / 2; the overhead averaged over an adapt
# interval of K steps is M / (K s).  Times are the processes' CPU seconds
# (user + system, OpenMP threads waiting passively), so other work on the
# machine disturbs them less than wall-clock; CLOCK=wall measures wall-clock
# (then run it alone).
#
# usage: bench/gact_overhead.sh [BUILD_DIR] [MODEL:BATCH ...]   (default resnet20:128 gpt-mini:16)
#        POLICY=gact:4 ESTIMATE=8 INTERVAL=1000
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
shift || true
configs=${*:-resnet20:128 gpt-mini:16}
policy=${POLICY:-gact:4}
est=${ESTIMATE:-8}
interval=${INTERVAL:-1000}
run() { # model batch steps interval -> seconds
    local TIMEFORMAT='%R %U %S' t
    t=$( { time OMP_WAIT_POLICY=passive "$build/actc" train --model "$1" --batch "$2" --compress "$policy" \
           --max-steps "$3" --adapt-interval "$4" --estimate-samples "$est" --epoch-steps 1000 --progress off \
           > /dev/null; } 2>&1 | tail -1)
    if [ "${CLOCK:-cpu}" = wall ]; then awk '{ print $1 }' <<<"$t"; else awk '{ print $2 + $3 }' <<<"$t"; fi
}
printf '%-14s %-8s %10s %14s %16s %22s\n' model policy "step (s)" "measure (s)" "= steps" "overhead at $interval"
for cfg in $configs; do
    model=${cfg%%:*} batch=${cfg##*:}
    a=$(run "$model" "$batch" 1 1000000)
    b=$(run "$model" "$batch" 3 1000000)
    c=$(run "$model" "$batch" 3 1)
    awk -v m="$model:$batch" -v p="$policy" -v a="$a" -v b="$b" -v c="$c" -v k="$interval" 'BEGIN {
        s = (b - a) / 2; M = (c - b) / 2
        printf "%-14s %-8s %10.3f %14.2f %16.1f %21.2f%%\n", m, p, s, M, M / s, 100 * M / (k * s) }'
done

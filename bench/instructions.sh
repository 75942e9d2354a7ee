#!/usr/bin/env bash
# Instructions (callgrind, one thread) that two builds spend on the same
# training run: bench_step MODEL BATCH POLICY 1 1 [SEQ], i.e. model set-up,
# 3 warm-up steps and 1 timed step, old and new side by side with the ratio.
# For refactors that must not cost time: instruction counts repeat where
# wall-clock time on a shared VM does not.  Slow: several minutes per row.
#
# usage: bench/instructions.sh OLD_BUILD NEW_BUILD MODEL:BATCH:POLICY[@SEQ] ...
set -euo pipefail
old=${1:?usage: instructions.sh OLD_BUILD NEW_BUILD CONFIG...} new=${2:?usage: instructions.sh OLD_BUILD NEW_BUILD CONFIG...}
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ir() { OMP_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'; }
printf '%-36s %14s %14s %9s\n' config old new new/old
for cfg in "$@"; do
    seq=""; [[ $cfg == *@* ]] && seq=${cfg##*@}
    spec=${cfg%@*}; model=${spec%%:*}; rest=${spec#*:}; batch=${rest%%:*}; policy=${rest#*:}
    ir "$old/bench_step" $model $batch $policy 1 1 $seq > $tmp/old &
    n=$(ir "$new/bench_step" $model $batch $policy 1 1 $seq); wait; o=$(cat $tmp/old)
    printf '%-36s %14s %14s %9s\n' "$cfg" $o $n $(awk -v a=$o -v b=$n 'BEGIN{printf "%.5f", b/a}')
done

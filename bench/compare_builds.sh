#!/usr/bin/env bash
# Two builds side by side (e.g. main before and after a change): the
# training step of each configuration with each build's bench_step, ROUNDS
# rounds interleaved so that drift hits both alike, best of the rounds;
# prints samples (or tokens) per second of each, their ratio new/old, and
# whether the context bytes agree.  Each run is its own process.
#
# usage: bench/compare_builds.sh OLD_BUILD NEW_BUILD [ROUNDS] [MODEL:BATCH:POLICY[@SEQ] ...]
#   default: 3 rounds of resnet20:128 under none, actnn:L3 and gact:4, gpt-mini:8 under
#   none and gact:4, llama-mini:8 under none (context 256); THREADS=2
set -euo pipefail
old=${1:?usage: compare_builds.sh OLD_BUILD NEW_BUILD [ROUNDS] [CONFIG...]}
new=${2:?usage: compare_builds.sh OLD_BUILD NEW_BUILD [ROUNDS] [CONFIG...]}
rounds=${3:-3}
shift 3 2>/dev/null || shift $#
configs=${*:-resnet20:128:none resnet20:128:actnn:L3 resnet20:128:gact:4 gpt-mini:8:none@256 gpt-mini:8:gact:4@256 llama-mini:8:none@256}
threads=${THREADS:-2}
rate() { sed -n 's/.*"\(samples\|tokens\)_per_s":\([0-9.]*\).*/\2/p' <<<"$1"; }
ctx() { sed -n 's/.*"context_bytes":\([0-9]*\).*/\1/p' <<<"$1"; }
printf '%-28s %12s %12s %8s  %s\n' config old/s new/s new/old context
for cfg in $configs; do
    # MODEL:BATCH:POLICY[@SEQ], where POLICY may hold colons (actnn:L3).
    seq=""
    [[ $cfg == *@* ]] && seq=${cfg##*@}
    spec=${cfg%@*}
    model=${spec%%:*} rest=${spec#*:}
    batch=${rest%%:*} policy=${rest#*:}
    steps=$([ "$model" = resnet18 ] && echo 3 || echo 5)
    best_old=0 best_new=0 ctx_old="" ctx_new=""
    for ((r = 0; r < rounds; r++)); do
        for b in old new; do
            dir=$old; [ $b = new ] && dir=$new
            out=$(OMP_NUM_THREADS=$threads "$dir/bench_step" "$model" "$batch" "$policy" $steps $threads $seq | tail -1)
            echo "$b $out" >> "${LOG:-/dev/null}"
            v=$(rate "$out")
            if [ $b = old ]; then best_old=$(awk -v a="$v" -v b=$best_old 'BEGIN{print (a > b ? a : b)}'); ctx_old=$(ctx "$out")
            else best_new=$(awk -v a="$v" -v b=$best_new 'BEGIN{print (a > b ? a : b)}'); ctx_new=$(ctx "$out"); fi
        done
    done
    same=$([ "$ctx_old" = "$ctx_new" ] && echo same || echo "differs: $ctx_old -> $ctx_new")
    printf '%-28s %12.1f %12.1f %8.3f  %s\n' "$cfg" "$best_old" "$best_new" "$(awk -v a=$best_new -v b=$best_old 'BEGIN{print a / b}')" "$same"
done

#!/usr/bin/env bash
# Data-parallel training steps on this machine: 1 rank x 2 threads against
# 2 ranks x 1 thread with the fp32 and the 8-bit all-reduce (and, with
# POLICY, under that policy), same global batch, same steps, run one after
# another in one go: tokens/s and its ratio to 1 x 2, step time, and per
# step the communication from the first bucket's start to the last one's
# end and the part of it left exposed after backward.
#
# usage: bench/dist_step.sh [BUILD] [MODEL:BATCH:SEQ]     (default build, llama-mini:8:256)
#        STEPS=30 ROUNDS=2 POLICY=none BUCKET=25MiB
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
IFS=: read -r model batch seq <<<"${2:-llama-mini:8:256}"
steps=${STEPS:-30}
rounds=${ROUNDS:-2}
policy=${POLICY:-none}
bucket=${BUCKET:-25MiB}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common="--model $model --compress $policy --data text --batch $batch --seq $seq --epochs 1 --epoch-steps $steps --eval-tokens $((batch * seq)) --progress off --bucket $bucket"
# name|launcher|flags
configs=("1 rank x 2 threads||--threads 2"
         "2 ranks x 1, fp32|mpirun -np 2|--threads 1 --grad-comm 32"
         "2 ranks x 1, 8-bit|mpirun -np 2|--threads 1 --grad-comm 8")
declare -A best
for ((r = 0; r < rounds; r++)); do
    for c in "${configs[@]}"; do
        IFS='|' read -r name launch flags <<<"$c"
        log=$out/$r-${name//[^a-z0-9]/_}.jsonl
        # shellcheck disable=SC2086
        $launch "$build/actc" train $common $flags --log "$log" > /dev/null
        tps=$(grep '"event":"epoch"' "$log" | sed 's/.*"tokens_per_s":\([0-9.]*\).*/\1/')
        if [ -z "${best[$name]:-}" ] || awk -v a="$tps" -v b="${best[$name]%% *}" 'BEGIN { exit !(a > b) }'; then
            comm=$(grep -o '"exposed_s":[0-9.]*,"comm_s":[0-9.]*' "$log" | sed 's/"exposed_s":\([0-9.]*\),"comm_s":\([0-9.]*\)/\1 \2/' || true)
            best[$name]="$tps ${comm:-0 0}"
        fi
    done
done
base=${best["1 rank x 2 threads"]%% *}
printf "%s batch %d x %d tokens, %s, %d steps, best of %d rounds\n" "$model" "$batch" "$seq" "$policy" "$steps" "$rounds"
printf "%-22s %10s %8s %9s %12s %12s\n" config tokens/s ratio "step ms" "comm ms" "exposed ms"
for c in "${configs[@]}"; do
    name=${c%%|*}
    read -r tps exposed comm <<<"${best[$name]}"
    awk -v n="$name" -v t="$tps" -v b="$base" -v e="$exposed" -v c="$comm" -v tok=$((batch * seq)) \
        'BEGIN { printf "%-22s %10.0f %8.3f %9.1f %12.1f %12.1f\n", n, t, t / b, 1e3 * tok / t, 1e3 * c, 1e3 * e }'
done

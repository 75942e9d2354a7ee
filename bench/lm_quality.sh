#!/usr/bin/env bash
# gpt-mini on the default corpus (the King James Bible, `make corpus`) for a
# budget of steps that takes about 10 minutes on this machine (2 cores), then
# generation from the checkpoint: issue 3's quality check.  Prints each
# epoch's validation loss in bits per byte, the unigram baseline, the whole
# held-out text's bpb (actc eval) and a sample.
#
# usage: bench/lm_quality.sh [BUILD_DIR] [MODEL] [POLICY]   (default build, gpt-mini, none)
#        RECIPE="..." to change the training flags, CKPT=FILE to keep the checkpoint,
#        LAUNCH="mpirun -np 2" to train data-parallel (evaluation and generation
#        then run in one process)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
model=${2:-gpt-mini}
policy=${3:-none}
recipe=${RECIPE:-"--epochs 10 --epoch-steps 120 --batch 8 --lr 3e-3 --warmup 100 --min-lr 1e-4 --eval-tokens 32768"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s)
ckpt=${CKPT:-$out/lm.ckpt}
# stdin from /dev/null: mpirun hands its stdin to rank 0, and would eat a
# caller's `while read` input.
# shellcheck disable=SC2086 # LAUNCH is a command with its flags
${LAUNCH:-} "$build/actc" train --model "$model" --compress "$policy" --data text $recipe --progress off \
    --save "$ckpt" < /dev/null | grep --line-buffered -E "^(actc|text|data parallel|epoch|context before backward|  total|  COMM|process peak RSS|gradients before|optimizer state|communication)"
echo "training took $(( $(date +%s) - start )) s"
"$build/actc" eval --checkpoint "$ckpt"
"$build/actc" generate --checkpoint "$ckpt" --prompt "And God said" --tokens 300 --top-k 20 --seed 1

#!/usr/bin/env bash
# GACT's Table 7 on gpt-mini: context bytes before backward (AM1) and the
# peak of the context during backward, reached while a segment is recomputed
# (AM2), for plain fp32 checkpointing (gact:CKPT), GACT with checkpointing
# (gact:CB1, textbook attention; gact:CB2, memory-efficient attention), and
# without checkpointing (none, gact:4).  One training step each (the gact
# levels measure sensitivities first), synthetic-free: real text windows.
#
# usage: bench/gact_checkpoint_memory.sh [BUILD_DIR] [BATCH]   (default build, 32)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
batch=${2:-32}
printf '%-10s %14s %14s %10s %10s %14s\n' policy "AM1 (MiB)" "AM2 (MiB)" "AM1 x" "AM2 x" "alloc peak"
base1="" base2=""
for p in gact:CKPT gact:CB1 gact:CB2 none gact:4; do
    out=$("$build/actc" train --model gpt-mini --compress "$p" --batch "$batch" --epochs 1 --epoch-steps 1 \
          --eval-tokens 256 --progress off --log /dev/stdout 2>&1)
    rec=$(grep '"event":"epoch"' <<<"$out")
    am1=$(sed -n 's/.*"context_before_backward":\([0-9]*\).*/\1/p' <<<"$rec")
    am2=$(sed -n 's/.*"context_backward_peak":\([0-9]*\).*/\1/p' <<<"$rec")
    peak=$(sed -n 's/.*"peak_total":\([0-9]*\).*/\1/p' <<<"$rec")
    [ -z "$base1" ] && base1=$am1 && base2=$am2
    awk -v p="$p" -v a="$am1" -v b="$am2" -v x="$base1" -v y="$base2" -v k="$peak" 'BEGIN {
        printf "%-10s %14.1f %14.1f %9.2fx %9.2fx %10.1f MiB\n", p, a / 1048576, b / 1048576, x / a, y / b, k / 1048576 }'
done

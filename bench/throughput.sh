#!/usr/bin/env bash
# fp32 training throughput of ResNet-20 and ResNet-18 at batch 32/128/256:
# samples/s and the forward/backward/optimizer split, actc next to PyTorch
# (Debian's python3-torch, if installed) measured in the same run, one process
# per configuration so each peak RSS is its own.  Prints the ratio actc/PyTorch.
#
# usage: bench/throughput.sh [BUILD_DIR] [THREADS]     (default build, 2)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
threads=${2:-2}
policy=${POLICY:-none}
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_torch=1
[ $have_torch = 1 ] || echo "(python3-torch not installed: actc figures only; apt-get install python3-torch for the peer)"
printf '%-9s %5s %12s %12s %7s %10s %10s\n' model batch actc_s/s torch_s/s ratio actc_RSS torch_RSS
for model in resnet20 resnet18; do
    for batch in 32 128 256; do
        steps=$([ $model = resnet18 ] && echo 4 || echo 10)
        a=$(OMP_NUM_THREADS=$threads "$build/bench_step" $model $batch "$policy" $steps $threads | tail -1)
        echo "$a" >> "${LOG:-/dev/null}"
        asps=$(sed 's/.*"samples_per_s":\([0-9.]*\).*/\1/' <<<"$a")
        arss=$(sed 's/.*"peak_rss":\([0-9]*\).*/\1/' <<<"$a")
        if [ $have_torch = 1 ]; then
            t=$(OMP_NUM_THREADS=$threads /usr/bin/python3 "$here/pytorch_step.py" $model $batch $steps $threads | tail -1)
            echo "$t" >> "${LOG:-/dev/null}"
            tsps=$(sed 's/.*"samples_per_s": \([0-9.]*\).*/\1/' <<<"$t")
            trss=$(sed 's/.*"peak_rss": \([0-9]*\).*/\1/' <<<"$t")
        else
            tsps=0; trss=0
        fi
        awk -v m=$model -v b=$batch -v a=$asps -v t=$tsps -v ar=$arss -v tr=$trss 'BEGIN {
            printf "%-9s %5d %12.1f %12.1f %7s %8.0fMiB %8.0fMiB\n", m, b, a, t, (t > 0 ? sprintf("%.2fx", a / t) : "-"), ar / 1048576, tr / 1048576 }'
    done
done

#!/usr/bin/env bash
# fp32 language-model training throughput, actc next to PyTorch in the same
# run: tokens/s, the forward/backward/optimizer split and peak RSS of a full
# AdamW step on random tokens, one process per configuration (so each peak
# RSS is its own).  The configurations of issue 3: gpt-mini (6 layers, width
# 256, 8 heads) at batch 8 and 32, context 256; llama-mini at batch 8; the
# GPT-2 124M shape at batch 4, context 64 (llm.c's train_gpt2.c set-up).
# Prints actc/PyTorch for tokens/s and for peak RSS.
#
# usage: bench/lm_throughput.sh [BUILD_DIR] [THREADS]     (default build, 2)
#        CONFIGS="gpt-mini:8:256 ..." POLICY=none STEPS=5 to change what runs
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
threads=${2:-2}
policy=${POLICY:-none}
configs=${CONFIGS:-"gpt-mini:8:256 gpt-mini:32:256 llama-mini:8:256 gpt2-124m:4:64"}
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_torch=1
[ $have_torch = 1 ] || echo "(python3-torch not installed: actc figures only; apt-get install python3-torch for the peer)"
json() { sed "s/.*\"$1\": *\([0-9.]*\).*/\1/" <<<"$2"; }
printf '%-10s %5s %4s %10s %10s %7s  %-17s %-17s %9s %9s %6s\n' model batch seq actc_tok/s torch_tok/s ratio \
    "actc f/b/o %" "torch f/b/o %" actc_RSS torch_RSS ratio
for c in $configs; do
    IFS=: read -r model batch seq <<<"$c"
    steps=${STEPS:-$([ "$model" = gpt2-124m ] && echo 3 || echo 5)}
    a=$(OMP_NUM_THREADS=$threads "$build/bench_step" "$model" "$batch" "$policy" "$steps" "$threads" "$seq" | tail -1)
    echo "$a" >> "${LOG:-/dev/null}"
    atok=$(json tokens_per_s "$a"); arss=$(json peak_rss "$a")
    af=$(json forward_s "$a"); ab=$(json backward_s "$a"); ao=$(json optimizer_s "$a")
    asplit=$(awk -v f=$af -v b=$ab -v o=$ao 'BEGIN { t = f + b + o; printf "%.0f/%.0f/%.0f", 100*f/t, 100*b/t, 100*o/t }')
    if [ $have_torch = 1 ]; then
        t=$(OMP_NUM_THREADS=$threads /usr/bin/python3 "$here/pytorch_gpt.py" --model "$model" --batch "$batch" \
            --seq "$seq" --steps "$steps" --warmup 2 --threads "$threads" --json | tail -1)
        echo "$t" >> "${LOG:-/dev/null}"
        ttok=$(json tokens_per_s "$t"); trss=$(json peak_rss_mib "$t")
        tsplit=$(awk -v f=$(json forward_pct "$t") -v b=$(json backward_pct "$t") -v o=$(json optimizer_pct "$t") \
            'BEGIN { printf "%.0f/%.0f/%.0f", f, b, o }')
    else
        ttok=0; trss=0; tsplit=-
    fi
    awk -v m=$model -v b=$batch -v s=$seq -v a=$atok -v t=$ttok -v as=$asplit -v ts=$tsplit -v ar=$arss -v tr=$trss 'BEGIN {
        printf "%-10s %5d %4d %10.1f %10.1f %7s  %-17s %-17s %7.0fMiB %7.0fMiB %6s\n", m, b, s, a, t,
            (t > 0 ? sprintf("%.2fx", a / t) : "-"), as, ts, ar / 1048576, tr, (tr > 0 ? sprintf("%.2fx", ar / 1048576 / tr) : "-") }'
done

#!/usr/bin/env bash
# Full-batch GCN training (node classification on a graph file, every step one
# forward/backward over the whole graph): actc with --compress none and with
# gact:4, next to PyTorch (bench/pytorch_gcn.py, Debian's python3-torch, if
# installed) on the same graph, measured in the same run, one process each so
# every peak RSS is its own.  For each: ms a step and steps/s, actc's
# allocator peak (memory.peak_total of the --log epoch line), the process's
# max RSS (/usr/bin/time %M; PyTorch's own ru_maxrss) and the test accuracy
# after the steps.  Prints the ratios actc none/PyTorch (steps/s, peak RSS)
# and gact:4/none (steps/s, allocator peak, RSS).
#
# What is timed: actc's figure is the epoch's wall time (the log's "seconds")
# over all STEPS steps, the first included; PyTorch's excludes 2 warm-up
# steps (its JSON also has ms_per_step_with_warmup, printed below the table).
# PyTorch's RSS includes the ~250 MB of the torch import itself; its JSON
# has the RSS right after loading the graph (rss_after_load_bytes).
#
# The caller's OMP_* variables reach every run (OMP_NUM_THREADS is set to
# THREADS).  On a small VM, OMP_WAIT_POLICY=passive may matter: on a 2-vCPU
# Firecracker guest PyTorch's spinning OpenMP threads made its 2-thread GCN
# steps 1.2x (a random 70k-node graph) to 35x (2k nodes) slower than passive waiting.
#
# usage: bench/graph_speed.sh [ACTC_BINARY] [GRAPH] [STEPS] [THREADS]
#        (defaults: build/actc, build/data/fmnist-knn10.graph, 50, 2)
#        LOG=FILE appends every run's JSON line (actc's epoch event, PyTorch's)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
actc=${1:-$here/../build/actc}
graph=${2:-$here/../build/data/fmnist-knn10.graph}
steps=${3:-50}
threads=${4:-2}
[ -x "$actc" ] || { echo "error: $actc: no actc binary (build first, or pass its path)" >&2; exit 1; }
[ -r "$graph" ] || { echo "error: $graph: no graph file (actc train --model gcn --data graph builds the default one)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
have_time=0
[ -x /usr/bin/time ] && have_time=1
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_torch=1

# The number after "KEY": in a JSON line, or nothing.
num() { sed -n "s/.*\"$1\": *\(-\{0,1\}[0-9][0-9.eE+-]*\).*/\1/p" <<<"$2" | head -1; }
# A row's figures, filled by the runs: sps ms alloc rss acc (n/a when missing).
declare -A SPS MS ALLOC RSS ACC
failed=0

run_actc() { # POLICY
    local p=$1 f=$tmp/${1//:/_} line secs st sps rss
    echo "running actc gcn --compress $p ($steps steps, $threads threads) ..." >&2
    local timer=()
    [ $have_time = 1 ] && timer=(/usr/bin/time -f %M -o "$f.time")
    if ! OMP_NUM_THREADS=$threads "${timer[@]}" "$actc" train --model gcn --data "graph:$graph" --compress "$p" \
        --epochs 1 --epoch-steps "$steps" --threads "$threads" --progress off --log "$f.log" >"$f.out" 2>"$f.err"; then
        echo "actc --compress $p failed; its last output:" >&2
        tail -n 5 "$f.out" "$f.err" >&2 || true
        failed=1
        SPS[$p]=n/a MS[$p]=n/a ALLOC[$p]=n/a RSS[$p]=n/a ACC[$p]=n/a
        return 0
    fi
    line=$(grep '"event":"epoch"' "$f.log" 2>/dev/null | tail -1 || true)
    echo "$line" >> "${LOG:-/dev/null}"
    secs=$(num seconds "$line")
    st=$(num step "$line")
    st=${st:-$steps}
    # The log's seconds (%.2f) over the steps; below a second the stdout epoch
    # line's "..., 3.21 steps/s, 15.6 s" has more digits.
    sps=$(sed -n 's/.* \([0-9][0-9.]*\) steps\/s.*/\1/p' "$f.out" 2>/dev/null | tail -1 || true)
    if [ -n "$secs" ] && awk -v s="$secs" -v o="$sps" 'BEGIN { exit !(s >= 1 || (s > 0 && o == "")) }'; then
        sps=$(awk -v s="$secs" -v n="$st" 'BEGIN { printf "%.4f", n / s }')
    fi
    SPS[$p]=${sps:-n/a}
    MS[$p]=n/a
    [ -n "$sps" ] && awk -v s="$sps" 'BEGIN { exit !(s > 0) }' && MS[$p]=$(awk -v s="$sps" 'BEGIN { printf "%.4f", 1e3 / s }')
    local alloc
    alloc=$(num peak_total "$line")
    ALLOC[$p]=${alloc:-n/a}
    rss=""
    [ -s "$f.time" ] && rss=$(awk '/^[0-9]+$/ { v = $1 } END { if (v != "") printf "%d", v * 1024 }' "$f.time")
    [ -n "$rss" ] || rss=$(num peak_rss "$line") # the process peak RSS at the epoch report
    RSS[$p]=${rss:-n/a}
    local acc
    acc=$(num test_acc "$line")
    ACC[$p]=${acc:-n/a}
}

# Formatting: bytes as MiB, fractions as percent, ratios a/b; n/a passes through.
mib() { awk -v b="$1" 'BEGIN { if (b ~ /^[0-9.]+$/) printf "%.1f MiB", b / 1048576; else print "n/a" }'; }
fix() { awk -v x="$1" -v d="$2" 'BEGIN { if (x ~ /^[0-9.eE+-]+$/) printf "%.*f", d, x; else print "n/a" }'; }
pct() { awk -v x="$1" 'BEGIN { if (x ~ /^[0-9.eE+-]+$/) printf "%.2f%%", 100 * x; else print "n/a" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.eE+-]+$/ && b ~ /^[0-9.eE+-]+$/ && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }

run_actc none
run_actc gact:4

torch_note=""
if [ $have_torch = 1 ]; then
    echo "running PyTorch gcn ($steps steps, $threads threads) ..." >&2
    t=$(OMP_NUM_THREADS=$threads /usr/bin/python3 "$here/pytorch_gcn.py" "$graph" "$steps" "$threads" 2>"$tmp/torch.err" \
        | grep '^{' | tail -1 || true)
    if [ -z "$t" ]; then
        echo "(the PyTorch peer failed; its last output:)" >&2
        tail -n 5 "$tmp/torch.err" >&2 || true
    fi
    echo "$t" >> "${LOG:-/dev/null}"
    v=$(num steps_per_s "$t"); SPS[pytorch]=${v:-n/a}
    v=$(num ms_per_step "$t"); MS[pytorch]=${v:-n/a}
    ALLOC[pytorch]=n/a
    v=$(num peak_rss_bytes "$t"); RSS[pytorch]=${v:-n/a}
    v=$(num test_acc "$t"); ACC[pytorch]=${v:-n/a}
    w=$(num ms_per_step_with_warmup "$t")
    ver=$(sed -n 's/.*"torch": *"\([^"]*\)".*/\1/p' <<<"$t")
    torch_note="PyTorch ${ver:-?}: $(fix "$w" 1) ms a step counting its 2 warm-up steps too; RSS after importing torch \
$(mib "$(num rss_before_load_bytes "$t")"), after loading the graph $(mib "$(num rss_after_load_bytes "$t")")"
else
    echo "(python3-torch not installed: actc figures only; apt-get install python3-torch for the peer)"
fi

echo
echo "GCN (2 layers, width 64) on $graph: $steps full-graph steps, $threads threads"
echo
echo "| implementation / policy | ms per step | steps/s | allocator peak | process max RSS | test acc |"
echo "|---|---:|---:|---:|---:|---:|"
rows="none gact:4"
[ $have_torch = 1 ] && rows="$rows pytorch"
for r in $rows; do
    name="actc $r"
    [ "$r" = pytorch ] && name="PyTorch"
    echo "| $name | $(fix "${MS[$r]}" 1) | $(fix "${SPS[$r]}" 2) | $(mib "${ALLOC[$r]}") | $(mib "${RSS[$r]}") | $(pct "${ACC[$r]}") |"
done
echo
if [ $have_torch = 1 ]; then
    echo "actc none / PyTorch: steps/s $(ratio "${SPS[none]}" "${SPS[pytorch]}"), process max RSS $(ratio "${RSS[none]}" "${RSS[pytorch]}")"
fi
echo "actc gact:4 / none: steps/s $(ratio "${SPS[gact:4]}" "${SPS[none]}"), allocator peak $(ratio "${ALLOC[gact:4]}" "${ALLOC[none]}"), process max RSS $(ratio "${RSS[gact:4]}" "${RSS[none]}")"
[ -n "$torch_note" ] && echo "$torch_note"
exit $failed

#!/usr/bin/env bash
# PyTorch under saved-tensor hooks against PyTorch alone, in the same run:
# per model, PyTorch fp32, PyTorch with a 2-bit hook written in PyTorch ops
# (ActNN's scheme, bench/torch_hooks.py), PyTorch with actc's hooks
# (actc.torch.compress: actnn:L3, gact:4, division), and actc's own engine
# (build/bench_step) on the same shape.  Each configuration is its own
# process (its peak RSS is its own); rounds are interleaved and the best
# kept.  Prints tokens (samples) per second, the step time against PyTorch
# fp32's, the saved context of one step and its ratio to fp32's, and the
# peak RSS.
#
# usage: bench/torch_hooks.sh [BUILD_DIR]              (default: build)
#        CONFIGS="gpt-mini:8 resnet18:64" THREADS=2 STEPS=5 ROUNDS=2
#        POLICIES="actnn:L3 gact:4 division" PYTHON=/usr/bin/python3
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
configs=${CONFIGS:-"gpt-mini:8 resnet18:64"}
threads=${THREADS:-2}
steps=${STEPS:-5}
rounds=${ROUNDS:-2}
policies=${POLICIES:-"actnn:L3 gact:4 division"}
python=${PYTHON:-/usr/bin/python3}
"$python" -c 'import torch' 2>/dev/null || { echo "no torch for $python: apt-get install python3-torch"; exit 1; }
export ACTC_LIBRARY=$build
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for cfg in $configs; do
    model=${cfg%%:*} batch=${cfg#*:}
    hooks="fp32 pytorch-2bit"
    for p in $policies; do hooks="$hooks actc:$p"; done
    for r in $(seq "$rounds"); do
        for h in $hooks; do
            OMP_NUM_THREADS=$threads "$python" "$here/torch_hooks.py" --model "$model" --batch "$batch" \
                --hook "$h" --steps "$steps" --warmup 2 --threads "$threads" | tail -1 >> "$tmp/$model.torch"
        done
        # actc's engine on the same model and batch (gpt-mini: its 256-token context).
        for p in none $policies; do
            OMP_NUM_THREADS=$threads "$build/bench_step" "$model" "$batch" "$p" "$steps" "$threads" | tail -1 \
                >> "$tmp/$model.engine"
        done
    done
    echo "== $model, batch $batch, $threads threads: best of $rounds interleaved rounds of $steps steps"
    "$python" - "$tmp/$model.torch" "$tmp/$model.engine" <<'PY'
import json, sys
torch_runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
engine_runs = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
unit = "tokens_per_s" if "tokens_per_s" in torch_runs[0] else "samples_per_s"
def best(runs, key):
    out = {}
    for r in runs:
        if r[key] not in out or r[unit] > out[r[key]][unit]:
            out[r[key]] = r
    return out
t, e = best(torch_runs, "hook"), best(engine_runs, "policy")
base = t["fp32"]
print(f"{'run':<26} {unit:>14} {'step/fp32':>10} {'context MiB':>12} {'fp32/context':>13} {'peak RSS MiB':>13}")
for h, r in t.items():
    print(f"{'torch ' + h:<26} {r[unit]:>14.1f} {base[unit] / r[unit]:>9.2f}x {r['context_mib']:>12.2f} "
          f"{base['context_mib'] / r['context_mib']:>12.1f}x {r['peak_rss_mib']:>13}")
for p, r in e.items():
    ctx = r["context_bytes"] / 2**20
    print(f"{'actc engine ' + p:<26} {r[unit]:>14.1f} {base[unit] / r[unit]:>9.2f}x {ctx:>12.2f} "
          f"{r['context_fp32'] / max(r['context_bytes'], 1):>12.1f}x {r['peak_rss'] // 2**20:>13}")
print("torch", torch_runs[0]["torch"], "| engine: fp32/context is its own fp32 reference's")
PY
done

#!/usr/bin/env bash
# fp32 training speed on this CPU, actc against PyTorch in the same run, and
# actc's dense-product backends against the OpenBLAS kernels the CPU could
# have had.  Per configuration and thread count, four runs (rounds
# interleaved, best round kept):
#   default   build/bench_step as installed: no environment variable (auto
#             picks the dense products' backend: actc info)
#   coretype  OPENBLAS_CORETYPE set to OpenBLAS's best kernels for this CPU
#             (SkylakeX on AVX-512, Haswell or Zen on AVX2): what a user who
#             knows the workaround gets
#   generic   OPENBLAS_CORETYPE=Prescott: what OpenBLAS gives a CPU it does
#             not know (Debian 12's 0.3.21 on Intel models from 0xB0 on);
#             auto then runs the products on oneDNN, so this column is the
#             default of such machines, measurable on any machine
#   pytorch   bench/pytorch_gpt.py or pytorch_step.py, the same model and step
#             (Debian's python3-torch here; any torch with PYTHON=...)
# Prints tokens/s (samples/s for ResNet-18), the backend and OpenBLAS core of
# each actc row, the codecs' share of the step (the store's copies: ~0 for
# fp32 saves, which are references), and the ratios default/coretype,
# generic/coretype and default/pytorch.
#
# usage: bench/cpu_speed.sh [BUILD_DIR] [THREADS...]        (default: build, 1 2)
#        CONFIGS="gpt-mini:16 llama-mini:16 gpt-12x768:4 resnet18:64"  the default set
#        STEPS=3 ROUNDS=1 LOG=FILE (JSON lines of every run) PYTHON=/usr/bin/python3
set -euo pipefail
# The default and pytorch rows are what a user gets, who sets nothing: a
# variable inherited from the caller's environment (this project's VM sets
# OPENBLAS_CORETYPE=Haswell) is dropped; the coretype and generic rows set
# their own.
unset OPENBLAS_CORETYPE
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
shift || true
threads_list=${*:-"1 2"}
configs=${CONFIGS:-"gpt-mini:16 llama-mini:16 gpt-12x768:4 resnet18:64"}
steps=${STEPS:-3}
rounds=${ROUNDS:-1}
python=${PYTHON:-/usr/bin/python3}
log=${LOG:-/dev/null}
have_torch=0
"$python" -c 'import torch' 2>/dev/null && have_torch=1
[ $have_torch = 1 ] || echo "(no torch for $python: actc figures only; apt-get install python3-torch for the peer)"
# The first value of a JSON key on a line (bench_step and the peers print
# flat records; actc info nests, so its fields are read with jfield).
json() { { grep -o "\"$1\": *\"\{0,1\}[^,\"}]*" <<<"$2" || true; } | head -1 | sed 's/.*: *"\{0,1\}//'; }
jfield() { { grep -o "\"$1\":{[^}]*}" <<<"$3" || true; } | head -1 | { grep -o "\"$2\":\"\{0,1\}[^,\"}]*" || true; } |
    sed 's/.*:"\{0,1\}//'; }

# OpenBLAS's best kernels for this CPU, from actc info.
info=$("$build/actc" info --json)
isa=$(jfield cpu isa "$info")
vendor=$(jfield cpu vendor "$info")
case $isa in
avx512) best=SkylakeX ;;
avx2) [ "$vendor" = AuthenticAMD ] && best=Zen || best=Haswell ;;
*) best="" ;;
esac
echo "cpu: $(jfield cpu brand "$info") ($vendor family $(jfield cpu family "$info") model $(jfield cpu model "$info")," \
     "level $isa); OpenBLAS loads its $(jfield openblas core "$info") kernels; its best here: ${best:-none}"
torch_version=$([ $have_torch = 1 ] && "$python" -c 'import torch; print(torch.__version__)' || echo -)
echo "pytorch: $torch_version ($python)"

# One actc run: ENV... -- MODEL BATCH THREADS -> its JSON line ("{}" and a
# note on stderr if it failed: one failed run does not end the table).
actc_run() {
    local envs=() model batch t shape=""
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    model=$1 batch=$2 t=$3
    if [ "$model" = gpt-12x768 ]; then
        model=gpt shape="layers=12,width=768,heads=12,context=1024,vocab=256"
    fi
    env "${envs[@]}" ${shape:+ACTC_BENCH_SHAPE=$shape} OMP_NUM_THREADS=$t \
        "$build/bench_step" "$model" "$batch" none "$steps" "$t" | tail -1 \
        || { echo "cpu_speed: bench_step $model $batch ${envs[*]} failed" >&2; echo "{}"; }
}
torch_run() { # MODEL BATCH THREADS -> its JSON line ("{}" if it failed)
    local model=$1 batch=$2 t=$3
    torch_one "$model" "$batch" "$t" || { echo "cpu_speed: the PyTorch peer of $model $batch failed" >&2; echo "{}"; }
}
torch_one() {
    local model=$1 batch=$2 t=$3
    case $model in
    resnet*) OMP_NUM_THREADS=$t "$python" "$here/pytorch_step.py" "$model" "$batch" "$steps" "$t" | tail -1 ;;
    gpt-12x768)
        OMP_NUM_THREADS=$t "$python" "$here/pytorch_gpt.py" --model gpt-mini --layers 12 --width 768 --heads 12 \
            --context 1024 --vocab 256 --batch "$batch" --steps "$steps" --warmup 2 --threads "$t" --json | tail -1 ;;
    *) OMP_NUM_THREADS=$t "$python" "$here/pytorch_gpt.py" --model "$model" --batch "$batch" --steps "$steps" \
           --warmup 2 --threads "$t" --json | tail -1 ;;
    esac
}
rate() { local r; r=$(json tokens_per_s "$1"); [ -n "$r" ] || r=$(json samples_per_s "$1"); echo "${r:-0}"; }
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (b + 0 > a + 0) ? b : a }'; }

printf '%-11s %5s %3s | %9s %-16s %6s | %9s %-14s | %9s %-14s | %9s | %8s %8s %8s\n' model batch thr default \
    "backend/core" codec% coretype "backend/core" generic "backend/core" pytorch def/core gen/core def/torch
for c in $configs; do
    IFS=: read -r model batch <<<"$c"
    for t in $threads_list; do
        d=0 k=0 g=0 p=0 dj="" kj="" gj=""
        for ((r = 0; r < rounds; r++)); do
            j=$(actc_run -- "$model" "$batch" "$t"); echo "$j" >> "$log"
            [ "$(rate "$j")" = "$(max "$d" "$(rate "$j")")" ] && { d=$(rate "$j"); dj=$j; }
            if [ -n "$best" ]; then
                j=$(actc_run OPENBLAS_CORETYPE=$best -- "$model" "$batch" "$t"); echo "$j" >> "$log"
                [ "$(rate "$j")" = "$(max "$k" "$(rate "$j")")" ] && { k=$(rate "$j"); kj=$j; }
            fi
            j=$(actc_run OPENBLAS_CORETYPE=Prescott -- "$model" "$batch" "$t"); echo "$j" >> "$log"
            [ "$(rate "$j")" = "$(max "$g" "$(rate "$j")")" ] && { g=$(rate "$j"); gj=$j; }
            if [ $have_torch = 1 ]; then
                j=$(torch_run "$model" "$batch" "$t"); echo "$j" >> "$log"
                p=$(max "$p" "$(rate "$j")")
            fi
        done
        backend_of() { [ -n "$1" ] && echo "$(json gemm "$1")/$(json openblas_core "$1")" || echo -; }
        codec=$(awk -v c="$(json codec_s "$dj")" -v f="$(json forward_s "$dj")" -v b="$(json backward_s "$dj")" \
            'BEGIN { printf "%.1f", (f + b > 0) ? 100 * c / (f + b) : 0 }')
        awk -v m="$model" -v b="$batch" -v t="$t" -v d="$d" -v k="$k" -v g="$g" -v p="$p" -v db="$(backend_of "$dj")" \
            -v kb="$(backend_of "$kj")" -v gb="$(backend_of "$gj")" -v cd="$codec" 'function r(x, y) { return y > 0 ? sprintf("%.2fx", x / y) : "-" }
            function v(x) { return x > 0 ? sprintf("%.1f", x) : "-" }
            BEGIN { printf "%-11s %5d %3d | %9s %-16s %6s | %9s %-14s | %9s %-14s | %9s | %8s %8s %8s\n",
                    m, b, t, v(d), db, cd, v(k), kb, v(g), gb, v(p), r(d, k), r(g, k), r(d, p) }'
    done
done

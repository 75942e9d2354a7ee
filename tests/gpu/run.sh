#!/usr/bin/env bash
# The CUDA codecs' checks on a GPU, in one command (issue 38; under 5
# minutes on one H100/H200):
#   1. tests/gpu/gpu_codecs: byte identity with the CPU codecs for every
#      codec, width, input kind and dtype; unbiasedness at 2 bits;
#      throughput of each kernel against a device-to-device copy; bad input;
#   2. python/tests/test_cuda.py (when python3 has torch with CUDA): the
#      package's payloads and hooks on CUDA tensors, bf16 autocast;
#   3. bench/torch_cuda.py: GPT-2 124M and a ResNet-50-like CNN under the
#      hooks, against no hooks and the pure-PyTorch 2-bit hook.
# Without a GPU it says so and exits 0 (CI has none).
#
# usage: tests/gpu/run.sh [BUILD | BUNDLE.tar.xz]
#   BUILD: a build folder with the CUDA codecs (default build-gpu); built
#   here with cmake when it has no tests/gpu_codecs yet (that needs the
#   project's Debian packages).  On a machine without them, bring the
#   tarball tests/gpu/bundle.sh makes (the test, libactc.so and their
#   libraries).
#   BENCH_STEPS (default 10) sets the benchmark's timed steps.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
if [ -f "$BUILD" ] && [ "${BUILD%.tar.xz}" != "$BUILD" ]; then
    dir=$(mktemp -d)
    tar -C "$dir" -xJf "$BUILD"
    BUILD=$dir/b
    export LD_LIBRARY_PATH="$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "no GPU: the CUDA codecs' GPU checks are skipped (ctest's gpu_codecs_emu runs the kernels on CUDA emulated on the CPU)"
    exit 0
fi
nvidia-smi -L
date -u +"date: %Y-%m-%d %H:%M UTC"
if [ ! -x "$BUILD/tests/gpu_codecs" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DACTC_WITH_CUDA=ON || exit 1
    cmake --build "$BUILD" -j"$(nproc)" --target gpu_codecs actc_shared || exit 1
fi
status=0
echo "== gpu_codecs"
"$BUILD/tests/gpu_codecs" || status=1
PY=${PYTHON:-python3}
if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "== python/tests/test_cuda.py"
    ACTC_LIBRARY="$BUILD" "$PY" -m pytest -q -p no:cacheprovider python/tests/test_cuda.py || status=1
    echo "== bench/torch_cuda.py"
    ACTC_LIBRARY="$BUILD" "$PY" bench/torch_cuda.py --steps "${BENCH_STEPS:-10}" || status=1
else
    echo "== python3 has no torch with CUDA: the package's GPU tests and the benchmark are skipped"
fi
echo "tests/gpu/run.sh: $([ $status = 0 ] && echo PASSED || echo FAILED)"
exit $status

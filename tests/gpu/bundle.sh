#!/usr/bin/env bash
# Pack what tests/gpu/run.sh needs on a GPU machine that lacks the
# project's Debian packages (the lent device machine: PyTorch and nvcc, no
# OpenBLAS or oneDNN): the gpu_codecs test, libactc.so and every library
# `ldd` lists outside the C and C++ runtimes (the machine's own are newer
# than Debian 12's, and PyTorch loads them: an older libstdc++ first on
# LD_LIBRARY_PATH could break it), into one xz tarball (ignored by git).
# There: tests/gpu/run.sh gpu-bundle.tar.xz
# usage: tests/gpu/bundle.sh [BUILD] [OUT]   (default build, gpu-bundle.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OUT=${2:-gpu-bundle.tar.xz}
[ -x "$BUILD/tests/gpu_codecs" ] || { echo "no $BUILD/tests/gpu_codecs: build with CUDA first (make build)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/b/tests" "$tmp/b/lib"
cp "$BUILD/tests/gpu_codecs" "$tmp/b/tests/"
# The library as linked: libactc.so and the soname it points to (not
# the older versions a build folder keeps).
cp -P "$BUILD/libactc.so" "$(readlink -f "$BUILD/libactc.so")" "$tmp/b/"
soname=$(objdump -p "$BUILD/libactc.so" | awk '/SONAME/ {print $2}')
[ -e "$BUILD/$soname" ] && cp -P "$BUILD/$soname" "$tmp/b/"
for f in "$BUILD/tests/gpu_codecs" "$BUILD/libactc.so"; do
    ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' | while read -r lib; do
    cp -L "$lib" "$tmp/b/lib/"
done
tar -C "$tmp" -cJf "$OUT" b
echo "$OUT: $(du -h "$OUT" | cut -f1) ($(ls "$tmp/b/lib" | wc -l) libraries)"

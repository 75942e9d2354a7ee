#!/bin/bash
# `cmake --install` into a temporary prefix, then build two examples that use
# only actc.h against the installed tree, the way a user would:
#   - a plain compiler command with `pkg-config --cflags --libs actc`, against
#     libactc.so, and with `pkg-config --static` against libactc.a;
#   - a small CMake project with find_package(actc), against actc::actc and
#     actc::actc_static;
# and run every program: custom_op trains 3 steps and evaluates, embed loads
# Fashion-MNIST and builds its model and trainer (0 epochs: an epoch of
# ResNet-20 plus its evaluation would take minutes).
# usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $*"; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }

# What is installed where (the library directory is lib/ or lib/<multiarch>/,
# as GNUInstallDirs chose it at configure time).
pc=$(find "$prefix" -name actc.pc -path '*/pkgconfig/*')
[ -n "$pc" ] || fail "no actc.pc installed"
libdir=$(dirname "$(dirname "$pc")")
major=$(sed -n 's/^#define ACTC_VERSION_MAJOR \([0-9]*\)$/\1/p' "$src/include/actc.h")
minor=$(sed -n 's/^#define ACTC_VERSION_MINOR \([0-9]*\)$/\1/p' "$src/include/actc.h")
patch=$(sed -n 's/^#define ACTC_VERSION_PATCH \([0-9]*\)$/\1/p' "$src/include/actc.h")
version=$major.$minor.$patch
# The ABI policy: MAJOR.MINOR in the soname before 1.0, MAJOR from 1.0 on.
if [ "$major" = 0 ]; then soname=libactc.so.$major.$minor; else soname=libactc.so.$major; fi
for f in "$prefix/include/actc.h" "$libdir/libactc.a" "$libdir/libactc.so.$version" "$libdir/$soname" \
         "$libdir/libactc.so" "$libdir/cmake/actc/actcConfig.cmake" "$libdir/cmake/actc/actcConfigVersion.cmake" \
         "$prefix/bin/actc" "$prefix/share/man/man1/actc.1"; do
    [ -e "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
# (Outputs are read whole before grep -q: under pipefail a writer that
# grep's early exit kills with SIGPIPE would fail the pipeline.)
[ "$(readlink "$libdir/libactc.so")" = "$soname" ] || fail "libactc.so does not link to $soname"
dyn=$(readelf -d "$libdir/libactc.so.$version")
grep -q "SONAME.*\[$soname\]" <<<"$dyn" || fail "soname of libactc.so is not $soname"
help=$("$prefix/bin/actc" --help)
grep -qF "actc $version " <<<"$help" || fail "installed actc --help does not say actc $version"

export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --modversion actc)" = "$version" ] || fail "pkg-config --modversion actc is not $version"

# The programs' own needs (custom_op uses expf) come after the library's.
check_run() { # NAME LINKAGE(shared|static): run the built program
    local exe=$1 linkage=$2 out dyn
    dyn=$(readelf -d "$exe")
    if grep -q "NEEDED.*\[libactc\.so" <<<"$dyn"; then
        [ "$linkage" = shared ] || fail "$exe should be linked with libactc.a but needs libactc.so"
        grep -q "NEEDED.*\[$soname\]" <<<"$dyn" || fail "$exe does not need $soname"
    else
        [ "$linkage" = static ] || fail "$exe should need $soname"
    fi
    # BLAS must be Debian's OpenMP build (the pthread one fights OpenMP for
    # the cores): through libactc.so's run path, or the static link's own.
    dyn=$(ldd "$exe")
    grep -qE 'libopenblas\.so\.0 => [^ ]*/openblas-openmp/' <<<"$dyn" || fail "$exe loads another OpenBLAS: $(grep openblas <<<"$dyn")"
    case $exe in
    *custom_op*)
        out=$("$exe" bf16 3 "$tmp/custom_op.ckpt") || fail "$exe bf16 3 exited with $?"
        grep -qE '^policy bf16: 3 steps, train loss [0-9.]+, test accuracy [0-9.]+% on 2000 images' <<<"$out" ||
            fail "$exe printed: $out" ;;
    *embed*)
        "$exe" bf16 0 "$tmp/embed.ckpt" 256 || fail "$exe bf16 0 exited with $?" ;;
    esac
    echo "ok: $(basename "$exe") ($linkage)"
}

step "pkg-config: $cc ... \$(pkg-config --cflags --libs actc)"
mkdir "$tmp/pc"
for ex in custom_op embed; do
    # The installed libactc.so is outside the loader's paths: the run path says where.
    # shellcheck disable=SC2046 # pkg-config's output is a list of words
    "$cc" -std=c11 -Wall -Wextra -o "$tmp/pc/${ex}_shared" "$src/examples/$ex.c" \
        $(pkg-config --cflags --libs actc) -Wl,-rpath,"$libdir" -lm
    check_run "$tmp/pc/${ex}_shared" shared
    # --static adds what libactc.a needs; -Bstatic makes the linker take
    # libactc.a over libactc.so, which sits next to it.
    libs=$(pkg-config --static --libs actc)
    libs=${libs/-lactc/-Wl,-Bstatic -lactc -Wl,-Bdynamic}
    # shellcheck disable=SC2086
    "$cc" -std=c11 -Wall -Wextra -o "$tmp/pc/${ex}_static" "$src/examples/$ex.c" $(pkg-config --cflags actc) $libs -lm
    check_run "$tmp/pc/${ex}_static" static
done

step "CMake: find_package(actc $major.$minor REQUIRED)"
mkdir "$tmp/cm"
cat >"$tmp/cm/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.18)
project(actc_consumer LANGUAGES C)
find_package(actc $major.$minor REQUIRED)
foreach(ex custom_op embed)
  add_executable(\${ex}_shared $src/examples/\${ex}.c)
  target_link_libraries(\${ex}_shared PRIVATE actc::actc m)
  add_executable(\${ex}_static $src/examples/\${ex}.c)
  target_link_libraries(\${ex}_static PRIVATE actc::actc_static m)
endforeach()
# The package's version compatibility follows the ABI policy.
find_package(actc $major.$((minor + 1)) QUIET)
if(actc_FOUND)
  message(FATAL_ERROR "find_package(actc $major.$((minor + 1))) accepted actc $version")
endif()
EOF
cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "configuring the find_package project"; }
cmake --build "$tmp/cm/build" -j2 >>"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "building the find_package project"; }
for ex in custom_op embed; do
    check_run "$tmp/cm/build/${ex}_shared" shared
    check_run "$tmp/cm/build/${ex}_static" static
done
echo "PASS: installed actc $version ($soname) builds and runs through pkg-config and find_package"

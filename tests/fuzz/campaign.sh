#!/usr/bin/env bash
# The long fuzzing campaign: every target for SECONDS (600), JOBS targets
# at a time (the machine's cores), under ASan and UBSan, each growing its
# own corpus in CORPUS/<target> from the committed seeds (kept between
# campaigns: the next one starts where this one stopped).  A finding is
# written as CORPUS/<target>/crash-* (or leak-*, timeout-*, oom-*); the
# script ends non-zero naming it, and the input belongs in
# tests/fuzz/regress/<target>/ with the fix.  Logs: CORPUS/<target>.log.
#
#   CC=clang cmake -S . -B build-fuzz -DACTC_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
#   cmake --build build-fuzz -j
#   tests/fuzz/campaign.sh build-fuzz corpus 600
set -u
BUILD=${1:-build-fuzz}
CORPUS=${2:-corpus}
SECONDS_EACH=${3:-600}
JOBS=${4:-$(nproc)}
SRC=$(cd "$(dirname "$0")" && pwd)
TARGETS=$(sed -n 's/^set(ACTC_FUZZ_TARGETS \(.*\))$/\1/p' "$SRC/CMakeLists.txt")
[ -n "$TARGETS" ] || { echo "error: no targets in $SRC/CMakeLists.txt" >&2; exit 2; }
for t in $TARGETS; do
    [ -x "$BUILD/tests/fuzz/fuzz_$t" ] || { echo "error: $BUILD/tests/fuzz/fuzz_$t is not built (see the top of $0)" >&2; exit 2; }
done
mkdir -p "$CORPUS"

run_one() {
    local t=$1 dir="$CORPUS/$1"
    mkdir -p "$dir"
    # -artifact_prefix: findings next to the corpus, not in the current directory
    OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=30 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$dir/" "$dir" "$SRC/seeds/$t" > "$CORPUS/$t.log" 2>&1
    local rc=$?
    local runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$CORPUS/$t.log" | grep -o '[0-9]*$')
    echo "$t: exit $rc, ${runs:-?} inputs run, corpus $(ls "$dir" | grep -vc -- '-') files"
    return $rc
}

echo "fuzzing $(wc -w <<<"$TARGETS") targets for ${SECONDS_EACH} s each, $JOBS at a time: $TARGETS"
FAILED=""
running=0
declare -A PIDS
for t in $TARGETS; do
    run_one "$t" &
    PIDS[$!]=$t
    running=$((running + 1))
    if [ $running -ge "$JOBS" ]; then
        wait -n -p done_pid || FAILED="$FAILED ${PIDS[$done_pid]}"
        running=$((running - 1))
    fi
done
while [ $running -gt 0 ]; do
    wait -n -p done_pid || FAILED="$FAILED ${PIDS[$done_pid]}"
    running=$((running - 1))
done
found=$(find "$CORPUS" -maxdepth 2 -name 'crash-*' -o -maxdepth 2 -name 'leak-*' -o -maxdepth 2 -name 'timeout-*' \
        -o -maxdepth 2 -name 'oom-*' | sort)
if [ -n "$FAILED" ] || [ -n "$found" ]; then
    echo "FINDINGS in:$FAILED"
    [ -n "$found" ] && echo "$found"
    exit 1
fi
echo "no finding"

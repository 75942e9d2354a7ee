#!/usr/bin/env bash
# Is the library fast under plain glibc malloc?  The training step of each
# model under four mallocs, ROUNDS rounds interleaved so drift hits all alike;
# prints each one's best step time (seconds, forward + backward + optimizer),
# its ratio to jemalloc as the programs linked it before the allocator cache
# (the baseline), the minor page faults per step (MiB faulted in again: the
# cost that does not depend on the machine's load), the allocations per step
# the system malloc served (of all the step made) and the process peak RSS
# (each run in its own process):
#   glibc           plain glibc malloc, no mallopt, cache off
#   jemalloc        the programs before the cache: jemalloc, never purging
#   glibc+cache     plain glibc malloc, the allocator's cache at its default
#   jemalloc+cache  the programs now
# Builds nothing: JEMALLOC_BUILD is a normal build (jemalloc found), GLIBC_BUILD
# one configured with -DACTC_WITH_JEMALLOC=OFF, both of the same source.
# bench_step's switches: ACTC_BENCH_MALLOPT=0 skips tools/malloc_conf.h's
# mallopt fallback, ACTC_BENCH_CACHE=0 turns the cache off.
#
# usage: bench/malloc_overhead.sh [JEMALLOC_BUILD] [GLIBC_BUILD] [ROUNDS] [MODEL:BATCH[:SEQ] ...]
#   default: build build-glibc 3 resnet20:128 gpt-mini:8:256; STEPS=5 THREADS=2
#   VARIANTS="glibc jemalloc glibc+cache jemalloc+cache" to choose; LOG=FILE keeps the JSON lines;
#   on a shared machine each run first waits (at most WAIT_IDLE=600 seconds,
#   0: no wait) until the CPUs are 90% idle for a second: 2 OpenMP threads on
#   2 busy cores run a step 3-10x slower
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
jbuild=${1:-$here/../build}
gbuild=${2:-$here/../build-glibc}
rounds=${3:-3}
shift 3 2>/dev/null || shift $#
configs=${*:-resnet20:128 gpt-mini:8:256}
variants=${VARIANTS:-glibc jemalloc glibc+cache jemalloc+cache}
threads=${THREADS:-2}
steps=${STEPS:-5}
page=$(getconf PAGESIZE)
for b in "$jbuild" "$gbuild"; do
    [ -x "$b/bench_step" ] || { echo "malloc_overhead: no $b/bench_step (build it first)" >&2; exit 2; }
done
ldd "$jbuild/bench_step" | grep -q jemalloc || { echo "malloc_overhead: $jbuild/bench_step does not link jemalloc" >&2; exit 2; }
! ldd "$gbuild/bench_step" | grep -q jemalloc || { echo "malloc_overhead: $gbuild/bench_step links jemalloc" >&2; exit 2; }
# wait_idle: until the CPUs were 90% idle over one second (from /proc/stat),
# at most WAIT_IDLE seconds; counts the runs that started on a busy machine.
busy_starts=0
wait_idle() {
    local deadline=$((SECONDS + ${WAIT_IDLE:-600})) a b
    while :; do
        a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
        awk -v i0="${a[4]}" -v i1="${b[4]}" -v t0="$(IFS=+; echo $((${a[*]:1})))" -v t1="$(IFS=+; echo $((${b[*]:1})))" \
            'BEGIN{exit !((i1 - i0) >= 0.9 * (t1 - t0))}' && return
        [ $SECONDS -lt $deadline ] || { busy_starts=$((busy_starts + 1)); return; }
    done
}
json() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" <<<"$1"; }
# run VARIANT MODEL BATCH STEPS [SEQ]: bench_step's JSON line
run() {
    local v=$1; shift
    local env=(OMP_NUM_THREADS=$threads) b=$jbuild
    case $v in
        glibc) b=$gbuild env+=(ACTC_BENCH_MALLOPT=0 ACTC_BENCH_CACHE=0) ;;
        jemalloc) env+=(ACTC_BENCH_CACHE=0) ;;
        glibc+cache) b=$gbuild env+=(ACTC_BENCH_MALLOPT=0 ACTC_BENCH_CACHE=auto) ;;
        jemalloc+cache) env+=(ACTC_BENCH_CACHE=auto) ;;
        *) echo "malloc_overhead: unknown variant $v" >&2; exit 2 ;;
    esac
    env "${env[@]}" "$b/bench_step" "$1" "$2" none "$3" "$threads" ${4:-} | tail -1
}
for cfg in $configs; do
    IFS=: read -r model batch seq <<<"$cfg"
    declare -A best=() line=()
    for ((r = 0; r < rounds; r++)); do
        for v in $variants; do
            [ "${WAIT_IDLE:-600}" -gt 0 ] && wait_idle
            out=$(run "$v" "$model" "$batch" "$steps" "$seq")
            echo "$v $out" >> "${LOG:-/dev/null}"
            t=$(awk -v f="$(json "$out" forward_s)" -v b="$(json "$out" backward_s)" -v o="$(json "$out" optimizer_s)" 'BEGIN{printf "%.4f", f+b+o}')
            if [ -z "${best[$v]:-}" ] || awk -v a="$t" -v b="${best[$v]}" 'BEGIN{exit !(a<b)}'; then
                best[$v]=$t line[$v]=$out
            fi
        done
    done
    base=${best[jemalloc]:-}
    printf '%s batch %s%s, %s rounds of %s steps, %s threads (best of the rounds)\n' "$model" "$batch" \
        "${seq:+ seq $seq}" "$rounds" "$steps" "$threads"
    printf '  %-16s %8s %12s %16s %16s %9s\n' malloc step_s vs_jemalloc faults/step sys_allocs/step RSS_MiB
    for v in $variants; do
        o=${line[$v]}
        ratio=$([ -n "$base" ] && awk -v a="${best[$v]}" -v b="$base" 'BEGIN{printf "%.3f", a/b}' || echo -)
        flt=$(json "$o" minflt_per_step)
        printf '  %-16s %8.3f %12s %16s %16s %9.1f\n' "$v" "${best[$v]}" "$ratio" \
            "$(awk -v f="$flt" -v p="$page" 'BEGIN{printf "%.0f (%.0fM)", f, f * p / 1048576}')" \
            "$(json "$o" sys_allocs_per_step)/$(json "$o" allocs_per_step)" \
            "$(awk -v b="$(json "$o" peak_rss)" 'BEGIN{print b/1048576}')"
    done
    unset best line
done
[ $busy_starts -eq 0 ] || echo "($busy_starts runs started on a busy machine after waiting WAIT_IDLE seconds)"

# Helpers for the shell tests of the actc command.  Usage: source lib.bash; $ACTC is argv[1].
set -u
ACTC=${1:?usage: test.sh PATH_TO_ACTC}
# tests/cli/old_checkpoint.c: a checkpoint rewritten as actc 0.9.0 wrote it
# (built beside the tests; ctest passes its path).
OLD_CHECKPOINT=${ACTC_OLD_CHECKPOINT:-$(dirname "$ACTC")/tests/old_checkpoint}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
PASSES=0

# valgrind as the memory checks run it.  The programs use jemalloc (see
# tools/malloc_conf.h): the soname synonym makes valgrind replace that malloc
# too, so leaks and invalid accesses are tracked.
# Under valgrind the dense products run on OpenBLAS: oneDNN's JIT-generated
# code reads past what valgrind thinks is defined (it reported "invalid read
# of size 32" on a thread's stack), and auto picks oneDNN on CPUs whose
# OpenBLAS kernels are generic.  The ASan build covers the oneDNN paths.
VALGRIND="env ACTC_GEMM=openblas valgrind -q --soname-synonyms=somalloc=*jemalloc* --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=99"

pass() { PASSES=$((PASSES + 1)); echo "ok: $1"; }
fail() { FAILS=$((FAILS + 1)); echo "FAIL: $1"; }

# expect_fail NAME PATTERN CMD...: CMD must exit non-zero (not by a signal)
# and print PATTERN (extended regex) on stderr or stdout.
expect_fail() {
    local name=$1 pat=$2; shift 2
    local out rc
    out=$("$@" 2>&1); rc=$?
    if [ $rc -eq 0 ]; then fail "$name: exit 0, expected failure"; echo "$out" | tail -5; return; fi
    if [ $rc -ge 128 ]; then fail "$name: killed by signal (exit $rc)"; echo "$out" | tail -5; return; fi
    if ! grep -Eq -- "$pat" <<<"$out"; then fail "$name: output lacks /$pat/"; echo "$out" | tail -5; return; fi
    pass "$name"
}

# write_idx_images FILE N [MAGIC_HEX] [NDIMS]: big-endian IDX header + N*28*28 random bytes.
be32() { printf "\\x$(printf %02x $(( ($1 >> 24) & 255 )))\\x$(printf %02x $(( ($1 >> 16) & 255 )))\\x$(printf %02x $(( ($1 >> 8) & 255 )))\\x$(printf %02x $(( $1 & 255 )))"; }
write_idx_images() {
    local f=$1 n=$2 magic=${3:-00000803}
    { printf "\\x${magic:0:2}\\x${magic:2:2}\\x${magic:4:2}\\x${magic:6:2}"; be32 "$n"; be32 28; be32 28;
      head -c $((n * 784)) /dev/urandom; } > "$f"
}
write_idx_labels() {
    local f=$1 n=$2 magic=${3:-00000801}
    { printf "\\x${magic:0:2}\\x${magic:2:2}\\x${magic:4:2}\\x${magic:6:2}"; be32 "$n";
      for ((i = 0; i < n; i++)); do printf "\\x0$((i % 10))"; done; } > "$f"
}

finish() {
    echo "$PASSES passed, $FAILS failed"
    [ $FAILS -eq 0 ]
}

#!/usr/bin/env bash
# Extract the King James Bible (Debian package bible-kjv, program `bible`) as
# plain text, the default corpus of `actc train --data text`:
#
#   tools/make_kjv_corpus.sh build/data/kjv.txt
#
# `bible -f gen1:1-rev22:21` prints every verse (31,102) on one line, prefixed
# with its reference and one space ("Ge1:1 In the beginning God created ...",
# "1Sm3:4 ...", "Rev22:21 ..."); -f does not wrap lines.  The awk below strips
# the reference and fails if any line does not have one, so a changed output
# format is caught here rather than trained on.  The result is one verse per
# line, Genesis 1:1 to Revelation 22:21, 4,137,850 bytes (about 4.1 MB) of 7-bit ASCII.
#
# The file is written to a temporary name next to OUTFILE and renamed, so an
# interrupted run never leaves a partial corpus behind.
set -euo pipefail

if [ "$#" -ne 1 ]; then
    echo "usage: $0 OUTFILE" >&2
    exit 2
fi
out=$1
if ! command -v bible >/dev/null 2>&1; then
    echo "$0: the 'bible' program is missing: apt-get install bible-kjv" >&2
    exit 1
fi

mkdir -p -- "$(dirname -- "$out")"
tmp=$(mktemp -- "$out.tmp.XXXXXX")
trap 'rm -f -- "$tmp"' EXIT

export LC_ALL=C
bible -f gen1:1-rev22:21 |
    awk '{
            if (sub(/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ /, "") != 1) {
                printf "line %d has no verse reference: %s\n", NR, $0 > "/dev/stderr"
                bad = 1
                exit 1
            }
            print
        }
        END { if (!bad && NR != 31102) {
                  printf "expected 31102 verses, got %d\n", NR > "/dev/stderr"
                  exit 1
              } }' >"$tmp"

bytes=$(wc -c <"$tmp")
if [ "$bytes" -lt 4000000 ]; then
    echo "$0: only $bytes bytes extracted (expected about 4.1 MB)" >&2
    exit 1
fi
chmod 644 -- "$tmp"
mv -f -- "$tmp" "$out"
trap - EXIT
echo "$out: $bytes bytes, $(wc -l <"$out") verses"

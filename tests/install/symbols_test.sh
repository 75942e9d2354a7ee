#!/bin/bash
# The shared library's export list is exactly the public API: every symbol
# `nm -D --defined-only` shows starts with actc_ (never actc__, the internal
# prefix, and nothing foreign), and it is the set of functions actc.h
# declares, so a declaration that lacks ACTC_API (hidden, then missing
# here) or a definition that escapes the header fails.  With the static
# library too: every global symbol it defines carries the actc_ prefix
# (actc__ included), so linking it cannot clash with a program's names.
# usage: symbols_test.sh LIBACTC_SO ACTC_H [CC [LIBACTC_A]]
set -euo pipefail
lib=$1 header=$2 cc=${3:-cc} static=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/exported"
# The header's functions: after preprocessing (comments gone, ACTC_API
# expanded), every actc_ name directly followed by "(" is a declaration;
# function-pointer typedefs ("actc_status (*actc_x_fn)(") are cut out first.
"$cc" -E -P -x c "$header" | sed -E 's/[A-Za-z0-9_]+[[:space:]]*\([[:space:]]*\*//g' | grep -oE '\bactc_[A-Za-z0-9_]+[[:space:]]*\(' | sed 's/[[:space:]]*($//' |
    sort -u >"$tmp/declared"

status=0
if grep -vE '^actc_[a-z0-9]' "$tmp/exported" >"$tmp/foreign"; then
    echo "FAIL: libactc.so exports symbols that are not public actc_ functions:"
    sed 's/^/  /' "$tmp/foreign"
    status=1
fi
comm -13 "$tmp/exported" "$tmp/declared" >"$tmp/missing"
if [ -s "$tmp/missing" ]; then
    echo "FAIL: declared in actc.h but not exported (no ACTC_API, or never defined):"
    sed 's/^/  /' "$tmp/missing"
    status=1
fi
comm -23 "$tmp/exported" "$tmp/declared" >"$tmp/extra"
if [ -s "$tmp/extra" ]; then
    echo "FAIL: exported but not declared in actc.h:"
    sed 's/^/  /' "$tmp/extra"
    status=1
fi
if [ -n "$static" ]; then
    # Names starting with __ are the implementation's (a sanitizer build
    # adds __odr_asan.* beside every global), not the library's.
    nm --defined-only -g "$static" 2>/dev/null | awk 'NF == 3 {print $3}' | grep -v -e '^actc_' -e '^__' | sort -u \
        >"$tmp/unprefixed" || true
    if [ -s "$tmp/unprefixed" ]; then
        echo "FAIL: $static defines global symbols without the actc_ prefix:"
        sed 's/^/  /' "$tmp/unprefixed"
        status=1
    fi
fi
echo "$(wc -l <"$tmp/exported") symbols exported, $(wc -l <"$tmp/declared") functions declared in actc.h"
exit $status

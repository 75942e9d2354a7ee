#!/bin/bash
# The man page actc(1) that the build generates (`actc --man`): a troff page
# that renders without warnings, with a section for every command of
# `actc --help` and every flag of `actc COMMAND --help`, since both are
# printed from the same tables.
# usage: man_test.sh ACTC_1 ACTC_BINARY
set -euo pipefail
page=$1 actc=$2
[ -s "$page" ] || { echo "FAIL: $page missing or empty"; exit 1; }
head -n1 "$page" | grep -q '^\.TH ACTC 1 ' || { echo "FAIL: $page does not start with .TH ACTC 1"; exit 1; }

# Render: groff with every warning on (a warning fails), else man -l; with
# neither installed (neither is a build dependency), only the checks below.
if command -v groff >/dev/null; then
    warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || { echo "FAIL: groff: $warnings"; exit 1; }
    [ -z "$warnings" ] || { echo "FAIL: groff warns:"; echo "$warnings"; exit 1; }
    [ "$(groff -man -Tutf8 "$page" 2>/dev/null | wc -l)" -gt 50 ] || { echo "FAIL: rendered page too short"; exit 1; }
elif command -v man >/dev/null; then
    [ "$(MANWIDTH=80 man -l "$page" 2>/dev/null | wc -l)" -gt 50 ] || { echo "FAIL: man -l rendered too little"; exit 1; }
else
    echo "note: neither groff nor man installed, rendering not checked"
fi

src=$(sed 's/\\-/-/g' "$page") # troff's \- is the hyphen the help text prints
commands=$("$actc" --help | sed -n '/^commands:/,/^$/p' | awk 'NR > 1 && NF {print $1}')
[ -n "$commands" ] || { echo "FAIL: no commands in actc --help"; exit 1; }
status=0 nflags=0
for c in $commands; do
    grep -qxF ".SH \"$c\"" <<<"$src" || { echo "FAIL: no section for command $c"; status=1; }
    for f in $("$actc" "$c" --help | grep -oE '^  --[a-z0-9-]+'); do
        nflags=$((nflags + 1))
        grep -qF "\\fB$f\\fR" <<<"$src" || { echo "FAIL: actc $c $f is in --help but not in the man page"; status=1; }
    done
done
echo "$(wc -w <<<"$commands") commands, $nflags flags checked"
exit $status

#!/bin/sh
# Writes the demo corpus, the King James Bible as plain text (one verse per line, verse
# references stripped, about 4.3 MB), to the path given (default data/kjv.txt).
# Needs Debian's bible-kjv and bible-kjv-text packages (the `bible` program and its text).
set -eu
out=${1:-data/kjv.txt}
command -v bible >/dev/null 2>&1 || {
    echo "make-demo-corpus.sh: the 'bible' program is missing: apt-get install bible-kjv bible-kjv-text" >&2
    exit 1
}
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# -f: one verse per line as "Ge1:1 In the beginning..."; -l: a line width no verse reaches, so
# that nothing wraps even on a terminal. sed strips the "Book C:V " prefix (books like 1Sm too).
bible -f -l100000 gen1:1-rev22:21 </dev/null | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' >"$tmp"
lines=$(wc -l <"$tmp")
if [ "$lines" -ne 31102 ] || grep -qE '^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ ' "$tmp"; then
    echo "make-demo-corpus.sh: unexpected output from bible ($lines verses, expected 31102)" >&2
    exit 1
fi
mv "$tmp" "$out"
trap - EXIT

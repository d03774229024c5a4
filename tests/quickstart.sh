#!/bin/sh
# Runs README.md's fine-tuning quick start word by word: the commands of the sh block after the
# line "<!-- quickstart: tests/quickstart.sh runs this block -->", in a scratch directory that
# links to this checkout's Makefile, sources, build, scripts, examples and tests (so that what the
# commands write stays there). Fails unless every command succeeds and the last, `sample --chat`,
# prints an answer: a line of text with no chat markup. `make test` runs it.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in Makefile src include build scripts examples tests; do ln -s "$root/$f" "$tmp/$f"; done
awk '/^<!-- quickstart: tests\/quickstart.sh runs this block -->$/ { marked = 1; next }
     marked && /^```/ { if (inside) exit; inside = 1; next }
     inside' "$root/README.md" >"$tmp/quickstart.sh"
grep -q 'sample .*--chat' "$tmp/quickstart.sh" || {
    echo "quickstart.sh: README.md has no quick start block ending with sample --chat" >&2
    exit 1
}
cd "$tmp"
if ! sh -eu quickstart.sh >out.txt 2>err.txt; then
    echo "quickstart.sh: the quick start failed; its commands:" >&2
    cat quickstart.sh >&2
    echo "stderr:" >&2
    cat err.txt >&2
    exit 1
fi
answer=$(tail -n 1 out.txt)
case "$answer" in
"" | *"<|im_"*)
    echo "quickstart.sh: sample --chat printed no answer: '$answer'" >&2
    exit 1
    ;;
esac
echo "quickstart.sh: the quick start answered: $answer"

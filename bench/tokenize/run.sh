#!/usr/bin/env bash
# Throughput of `megatrain tokenize` on one thread and on all cores, beside Hugging Face's
# `tokenizers` (the reference, where python3 imports it: one thread and all cores) and
# @lenml/tokenizers (node, one thread), on the same text: the KJV demo corpus as one plain-text document
# (data/kjv.txt, 4.1 MB) and as JSONL with one verse a document (31102 documents), then both eight
# times over (kjv8.txt, 33 MB as one document, which megatrain cuts into parts for its threads;
# kjv8.jsonl, 248816 documents) so that the all-core rows time seconds of work, not start-up. For each
# reference tokenizer: megatrain's seconds and MB/s as its summary line reports them (from the
# first input read to the last shard renamed: tokenizer loading excluded), and node's encoding
# seconds and `tokenizers`' (loading excluded too). The token counts of megatrain and `tokenizers`
# must agree up to the separators megatrain puts around each document (end-of-text, and BOS
# where the tokenizer's config adds it): a row where they differ otherwise says so.
#
#   bench/tokenize/run.sh [TOKENIZERS]      default: llama3 qwen3 mistral
#
# Environment: BUILD (build dir, default build), THREADS (the "all cores" count, default nproc),
# NODE=0 to leave node out (its one-document Mistral run takes minutes: transformers.js merges the
# whole text as one word; node never runs the eight-times inputs), LARGE=0 to leave the eight-times
# inputs out. Node's column needs `npm install` in tests/reference/tokenizers.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
threads=${THREADS:-$(nproc)}
names=${1:-llama3 qwen3 mistral}

make -s BUILD="$build" "$build/megatrain" data/kjv.txt tokenizer-data >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -c '
import json, sys
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as g:
    for line in f:
        g.write(json.dumps({"text": line.rstrip("\n")}, ensure_ascii=False) + "\n")
' data/kjv.txt "$work/kjv.jsonl"
inputs=(data/kjv.txt "$work/kjv.jsonl")
if [ "${LARGE:-1}" = 1 ]; then
    for i in 1 2 3 4 5 6 7 8; do cat data/kjv.txt; done >"$work/kjv8.txt"
    for i in 1 2 3 4 5 6 7 8; do cat "$work/kjv.jsonl"; done >"$work/kjv8.jsonl"
    inputs+=("$work/kjv8.txt" "$work/kjv8.jsonl")
fi
have_node=0
have_hf=0
python3 -c 'import tokenizers' 2>/dev/null && have_hf=1
[ "${NODE:-1}" = 1 ] && [ -d tests/reference/tokenizers/node_modules/@lenml/tokenizers ] && command -v node >/dev/null && have_node=1

# megatrain tokenize's summary line ("... into N tokens ..., S s on T threads: M MB/s, ...") and the
# process's CPU seconds (user + system, tokenizer loading included) from /usr/bin/time.
run_ours() { # model input threads
    rm -f "$work"/out_*
    local summary
    summary=$(/usr/bin/time -f "cpu %U %S" -o "$work/time" \
        "$build/megatrain" tokenize --tokenizer "$1" "$2" --out "$work/out" --threads "$3" 2>/dev/null)
    sed -E 's/.* into ([0-9]+) tokens .* ([0-9.]+) s on ([0-9]+) threads: ([0-9.]+) MB\/s.*/\1 \2 \4/' <<<"$summary" |
        tr '\n' ' '
    awk '/^cpu/ { printf "%.2f\n", $2 + $3 }' "$work/time"
}

# hf MODEL INPUT THREADS: `tokenizers`' documents, tokens, seconds and MB/s
hf() {
    python3 bench/tokenize/hf_bench.py "$@" |
        sed -E 's/.*docs=([0-9]+) bytes=([0-9]+) tokens=([0-9]+) seconds=([0-9.]+).*/\1 \3 \4 \2/' |
        awk '{ printf "%s %s %s %.2f\n", $1, $2, $3, $4 / 1e6 / $3 }'
}

printf '%-8s %-10s %8s %10s %9s %8s %9s %14s %16s\n' tokenizer input threads tokens seconds "MB/s" "cpu s" \
    "node s (MB/s)" "tokenizers s (MB/s)"
for name in $names; do
    model=$build/tokenizers/$name
    [ -d "$model" ] || model=tests/data/tokenizers/$name
    for input in "${inputs[@]}"; do
        label=$(basename "$input")
        node_col=-
        if [ $have_node = 1 ] && [[ $label != kjv8.* ]]; then
            node_out=$(node bench/tokenize/lenml_bench.mjs "$model" "$input")
            s=$(sed -E 's/.*seconds=([0-9.]+).*/\1/' <<<"$node_out")
            b=$(sed -E 's/.*bytes=([0-9]+).*/\1/' <<<"$node_out")
            node_col=$(awk -v s="$s" -v b="$b" 'BEGIN { printf "%.2f (%.2f)", s, b / 1e6 / s }')
        fi
        for t in 1 "$threads"; do
            read -r tokens secs mbs cpu <<<"$(run_ours "$model" "$input" "$t")"
            hf_col=-
            if [ $have_hf = 1 ]; then
                read -r docs hf_tokens hf_secs hf_mbs <<<"$(hf "$model" "$input" "$t")"
                hf_col="$hf_secs ($hf_mbs)"
                extra=$((tokens - hf_tokens))
                if [ $extra -ne "$docs" ] && [ $extra -ne $((2 * docs)) ]; then
                    hf_col="$hf_col DIFFERENT: $hf_tokens tokens for $docs documents"
                fi
            fi
            printf '%-8s %-10s %8s %10s %9s %8s %9s %14s %16s\n' "$name" "$label" "$t" "$tokens" "$secs" "$mbs" "$cpu" \
                "$node_col" "$hf_col"
        done
    done
done

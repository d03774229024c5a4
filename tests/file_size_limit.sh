#!/bin/bash
# A file-size limit (ulimit -f) below a checkpoint's blobs: the write past it fails with EFBIG,
# which megatrain reports and handles as a full disk (exit 1, the file named, no partial
# checkpoint left), instead of dying by SIGXFSZ without a word. Usage: file_size_limit.sh MEGATRAIN
set -u
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for i in $(seq 3000); do printf 'light water stone river bread house field wind '; done > "$dir/corpus.txt"
(
    ulimit -f 100 # KiB: the tiny model's master blob is about 490 KiB
    exec "$bin" train --preset tiny --seq 16 --batch 2 --backend cpu --eval-every 0 --steps 4 --ckpt-every 2 \
        --data "$dir/corpus.txt" --out "$dir/run"
) 2> "$dir/err"
rc=$?
fail() { echo "file_size_limit.sh: $1 (exit $rc)"; cat "$dir/err"; exit 1; }
[ "$rc" -ge 128 ] && fail "killed by signal $((rc - 128))"
[ "$rc" -eq 1 ] || fail "expected exit 1"
grep -q "master.bin: write failed: File too large" "$dir/err" || fail "no message naming the file and EFBIG"
ls -d "$dir"/run/ckpt-* 2> /dev/null && fail "a partial checkpoint was left"
exit 0

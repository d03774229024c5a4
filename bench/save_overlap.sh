#!/bin/bash
# How much a periodic checkpoint costs the training that goes on around it: the same run with
# background saves (the default) and with --sync-save, on random tokens. Runs on the device
# machine from the repository root (one call, carry [".debs"]):
#
#   bash bench/save_overlap.sh
#
# Environment: PRESET (llama-3.2-1b), STEPS (50), EVERY (25: checkpoint period), BUILD_DIR
# (build-bench). Prints each run's wall time and its checkpoint lines; logs go to $OUT.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
out=${OUT:-/tmp/megatrain-save}
preset=${PRESET:-llama-3.2-1b}
steps=${STEPS:-50}
every=${EVERY:-25}
build=${BUILD_DIR:-build-bench}
work=$(mktemp -d /tmp/megatrain-save.XXXXXX)
mkdir -p "$out"
make CUDA=1 BUILD="$build" -j"$(nproc)" "$build/megatrain" >"$out/save-build.log" 2>&1 || { tail -30 "$out/save-build.log"; exit 1; }

# llm.c .bin, version 2 (uint32 ids): enough random tokens for every step.
python3 - "$work/tokens.bin" <<'PY'
import struct, sys, random
count = 4_000_000
random.seed(1)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 2, count, *([0] * 253)))
    f.write(struct.pack(f"<{count}I", *(random.randrange(128000) for _ in range(count))))
PY

df -h /tmp | tail -1
for mode in background sync; do
    flag=()
    [ "$mode" = sync ] && flag=(--sync-save)
    rm -rf "$work/run"
    start=$(date +%s%N)
    "$build/megatrain" train --backend cuda --preset "$preset" --data "$work/tokens.bin" --seq 4096 --batch 4 \
        --steps "$steps" --ckpt-every "$every" --keep 1 --eval-every 0 --val-fraction 0 --clip 0 \
        --out "$work/run" "${flag[@]}" >"$out/save-$mode.log" 2>&1
    rc=$?
    end=$(date +%s%N)
    echo "==== $mode: exit $rc, $(((end - start) / 1000000)) ms"
    grep -aE "checkpoint|error" "$out/save-$mode.log" | tail -6
done
rm -rf "$work"

#!/usr/bin/env bash
# The CUDA backend's gated delta rule (the chunked kernels of src/backend/cuda/gdn_rule.cu) beside
# flash-linear-attention's chunk_gated_delta_rule (Triton), forward and backward, same shapes and
# inputs, one table; each output of megatrain's compared with FLA's (relative L2). On the GPU machine:
#
#   FLA_SRC=DIR bash bench/gdn/run.sh        DIR holds FLA's `fla` package (a copy of its source)
#
# Environment: BATCH, SEQ, HEADS, DK, DV (default 4, 4096, 32, 128, 128: Qwen3.5's linear layers),
# PACKED (the second layout's example length, default 512; 0: none), ITERS (default 10), BUILD
# (build-bench), OUT (where the results go), MACHINE (the table's words for the machine), NOTE (a
# paragraph for the table).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .debs ] && . tests/device/env.sh # on the GPU machine: the carried build dependencies
build=${BUILD:-build-bench}
out=${OUT:-/tmp/megatrain-gdn}
mkdir -p "$out"
args=(--batch "${BATCH:-4}" --seq "${SEQ:-4096}" --heads "${HEADS:-32}" --dk "${DK:-128}" --dv "${DV:-128}"
      --iters "${ITERS:-10}" --packed "${PACKED:-512}")
make -s CUDA=1 BUILD="$build" ${NV_ARCHS:+"NV_ARCHS=$NV_ARCHS"} -j"$(nproc)" bench-gdn >"$out/gdn-build.log" 2>&1 || { tail -30 "$out/gdn-build.log"; exit 1; }
raw=$out/gdn.txt
"$build/bench/gdn/bench_gdn" "${args[@]}" --out "$out" | tee "$raw" || true
PYTHONPATH="${FLA_SRC:?FLA_SRC: the directory holding fla}${PYTHONPATH:+:$PYTHONPATH}" \
    python3 bench/gdn/fla_gdn.py "${args[@]}" --compare "$out" 2>&1 | tee -a "$raw" || true
rm -f "$out"/gdn-*.bin
python3 bench/gdn/table.py "$raw" --machine "${MACHINE:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)}" \
    --command "bench_gdn and fla_gdn.py ${args[*]}" --note "${NOTE:-}" --md "$out/gdn.md" --json "$out/gdn.json"
cat "$out/gdn.md"

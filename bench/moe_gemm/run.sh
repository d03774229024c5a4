#!/usr/bin/env bash
# The mixture-of-experts grouped GEMMs at OLMoE-1B-7B's and Qwen3-30B-A3B's shapes, top 8: each way the
# CUDA backend can run them (bench_moe_gemm: the cuBLASLt loop on 1, 2, 4 and 8 streams, the kernels,
# a dense GEMM of the same FLOPs) beside PyTorch's torch._grouped_mm, for 16384 tokens routed uniformly
# and skewed, and for the engine's piece at 16 x 4096 (its default --chunk 8192: 8192 tokens in 2
# segments of 4096, dw adding segment by segment); one table (table.py). On the GPU machine:
#
#   bash bench/moe_gemm/run.sh
#
# Environment: TOKENS (16384), SHAPES (olmoe,qwen3), ITERS (5), STREAMS (1,2,4,8), BUILD (build-bench),
# NV_ARCHS (passed to make; Hopper's alone by default), OUT (where moe-gemm.txt, .md and .json go).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .debs ] && . tests/device/env.sh # on the GPU machine: the carried build dependencies
build=${BUILD:-build-bench}
out=${OUT:-/tmp/megatrain-moe-gemm}
mkdir -p "$out"
tokens=${TOKENS:-16384}
shapes=${SHAPES:-olmoe,qwen3}
iters=${ITERS:-5}
streams=${STREAMS:-1,2,4,8}
make -s CUDA=1 BUILD="$build" NV_ARCHS="${NV_ARCHS:--gencode=arch=compute_90a,code=sm_90a}" -j"$(nproc)" \
    bench-moe-gemm >"$out/moe-gemm-build.log" 2>&1 || { tail -30 "$out/moe-gemm-build.log"; exit 1; }
raw=$out/moe-gemm.txt
: >"$raw"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$raw"
# variant label, then bench_moe_gemm's flags (torch_grouped_mm.py takes --tokens and --load; it has no
# segments: its dw sums an expert's rows at once)
while read -r label flags; do
    echo "# $label: $flags" | tee -a "$raw"
    # shellcheck disable=SC2086 # flags are words
    "$build/bench/moe_gemm/bench_moe_gemm" --shapes "$shapes" --iters "$iters" --streams "$streams" $flags </dev/null \
        | sed "s/^shape=/variant=$label shape=/" | tee -a "$raw" || true
    torch_flags=$(echo "$flags" | sed 's/--seg [0-9]*//')
    # shellcheck disable=SC2086 # flags are words
    python3 bench/moe_gemm/torch_grouped_mm.py --shapes "$shapes" --iters "$iters" $torch_flags </dev/null \
        | sed "s/^shape=/variant=$label shape=/" | tee -a "$raw" || true
done <<VARIANTS
uniform --tokens $tokens --load uniform
skewed --tokens $tokens --load skewed
engine_piece --tokens 8192 --seg 4096 --load uniform
VARIANTS
python3 bench/moe_gemm/table.py "$raw" --md "$out/moe-gemm.md" --json "$out/moe-gemm.json"
cat "$out/moe-gemm.md"

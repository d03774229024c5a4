#!/usr/bin/env bash
# The mixture-of-experts grouped GEMMs at OLMoE-1B-7B's and Qwen3-30B-A3B's shapes, 16384 tokens top 8:
# each way the CUDA backend can run them (bench_moe_gemm: the kernels, the cuBLASLt loop,
# cublasGemmGroupedBatchedEx, a dense GEMM of the same FLOPs) beside PyTorch's torch._grouped_mm, for a
# uniform and a skewed routing, and with the rows in 4 segments of 4096 tokens (dw adds segment by
# segment, as the engine's sequences ask); one table. On the GPU machine:
#
#   bash bench/moe_gemm/run.sh
#
# Environment: TOKENS (16384), SHAPES (olmoe,qwen3), ITERS (5), BUILD (build-bench), NV_ARCHS (passed
# to make; Hopper's alone by default), OUT (where bench.txt and bench.md go).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .debs ] && . tests/device/env.sh # on the GPU machine: the carried build dependencies
build=${BUILD:-build-bench}
out=${OUT:-/tmp/megatrain-moe-gemm}
mkdir -p "$out"
tokens=${TOKENS:-16384}
shapes=${SHAPES:-olmoe,qwen3}
iters=${ITERS:-5}
make -s CUDA=1 BUILD="$build" NV_ARCHS="${NV_ARCHS:--gencode=arch=compute_90a,code=sm_90a}" -j"$(nproc)" \
    bench-moe-gemm >"$out/moe-gemm-build.log" 2>&1 || { tail -30 "$out/moe-gemm-build.log"; exit 1; }
raw=$out/moe-gemm.txt
: >"$raw"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$raw"
for variant in "uniform" "skewed" "uniform --seg 4096"; do
    load=${variant%% *}
    extra=${variant#"$load"}
    echo "# load=$load$extra" | tee -a "$raw"
    # shellcheck disable=SC2086 -- extra is a flag and its value
    "$build/bench/moe_gemm/bench_moe_gemm" --tokens "$tokens" --shapes "$shapes" --iters "$iters" --load "$load" $extra \
        | sed "s/^shape=/variant=$load${extra// /_} shape=/" | tee -a "$raw" || true
    if [ -z "$extra" ]; then
        python3 bench/moe_gemm/torch_grouped_mm.py --tokens "$tokens" --shapes "$shapes" --iters "$iters" --load "$load" \
            | sed "s/^shape=/variant=$load shape=/" | tee -a "$raw" || true
    fi
done
python3 - "$raw" <<'PY' | tee "$out/moe-gemm.md"
import sys
rows, order = {}, []
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    if "way" not in f or "gemm" not in f:
        continue
    key = (f["variant"], f["shape"], f["way"])
    if key not in rows:
        rows[key] = {}
        order.append(key)
    rows[key][f["gemm"]] = f.get("tflops", "err") + ("" if "rel_err_vs_kernel" not in f else " (%s)" % f["rel_err_vs_kernel"])
    if f["gemm"] == "all":
        rows[key]["ms"] = f.get("ms", "-")
gemms = ["gate_up", "down", "gate_up_dx", "down_dx", "gate_up_dw", "down_dw", "all"]
print("TFLOP/s of each GEMM (relative L2 difference from the kernels' results); all: the six together, and their ms")
print()
print("| routing | shape | way | " + " | ".join(gemms) + " | ms |")
print("|---|---|---|" + "---|" * (len(gemms) + 1))
for key in order:
    r = rows[key]
    print("| %s | %s | %s | " % key + " | ".join(r.get(g, "-") for g in gemms) + " | %s |" % r.get("ms", "-"))
PY

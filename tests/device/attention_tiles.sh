#!/bin/bash
# Tiled attention on the GPU (issue 29), one device call of about 7 minutes on one H100, from the
# repository root:
#
#   CUDA_VISIBLE_DEVICES=0 bash tests/device/attention_tiles.sh        carry [".debs"]
#
# 1. builds the CUDA tests and bench_attention, machine code for the GPU at hand only (NV_ARCHS,
#    default Hopper's sm_90a);
# 2. the CUDA tests of windows of queries (tests/cuda/test_cuda_attention.c: both paths, each
#    window against the CPU reference, the windows assembled against the CPU's whole sequence and
#    against the path's own untiled attention, dk and dv summed in bf16 logged beside the fp32 sums
#    the engine keeps), the op table (its window, RoPE-from-a-position and fp32-sum cases) and the
#    engine in windows against the cpu engine; MT_LOG_LEVEL=debug logs cuDNN's engine for every
#    plan (a window whose graph cuDNN's flash engines do not take shows another engine, or a
#    refusal and the CUDA-core kernels);
# 3. bench/attention/run.sh at 131072, 262144 and 524288 tokens with Llama-3.1-8B's heads (32 of
#    128, 8 kv heads), megatrain in windows of 65536 queries as the engine runs them, beside
#    PyTorch's SDPA on the same inputs; then megatrain untiled at 524288 (one call), for the cost
#    of the windows;
# 4. compute-sanitizer's memcheck over the windows of the smallest test, in what is left of the
#    call (MT_SANITIZE=0 skips it).
#
# A pass: every test step "ok"; attention.md's megatrain / PyTorch column >= 0.95x at every length
# (the issue's bar) and its out/dq errors against PyTorch at the bf16 level (~1e-3). Writes to
# $OUT (or /tmp/megatrain-attention-tiles): each step's log (tests.log, memcheck.log, bench.log,
# untiled.log, ...), attention.md, attention.json, attention.txt. Environment: SEQS, NV_ARCHS,
# MT_SANITIZE, ITERS (timed runs a length after one warm-up, 1).
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/megatrain-attention-tiles}
logs=$out # steps.sh: each step's output in $logs/NAME.log
build=build-device
mkdir -p "$out"
. tests/device/env.sh
. tests/device/steps.sh
export NV_ARCHS=${NV_ARCHS:--gencode=arch=compute_90a,code=sm_90a}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

step build make CUDA=1 BUILD=$build NV_ARCHS="$NV_ARCHS" -j"$(nproc)" $build/cuda_tests bench-attention
tests='cuda/@(attention_*windows*|attention_paths_!(*speed*)|ops_table*|engine_matches_cpu_in_windows_*)'
step tests env MT_LOG_LEVEL=debug $build/cuda_tests --jobs 1 --verbose --filter "$tests"

seqs=${SEQS:-131072,262144,524288}
export HEADS=32 KV_HEADS=8 HEAD_DIM=128 BUILD=$build OUT="$out" ITERS=${ITERS:-1}
step bench bash bench/attention/run.sh "$seqs"
last=${seqs##*,}
step untiled $build/bench/attention/bench_attention --seqs "$last" --heads 32 --kv-heads 8 --head-dim 128 \
    --iters "$ITERS" --tile 0

# memcheck last, in what is left of the call's 10 minutes
left=$((540 - SECONDS))
if [ "${MT_SANITIZE:-1}" != 0 ] && [ $left -gt 60 ]; then
    sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
    step memcheck timeout $left "$sanitizer" --tool memcheck --error-exitcode 1 \
        $build/cuda_tests --jobs 1 --filter 'cuda/attention_windows_one_and_tiny'
fi
python3 - "$out/attention.txt" "$out/gpu.txt" "$out/attention.json" <<'PY'
import json, sys
rows = [dict(kv.split("=", 1) for kv in line.split() if "=" in kv) for line in open(sys.argv[1])]
json.dump({"gpu": open(sys.argv[2]).read().strip(), "rows": rows}, open(sys.argv[3], "w"), indent=1)
PY

echo "==== summary"
printf '%s\n' "${summary[@]}"
cat "$out/attention.md" 2>/dev/null
exit $status

#!/bin/bash
# Issue 27's op-table failure on cuda (packed examples, one-token segments, head_dim 40: dq off the
# reference), taken apart in one short device call from the repository root:
#
#   bash tests/device/packing_debug.sh        with carry [".debs"]  (tests/device/fetch-debs.sh)
#
# 1. build    the CUDA tests for Hopper (NV_ARCHS; one arch: quick), in packing.sh's build folder
# 2. layouts  test_cuda_attention_layouts.c: the failing layout and its variations (head_dim 40 against
#             32, 48, 64, 80, 96, 128; batch 1 against 3; 7 segments against 8; one-token segments alone,
#             first, in the middle, last; none) on each path: cuDNN's ragged layout (run even where
#             the backend does not), the CUDA-core kernels, the backend's choice; at MT_LOG_LEVEL=debug
#             (the cuDNN engines each plan runs)
# 3. ops      the op table (its segment cases among them), the existing packed-attention tests and
#             the engine with segments against the cpu engine
# Writes NAME.log per step to $OUT (or /tmp/megatrain-packing-debug) and prints a digest: every case
# line of cuDNN that is off (asserted or not), every failure, and each step's result.
# A pass: both test steps rc=0. Where cuDNN's own ragged backward is wrong at a head dim the backend
# routes to the kernels (all but 64 and 128), its lines read "FAIL (not asserted: the backend runs the
# kernels here)"; they are the evidence for that routing, not failures.
set -u
cd "$(dirname "$0")/../.." || exit 1
logs=${OUT:-/tmp/megatrain-packing-debug}
mkdir -p "$logs"
. tests/device/env.sh
. tests/device/steps.sh
build="build-packing"
arch=${NV_ARCHS:--gencode=arch=compute_90a,code=sm_90a}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/machine.txt"

step build make CUDA=1 BUILD=$build NV_ARCHS="$arch" -j"$(nproc)" $build/cuda_tests
step layouts env MT_LOG_LEVEL=debug $build/cuda_tests --jobs 1 --verbose --filter 'cuda/attention_layouts_*'
step ops $build/cuda_tests --jobs 2 --verbose --filter 'cuda/@(ops_table|attention_paths_packed*|engine_matches_cpu_packed*)'

echo "==== cuDNN's ragged layout: the cases off the reference (asserted where the backend runs cuDNN)"
grep -a "cuDNN ragged .* FAIL" "$logs/layouts.log" | sed -E 's/^\[(----|ERR )\] //'
echo "==== cuDNN's engines by dims"
grep -a "cuDNN's plans for" "$logs/layouts.log" | sed 's/.*: attention (/(/' | sort | uniq -c
echo "==== failures (the details in layouts.log and ops.log)"
grep -ahE "^\[ERR \]|\[FAIL\]|off the reference|FAILED to run|cases fail" "$logs/layouts.log" "$logs/ops.log" | head -100
echo "==== summary"
printf '%s\n' "${summary[@]}"
exit $status

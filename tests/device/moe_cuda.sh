#!/bin/bash
# The CUDA mixture-of-experts ops in one call on a fresh device machine (carry [".debs"]): builds the
# CUDA tests and the grouped-GEMM benchmark for Hopper alone (a quicker build than run.sh's, which
# builds every GPU generation), runs the MoE tests (tests/cuda/test_cuda_moe*.c: every op against the
# CPU reference, both ways of the grouped GEMMs, the cuBLASLt loop's bits on 1, 3 and 8 streams), the
# profile's tests (tests/cuda/test_cuda_profile.c: its rows against the engine's timers), the op table
# on CUDA both ways (the default cuBLASLt loop, and MT_MOE_GEMM=kernel), the grouped-GEMM benchmark
# (bench/moe_gemm/run.sh: the cuBLASLt loop on 1, 2, 4 and 8 streams, the kernels, a dense GEMM and
# torch._grouped_mm at OLMoE's and Qwen3-30B-A3B's shapes, 16384 tokens and the engine's piece), then
# compute-sanitizer's memcheck and racecheck on the MoE tests (the model-shape and timing tests left
# out). Logs go to $OUT; the summary names each step's result and time, and a failed step's log ends
# are printed. The steps stop starting once BUDGET_S seconds (default 540) are spent, so one device
# command of 10 minutes holds it; MT_STEPS="moe bench ..." runs only the steps named.
#
#   bash tests/device/moe_cuda.sh
set -u
cd "$(dirname "$0")/../.."
logs=${OUT:-/tmp/megatrain-moe}
build=build-moe
budget=${BUDGET_S:-540}
mkdir -p "$logs"

. tests/device/env.sh

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
. tests/device/steps.sh

hopper='-gencode=arch=compute_90a,code=sm_90a'
# timed STEP SECONDS COMMAND...: a step that still has SECONDS within the budget, else skipped (said so)
timed() {
    local name=$1 need=$2
    shift 2
    if [ $((SECONDS + need)) -gt "$budget" ]; then
        summary+=("$(printf '%-10s skipped: %d s of the %d s budget left' "$name" $((budget - SECONDS)) "$budget")")
        return
    fi
    step "$name" "$@"
}

step build make CUDA=1 BUILD=$build NV_ARCHS="$hopper" -j"$(nproc)" $build/cuda_tests bench-moe-gemm
timed moe 60 $build/cuda_tests --jobs 1 --verbose --filter 'cuda/moe_*'
timed profile 30 $build/cuda_tests --jobs 1 --verbose --filter 'cuda/profile_*'
timed optable 30 $build/cuda_tests --jobs 4 --filter 'cuda/ops_table'
timed optable_kernel 30 env MT_MOE_GEMM=kernel $build/cuda_tests --jobs 4 --filter 'cuda/ops_table'
timed bench 90 env OUT="$logs" BUILD=$build NV_ARCHS="$hopper" bash bench/moe_gemm/run.sh

sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
sanitize() { # sanitize TOOL FILTER: the MoE tests FILTER names, cut at the budget
    local left=$((budget - SECONDS))
    timeout "$left" "$sanitizer" --tool "$1" --target-processes all --error-exitcode 1 \
        $build/cuda_tests --jobs 4 --filter "$2"
}
# the model shapes and the timing left out; racecheck (shared memory, inside kernels) leaves out the
# cuBLASLt loop's stream counts too: the same cuBLASLt kernels, a thousand more launches
timed memcheck 60 sanitize memcheck 'cuda/moe_!(big_*|ops_timing)'
timed racecheck 60 sanitize racecheck 'cuda/moe_!(big_*|ops_timing|*_on_any_streams)'

echo "==== summary"
printf '%s\n' "${summary[@]}"
exit $status

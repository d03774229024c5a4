#!/bin/bash
# The one command for a fresh device machine (GPU, no package manager): unpacks the Debian
# packages carried in .debs/ (made here by tests/device/fetch-debs.sh) into /tmp/debs, builds
# with CUDA=1, runs the CUDA tests, the CUDA kernels' tests again under compute-sanitizer, and
# the CPU tests, and prints a summary. Logs go to $OUT (the device tool's output folder) when it
# is set. Exits non-zero when anything failed. MT_STEPS="build chat ..." runs only the steps named
# (a shorter call when only some parts changed); by default every step runs. NV_ARCHS (e.g.
# -gencode=arch=compute_90a,code=sm_90a) builds for the GPU at hand alone (then skip the fatbin
# step); MT_CUDA_FILTER narrows the cuda step to the tests it matches (Criterion's --filter).
set -u
cd "$(dirname "$0")/../.."
logs=${OUT:-/tmp/megatrain-device}
build=${MT_BUILD:-build-device} # MT_BUILD=build-bench with MT_STEPS lacking build: binaries carried, as they are
mkdir -p "$logs"

. tests/device/env.sh

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
. tests/device/steps.sh

step build make CUDA=1 BUILD=$build ${NV_ARCHS:+NV_ARCHS="$NV_ARCHS"} -j"$(nproc)" $build/cuda_tests $build/run-tests $build/megatrain tokenizer-data
# Machine code for every supported GPU generation (and, where cuobjdump is installed, the same
# listing from it as from scripts/fatbin_list.py).
step fatbin scripts/check-fatbin.sh $build/megatrain
rm -rf /tmp/mt-transformers-check
step cuda env MT_TRANSFORMERS_DIR=/tmp/mt-transformers-check $build/cuda_tests --jobs 1 --verbose \
    ${MT_CUDA_FILTER:+--filter "$MT_CUDA_FILTER"}
# The host optimizer's kernels and the split masters on this host's CPU (AVX-512 where the CI's
# machine has only AVX2): a part of the cpu step below, for a call that runs only these.
step optim $build/run-tests --jobs 4 --filter '@(adamw|split|moments|speculative)/*'

# compute-sanitizer (the CUDA toolkit's) over a subset, to keep the run within minutes: memcheck
# (out-of-bounds and misaligned accesses, errors of the CUDA API, leaks) on the op table, both
# attention paths (and sinks through the backend's choice), the MoE ops, the engine against the cpu backend, blocks updated on the device and
# the ends' gradient chunks through the host chunk buffers;
# racecheck (shared-memory races) on the kernels' tests alone. The timing tests are left out: at a 3B model's sizes they would take long.
# Each tool's run is cut at 300 s. MT_SANITIZE=0 skips both (a quicker run).
sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
memcheck_tests='cuda/@(ops_table|attention_paths_!(*speed*)|attention_sinks_*|engine_matches_cpu_*|checkpoints_on_host_change_nothing|device_blocks_*|chunk_buffers_*|moe_!(big_*|ops_timing))'
racecheck_tests='cuda/@(ops_table|attention_paths_!(*speed*)|attention_sinks_*|moe_!(big_*|ops_timing))'
sanitize() { # sanitize TOOL FILTER: the cuda tests matching FILTER under compute-sanitizer's TOOL
    if [ ! -x "$sanitizer" ]; then
        echo "compute-sanitizer not found (PATH, ${CUDA_HOME:-/usr/local/cuda}/bin)"
        return 1
    fi
    timeout 300 "$sanitizer" --tool "$1" --target-processes all --error-exitcode 1 ${3:-} \
        $build/cuda_tests --jobs 4 --filter "$2"
}
if [ "${MT_SANITIZE:-1}" != 0 ]; then
    step memcheck sanitize memcheck "$memcheck_tests"
    step racecheck sanitize racecheck "$racecheck_tests" "--kernel-name-exclude kns=cudnn"
fi
step hf python3 tests/device/check_transformers.py /tmp/mt-transformers-check
step roundtrip python3 tests/device/hf_roundtrip.py --bin $build/megatrain
step moe python3 tests/device/check_moe.py --bin $build/megatrain
step families python3 tests/device/check_families.py --bin $build/megatrain
# flash-linear-attention's source, where carried (build-fla: README's device section), gives the
# Gated DeltaNet's check transformers' bf16 run on FLA's Triton kernels as a noise floor too.
[ -d build-fla/fla ] && export FLA_SRC=${FLA_SRC:-$PWD/build-fla}
step qwen35 python3 tests/device/check_qwen35.py --bin $build/megatrain
step gptoss python3 tests/device/check_gptoss.py --bin $build/megatrain
step mxfp4 python3 tests/device/check_gptoss_mxfp4.py --bin $build/megatrain
step tokenizer python3 tests/device/check_tokenizer.py --bin $build/megatrain
step chat python3 tests/device/check_chat.py --bin $build/megatrain
step tensorboard python3 tests/device/check_tensorboard.py --bin $build/megatrain
step reliab python3 tests/device/reliability.py --bin $build/megatrain
step cpu env MT_TOKENIZER_DATA=$build/tokenizers MT_BIN=$build/megatrain $build/run-tests --jobs 4

echo "==== summary"
printf '%s\n' "${summary[@]}"
exit $status

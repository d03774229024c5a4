#!/bin/bash
# megatrain and its two PyTorch peers (bench/peers/torch_peer.py: resident, fsdp2-offload) on one
# GPU, the same model shapes and tokens per step, as one table. Runs on a fresh device machine
# from the repository root, in one device call (bench/README.md):
#
#   bash bench/run.sh          with carry [".debs"]
#
# Writes to $OUT (or /tmp/megatrain-bench): bench.jsonl (one line a run, failures included),
# bench.md and bench.json (bench/table.py), runs.log and build.log; prints the table last.
# Environment: SHAPES (default "llama-3.2-1b llama-3.2-3b llama-3-8b"), STEPS (timed steps, 5),
# WARMUP (2), BUDGET_S (seconds from the start after which no run starts and a running one is
# cut, 560: the device call's limit is 600), FSDP2 (1: also run the pytorch-fsdp2-offload peer at
# 1B and 3B; by default its rows are recorded as not run, to keep the call inside the limit).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
# The device machines' rule, kept also here: NVLink multicast stays off. Expandable segments
# spare the PyTorch peers fragmentation, the resident 8B's best chance to fit.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

out=${OUT:-/tmp/megatrain-bench}
shapes=${SHAPES:-llama-3.2-1b llama-3.2-3b llama-3-8b}
steps=${STEPS:-5}
warmup=${WARMUP:-2}
seq=4096
deadline=${BUDGET_S:-560}
build="build-bench"
. bench/bench_lib.sh
bench_start bench.jsonl
build_megatrain

common=(--seq "$seq" --steps "$steps" --warmup-steps "$warmup" --json "$jsonl")
megatrain=("$build/megatrain" bench --backend cuda "${common[@]}")
peer=(python3 bench/peers/torch_peer.py "${common[@]}")
# megatrain runs with the default exact clipping (--clip 1) and without (--clip 0); the peers
# without clipping. Each megatrain run's placement is the planner's (megatrain plan prints it; the
# table's placement column says how many units' optimizer state the GPU kept and updated and
# where the gradients waiting for the clipping norm lived).
fsdp2=${FSDP2:-0}
for shape in $shapes; do
    if [ "$shape" = llama-3-8b ]; then
        # The default (--clip 1), no budget: the planner puts most blocks' optimizer state on the
        # GPU, so that the gradients waiting for the norm (32 GB in fp32 at 8B) mostly stay there
        # and the host keeps only its state (~112 GB): 8 x 1 x 4096 tokens a step.
        bench megatrain "$shape" 8 1 200 "${megatrain[@]}" --preset "$shape" --clip 1
        # The same inside a 24 GiB GPU budget: little room for state on the GPU, so the waiting
        # gradients would have to sit on the host beside its state: refused up front, naming the
        # bytes of each class, where the host cannot hold them.
        bench megatrain "$shape" 8 1 120 "${megatrain[@]}" --preset "$shape" --clip 1 --gpu-mem 24GiB
        # The earlier headline: no clipping inside 24 GiB (a ring of gradient buffers on the host).
        bench megatrain "$shape" 8 1 200 "${megatrain[@]}" --preset "$shape" --clip 0 --gpu-mem 24GiB
        record pytorch-resident "$shape" 4 1 skipped "out of GPU memory at 8B on the 139 GiB H200 (2026-11-22: fp32 weights, gradients and Adam state are 128 GB)"
        record pytorch-fsdp2-offload "$shape" 1 4 skipped "its process died at 8B on this 128 GiB host"
    else
        bench megatrain "$shape" 1 4 150 "${megatrain[@]}" --preset "$shape" --clip 0
        bench megatrain "$shape" 1 4 150 "${megatrain[@]}" --preset "$shape" --clip 1
        bench pytorch-resident "$shape" 1 4 150 "${peer[@]}" --mode resident --preset "$shape" --clip 0
        if [ "$fsdp2" = 1 ]; then
            bench pytorch-fsdp2-offload "$shape" 1 4 180 "${peer[@]}" --mode fsdp2-offload --preset "$shape" --clip 0
        else
            record pytorch-fsdp2-offload "$shape" 1 4 skipped "left out to keep the call inside the device's 600 s (FSDP2=1 runs it)"
        fi
    fi
done

python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/bench.md" --json "$out/bench.json" >/dev/null
echo
cat "$out/bench.md"

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
# cut, 560: the device call's limit is 600; the three shapes take about 490 s).
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
# Every system runs without clipping, so that all do the same work: with it, megatrain's exact
# clipping holds each update until the whole backward is done (a megatrain run with the default
# --clip 1.0 is added at 1B and 3B to show that cost). At 8B no clipping is also what lets the host
# state fit this 128 GiB host: megatrain then keeps a ring of gradient buffers, not all of them.
for shape in $shapes; do
    if [ "$shape" = llama-3-8b ]; then
        # Enough tokens for the GPU to outlast the ~3 s host optimizer, inside a 24 GiB GPU budget:
        # 8 micro-batches of 1 sequence keep ~9 GB of activation checkpoints on the GPU (8 of 4
        # would need ~37 GB).
        bench megatrain "$shape" 8 1 200 "${megatrain[@]}" --preset "$shape" --clip 0 --gpu-mem 24GiB
        # Half that budget: most activation checkpoints then live in pinned host memory.
        bench megatrain "$shape" 8 1 200 "${megatrain[@]}" --preset "$shape" --clip 0 --gpu-mem 12GiB
        # 8B in fp32 with Adam is 128 GB before activations: the resident peer gets its best
        # chance with 4 micro-batches of 1 sequence (the same tokens per step).
        bench pytorch-resident "$shape" 4 1 200 "${peer[@]}" --mode resident --preset "$shape" --clip 0
        record pytorch-fsdp2-offload "$shape" 1 4 skipped "its process died at 8B on this 128 GiB host"
    else
        bench megatrain "$shape" 1 4 150 "${megatrain[@]}" --preset "$shape" --clip 0
        # The same with the embedding and head updated by the host optimizer (the default puts
        # them on the GPU where they fit): what --ends-on-device is worth.
        bench megatrain "$shape" 1 4 150 "${megatrain[@]}" --preset "$shape" --clip 0 --ends-on-device off
        bench megatrain "$shape" 1 4 150 "${megatrain[@]}" --preset "$shape" --clip 1
        bench pytorch-resident "$shape" 1 4 150 "${peer[@]}" --mode resident --preset "$shape" --clip 0
        bench pytorch-fsdp2-offload "$shape" 1 4 180 "${peer[@]}" --mode fsdp2-offload --preset "$shape" --clip 0
    fi
done

python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/bench.md" --json "$out/bench.json" >/dev/null
echo
cat "$out/bench.md"

#!/bin/bash
# Data parallelism on one host (megatrain train/bench --gpus N, engine/ranks.h): tokens/s at 1, 2
# (and 4, where there are) GPUs with the same tokens per GPU, the default (--clip 1) beside --clip 0,
# and PyTorch FSDP2 with CPU offload at the same GPU counts (torchrun); each line with host memory,
# PCIe bytes per GPU per step and the host optimizer's share of a step. Runs on a fresh device
# machine with 2 or more GPUs (kind nvidia-h100-x2 / nvidia-h200-x2; nvidia-h100-x4 for 4) from the
# repository root, a group of shapes per device call (each fits one call of 10 minutes):
#
#   SHAPES=llama-3.2-3b bash bench/multi_gpu.sh         with carry [".debs"]   (~6 min)
#   SHAPES=llama-3-8b bash bench/multi_gpu.sh           (~9 min, the peer's 8B steps are long)
#   SHAPES=qwen2.5-14b SYSTEMS=megatrain bash bench/multi_gpu.sh
#   GPUS="1 2 4" SHAPES=llama-3-8b bash bench/multi_gpu.sh      on a 4-GPU machine
#
# Shapes, per GPU (a step holds N times these tokens on N GPUs):
#   llama-3.2-3b   1 x 4 x 4096, the GPU's whole memory    peer: 1 x 4 x 4096
#   llama-3-8b     8 x 1 x 4096, --gpu-mem 24GiB           peer: 2 x 4 x 4096
#   qwen2.5-14b    4 x 1 x 4096, the GPU's whole memory    (no peer: FSDP2 offload dies there)
# FSDP2 re-streams every layer for every micro-batch: its runs hold the same tokens in fewer, larger
# micro-batches. Writes to $OUT (or /tmp/megatrain-multi-gpu): multi_gpu.jsonl, multi_gpu.md,
# runs.log, build.log; prints the table last. Environment: SHAPES, SYSTEMS ("megatrain fsdp2"; "procs":
# megatrain as one process a GPU under torchrun, beside --gpus N's threads),
# CLIPS ("1 0": megatrain's), GPUS (1 2, and 4 where 4 are visible), STEPS (2), WARMUP (1),
# PEER_STEPS (1) and PEER_WARMUP (1) for FSDP2, BUDGET_S (570), PREBUILT (bench/bench_lib.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
# The device machines' rule: NVLink multicast stays off, for NCCL and for PyTorch.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

out=${OUT:-/tmp/megatrain-multi-gpu}
shapes=${SHAPES:-llama-3.2-3b llama-3-8b}
systems=${SYSTEMS:-megatrain fsdp2}
clips=${CLIPS:-1 0}
visible=$(nvidia-smi -L | wc -l)
gpus=${GPUS:-$([ "$visible" -ge 4 ] && echo "1 2 4" || echo "1 2")}
steps=${STEPS:-2}
warmup=${WARMUP:-1}
peer_steps=${PEER_STEPS:-1}
peer_warmup=${PEER_WARMUP:-1}
seq=4096
deadline=${BUDGET_S:-570}
build="build-bench"
. bench/bench_lib.sh
bench_start multi_gpu.jsonl
nvidia-smi topo -m 2>/dev/null | head -4

# shape MODEL: micro, batch, extra options and time limit of megatrain's run; the peer's micro,
# batch and limit (peer_micro empty: no peer).
shape() {
    case $1 in
    llama-3.2-3b) micro=1 batch=4 extra=() limit=150 peer_micro=1 peer_batch=4 peer_limit=240 ;;
    llama-3-8b) micro=8 batch=1 extra=(--gpu-mem 24GiB) limit=200 peer_micro=2 peer_batch=4 peer_limit=420 ;;
    qwen2.5-14b) micro=4 batch=1 extra=() limit=280 peer_micro="" ;;
    *) echo "unknown shape '$1' (llama-3.2-3b, llama-3-8b, qwen2.5-14b)" >&2; exit 2 ;;
    esac
}

for model in $shapes; do
    shape "$model"
    for system in $systems; do
        case $system in
        megatrain)
            build_megatrain
            for n in $gpus; do
                [ "$n" -le "$visible" ] || continue
                for clip in $clips; do
                    bench "megatrain x$n" "$model" "$micro" "$batch" "$limit" "$build/megatrain" bench --backend cuda \
                        --preset "$model" --gpus "$n" --seq "$seq" --steps "$steps" --warmup-steps "$warmup" \
                        --clip "$clip" --json "$jsonl" "${extra[@]}"
                done
            done
            ;;
        procs) # one process a GPU, as torchrun starts them (several hosts run so): the same bench
            build_megatrain
            for n in $gpus; do
                [ "$n" -gt 1 ] && [ "$n" -le "$visible" ] || continue
                for clip in $clips; do
                    bench "megatrain-processes x$n" "$model" "$micro" "$batch" "$limit" python3 -m torch.distributed.run \
                        --standalone --nproc-per-node "$n" --no-python "$build/megatrain" bench --backend cuda \
                        --preset "$model" --seq "$seq" --steps "$steps" --warmup-steps "$warmup" --clip "$clip" \
                        --json "$jsonl" "${extra[@]}"
                done
            done
            ;;
        fsdp2)
            [ -n "$peer_micro" ] || continue
            for n in $gpus; do
                [ "$n" -le "$visible" ] || continue
                bench "pytorch-fsdp2-offload x$n" "$model" "$peer_micro" "$peer_batch" "$peer_limit" python3 \
                    -m torch.distributed.run --standalone --nproc-per-node "$n" bench/peers/torch_peer.py \
                    --mode fsdp2-offload --preset "$model" --seq "$seq" --steps "$peer_steps" \
                    --warmup-steps "$peer_warmup" --clip 1 --json "$jsonl"
            done
            ;;
        *) echo "unknown system '$system' in SYSTEMS (megatrain, procs, fsdp2)" >&2; exit 2 ;;
        esac
    done
done

echo
python3 bench/multi_gpu_table.py "$jsonl" --machine "$machine" --md "$out/multi_gpu.md" --json "$out/multi_gpu.json"

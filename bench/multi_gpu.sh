#!/bin/bash
# Data parallelism on one host (megatrain train/bench --gpus N, engine/ranks.h): tokens/s of
# Llama-3-8B at 1, 2 (and 4, where there are) GPUs with the same tokens per GPU, beside PyTorch
# FSDP2 with CPU offload at the same GPU counts (torchrun), each line with host memory, PCIe bytes
# per GPU per step and the host optimizer's share of a step. Runs on a fresh device machine with 2
# or more GPUs (kind nvidia-h200-x2) from the repository root, in one device call per system:
#
#   SYSTEMS=megatrain bash bench/multi_gpu.sh      with carry [".debs"]   (~5 min)
#   SYSTEMS=fsdp2 bash bench/multi_gpu.sh          with carry [".debs"]
#
# Writes to $OUT (or /tmp/megatrain-multi-gpu): multi_gpu.jsonl, runs.log, build.log; prints a
# table last. Environment: SYSTEMS ("megatrain fsdp2"), GPUS (1 2, and 4 where 4 are visible),
# SHAPE (llama-3-8b), MICRO (8 micro-batches of 1 sequence of 4096 tokens per GPU), STEPS (3),
# WARMUP (1), BUDGET_S (560). Every run clips at 1.0: several ranks need exact clipping (the
# optimizer's overlap with the backward serves one GPU only), so one GPU does the same work.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
# The device machines' rule: NVLink multicast stays off, for NCCL and for PyTorch.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

out=${OUT:-/tmp/megatrain-multi-gpu}
systems=${SYSTEMS:-megatrain fsdp2}
visible=$(nvidia-smi -L | wc -l)
gpus=${GPUS:-$([ "$visible" -ge 4 ] && echo "1 2 4" || echo "1 2")}
shape=${SHAPE:-llama-3-8b}
micro=${MICRO:-8}
steps=${STEPS:-3}
warmup=${WARMUP:-1}
seq=4096
deadline=${BUDGET_S:-560}
build="build-bench"
. bench/bench_lib.sh
bench_start multi_gpu.jsonl
nvidia-smi topo -m 2>/dev/null | head -4
common=(--seq "$seq" --steps "$steps" --warmup-steps "$warmup" --json "$jsonl" --clip 1)

for system in $systems; do
    case $system in
    megatrain)
        build_megatrain
        for n in $gpus; do
            [ "$n" -le "$visible" ] || continue
            bench "megatrain x$n" "$shape" "$micro" 1 200 "$build/megatrain" bench --backend cuda "${common[@]}" \
                --preset "$shape" --gpus "$n" --gpu-mem 24GiB
        done
        ;;
    fsdp2)
        # FSDP2 re-streams every layer for every micro-batch: the same tokens per GPU as 2 of 4.
        for n in $gpus; do
            [ "$n" -le "$visible" ] || continue
            bench "pytorch-fsdp2-offload x$n" "$shape" 2 4 260 python3 -m torch.distributed.run --standalone \
                --nproc-per-node "$n" bench/peers/torch_peer.py "${common[@]}" --mode fsdp2-offload --preset "$shape"
        done
        ;;
    *) echo "unknown system '$system' in SYSTEMS (megatrain, fsdp2)" >&2; exit 2 ;;
    esac
done

echo
python3 - "$jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
one = {r["system"]: r["tokens_per_s"] for r in runs if r.get("gpus", 1) == 1 and "tokens_per_s" in r}
print("| system | GPUs | tokens/step | step s | tokens/s | vs its 1 GPU | host GiB | PCIe in/out GB per GPU per step "
      "| host optimizer share of a step | notes |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in runs:
    if "tokens_per_s" not in r:
        print(f"| {r['system']} | | | | | | | | | {r.get('error') or r.get('skipped')} |")
        continue
    n = r.get("gpus", 1)
    base = one.get(r["system"])
    pcie = (f"{r['pcie_h2d_gb_per_gpu']:.1f} / {r['pcie_d2h_gb_per_gpu']:.1f}" if "pcie_h2d_gb_per_gpu" in r
            else "-")
    share = f"{100 * r['opt_seconds'] / r['step_s']:.0f}%" if "opt_seconds" in r else "-"
    speedup = f"{r['tokens_per_s'] / base:.2f}x" if base else "-"
    print(f"| {r['system']} | {n} | {r['tokens_per_step']:.0f} | {r['step_s']:.2f} | {r['tokens_per_s']:.0f} | "
          f"{speedup} | {r['host_gib']:.1f} | {pcie} | {share} | peak GPU {r['peak_gpu_gib']:.1f} GiB |")
PY

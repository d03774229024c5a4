#!/bin/bash
# Mixtures of experts: megatrain (--clip 1, the default, and --clip 0) beside PyTorch running
# transformers' own MoE modules (bench/peers/torch_peer.py: GPU-resident where it fits, FSDP2 with
# CPU offload otherwise) on the same shapes and tokens per step, 4 x 4096 and 16 x 4096 tokens:
#
#   olmoe   allenai/OLMoE-1B-7B's shape (preset olmoe-1b-7b): 16 blocks of 64 experts, top 8
#   qwen3   Qwen/Qwen3-30B-A3B's shape (preset qwen3-30b-a3b: 128 experts of 768, top 8) cut to as
#           many of its 48 blocks as this host holds for the default --clip 1 run (megatrain plan
#           says; LAYERS=N sets it)
#
# Runs on a fresh device machine from the repository root, one shape a device call (each run sets
# up a host store of tens of GB; both shapes do not fit the call's 600 s):
#
#   SHAPES=olmoe bash bench/moe.sh      with carry [".debs"]
#   SHAPES=qwen3 bash bench/moe.sh
#
# on the H100 of nvidia-h100-x2 (256 GiB host; the OLMoE shape's state, 124 GB with the default
# clipping, does not fit nvidia-h200's 128 GiB host beside the peer) or nvidia-h200. Writes to $OUT
# (or /tmp/megatrain-bench-moe): moe.jsonl (one line a run, failures included), moe.md and
# moe.json (bench/table.py), runs.log and build.log; prints the table last.
#
# TFLOP/s count model FLOPs from the active parameters, as src/train/bench.c and the peer count
# them: per token, 6 x (the blocks' active parameters, i.e. attention, the router and the top_k
# experts a token goes to, + the LM head's vocab x hidden) + 6 x L x seq x heads x head_dim for
# causal attention; recomputation not counted.
# Environment: SHAPES (olmoe qwen3), STEPS (timed steps, 4), WARMUP (1), BUDGET_S (560), LAYERS,
# SIZES (the micro-batches of 4 x 4096 tokens a step: "1 4"), SYSTEMS (all; megatrain; peers: the
# PyTorch rows alone), PEER_LIMIT_S (200: the offloaded peer's seconds a run, its set-up included).
# The offloaded peer's 16 x 4096 run needs a call of its own (SIZES=4 SYSTEMS=peers PEER_LIMIT_S=500),
# and its host memory bounds the Qwen3 cut that both can train: the peer holds about 16 bytes a
# parameter against megatrain's 14, so on a 256 GiB host megatrain's own cut (the default, ~28
# blocks) is too deep for it; LAYERS=13 (8.7 B parameters) leaves both room.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

out=${OUT:-/tmp/megatrain-bench-moe}
shapes=${SHAPES:-olmoe qwen3}
steps=${STEPS:-4}
warmup=${WARMUP:-1}
seq=4096
deadline=${BUDGET_S:-560}
sizes=${SIZES:-1 4}
systems=${SYSTEMS:-all}
peer_limit=${PEER_LIMIT_S:-200}
build="build-bench"
. bench/bench_lib.sh
bench_start moe.jsonl
build_megatrain

common=(--seq "$seq" --steps "$steps" --warmup-steps "$warmup" --json "$jsonl")
megatrain=("$build/megatrain" bench --backend cuda "${common[@]}")
peer=(python3 bench/peers/torch_peer.py "${common[@]}")
# One shape: megatrain at 4 x 4096 and 16 x 4096 tokens, default clipping then none; the peer
# GPU-resident, and where that fails (out of memory), with FSDP2's CPU offload.
bench_shape() {
    local name=$1 layers=$2
    shift 2
    local model=("$@") peer_model=(--preset "$name") label=$name
    if [ "$layers" -gt 0 ]; then
        peer_model+=(--layers "$layers")
        label="$name ($layers layers)"
    fi
    local micro lines
    for micro in $sizes; do # x 4 sequences of 4096
        if [ "$systems" != peers ]; then
            bench megatrain "$label" "$micro" 4 200 "${megatrain[@]}" "${model[@]}" --clip 1
            bench megatrain "$label" "$micro" 4 200 "${megatrain[@]}" "${model[@]}" --clip 0
            relabel "$label"
        fi
        [ "$systems" = megatrain ] && continue
        lines=$(wc -l <"$jsonl")
        bench pytorch-resident "$label" "$micro" 4 150 "${peer[@]}" --mode resident "${peer_model[@]}" --clip 1
        if tail -n +"$((lines + 1))" "$jsonl" | grep -q '"error"'; then
            bench pytorch-fsdp2-offload "$label" "$micro" 4 "$peer_limit" "${peer[@]}" --mode fsdp2-offload \
                "${peer_model[@]}" --clip 1
        else
            record pytorch-fsdp2-offload "$label" "$micro" 4 skipped "the resident peer fit on the GPU"
        fi
    done
}

for shape in $shapes; do
    case $shape in
    olmoe) bench_shape olmoe-1b-7b 0 --preset olmoe-1b-7b ;;
    qwen3)
        # each block 0.62 B parameters, about 11 GB of host state
        layers=${LAYERS:-$(host_layers qwen3-30b-a3b 48 --micro-batches 4 --batch 4 --clip 1)}
        if [ "$layers" -lt 1 ]; then
            record megatrain "qwen3-30b-a3b" 1 4 error "not one block of Qwen3-30B-A3B fits this host (megatrain plan)"
            continue
        fi
        echo "Qwen3-30B-A3B cut to $layers of its 48 blocks (what this host holds)"
        bench_shape qwen3-30b-a3b "$layers" --config "$(cut_config qwen3-30b-a3b "$layers")"
        ;;
    *) echo "unknown shape '$shape' (olmoe, qwen3)" ;;
    esac
done

python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/moe.md" --json "$out/moe.json" >/dev/null
echo
cat "$out/moe.md"

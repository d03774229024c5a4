#!/bin/bash
# Small GPUs and long contexts (issue 13), one device call on the H200 machine, from the
# repository root:
#
#   bash bench/long_context.sh          with carry [".debs"]
#
# Rows, each a `megatrain bench` (or PyTorch peer) line in bench.jsonl, printed as one table:
#   1. Llama-3-8B, 8 x 1 x 4096, --clip 0, --gpu-mem 24GiB, then 8GiB: tokens/s beside each other
#      and the peak device memory by the driver's count (driver_peak_gpu_gib: cudaMemGetInfo, the
#      CUDA context included), which must stay under 8 GiB in the second;
#   2. Llama-3.1-8B, one sequence of 131072 tokens a step: TFLOP/s (the bench's count, causal
#      attention included), peak GPU and host memory;
#   3. the longest context that trains, from a ladder tried longest first (a rung that fails is an
#      error row, the first that trains ends the ladder): Llama-3.2-3B (LADDER_3B), Llama-3.1-8B
#      (LADDER_8B), and beside them PyTorch GPU-resident with activation checkpointing and SDPA on
#      the 3B (LADDER_PEER).
# Writes to $OUT (or /tmp/megatrain-long): bench.jsonl, bench.md, bench.json, runs.log, build.log.
# The longest contexts take minutes a step: they are a group of their own, for calls of their own
# (ROWS=longest, one ladder each: LADDER_3B=524288 LADDER_8B= LADDER_PEER=65536, and so on).
# Environment: STEPS (timed steps, 2), WARMUP (1), BUDGET_S (560), ROWS ("small long", or
# "longest"), the three ladders (tokens, longest first), GPU_MEM (the long rows' budget).
#
# Llama-3.1-8B at 512k on one 80 GB H100 (issue 29; nvidia-h100-x2 with CUDA_VISIBLE_DEVICES=0: one
# H100 beside 256 GiB of host), each group a call of its own, with --gpu-mem GPU_MEM (78GiB; 77GiB
# for full393k, below) and --host-mem HOST_MEM (251GiB):
#   layer512k  Llama-3.1-8B's layer shape at 524288 tokens, one sequence a step, its depth cut to
#              LAYERS (2) blocks (a config.json written here, num_hidden_layers cut) so that the
#              default settings and --clip 0 each take a warm-up and a timed step in one call (a
#              block's step is ~25 s at 300 TFLOP/s; the full 32 a step would be ~13 minutes), the
#              optimizer state on the host as the full depth's plan places it;
#              `megatrain plan` of the full 32 layers at 524288 and at 393216 tokens beside them, on
#              this GPU (cuDNN's own workspaces);
#   full393k   full-depth Llama-3.1-8B at 393216 tokens, one step without a warm-up (~7 minutes:
#              the whole call; PREBUILT=1 with the binary carried saves the build), CLIP (1: the
#              default settings; 0 for the other call);
#   peer       PyTorch GPU-resident with activation checkpointing and SDPA: Llama-3-8B (the same
#              layers; 128 GB of fp32 weights, gradients and AdamW state, so no length fits 80 GB:
#              one rung at 4096 says so) and the longest length of LADDER_PEER_H100 (32768 16384)
#              Llama-3.2-3B trains on the GPU (it trained 65536 on the H200's 139 GiB).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

out=${OUT:-/tmp/megatrain-long}
steps=${STEPS:-2}
warmup=${WARMUP:-1}
deadline=${BUDGET_S:-560}
rows=${ROWS:-small long}
ladder_3b=${LADDER_3B:-524288 393216 262144 131072}
ladder_8b=${LADDER_8B:-262144 196608}
ladder_peer=${LADDER_PEER:-65536 32768 16384}
# The long rows' budget: the H200's 139 GiB less a margin, so that the planner moves checkpoints
# to pinned host memory where the GPU cannot hold them all.
gpu_mem=${GPU_MEM:-132GiB}
build="build-bench"
. bench/bench_lib.sh
bench_start bench.jsonl
build_megatrain

common() { echo --seq "$seq" --steps "$steps" --warmup-steps "$warmup" --json "$jsonl"; }
# Past the presets' 131072 positions the model's context is extended (--max-positions), as a
# long-context run would; the step's work does not depend on it.
extended() { [ "$seq" -gt 131072 ] && echo --max-positions "$seq"; }
megatrain() { bench megatrain "$1" 1 1 "$2" "$build/megatrain" bench --backend cuda $(common) $(extended) --preset "$1" --clip 0 --gpu-mem "$gpu_mem"; }
trained() { tail -1 "$jsonl" | grep -q '"tokens_per_s"'; }

# ladder SYSTEM MODEL LIMIT_S TOKENS...: longest first, until one trains; one step each, no
# warm-up (a 3B step at 512k tokens is ~1.5e17 FLOPs, minutes).
ladder() {
    local system=$1 model=$2 limit=$3 steps=1 warmup=0
    shift 3
    for seq in "$@"; do
        if [ "$system" = megatrain ]; then megatrain "$model" "$limit"
        else bench "$system" "$model" 1 1 "$limit" python3 bench/peers/torch_peer.py --mode resident $(common) --preset "$model" --clip 0
        fi
        trained && return
    done
}

host_mem=${HOST_MEM:-251GiB}
layers=${LAYERS:-2}

# cut_config LAYERS: Llama-3.1-8B's config.json (the llama-3.1-8b preset's fields) with its depth cut.
cut_config() {
    local dir=$out/llama-3.1-8b-$1-layers
    mkdir -p "$dir"
    python3 - "$dir/config.json" "$1" <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": int(sys.argv[2]), "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072,
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False, "bos_token_id": 128000,
           "eos_token_id": 128001, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}, open(sys.argv[1], "w"), indent=1)
PY
    echo "$dir/config.json"
}

# h100 NAME LIMIT_S STEPS WARMUP GPU_MEM ARGS...: megatrain bench on one sequence of $seq tokens inside
# --gpu-mem and --host-mem.
h100() {
    local name=$1 limit=$2 steps=$3 warmup=$4 budget=$5
    shift 5
    bench megatrain "$name" 1 1 "$limit" "$build/megatrain" bench --backend cuda $(common) --max-positions "$seq" \
        --gpu-mem "$budget" --host-mem "$host_mem" "$@"
}

# note TEXT: attached to the last line of the JSON lines (its "model" renamed to MODEL when given).
note() {
    python3 - "$jsonl" "$1" "${2:-}" <<'PY'
import json, sys
path, text, model = sys.argv[1:]
lines = open(path).read().splitlines()
run = json.loads(lines[-1])
run["note"] = text
if model:
    run["model"] = model
lines[-1] = json.dumps(run)
open(path, "w").write("\n".join(lines) + "\n")
PY
}

plans=()
# plan_full SEQ: `megatrain plan` of the full Llama-3.1-8B at SEQ tokens on this GPU, kept beside the table.
plan_full() {
    local file=$out/plan-llama-3.1-8b-$1.txt
    "$build/megatrain" plan --backend cuda --preset llama-3.1-8b --seq "$1" --batch 1 --max-positions "$1" \
        --gpu-mem "${GPU_MEM:-78GiB}" --host-mem "$host_mem" >"$file" 2>&1
    plans+=(--plan "megatrain plan: Llama-3.1-8B, all 32 layers, one sequence of $1 tokens, --gpu-mem ${GPU_MEM:-78GiB} --host-mem $host_mem=$file")
}

for group in $rows; do
    case $group in
    small)
        seq=4096
        bench megatrain llama-3-8b 8 1 150 "$build/megatrain" bench --backend cuda $(common) --preset llama-3-8b --clip 0 --gpu-mem 24GiB
        bench megatrain llama-3-8b 8 1 150 "$build/megatrain" bench --backend cuda $(common) --preset llama-3-8b --clip 0 --gpu-mem 8GiB
        ;;
    long)
        seq=131072
        # About 50 s of set-up and 64 s a step on the H200: 300 s holds a warm-up and two timed steps.
        megatrain llama-3.1-8b 300
        ;;
    longest)
        ladder pytorch-resident llama-3.2-3b 120 $ladder_peer
        ladder megatrain llama-3.2-3b 540 $ladder_3b
        ladder megatrain llama-3.1-8b 540 $ladder_8b
        ;;
    layer512k)
        seq=524288
        plan_full 524288
        plan_full 393216
        config=$(cut_config "$layers")
        cut="the depth cut to $layers of 32 layers (num_hidden_layers), so that a warm-up and a timed step fit the call; each layer is Llama-3.1-8B's, and so are the workspace, weight slots and ends on the GPU and the optimizer state on the host (the full depth's placement, given: --ends-on-device off --device-blocks 0); the full depth keeps most of its checkpoints in pinned host memory instead (its plan beside the table)"
        for clip in 1 0; do
            h100 llama-3.1-8b 290 1 1 "${GPU_MEM:-78GiB}" --config "$config" --clip "$clip" --ends-on-device off \
                --device-blocks 0
            trained && note "$cut" "llama-3.1-8b ($layers of 32 layers)"
        done
        ;;
    full393k)
        seq=393216
        # The planner fills the budget with checkpoints here; the kernels cuDNN loads for its plans
        # during the run come on top of it (the budget spends what is in use when the run is
        # planned), so 1 GiB of the 78 is left to them.
        h100 llama-3.1-8b 590 1 0 "${GPU_MEM:-77GiB}" --preset llama-3.1-8b --clip "${CLIP:-1}"
        trained && note "one step, no warm-up: cuDNN's plans for its windows are built in it"
        ;;
    peer)
        seq=4096
        bench pytorch-resident llama-3-8b 1 1 120 python3 bench/peers/torch_peer.py --mode resident $(common) --preset llama-3-8b --clip 0
        ladder pytorch-resident llama-3.2-3b 150 ${LADDER_PEER_H100:-32768 16384}
        ;;
    *) echo "ROWS: unknown group '$group' (small, long, longest, layer512k, full393k, peer)"; exit 2 ;;
    esac
done

python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/bench.md" --json "$out/bench.json" ${plans[@]+"${plans[@]}"} >/dev/null
echo
cat "$out/bench.md"
echo
echo "the driver's peak device memory (GiB, CUDA context included), megatrain rows:"
python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("system") != "megatrain":
        continue
    head = "  %s seq %d gpu-mem %.0f GiB: " % (r["model"], r["seq"], r.get("gpu_mem_gib", 0))
    if "tokens_per_s" not in r:
        print(head + r.get("error", r.get("skipped", "")))
        continue
    print(head + "%.0f tokens/s, %.0f TFLOP/s, driver peak %.2f GiB, host %.1f GiB, chunk %d, host checkpoints %d"
          % (r["tokens_per_s"], r["tflops"], r["driver_peak_gpu_gib"], r["host_gib"], r["chunk"], r["ckpt_on_host"]))' "$jsonl"

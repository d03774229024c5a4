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
    *) echo "ROWS: unknown group '$group' (small, long, longest)"; exit 2 ;;
    esac
done

python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/bench.md" --json "$out/bench.json" >/dev/null
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

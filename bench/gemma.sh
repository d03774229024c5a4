#!/bin/bash
# Gemma 3 4B on one GPU, in one device call (with carry [".debs"]):
#
#   ROWS="ratio long" bash bench/gemma.sh
#
# ratio  4 x 4096 tokens a step: megatrain (--clip 0, then the default --clip 1) beside PyTorch
#        GPU-resident running transformers' Gemma3ForCausalLM (bench/peers/torch_peer.py, fused
#        AdamW, no clipping); the peer at 1 x 4 and, if that does not fit the GPU, at 4 x 1 (the
#        same tokens a step). The resident peer needs ~16 bytes a parameter on the GPU: an H200.
# long   one sequence of 131072 tokens a step, the default settings; TFLOP/s counts the keys the
#        local layers' windows let a query see, the figure as if every layer were global beside it
#        (the run's tflops_full_attention); and `megatrain plan` of gemma-3-27b inside 80 GB of GPU
#        and 512 GiB of host memory, kept beside the table.
# Writes to $OUT (or /tmp/megatrain-gemma): bench.jsonl, bench.md, bench.json, runs.log, build.log.
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

out=${OUT:-/tmp/megatrain-gemma}
rows=${ROWS:-ratio long}
steps=${STEPS:-5}
warmup=${WARMUP:-2}
deadline=${BUDGET_S:-560}
build=${BUILD:-build-bench} # PREBUILT=1 BUILD=build-device: tests/device/run.sh's build, as it is
seq=4096
. bench/bench_lib.sh
bench_start bench.jsonl
build_megatrain

common() { echo --seq "$seq" --steps "$steps" --warmup-steps "$warmup" --json "$jsonl"; }
megatrain=("$build/megatrain" bench --backend cuda --preset gemma-3-4b)
peer=(python3 bench/peers/torch_peer.py --mode resident --preset gemma-3-4b --clip 0)
fits() { ! tail -1 "$jsonl" | grep -q '"error"'; }
plans=()
for row in $rows; do
    case $row in
    ratio)
        seq=4096
        bench megatrain gemma-3-4b 1 4 150 "${megatrain[@]}" $(common) --clip 0
        bench megatrain gemma-3-4b 1 4 150 "${megatrain[@]}" $(common) --clip 1
        bench pytorch-resident gemma-3-4b 1 4 150 "${peer[@]}" $(common)
        fits || bench pytorch-resident gemma-3-4b 4 1 150 "${peer[@]}" $(common)
        ;;
    long)
        seq=131072
        steps=2 warmup=1
        bench megatrain gemma-3-4b 1 1 300 "${megatrain[@]}" $(common)
        file=$out/plan-gemma-3-27b.txt
        "$build/megatrain" plan --preset gemma-3-27b --seq 4096 --batch 1 --gpu-mem 80GB --host-mem 512GiB >"$file" 2>&1
        plans+=(--plan "megatrain plan --preset gemma-3-27b --seq 4096 --batch 1 --gpu-mem 80GB --host-mem 512GiB=$file")
        ;;
    esac
done

python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/bench.md" --json "$out/bench.json" "${plans[@]}" >/dev/null
echo
cat "$out/bench.md"

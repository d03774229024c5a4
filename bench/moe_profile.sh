#!/bin/bash
# Where a mixture of experts' step goes (issue 45, "measure first"): OLMoE-1B-7B's shape (preset
# olmoe-1b-7b: 16 blocks of 64 experts of 1024, top 8) at 16 x 4096 tokens a step (4 micro-batches
# of 4 x 4096), default settings (--clip 1), on one GPU, profiled op by op (bench --profile,
# docs/profile.md): the blocks' ops (the router GEMM, routing, the permutation, gathers, the expert
# GEMMs, SwiGLU, the combine, their backwards and the recomputation, the cuBLASLt loop's host waits
# for the expert offsets) and the rest of the step (the waits on copies, the head, the device's idle
# time), each with its share and a GEMM's TFLOP/s; the step's TFLOP/s counted from the active
# parameters as bench/moe.sh counts them.
#
# Runs on a fresh device machine from the repository root, in one call of under 500 s (a build for
# the GPU at hand, then one bench run: a host store of ~90 GB, 2 warm-up and 4 timed steps of ~2 s):
#
#   NV_ARCHS=-gencode=arch=compute_90a,code=sm_90a bash bench/moe_profile.sh      with carry [".debs"]
#
# on nvidia-h100-x1 (126 GiB host: the whole model fits with the default clipping, 90 GiB measured).
# Where megatrain plan says the host cannot hold all 16 blocks, they are cut to the most it holds
# (LAYERS=N sets it), said in the table's title; the profile of a block is the same at any depth.
# Writes to $OUT (or /tmp/megatrain-moe-profile): moe-profile.md and moe-profile.json (the profile),
# bench.jsonl (bench's summary line), runs.log and build.log; prints the profile last.
# Environment: STEPS (timed steps, 4), WARMUP (2), LAYERS, BUDGET_S (480: the run is cut there).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh

out=${OUT:-/tmp/megatrain-moe-profile}
steps=${STEPS:-4}
warmup=${WARMUP:-2}
seq=4096
deadline=${BUDGET_S:-480}
build="build-bench"
. bench/bench_lib.sh
bench_start bench.jsonl
build_megatrain

shape=(--seq "$seq" --micro-batches 4 --batch 4 --clip 1)
layers=${LAYERS:-$(host_layers olmoe-1b-7b 16 "${shape[@]:2}")}
if [ "$layers" -lt 1 ]; then
    echo "not one block of OLMoE-1B-7B fits this host (megatrain plan)"
    exit 1
fi
model=(--preset olmoe-1b-7b)
if [ "$layers" -lt 16 ]; then
    model=(--config "$(cut_config olmoe-1b-7b "$layers")")
    echo "OLMoE-1B-7B cut to $layers of its 16 blocks (what this host holds)"
fi

left=$((deadline - SECONDS))
echo "==== megatrain bench --profile, olmoe-1b-7b ($layers blocks), 4 x 4 x $seq (limit $left s)" | tee -a "$log"
timeout -k 10 "$left" "$build/megatrain" bench --backend cuda "${model[@]}" "${shape[@]}" --steps "$steps" \
    --warmup-steps "$warmup" --json "$jsonl" --profile "$out/moe-profile" >>"$log" 2>&1
rc=$?
echo "==== exit $rc after $SECONDS s" | tee -a "$log"
if [ $rc -ne 0 ] || [ ! -s "$out/moe-profile.md" ]; then
    echo "the profiled run failed; its log ends:"
    tail -30 "$log"
    exit 1
fi
if [ "$layers" -lt 16 ]; then # bench names a model given by --config "model"
    sed -i "1s/^# Profile: model/# Profile: olmoe-1b-7b cut to $layers of its 16 blocks/" "$out/moe-profile.md"
    python3 - "$out/moe-profile.json" "olmoe-1b-7b ($layers of 16 blocks)" <<'EOF'
import json, sys
path, label = sys.argv[1:]
profile = json.load(open(path))
profile["model"] = label
json.dump(profile, open(path, "w"), indent=1)
EOF
fi
echo "$machine"
cat "$out/moe-profile.md"

#!/bin/bash
# Data parallelism on a machine with 2 or more GPUs (kind nvidia-h200-x2), in one short device call
# (about 3-4 minutes, most of it the build):
#
#   bash tests/device/multi_gpu.sh        with carry [".debs"]
#
# Builds with CUDA=1, runs the two-GPU CUDA tests (2 GPUs against 1 within bf16 tolerance; NCCL's
# reduce-scatter with a tail; a rank that dies releases the other from NCCL), then the command line:
# a tiny run on 2 GPUs, a failing rank, a resume on 1 GPU, and the refusal of more GPUs than there
# are. Logs go to $OUT when set. NV_ARCHS (e.g. -gencode=arch=compute_90a,code=sm_90a) builds for the
# GPU at hand alone.
set -u
cd "$(dirname "$0")/../.."
logs=${OUT:-/tmp/megatrain-multi-gpu-tests}
build=build-device
mkdir -p "$logs"
. tests/device/env.sh
# The device machines' rule: NVLink multicast stays off.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
nvidia-smi -L
. tests/device/steps.sh

step build make CUDA=1 BUILD=$build ${NV_ARCHS:+NV_ARCHS="$NV_ARCHS"} -j"$(nproc)" $build/cuda_tests $build/megatrain
step cuda2 $build/cuda_tests --jobs 1 --verbose --filter 'cuda/@(two_gpus_*|a_gpu_rank_*|nccl_reduce_scatter_*)'

# cli: a run on 2 GPUs that one rank's death stops at step 5 (the checkpoint of step 4 stays good),
# resumed on 2 GPUs to 8, then on 1 GPU to 10; a run on 2 GPUs with --clip 0; and --gpus past the
# GPUs present, refused.
cli() {
    local dir=/tmp/mt-multi-gpu run=/tmp/mt-multi-gpu/run visible
    visible=$(nvidia-smi -L | wc -l)
    rm -rf $dir && mkdir -p $dir
    python3 -c 'import random; random.seed(1); print(" ".join(random.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(200000)))' >$dir/corpus.txt
    local args=(train --preset tiny --backend cuda --seq 64 --batch 4 --ckpt-every 2 --eval-every 4 --data $dir/corpus.txt --out $run)
    if MT_TEST_RANK_FAIL_STEP=5 $build/megatrain "${args[@]}" --gpus 2 --steps 8 2>$dir/fail.err; then
        echo "FAIL: the run with a dying rank succeeded"; return 1
    fi
    grep -q "rank 1 of 2" $dir/fail.err || { echo "FAIL: no rank named:"; cat $dir/fail.err; return 1; }
    echo "ok: a dying rank stopped the run: $(tail -1 $dir/fail.err)"
    $build/megatrain "${args[@]}" --gpus 2 --steps 8 --resume || { echo "FAIL: resume on 2 GPUs"; return 1; }
    $build/megatrain "${args[@]}" --gpus 1 --steps 10 --resume || { echo "FAIL: resume on 1 GPU"; return 1; }
    echo "ok: resumed on 2 GPUs, then on 1"
    $build/megatrain train --preset tiny --backend cuda --seq 64 --batch 4 --eval-every 4 --data $dir/corpus.txt \
        --out $dir/noclip --gpus 2 --clip 0 --steps 6 || { echo "FAIL: --gpus 2 --clip 0"; return 1; }
    echo "ok: 2 GPUs without clipping (the optimizer overlapping the backward)"
    if $build/megatrain "${args[@]}" --gpus $((visible + 1)) --steps 12 --resume 2>$dir/refused.err; then
        echo "FAIL: --gpus $((visible + 1)) was accepted with $visible GPUs"; return 1
    fi
    echo "ok: refused: $(tail -1 $dir/refused.err)"
}
step cli cli

# procs: two processes, one GPU each, started as torchrun starts them (NCCL's unique id over the
# TCP rendezvous at MASTER_ADDR:MASTER_PORT), train the tiny run; a rank killed mid-run ends its peer.
procs() {
    local dir=/tmp/mt-multi-gpu
    local args=(train --preset tiny --backend cuda --seq 64 --batch 4 --steps 20 --ckpt-every 10 --eval-every 10 --data $dir/corpus.txt)
    export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29631
    RANK=1 LOCAL_RANK=1 $build/megatrain "${args[@]}" --out $dir/procs >$dir/rank1.log 2>&1 &
    local pid=$!
    RANK=0 LOCAL_RANK=0 $build/megatrain "${args[@]}" --out $dir/procs || { echo "FAIL: rank 0"; return 1; }
    wait $pid || { echo "FAIL: rank 1:"; tail -5 $dir/rank1.log; return 1; }
    echo "ok: two processes trained 20 steps; rank 1's log ends: $(tail -1 $dir/rank1.log)"
    # The processes split the units (each updates its slice, the others' come over NCCL as blocks
    # load, the whole state before each checkpoint): the same run as two GPUs of one process, step
    # for step. A slice left stale shows as a loss apart by far more than the order of the sums.
    unset WORLD_SIZE
    $build/megatrain "${args[@]}" --gpus 2 --out $dir/threads >$dir/threads.log 2>&1 || { echo "FAIL: --gpus 2"; return 1; }
    python3 - $dir/procs/metrics.jsonl $dir/threads/metrics.jsonl <<'PY' || return 1
import json, sys
def losses(p): return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if r.get("loss") is not None}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(a[s] - b[s]) / abs(b[s]) for s in b)
print(f"two processes vs --gpus 2: {len(b)} steps, largest relative loss difference {worst:.2e}")
sys.exit(1 if worst > 1e-2 or set(a) != set(b) else 0)
PY
    export WORLD_SIZE=2
    # Rank 1 killed 20 s in: rank 0's watchdog (MT_RANK_TIMEOUT_S=30) aborts NCCL and says so.
    RANK=1 LOCAL_RANK=1 $build/megatrain "${args[@]}" --steps 100000 --out $dir/procs2 >$dir/rank1.log 2>&1 &
    pid=$!
    (sleep 20; kill -9 $pid) &
    local start=$SECONDS
    if RANK=0 LOCAL_RANK=0 MT_RANK_TIMEOUT_S=30 timeout 300 $build/megatrain "${args[@]}" --steps 100000 \
        --out $dir/procs2 2>$dir/rank0.err; then
        echo "FAIL: rank 0 went on without rank 1"; return 1
    fi
    echo "rank 0 ended $((SECONDS - start)) s after it started (rank 1 killed at 20 s): $(tail -1 $dir/rank0.err)"
    unset WORLD_SIZE MASTER_ADDR MASTER_PORT
    [ $((SECONDS - start)) -lt 120 ] || { echo "FAIL: rank 0 was not ended by its watchdog"; return 1; }
}
step procs procs

echo "==== summary"
printf '%s\n' "${summary[@]}"
exit $status

#!/bin/bash
# Issue 27's device check of packed examples, in one device call from the repository root:
#
#   bash tests/device/packing.sh        with carry [".debs"]  (tests/device/fetch-debs.sh)
#
# 1. build   megatrain, the CUDA tests and bench_attention for Hopper (NV_ARCHS; one arch: quick)
# 2. cuda    the CUDA tests of packed attention: both paths (cuDNN's ragged layout, the CUDA-core
#            kernels) against the CPU reference, the op table (its segment cases), the engine with
#            segments against the cpu engine
# 3. check   the backend's attention of packed examples at 4k-32k tokens, three layouts, against
#            PyTorch's SDPA run on each example alone (and, up to 8k, with a block-diagonal mask);
#            with the same tokens' plain (unmasked) attention timed beside it
# 4. step    the packed-step bench: megatrain bench at Llama-3.2-1B (then 3B while time is left),
#            a step of packed examples (about 600 tokens each) beside today's plain step on the
#            same tokens
# Writes to $OUT (or /tmp/megatrain-packing): NAME.log per step (check.log: the attention lines),
# steps.jsonl, packing.md and packing.json; prints the tables last. A pass: every step rc=0; rel_out and rel_dq
# under 2e-2 against PyTorch (bf16); the packed step at >= 0.95x the plain step's tokens/s.
# Environment: BUDGET_S (seconds after which no bench run starts, default 540), MT_STEPS (the steps
# to run, steps.sh), SEQS / MEANS (the check's lengths and example lengths).
set -u
cd "$(dirname "$0")/../.." || exit 1
logs=${OUT:-/tmp/megatrain-packing}
mkdir -p "$logs"
. tests/device/env.sh
. tests/device/steps.sh
build=build-packing
arch=${NV_ARCHS:--gencode=arch=compute_90a,code=sm_90a}
deadline=${BUDGET_S:-540}
seqs=${SEQS:-4096,16384,32768}
means=${MEANS:-256,1024,4096}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/machine.txt"

step build make CUDA=1 BUILD=$build NV_ARCHS="$arch" -j"$(nproc)" $build/cuda_tests $build/megatrain \
    $build/bench/attention/bench_attention
step cuda $build/cuda_tests --jobs 2 --verbose \
    --filter 'cuda/@(attention_paths_packed*|attention_layouts_*|engine_matches_cpu_packed*|ops_table|attention_paths_gqa_odd*)'

# The Llama-3.2-1B attention shape: 32 heads, 8 kv heads, head_dim 64.
check() {
    mkdir -p "$logs/samples"
    local shape=(--seqs "$seqs" --heads 32 --kv-heads 8 --head-dim 64)
    "$build/bench/attention/bench_attention" "${shape[@]}" --iters 3 --packed "$means" --sample "$logs/samples" &&
        python3 bench/attention/torch_packed.py "${shape[@]}" --packed "$means" --sample "$logs/samples"
    local rc=$?
    rm -rf "$logs/samples"
    return $rc
}
step check check

# megatrain bench NAME ARGS...: one run's JSON line into steps.jsonl, its output into step.log.
steps_jsonl=$logs/steps.jsonl
: >"$steps_jsonl"
bench_step() {
    local left=$((deadline - SECONDS))
    if [ $left -lt 60 ]; then
        echo "skipped (the time budget, BUDGET_S=$deadline, is spent): $*"
        return 0
    fi
    echo "==== $*"
    timeout -k 10 $left "$build/megatrain" bench --backend cuda --steps 4 --warmup-steps 2 --json "$steps_jsonl" "$@"
}
steps() {
    local rc=0
    for shape in "llama-3.2-1b 4 4 4096" "llama-3.2-1b 4 1 16384" "llama-3.2-3b 2 4 4096"; do
        set -- $shape
        bench_step --preset "$1" --micro-batches "$2" --batch "$3" --seq "$4" || rc=1
        bench_step --preset "$1" --micro-batches "$2" --batch "$3" --seq "$4" --packed 600 || rc=1
    done
    return $rc
}
step step steps

python3 - "$logs" <<'PY' | tee "$logs/packing.md"
import json, os, sys
logs = sys.argv[1]
def lines(name):
    path = os.path.join(logs, name)
    return open(path).read().splitlines() if os.path.exists(path) else []
rows = {}
for line in lines("check.log"):
    f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    if "seq" not in f:
        continue
    key = (int(f["seq"]), int(f.get("packed", 0)))
    rows.setdefault(key, {}).update({k: v.strip('"') for k, v in f.items()})
machine = " ".join(lines("machine.txt"))
print("# Packed examples on %s\n" % machine)
print("## Attention (Llama-3.2-1B shape: 32 heads, 8 kv heads, head_dim 64), one sequence\n")
print("| tokens | examples (mean length) | fwd / bwd ms | vs plain (time) | out, dq vs PyTorch per example (rel L2; worst example) | vs PyTorch, block-diagonal mask |")
print("|---|---|---|---|---|---|")
table = {"attention": [], "steps": []}
for (seq, mean) in sorted(rows):
    r = rows[(seq, mean)]
    plain = rows.get((seq, 0), {})
    if mean == 0:
        print("| %d | plain (causal over the whole sequence) | %s / %s | 1.00x | - | - |" % (seq, r.get("fwd_ms", "-"), r.get("bwd_ms", r.get("error", "-"))))
    else:
        ratio = "-"
        if "fwd_ms" in r and "fwd_ms" in plain:
            ratio = "%.2fx" % ((float(r["fwd_ms"]) + float(r["bwd_ms"])) / (float(plain["fwd_ms"]) + float(plain["bwd_ms"])))
        check = "%s, %s; %s, %s" % (r.get("rel_out", "-"), r.get("rel_dq", "-"), r.get("worst_example_out", "-"), r.get("worst_example_dq", "-"))
        mask = "%s, %s" % (r["rel_out_mask"], r["rel_dq_mask"]) if "rel_out_mask" in r else "-"
        print("| %d | %s (%d) | %s / %s | %s | %s | %s |" % (seq, r.get("segments", "-"), mean, r.get("fwd_ms", "-"),
              r.get("bwd_ms", r.get("error", "-")), ratio, check, mask))
    table["attention"].append(r)
print("\n## Training steps, the same tokens plain and packed (examples of about 600 tokens)\n")
print("| model | micro x batch x seq | plain step s | packed step s (examples a window) | packed / plain tokens/s |")
print("|---|---|---|---|---|")
runs = [json.loads(l) for l in lines("steps.jsonl") if l.strip()]
by = {}
for j in runs:
    by.setdefault((j["model"], j["micro_batches"], j["batch"], j["seq"]), {})[j.get("packed_mean", 0)] = j
for key in sorted(by):
    p, q = by[key].get(0), by[key].get(600)
    ratio = "%.3fx" % (q["tokens_per_s"] / p["tokens_per_s"]) if p and q else "-"
    print("| %s | %d x %d x %d | %s | %s | %s |" % (key[0], key[1], key[2], key[3], "%.3f" % p["step_s"] if p else "-",
          "%.3f (%.1f)" % (q["step_s"], q["segments_per_window"]) if q else "-", ratio))
    table["steps"].append({"model": key[0], "micro_batches": key[1], "batch": key[2], "seq": key[3],
                           "plain": p, "packed": q})
json.dump(table, open(os.path.join(logs, "packing.json"), "w"), indent=1)
PY

echo "==== summary"
printf '%s\n' "${summary[@]}"
exit $status

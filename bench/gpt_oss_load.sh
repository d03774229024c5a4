#!/bin/bash
# Host memory at load (issue 41): the process's peak resident memory when `megatrain train
# --init-from` has loaded a gpt-oss-120b-shaped MXFP4 checkpoint cut to BLOCKS blocks (the experts
# decoded a band of rows at a time straight into the store), beside what `megatrain plan` says the
# run holds on the host for the same model and step. From the repository root:
#
#   on a 128 GiB machine of one GPU (nvidia-h100-x1, nvidia-h200), carry [".debs"]:
#     BLOCKS=1 bash bench/gpt_oss_load.sh         1 block of the 120b's 128 experts (4.4 B parameters)
#   on nvidia-h100-x2 (256 GiB host):
#     bash bench/gpt_oss_load.sh                  2 blocks (7.6 B parameters, 5.6 GB on disk)
#   on a machine without a GPU (the cpu backend; a cut that fits 24 GiB):
#     BACKEND=cpu BUILD_DIR=build EXPERTS=8 VOCAB=32000 bash bench/gpt_oss_load.sh
#
# The checkpoint (bench/gpt_oss_checkpoint.py: random codes) goes to CKPT_DIR
# (/tmp/gpt-oss-120b-cut), made again only when its shape changes; the free disk there is checked
# first. The run stops (SIGKILL: no checkpoint written) once its "loaded" line is out, unless
# FULL=1 lets its one step run. Writes to $OUT (/tmp/megatrain-gpt-oss-load): gpt_oss_load.jsonl,
# bench.md, bench.json, plan.txt, train.log. Environment: BLOCKS (2), EXPERTS (128), VOCAB (201088),
# SEQ (4096), BATCH (1), BACKEND (cuda), BUILD_DIR (build-bench), PREBUILT, HOST_MEM (as
# host_floor.sh's), ARGS (more options for plan and train, e.g. --clip 0), FULL (0), BUDGET_S (580),
# PYTHON (python3: one with numpy).
set -u
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/megatrain-gpt-oss-load}
ckpt=${CKPT_DIR:-/tmp/gpt-oss-120b-cut}
blocks=${BLOCKS:-2}
experts=${EXPERTS:-128}
vocab=${VOCAB:-201088}
seq=${SEQ:-4096}
batch=${BATCH:-1}
backend=${BACKEND:-cuda}
build=${BUILD_DIR:-build-bench}
deadline=${BUDGET_S:-580}
py=${PYTHON:-python3}
host_opt=()
[ "${HOST_MEM:-none}" = none ] || host_opt=(--host-mem "$HOST_MEM")
mkdir -p "$out"
jsonl=$out/gpt_oss_load.jsonl
: >"$jsonl"

if [ "$backend" = cuda ]; then
    . tests/device/env.sh
    . bench/bench_lib.sh
    bench_start gpt_oss_load.jsonl
    build_megatrain
else
    machine="$(nproc) cores, $(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo) GiB host memory, no GPU"
    [ -x "$build/megatrain" ] || { echo "$build/megatrain is not built (make $build/megatrain)"; exit 1; }
fi

shape="$blocks $experts $vocab"
if [ "$(cat "$ckpt/shape" 2>/dev/null)" != "$shape" ]; then
    rm -rf "$ckpt"
    mkdir -p "$ckpt"
    need=$("$py" bench/gpt_oss_checkpoint.py --bytes $shape) || exit 1
    free=$(df -B1 --output=avail "$ckpt" | tail -1)
    if [ "$need" -gt $((free - (1 << 30))) ]; then
        echo "$ckpt: the checkpoint needs $need bytes, $free free there (1 GiB kept): give CKPT_DIR elsewhere"
        exit 1
    fi
    echo "writing $ckpt: $blocks blocks of $experts experts, vocabulary $vocab, $need bytes"
    "$py" bench/gpt_oss_checkpoint.py "$ckpt" $shape || exit 1
    echo "$shape" >"$ckpt/shape"
fi
"$py" -c 'import numpy, sys; numpy.save(sys.argv[1], numpy.random.default_rng(0).integers(0, int(sys.argv[2]),
            4 * (int(sys.argv[3]) * int(sys.argv[4]) + 1), dtype=numpy.uint32))' "$out/tokens.npy" "$vocab" "$seq" "$batch"

# shellcheck disable=SC2206
opts=(--seq "$seq" --batch "$batch" --backend "$backend" "${host_opt[@]}" ${ARGS:-})
"$build/megatrain" plan --init-from "$ckpt" "${opts[@]}" >"$out/plan.txt" 2>&1
cat "$out/plan.txt"

rm -rf "$out/run"
"$build/megatrain" train --init-from "$ckpt" --data "$out/tokens.npy" --steps 1 --out "$out/run" "${opts[@]}" \
    >"$out/train.log" 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null && ! grep -q "^megatrain: info: loaded " "$out/train.log" && [ $SECONDS -lt "$deadline" ]; do
    sleep 1
done
if [ "${FULL:-0}" = 1 ]; then wait $pid; else kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; fi
cat "$out/train.log"

"$py" - "$out" "$machine" "$blocks" "$experts" "$vocab" "$seq" "$batch" "$backend" <<'PY'
import json, re, sys
out, machine, blocks, experts, vocab, seq, batch, backend = sys.argv[1:]
plan, log = open(out + "/plan.txt").read(), open(out + "/train.log").read()
row = {"model": f"gpt-oss-120b cut to {blocks} blocks, {experts} experts, vocabulary {vocab}", "seq": int(seq),
       "batch": int(batch), "backend": backend, "machine": machine}
m = re.search(r"^host .*= ([0-9.]+) GB, ([0-9.]+) bytes a parameter", plan, re.M)
n = re.search(r"^fit +host needs ([0-9.]+) GB", plan, re.M)
p = re.search(r"^model +([0-9.]+) B parameters", plan, re.M)
store = re.search(r"host store: ([0-9.]+) GB", log)
loaded = re.search(r"loaded .*: ([0-9.]+) GB \(the process's peak resident memory so far: ([0-9.]+) GB\)", log)
if m: row.update(plan_host_gb=float(m.group(1)), plan_bytes_per_param=float(m.group(2)))
# what a run allocates only after its load: the gradients kept for the clip and the staging buffers
later = re.findall(r"(?:gradients kept for the clip|staging) ([0-9.]+) GB", m.group(0) if m else "")
if m: row["plan_host_at_load_gb"] = row["plan_host_gb"] - sum(map(float, later))
if n: row["plan_host_needs_gb"] = float(n.group(1))
if store: row["store_gb"] = float(store.group(1))
if p: row["params_b"] = float(p.group(1))
if loaded:
    row.update(checkpoint_gb=float(loaded.group(1)), load_peak_gb=float(loaded.group(2)))
    if m: row["load_peak_vs_plan_host"] = row["load_peak_gb"] / row["plan_host_gb"]
    if m: row["load_peak_vs_plan_at_load"] = row["load_peak_gb"] / row["plan_host_at_load_gb"]
    if store: row["load_over_store_gb"] = row["load_peak_gb"] - row["store_gb"]
else:
    row["error"] = (log.strip().splitlines() or ["no output"])[-1][:900]
open(out + "/gpt_oss_load.jsonl", "a").write(json.dumps(row) + "\n")
json.dump([row], open(out + "/bench.json", "w"), indent=2)
cols = [("checkpoint_gb", "checkpoint GB"), ("store_gb", "host store GB"), ("load_peak_gb", "peak resident at load GB"),
        ("load_over_store_gb", "load peak less the store GB"),
        ("plan_host_gb", "plan: host GB"), ("plan_host_needs_gb", "plan: host needs GB"),
        ("load_peak_vs_plan_host", "load peak / plan host"),
        ("plan_host_at_load_gb", "plan: host less what a run allocates after loading GB"),
        ("load_peak_vs_plan_at_load", "load peak / that"), ("plan_bytes_per_param", "plan bytes/param")]
md = [f"machine: {machine}", "", "| model | seq x batch | " + " | ".join(c[1] for c in cols) + " |",
      "|---|---|" + "---|" * len(cols),
      f"| {row['model']} | {seq} x {batch} | " + " | ".join(
          (f"{row[k]:.3f}" if k in row else "-") for k, _ in cols) + " |"]
if "error" in row:
    md += ["", "error: " + row["error"]]
open(out + "/bench.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY

#!/bin/bash
# Small steps of a mixture of experts (issue 45, item 3): the backward's reloads bring only the
# experts some token of the step chose (the default) against every expert (--all-experts), on
# OLMoE-1B-7B's shape (preset olmoe-1b-7b: 16 blocks of 64 experts of 1024, top 8; cut to what the
# host holds) at 1 x 4096 tokens a step and at 1 x 512 (fewer tokens: more experts no token chose),
# default settings otherwise. Each row: the step's time, tokens/s, TFLOP/s (active parameters), the
# weights' bytes that crossed PCIe a step as the engine counted them, the share of the reloaded
# blocks' experts left home, and the timed steps' losses (the same run twice but for the reloads:
# the losses agree to the GPU's run-to-run floor; tests/cuda's moe_reloads_of_routed_experts_change_
# nothing checks the gradients).
#
# Runs on a fresh device machine from the repository root, in one call of under 400 s:
#
#   NV_ARCHS=-gencode=arch=compute_90a,code=sm_90a bash bench/moe_reload.sh      with carry [".debs"]
#
# Writes to $OUT (or /tmp/megatrain-moe-reload): moe-reload.jsonl (bench's lines), moe-reload.md and
# moe-reload.json (the table), runs.log and build.log; prints the table last.
# Environment: STEPS (timed steps, 4), WARMUP (2), LAYERS, BUDGET_S (380).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh

out=${OUT:-/tmp/megatrain-moe-reload}
steps=${STEPS:-4}
warmup=${WARMUP:-2}
seq=4096
deadline=${BUDGET_S:-380}
build="build-bench"
. bench/bench_lib.sh
bench_start moe-reload.jsonl
build_megatrain

layers=${LAYERS:-$(host_layers olmoe-1b-7b 16 --micro-batches 1 --batch 1)}
if [ "$layers" -lt 1 ]; then
    echo "not one block of OLMoE-1B-7B fits this host (megatrain plan)"
    exit 1
fi
model=(--preset olmoe-1b-7b)
label=olmoe-1b-7b
if [ "$layers" -lt 16 ]; then
    model=(--config "$(cut_config olmoe-1b-7b "$layers")")
    label="olmoe-1b-7b ($layers of 16 blocks)"
fi

for tokens in 4096 512; do
    for reload in routed all; do
        flags=()
        [ $reload = all ] && flags=(--all-experts)
        bench "megatrain-$reload" "$label" 1 1 180 "$build/megatrain" bench --backend cuda "${model[@]}" \
            --seq "$tokens" --steps "$steps" --warmup-steps "$warmup" --json "$jsonl" "${flags[@]}"
    done
done
relabel "$label"

python3 - "$jsonl" "$log" "$out/moe-reload" "$machine" <<'PY'
import json, re, sys
jsonl, log, stem, machine = sys.argv[1:]
runs = [json.loads(line) for line in open(jsonl) if line.strip()]
# The timed steps' losses, run by run, from the log (bench prints each step's line).
losses, current = [], None
for line in open(log):
    if line.startswith("==== ") and ": " in line and "exit" not in line:
        current = []
        losses.append(current)
    m = re.match(r"timed step \d+: .*loss ([0-9.]+)", line)
    if m and current is not None:
        current.append(float(m.group(1)))
rows = []
for i, r in enumerate(runs):
    run = "every expert (--all-experts)" if r.get("all_experts") else "routed experts (default)"
    row = {"system": r.get("system"), "run": run, "model": r.get("model"), "tokens_per_step": r.get("tokens_per_step"),
           "all_experts": r.get("all_experts"), "step_s": r.get("step_s"), "tokens_per_s": r.get("tokens_per_s"),
           "tflops": r.get("tflops"), "pcie_h2d_gb": r.get("pcie_h2d_gb_per_gpu"),
           "experts_unrouted_share": r.get("experts_unrouted_share"),
           "losses": losses[i] if i < len(losses) else [], "error": r.get("error")}
    rows.append(row)
json.dump({"machine": machine, "rows": rows}, open(stem + ".json", "w"), indent=1)
with open(stem + ".md", "w") as f:
    f.write(f"# Routed reloads against every expert: {rows[0]['model'] if rows else ''}, one step of 1 sequence\n\n")
    f.write(f"{machine}. Default settings (--clip 1); `--all-experts` reloads every expert.\n\n")
    f.write("| run | tokens/step | step s | tokens/s | TFLOP/s | PCIe in GB/step | experts left home | timed losses |\n")
    f.write("|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        if r["error"]:
            f.write(f"| {r['system']} | | | | | | | {r['error']} |\n")
            continue
        share = r["experts_unrouted_share"]
        f.write(f"| {r['run']} | {r['tokens_per_step']:.0f} | {r['step_s']:.3f} | {r['tokens_per_s']:.0f} | "
                f"{r['tflops']:.1f} | {r['pcie_h2d_gb']:.3f} | {100 * share:.1f}% | "
                f"{', '.join(f'{x:.4f}' for x in r['losses'])} |\n")
print(open(stem + ".md").read())
PY

#!/usr/bin/env bash
# The CUDA backend's causal attention (cuDNN's fused SDPA through the backend's op) at long
# sequences beside PyTorch's SDPA, same shapes and inputs, one table; megatrain's results at each
# length are checked against PyTorch's (first and last rows of out and dq). On the GPU machine:
#
#   bash bench/attention/run.sh [SEQS]      default 32768,65536,131072,262144,524288
#
# Environment: HEADS, KV_HEADS, HEAD_DIM (default 24, 8, 128: Llama-3.2-3B), ITERS (timed runs a
# length after one warm-up, default 2), TILE (megatrain's attention in windows of TILE queries, as
# the engine runs it with --attn-tile; default 65536, the engine's default; 0: one call), BUILD
# (build-bench), OUT (where the table goes).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .debs ] && . tests/device/env.sh # on the GPU machine: the carried build dependencies
seqs=${1:-32768,65536,131072,262144,524288}
build=${BUILD:-build-bench}
out=${OUT:-/tmp/megatrain-attention}
mkdir -p "$out"
args=(--seqs "$seqs" --heads "${HEADS:-24}" --kv-heads "${KV_HEADS:-8}" --head-dim "${HEAD_DIM:-128}" --iters "${ITERS:-2}")
tile=${TILE:-65536}
make -s CUDA=1 BUILD="$build" ${NV_ARCHS:+"NV_ARCHS=$NV_ARCHS"} -j"$(nproc)" bench-attention >"$out/attention-build.log" 2>&1 || { tail -30 "$out/attention-build.log"; exit 1; }
raw=$out/attention.txt
"$build/bench/attention/bench_attention" "${args[@]}" --tile "$tile" --sample "$out" | tee "$raw" || true
python3 bench/attention/torch_attention.py "${args[@]}" --sample "$out" | tee -a "$raw" || true
python3 - "$raw" <<'PY' | tee "$out/attention.md"
import sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    rows.setdefault(int(f["seq"]), {})[f["system"]] = f
print("| seq | megatrain windows of (count) | megatrain fwd / bwd ms | TFLOP/s fwd / bwd | PyTorch SDPA fwd / bwd ms | TFLOP/s fwd / bwd | megatrain / PyTorch (fwd+bwd time) | out, dq vs PyTorch (rel L2, first / last 64 rows) |")
print("|---|---|---|---|---|---|---|---|")
for seq in sorted(rows):
    m, t = rows[seq].get("megatrain", {}), rows[seq].get("torch", {})
    def cell(r, a, b):
        return "%s / %s" % (r[a], r[b]) if a in r else r.get("error", "-")
    ratio = "-"
    if "fwd_ms" in m and "fwd_ms" in t:
        ratio = "%.2fx" % ((float(t["fwd_ms"]) + float(t["bwd_ms"])) / (float(m["fwd_ms"]) + float(m["bwd_ms"])))
    check = "-"
    if "rel_out_first" in t:
        check = "%s / %s, %s / %s" % (t["rel_out_first"], t["rel_out_last"], t["rel_dq_first"], t["rel_dq_last"])
    tiles = "%s (%s)" % (m["tile"], m["windows"]) if "tile" in m else "-"
    print("| %d | %s | %s | %s | %s | %s | %s | %s |" % (seq, tiles, cell(m, "fwd_ms", "bwd_ms"), cell(m, "fwd_tflops", "bwd_tflops"),
          cell(t, "fwd_ms", "bwd_ms"), cell(t, "fwd_tflops", "bwd_tflops"), ratio, check))
PY

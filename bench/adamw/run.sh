#!/usr/bin/env bash
# megatrain's CPU AdamW beside PyTorch's fused CPU AdamW and the host's memory bandwidth, over
# the same parameter count, as one table.
#
#   bench/adamw/run.sh [PARAMS] [THREADS]     defaults: 268435456 (256M) and 1,2,4,8,16
#
# Environment: PYTHON (python3 by default; needs torch), BUILD (build dir, default build),
# ITERS (timed runs per row, best taken; default 5), PARTS (ours: the parts of the update timed,
# default full; full,masters,moments adds a clipped step's two passes after the norm).
set -euo pipefail
cd "$(dirname "$0")/../.."

params=${1:-268435456}
threads=${2:-1,2,4,8,16}
iters=${ITERS:-5}
parts=${PARTS:-full}
build=${BUILD:-build}
python=${PYTHON:-python3}

make -s BUILD="$build" bench-adamw
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
args=(--params "$params" --threads "$threads" --iters "$iters")
"$build/bench/adamw/bench_adamw" "${args[@]}" --parts "$parts" >"$raw"
"$python" bench/adamw/torch_adamw.py "${args[@]}" >>"$raw"

# One row per measurement; "x torch" divides an AdamW row's G params/s by torch's at the same
# thread count. Bytes per parameter: ours 28 (split masters: the bf16 weights are their high halves), torch 28.
awk '
    /^#/ { print; next }
    {
        for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
        n++; kind[n] = f["kind"]; impl[n] = f["impl"] (f["part"] != "" && f["part"] != "full" ? "/" f["part"] : ""); thr[n] = f["threads"]
        gps[n] = f["gparams_per_s"]; gbs[n] = f["gb_per_s"]
        if (f["kind"] == "torch") torch_gps[f["threads"]] = f["gparams_per_s"]
        delete f
    }
    END {
        fmt = "%-8s %-14s %7s %12s %8s %8s\n"
        printf fmt, "kind", "impl", "threads", "G params/s", "GB/s", "x torch"
        for (i = 1; i <= n; i++) {
            p = (gps[i] == "") ? "-" : gps[i]
            t = torch_gps[thr[i]]
            r = (kind[i] == "stream" || t == "" || index(impl[i], "/")) ? "-" : sprintf("%.2f", gps[i] / t)
            printf fmt, kind[i], impl[i], thr[i], p, gbs[i], r
        }
    }' "$raw"

#!/bin/bash
# The host floor of full precision (issue 25): host bytes a parameter, exact clipping that overlaps
# the backward, and plan's floor beside each measured step. From the repository root:
#
#   on nvidia-h100-x2 (one of its GPUs; 256 GiB host, 32 cores), two calls:
#     ROWS="plans 14b" bash bench/host_floor.sh        carry [".debs"]; builds build-bench (~3 min)
#     ROWS="8b" PREBUILT=1 bash bench/host_floor.sh    carry [".debs", "build-bench"]
#   on a 128 GiB machine of one GPU (nvidia-h200 or nvidia-h100-x1):
#     ROWS="8b-128" bash bench/host_floor.sh           carry [".debs"] (or PREBUILT=1 with build-bench)
#
# Groups (ROWS):
#   plans   `megatrain plan` of the rows below on this machine (its GPU, rates and host memory),
#           and of the 123B preset (mistral-large-2) with --host-mem 1.5TB --gpu-mem 139GiB,
#           --clip 0 and the default: host bytes a parameter, the floor, fit
#   14b     bench Qwen2.5-14B, 1 x 4 x 4096 tokens: --clip 0; exact clipping on steps that do not
#           clip (--clip 1e9: after the warm-up, every step takes its whole update ahead of the
#           norm, the plain update's bits); exact clipping on steps that all clip (--clip 1e-3:
#           every step updates the masters, then the moments, once the norm is known; the bars:
#           >= 0.95x and >= 0.85x of --clip 0)
#   8b      bench Llama-3-8B, 8 x 1 x 4096 tokens, --gpu-mem 24GiB: --clip 0 and the default
#           (--clip 1); the bar: the default >= 0.9x of --clip 0
#   ring    the 8b --clip 0 row with --grad-ring 4 (the ring before the planner's default became 2),
#           to run in the same call as 8b
#   ring14b the 14b --clip 0 row with --grad-ring 4, one block past the planner's ring on the x2's
#           H100 (3: the quarter byte a parameter), to run in the same call as 14b
#   8b-128  the same two on a 128 GiB host, the default first (it must fit and run there)
#   allcores the 8b default with --opt-threads set to every core (the issuing thread's among them)
#   ends14b the 14b row that clips every step with --ends-on-device off (the planner's blocks in
#           the ends' room; the embedding's untouched rows then go before the norm)
#   blocks14b the 14b row that clips every step with --device-blocks N for each N of BLOCKS14
#           ("1 4"): with the planner's own count in 14b, what each block the device keeps buys
#   pieces14b the 14b rows (CLIPS14) with 4096-token pieces and 8192-query attention tiles: the
#           workspace the planner then spends on another block's state (the x2's H100: 9 not 8)
# Each bench row carries, beside the measured step and host GiB (the process's peak), plan's floor
# and host bytes a parameter (plan_floor_s, plan_host_bytes_per_param, host_bytes_per_param) and
# how many timed steps clipped (clipped_steps). Writes to $OUT (or /tmp/megatrain-host-floor):
# host_floor.jsonl, bench.md, bench.json, plans.txt, runs.log, build.log. Environment: ROWS, STEPS
# (timed steps, 3), CLIPS14 (the 14b group's --clip values, "0 1e9 1e-3"), ARGS14 (more options for
# the 14b group's rows, e.g. --gpu-mem 75GiB: an H100's budget on an H200), BLOCKS14, WARMUP (3: exact
# clipping's first step takes its update after the norm, and the next two switch to taking it
# ahead; one warm-up step times the switch), BUDGET_S (580), HOST_MEM ("none": the machine's
# report; or e.g. 240GiB where the VM's memory grows as it is touched), PREBUILT (1: take a carried or earlier
# $BUILD_DIR/megatrain as it is), BUILD_DIR (build-bench; build-device to take tests/device/run.sh's).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}

out=${OUT:-/tmp/megatrain-host-floor}
rows=${ROWS:-plans 14b}
steps=${STEPS:-3}
warmup=${WARMUP:-3}
deadline=${BUDGET_S:-580}
host_mem=${HOST_MEM:-none}
host_opt=()
[ "$host_mem" = none ] || host_opt=(--host-mem "$host_mem")
seq=4096
build=${BUILD_DIR:-build-bench}
. bench/bench_lib.sh
bench_start host_floor.jsonl
echo "NUMA nodes: $(cat /sys/devices/system/node/online 2>/dev/null); balloon pages: $(awk '/^nr_balloon_pages/ { print $2 }' /proc/vmstat)"
build_megatrain

plan() { "$build/megatrain" plan --backend cuda --seq 4096 "$@" 2>&1; }
common() { echo --seq "$seq" --steps "$steps" --warmup-steps "$warmup" --json "$jsonl"; }
# bench_8b CLIP [OPTION...]: Llama-3-8B, 8 x 1 x 4096, --gpu-mem 24GiB
bench_8b() {
    local clip=$1
    shift
    bench megatrain llama-3-8b 8 1 280 "$build/megatrain" bench --backend cuda $(common) --preset llama-3-8b \
        --gpu-mem 24GiB --clip "$clip" "${host_opt[@]}" "$@"
}

for group in $rows; do
    case $group in
    plans)
        for args in "--preset qwen2.5-14b --batch 4" "--preset llama-3-8b --batch 1 --micro-batches 8 --gpu-mem 24GiB"; do
            for clip in 0 1; do
                # shellcheck disable=SC2086
                printf '== plan %s --clip %s, host memory as this machine says\n%s\n' "$args" "$clip" \
                    "$(plan $args --clip $clip "${host_opt[@]}")" | tee -a "$out/plans.txt"
            done
        done
        for clip in 0 1; do
            printf '== plan mistral-large-2 (123 B) --clip %s --host-mem 1.5TB --gpu-mem 139GiB\n%s\n' "$clip" \
                "$(plan --preset mistral-large-2 --batch 4 --clip $clip --host-mem 1.5TB --gpu-mem 139GiB)" |
                tee -a "$out/plans.txt"
        done
        ;;
    14b)
        for clip in ${CLIPS14:-0 1e9 1e-3}; do
            # shellcheck disable=SC2086
            bench megatrain qwen2.5-14b 1 4 200 "$build/megatrain" bench --backend cuda $(common) --preset qwen2.5-14b \
                --clip "$clip" ${ARGS14:-} "${host_opt[@]}"
        done
        ;;
    8b) bench_8b 0; bench_8b 1 ;;
    8b-128) bench_8b 1; bench_8b 0 ;;
    ring) bench_8b 0 --grad-ring 4 ;; # beside 8b's --clip 0 row: the ring of 2 the planner now takes
    ring14b)
        bench megatrain qwen2.5-14b 1 4 200 "$build/megatrain" bench --backend cuda $(common) --preset qwen2.5-14b \
            --clip 0 --grad-ring 4 "${host_opt[@]}"
        ;;
    allcores) bench_8b 1 --opt-threads "$(nproc)" ;; # the default, the optimizer's team on every core
    ends14b)
        bench megatrain qwen2.5-14b 1 4 200 "$build/megatrain" bench --backend cuda $(common) --preset qwen2.5-14b \
            --clip 1e-3 --ends-on-device off "${host_opt[@]}"
        ;;
    blocks14b)
        for blocks in ${BLOCKS14:-1 4}; do
            bench megatrain qwen2.5-14b 1 4 200 "$build/megatrain" bench --backend cuda $(common) --preset qwen2.5-14b \
                --clip 1e-3 --device-blocks "$blocks" "${host_opt[@]}"
        done
        ;;
    pieces14b)
        for clip in ${CLIPS14:-0 1e9 1e-3}; do
            bench megatrain qwen2.5-14b 1 4 200 "$build/megatrain" bench --backend cuda $(common) --preset qwen2.5-14b \
                --clip "$clip" --chunk 4096 --attn-tile 8192 "${host_opt[@]}"
        done
        ;;
    *) echo "ROWS: unknown group '$group' (plans, 14b, 8b, 8b-128, ring, ring14b, allcores, ends14b, blocks14b, pieces14b)"; exit 2 ;;
    esac
done

[ -s "$jsonl" ] || exit 0
python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/bench.md" --json "$out/bench.json" >/dev/null
echo
cat "$out/bench.md"
python3 - "$jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for model in sorted({r["model"] for r in runs}):
    rows = [r for r in runs if r["model"] == model and "tokens_per_s" in r]
    base = next((r["tokens_per_s"] for r in rows if r.get("clip") == 0), None)
    for r in rows:
        vs = f", {r['tokens_per_s'] / base:.2f}x --clip 0" if base else ""
        floor = r.get("plan_floor_s", 0)
        print(f"  {model} clip {r.get('clip')}: {r['tokens_per_s']:.0f} tokens/s{vs}, step {r['step_s']:.3f} s, "
              f"plan's floor {floor:.3f} s ({r['step_s'] / floor if floor else 0:.2f}x), host {r['host_gib']:.1f} GiB = "
              f"{r.get('host_bytes_per_param', 0):.2f} bytes a parameter (plan {r.get('plan_host_bytes_per_param', 0):.2f}), "
              f"{r.get('clipped_steps', '?')} of the timed steps clipped, last norm {r.get('grad_norm', 0):.3g}")
PY

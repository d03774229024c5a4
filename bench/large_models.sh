#!/bin/bash
# 14B to 32B on one GPU of a 512 GiB, 64-core host (issue 18), on the nvidia-h200-x4 machine (one
# of its GPUs), from the repository root:
#
#   bash bench/large_models.sh                   with carry [".debs", "data/kjv.txt"]
#
# Groups (ROWS, default "plans 14b largest train"; each fits one device call, so give one or two
# a call where the time is short: ROWS=14b, then ROWS="largest", then ROWS=train):
#   plans    `megatrain plan` of qwen2.5-14b, mistral-small-24b and qwen2.5-32b at 4 x 4096 on
#            this machine: first with the host memory the machine reports (MemAvailable, the VM's
#            balloon, the memory cgroups: the line "fit host needs ... available (...)" says
#            which), then with --host-mem $HOST_MEM
#   14b      bench Qwen2.5-14B, 1 x 4 x 4096 tokens: --clip 0 and the default (--clip 1), then
#            PyTorch FSDP2 with CPU offload (bench/peers/torch_peer.py, clip 1) on the same shape;
#            the table's last column is megatrain's tokens/s over the peer's (the bar: >= 2.5x)
#   largest  the largest of qwen2.5-32b, mistral-small-24b, qwen2.5-14b that `plan` says fits
#            (host and device), with the default clipping or else --clip 0, benched
#   train    50 steps of Qwen2.5-14B on the demo corpus (data/kjv.txt, bytes as tokens), 4 x 1024
#            tokens a step: every loss finite and the last five's mean below the first step's
#            (metrics.jsonl and loss.svg come back; the run directory, with its 177 GB
#            checkpoint, is deleted)
# Writes to $OUT (or /tmp/megatrain-large): large.jsonl, bench.md, plans.txt, train/, runs.log,
# build.log. Environment: ROWS, STEPS (timed steps, 3), WARMUP (1), BUDGET_S (580), HOST_MEM
# (500GiB: the machine's 512 GiB less room for the system and the driver, for a VM whose memory
# grows as it is touched; "none" to leave it to the machine's report), TRAIN_STEPS (50), PREBUILT
# (1: take a carried build-bench/megatrain as it is, bench/bench_lib.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

out=${OUT:-/tmp/megatrain-large}
rows=${ROWS:-plans 14b largest train}
steps=${STEPS:-3}
warmup=${WARMUP:-1}
deadline=${BUDGET_S:-580}
train_steps=${TRAIN_STEPS:-50}
host_mem=${HOST_MEM:-500GiB}
host_opt=()
[ "$host_mem" = none ] || host_opt=(--host-mem "$host_mem")
seq=4096
build="build-bench"
. bench/bench_lib.sh
bench_start large.jsonl
echo "NUMA nodes: $(cat /sys/devices/system/node/online 2>/dev/null); balloon pages: $(awk '/^nr_balloon_pages/ { print $2 }' /proc/vmstat)"
build_megatrain
shapes="qwen2.5-32b mistral-small-24b qwen2.5-14b"

plan() { "$build/megatrain" plan --backend cuda --seq 4096 --batch 4 "$@" 2>&1; }
fits() { ! grep -q "does NOT fit" <<<"$1" && grep -q "host needs .*: fits" <<<"$1"; }
common() { echo --seq "$seq" --steps "$steps" --warmup-steps "$warmup" --json "$jsonl"; }

for group in $rows; do
    case $group in
    plans)
        for model in $shapes; do
            for host in machine given; do
                if [ $host = machine ]; then p=$(plan --preset "$model"); else p=$(plan --preset "$model" "${host_opt[@]}"); fi
                printf '== plan %s, host memory as the %s says\n%s\n' "$model" "$host" "$p" | tee -a "$out/plans.txt"
            done
        done
        ;;
    14b)
        bench megatrain qwen2.5-14b 1 4 200 "$build/megatrain" bench --backend cuda $(common) --preset qwen2.5-14b \
            --clip 0 "${host_opt[@]}"
        bench megatrain qwen2.5-14b 1 4 200 "$build/megatrain" bench --backend cuda $(common) --preset qwen2.5-14b \
            "${host_opt[@]}"
        bench pytorch-fsdp2-offload qwen2.5-14b 1 4 400 python3 bench/peers/torch_peer.py --mode fsdp2-offload \
            $(common) --steps 2 --preset qwen2.5-14b --clip 1
        ;;
    largest)
        chosen=
        for model in $shapes; do
            for clip in 1 0; do
                p=$(plan --preset "$model" --clip $clip "${host_opt[@]}")
                if fits "$p"; then chosen="$model $clip"; break 2; fi
                echo "plan: $model with --clip $clip does not fit: $(grep -E 'does NOT fit' <<<"$p" | head -2)"
            done
        done
        if [ -z "$chosen" ]; then
            echo "plan: none of $shapes fits this machine"
        else
            set -- $chosen
            echo "largest that fits: $1 with --clip $2"
            bench megatrain "$1" 1 4 540 "$build/megatrain" bench --backend cuda $(common) --preset "$1" --clip "$2" \
                "${host_opt[@]}"
        fi
        ;;
    train)
        if [ $((deadline - SECONDS)) -lt 120 ]; then
            echo "train: skipped: the time budget (BUDGET_S=$deadline) is spent"
            continue
        fi
        run=/tmp/megatrain-large-run
        rm -rf "$run"
        mkdir -p "$out/train"
        start=$SECONDS
        timeout -k 10 $((deadline - SECONDS)) "$build/megatrain" train --backend cuda --preset qwen2.5-14b \
            --data data/kjv.txt --seq 1024 --batch 4 --steps "$train_steps" --lr 3e-4 --warmup 5 --eval-every 0 \
            --ckpt-every 0 --out "$run" "${host_opt[@]}" >"$out/train/train.log" 2>&1
        rc=$?
        echo "train: exit $rc after $((SECONDS - start)) s; its log ends:"
        tail -5 "$out/train/train.log"
        cp "$run/metrics.jsonl" "$run/loss.svg" "$out/train/" 2>/dev/null
        python3 - "$out/train/metrics.jsonl" "$train_steps" <<'PY'
import json, math, sys
steps = [e for e in map(json.loads, open(sys.argv[1])) if "loss" in e and "step" in e and "eval" not in e]
finite = lambda x: isinstance(x, (int, float)) and math.isfinite(x)  # a NaN may be written as null
bad = [e["step"] for e in steps if not finite(e["loss"]) or e.get("skipped")]
losses = [e["loss"] for e in steps if finite(e["loss"])] or [math.nan]
last = sum(losses[-5:]) / len(losses[-5:])
ok = len(steps) >= int(sys.argv[2]) and not bad and last < losses[0]
print(f"train: {len(steps)} steps, loss {losses[0]:.4f} at step 1, {last:.4f} over the last five; "
      f"non-finite or skipped at steps {bad or 'none'}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
        rm -rf "$run"
        ;;
    *) echo "ROWS: unknown group '$group' (plans, 14b, largest, train)"; exit 2 ;;
    esac
done

[ -s "$jsonl" ] || exit 0
python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/bench.md" --json "$out/bench.json" >/dev/null
echo
cat "$out/bench.md"
python3 - "$jsonl" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peer = next((r["tokens_per_s"] for r in runs if r["system"].startswith("pytorch") and "tokens_per_s" in r), None)
for r in runs:
    if r["system"] == "megatrain" and "tokens_per_s" in r:
        vs = f", {r['tokens_per_s'] / peer:.2f}x PyTorch FSDP2 offload (bar 2.5x)" if peer else ""
        print(f"  {r['model']} clip {r.get('clip', '?')}: {r['tokens_per_s']:.0f} tokens/s, host {r['host_gib']:.0f} GiB{vs}")
PY

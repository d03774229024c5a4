#!/usr/bin/env bash
# The README's table of what a 10, 16 and 24 GB card can train, from `megatrain plan` (runs on any
# machine: without a GPU, `--backend cuda --gpu-mem` plans with a model of one). Prints markdown.
#   usage: scripts/plan-gpu-table.sh [MEGATRAIN]   (default build/megatrain)
# The assumptions, all in the variables below: a desktop with PCIe 4.0 x16 (25 GB/s each way,
# 80% of the link's 31.5) and 8 cores (7 optimizer threads at 1.5 G parameters/s of AdamW, 45 GB/s
# of dual-channel DDR5); each card's GEMM rate 71% of its bf16 dense peak (what cuBLASLt reaches
# on the H200); 4 x 2048 tokens a step, and every other option at its default (exact clipping,
# fp32 Adam moments).
set -euo pipefail
bin=${1:-build/megatrain}
presets=(qwen3-0.6b llama-3.2-1b qwen3-1.7b llama-3.2-3b qwen3-4b llama-3-8b qwen3-8b qwen2.5-14b)
cards=("10GiB RTX-3080 42" "16GiB RTX-4080 69" "24GiB RTX-4090 117") # memory, example card, GEMM TFLOP/s
shape=(--seq 2048 --batch 4)
rates=(--rate-pcie 25 --rate-adamw 1.5)

# One cell: the step's floor and the tokens/s it allows, and how the budget was met ("4.2 s, 1.9k
# tok/s (2 slots, 1 x 4 seq, 7 ckpts on host)"), or "does not fit: needs 12.75 GiB".
cell() {
  awk -v tokens=$((2048 * 4)) '
    /^budget/ && /does NOT fit/ { match($0, /needs [0-9.]+ GiB/); nofit = substr($0, RSTART, RLENGTH) }
    /^budget/ && !/does NOT fit/ {
      match($0, /[0-9]+ weight slots/); slots = substr($0, RSTART, RLENGTH - 13)
      match($0, /[0-9]+ x [0-9]+ sequences/); split(substr($0, RSTART, RLENGTH), mb, " ")
      match($0, /inputs of [0-9]+ of/); split(substr($0, RSTART, RLENGTH), ck, " ")
    }
    /= [0-9.]+ s$/ { s = $NF == "s" ? $(NF - 1) : $NF; if (s + 0 > floor) floor = s + 0 }
    END {
      if (nofit != "") { printf "does not fit: %s", nofit; exit }
      printf "%.1f s, %.1fk tok/s (%s slots, %s x %s seq%s)", floor, tokens / floor / 1000, slots, mb[1], mb[3],
             (ck[3] > 0 ? ", " ck[3] " ckpts on host" : "")
    }'
}

host_gb() { sed -nE 's/^fit +host needs ([0-9.]+) GB.*/\1/p' | head -1; }

echo "| model | host RAM (clip / --clip 0) | 10 GB (RTX 3080: 42 TFLOP/s) | 16 GB (RTX 4080: 69) | 24 GB (RTX 4090: 117) |"
echo "|---|---|---|---|---|"
for p in "${presets[@]}"; do
  row="| $p"
  first=1
  for c in "${cards[@]}"; do
    read -r mem _card gemm <<<"$c"
    out=$(MT_LOG_LEVEL=warn "$bin" plan --preset "$p" --backend cuda --gpu-mem "$mem" "${shape[@]}" "${rates[@]}" \
          --rate-gemm "$gemm" 2>&1) || true
    if [ $first = 1 ]; then
      noclip=$(MT_LOG_LEVEL=warn "$bin" plan --preset "$p" --backend cuda --gpu-mem "$mem" "${shape[@]}" \
               "${rates[@]}" --rate-gemm "$gemm" --clip 0 2>&1 | host_gb)
      row="$row | $(host_gb <<<"$out") / $noclip GB"
      first=0
    fi
    row="$row | $(cell <<<"$out")"
  done
  echo "$row |"
done

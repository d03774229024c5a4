#!/bin/bash
# Qwen3.5-35B-A3B's text model on one H100 (issue 42): megatrain bench with the default settings on
# its blocks (three Gated DeltaNet layers to one gated attention layer, 256 experts of 512, top 8,
# and a shared expert; 0.84 B parameters a block) cut to as many as this host holds for the
# default run at 16 x 4096 tokens (megatrain plan says: about 10 of 40 on a 128 GiB host; LAYERS=N
# sets it), beside PyTorch FSDP2 with CPU offload running transformers' Qwen3_5MoeForCausalLM
# (bench/peers/torch_peer.py: SDPA for the attention layers; the Gated DeltaNet layers on
# flash-linear-attention where installed, else transformers' own torch fallback, which the
# table's notes name). The rows, one device call each on a fresh nvidia-h100-x1, from the
# repository root with carry [".debs"]:
#
#   ROWS=main bash bench/qwen35.sh    16 x 4096 tokens (4 micro-batches of 4 sequences)
#   ROWS=peer bash bench/qwen35.sh    16 x 4096 tokens at the depth whose peer state this host holds
#                                     (bench_lib.sh's peer_layers; PEER_LAYERS=N sets it): megatrain,
#                                     then the peer, on that same shape
#   ROWS=long bash bench/qwen35.sh    one sequence of 262,144 tokens a step (the linear layers' memory
#                                     grows with the tokens, not their square) on the main row's cut,
#                                     or as many of its blocks as this host holds at that length
#                                     (the gradients and checkpoints grow with the tokens: 10 blocks
#                                     need ~158 GB by plan's count; LONG_LAYERS=N sets it)
#
# TFLOP/s counts model FLOPs from the active parameters, and the recurrence's: the table's last
# paragraph says how many a token. A run that fails, is refused or is killed keeps its row with
# the reason. Writes to $OUT (or /tmp/megatrain-bench-qwen35): qwen35.jsonl (one line a run),
# qwen35.md and qwen35.json (bench/table.py, with plan's text), plan-*.txt, runs.log, build.log;
# prints the table last. Environment: ROWS (main peer long), LAYERS, LONG_LAYERS, LONG_STEPS (2),
# MT_LIMIT_S (300: a megatrain run's seconds, its set-up included), PEER_LIMIT_S (400), BUDGET_S
# (560), PREBUILT; STEPS, WARMUP, PEER_STEPS, PEER_WARMUP, PEER_LAYERS, PEER_BYTES (cut_rows.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

out=${OUT:-/tmp/megatrain-bench-qwen35}
rows=${ROWS:-main peer long}
seq=4096
long_seq=262144
deadline=${BUDGET_S:-560}
mt_limit=${MT_LIMIT_S:-300}
peer_limit=${PEER_LIMIT_S:-400}
preset=qwen3.5-35b-a3b
build="build-bench"
. bench/bench_lib.sh
bench_start qwen35.jsonl
build_megatrain

. bench/cut_rows.sh

# long_row MOST: one sequence of $long_seq tokens a step, on the most blocks (MOST at most) whose
# run at that length this host holds: its activation checkpoints and gradients grow with the tokens.
long_row() {
    local seq=$long_seq # bench_lib.sh's lines take it
    local layers=${LONG_LAYERS:-$(host_layers "$preset" "$1" --micro-batches 1 --batch 1)}
    if [ "$layers" -lt 1 ]; then
        record megatrain "$preset" 1 1 error "not one block of Qwen3.5-35B-A3B fits this host at $seq tokens (megatrain plan)"
        return
    fi
    echo "at $seq tokens a sequence: $layers blocks (what this host holds at that length)"
    keep_plan "$layers" 1 1
    megatrain_row "$layers" 1 1 "${LONG_STEPS:-2}"
}

# The paragraph under the table: what a token's TFLOP/s count at each sequence length run.
flops_note() {
    python3 - "$jsonl" <<'PY'
import json, sys
sys.path.insert(0, "bench/peers")
import torch_peer as t
runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
shown = set()
for run in runs:
    if run["system"] != "megatrain" or "layers" not in run or (run["model"], run["seq"]) in shown:
        continue
    if not shown:
        print("\n## What a token's FLOPs count\n")
    shown.add((run["model"], run["seq"]))
    p = t.preset_shape("qwen3.5-35b-a3b", run["layers"])
    kinds = t.layer_types(p)
    recurrence = 3 * t.extra_flops(p, "linear_attention", run["seq"])
    attention = 3 * t.extra_flops(p, "full_attention", run["seq"])
    print(f"{run['model']} at {run['seq']} tokens a sequence: TFLOP/s counts {t.model_flops_per_token(p, run['seq']) / 1e9:.2f} "
          f"GFLOP a token: 6 x {t.blocks_params(p, active=True) / 1e9:.3f} B active block parameters + 6 x the LM "
          f"head's vocab x hidden, the {kinds.count('full_attention')} attention layers' 12 x heads x head_dim x seq / 2 "
          f"({attention / 1e6:.1f} MFLOP a token each) and the {kinds.count('linear_attention')} Gated DeltaNet layers' "
          f"recurrence, 3 x 7 x value heads x d_k x d_v ({recurrence / 1e6:.2f} MFLOP a token each; the chunked "
          f"form's own extra work not counted).")
PY
}

main_cut 40

for row in $rows; do
    case $row in
    main) main_row ;;
    peer) peer_row "$layers" 4 4 ;;
    long) long_row "$layers" ;;
    *) echo "unknown row '$row' (main, peer, long)" ;;
    esac
done

python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/qwen35.md" --json "$out/qwen35.json" "${plans[@]}" \
    >/dev/null
flops_note >>"$out/qwen35.md"
echo
cat "$out/qwen35.md"

#!/bin/bash
# gpt-oss-120b's shape on one H100 (issue 41): megatrain bench with the default settings on the
# 120b's blocks (3.2 B parameters each, 128 experts of 2880) cut to as many as this host holds for
# the default run at 16 x 4096 tokens (megatrain plan says: 2 of 36 on a 128 GiB host; LAYERS=N
# sets it), beside PyTorch FSDP2 with CPU offload running transformers' GptOssForCausalLM
# (bench/peers/torch_peer.py: eager attention, the only one of transformers' with gpt-oss's sinks).
# The rows, one device call each on a fresh nvidia-h100-x1 (a call's 600 s holds one host store of
# ~100 GB and its steps), from the repository root with carry [".debs"]:
#
#   ROWS=floor bash bench/gpt_oss.sh   16 x 4096 tokens (4 micro-batches of 4 sequences); its line
#                                      keeps plan's floor (plan_floor_s), the table plan's whole text
#   ROWS=cover bash bench/gpt_oss.sh   the tokens a step that plan says the GEMMs cover the PCIe
#                                      copies from (micro-batches of 4 x 4096, rounded up; COVER_MICRO=N
#                                      sets them); TFLOP/s from the active parameters
#   ROWS=peer bash bench/gpt_oss.sh    16 x 4096 tokens at the depth whose peer state this host holds
#                                      (bench_lib.sh's peer_layers: 1 block on 128 GiB; PEER_LAYERS=N
#                                      sets it): megatrain, then the peer, on that same shape
#
# The peer's micro-batches are of PEER_BATCH (1) sequences, PEER_MICRO = 16 / PEER_BATCH of them
# (the same 16 x 4096 tokens a step): eager attention holds [batch, 64 heads, 4096, 4097] scores
# in fp32 several times over. A run that fails, is refused or is killed keeps its row with the
# reason. Writes to $OUT (or /tmp/megatrain-bench-gpt-oss): gpt_oss.jsonl (one line a run),
# gpt_oss.md and gpt_oss.json (bench/table.py, with plan's text), plan-*.txt, runs.log, build.log;
# prints the table last. Environment: ROWS (floor cover peer), LAYERS, COVER_MICRO, PEER_BATCH,
# MT_LIMIT_S (300: a megatrain run's seconds, its set-up included), PEER_LIMIT_S (400), BUDGET_S
# (560), PREBUILT; STEPS, WARMUP, PEER_STEPS, PEER_WARMUP, PEER_LAYERS, PEER_BYTES (cut_rows.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
. tests/device/env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

out=${OUT:-/tmp/megatrain-bench-gpt-oss}
rows=${ROWS:-floor cover peer}
seq=4096
deadline=${BUDGET_S:-560}
mt_limit=${MT_LIMIT_S:-300}
peer_limit=${PEER_LIMIT_S:-400}
peer_batch=${PEER_BATCH:-1}
preset=gpt-oss-120b
build="build-bench"
. bench/bench_lib.sh
bench_start gpt_oss.jsonl
build_megatrain

. bench/cut_rows.sh

# The GEMMs cover the copies from plan's tokens a step: its micro-batches of 4 x 4096, rounded up.
cover_micro() {
    local tokens
    tokens=$(grep -o "cover the PCIe copies from [0-9]* tokens" "$(plan_file "$layers" 4 4 "$seq")" | grep -o "[0-9][0-9]*")
    [ -n "$tokens" ] && echo $(((tokens + 4 * seq - 1) / (4 * seq)))
}

main_cut 36

for row in $rows; do
    case $row in
    floor) main_row ;;
    cover)
        micro=${COVER_MICRO:-$(cover_micro)}
        if [ -z "$micro" ]; then
            record megatrain "$(label "$layers")" 4 4 error "plan gave no tokens that cover the copies ($(plan_file "$layers" 4 4 "$seq"))"
        elif [ "$micro" -le 4 ]; then
            record megatrain "$(label "$layers")" "$micro" 4 skipped "plan says 16 x 4096 tokens already cover the copies: the floor row is this one"
        else
            echo "the GEMMs cover the copies from $micro x 4 x $seq tokens a step (plan)"
            keep_plan "$layers" "$micro" 4
            megatrain_row "$layers" "$micro" 4 "$steps"
        fi
        ;;
    peer) peer_row "$layers" $((16 / peer_batch)) "$peer_batch" ;;
    *) echo "unknown row '$row' (floor, cover, peer)" ;;
    esac
done

python3 bench/table.py "$jsonl" --machine "$machine" --md "$out/gpt_oss.md" --json "$out/gpt_oss.json" "${plans[@]}" \
    >/dev/null
echo
cat "$out/gpt_oss.md"

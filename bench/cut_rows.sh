# shellcheck shell=bash
# Sourced by bench/gpt_oss.sh and bench/qwen35.sh after bench/bench_lib.sh: the rows of $preset's
# hub shape cut to some of its blocks (bench/moe_config.py's config.json), megatrain's with the
# default settings, the PyTorch peer's with FSDP2's CPU offload. Needs preset, seq, mt_limit and
# peer_limit beside bench_lib.sh's. Environment: STEPS (3) and WARMUP (1), megatrain's timed and
# warm-up steps; PEER_STEPS (2) and PEER_WARMUP (1), the peer's; PEER_LAYERS (peer_row), PEER_BYTES
# (bench_lib.sh's peer_layers).
megatrain=("$build/megatrain" bench --backend cuda --warmup-steps "${WARMUP:-1}" --json "$jsonl")
peer=(python3 bench/peers/torch_peer.py --mode fsdp2-offload --preset "$preset" --seq "$seq" --steps "${PEER_STEPS:-2}"
    --warmup-steps "${PEER_WARMUP:-1}" --json "$jsonl" --clip 1)
steps=${STEPS:-3}
plans=() # table.py's --plan options: the plans kept beside the table
measured_at=0 # the depth megatrain's 4 x 4 x $seq row ran at in this call

label() { echo "$preset ($1 layers)"; }

plan_file() { echo "$out/plan-$1-layers-$2x$3x$4.txt"; }

# keep_plan LAYERS MICRO BATCH: plan's text for LAYERS blocks at MICRO x BATCH x $seq tokens, in
# plan_file and beside the table.
keep_plan() {
    local file
    file=$(plan_file "$1" "$2" "$3" "$seq")
    "$build/megatrain" plan --backend cuda --config "$(cut_config "$preset" "$1")" --micro-batches "$2" --batch "$3" \
        --seq "$seq" >"$file" 2>&1
    plans+=(--plan "plan, $(label "$1"), $2 x $3 x $seq tokens=$file")
}

# megatrain_row LAYERS MICRO BATCH STEPS: megatrain bench on LAYERS blocks, MICRO micro-batches of
# BATCH x $seq tokens, STEPS timed steps.
megatrain_row() {
    bench megatrain "$(label "$1")" "$2" "$3" "$mt_limit" "${megatrain[@]}" --steps "$4" --seq "$seq" \
        --config "$(cut_config "$preset" "$1")"
    relabel "$(label "$1")"
}

# main_row: megatrain on the main cut at 4 x 4 x $seq tokens.
main_row() {
    megatrain_row "$layers" 4 4 "$steps"
    measured_at=$layers
}

# peer_row MOST PEER_MICRO PEER_BATCH: on the most blocks (MOST at most; PEER_LAYERS sets them)
# whose peer state this host holds, megatrain at 4 x 4 x $seq tokens (unless it ran at that depth
# already in this call) and the peer at PEER_MICRO x PEER_BATCH, the same tokens.
peer_row() {
    local layers=${PEER_LAYERS:-$(peer_layers "$preset" "$1")}
    if [ "$layers" -lt 1 ]; then
        record pytorch-fsdp2-offload "$preset" "$2" "$3" error \
            "not one block's peer state fits this host (PEER_BYTES=${PEER_BYTES:-20} a parameter)"
        return
    fi
    echo "the peer on $layers blocks (its host state fits), megatrain beside it on the same"
    [ "$layers" = "$measured_at" ] || megatrain_row "$layers" 4 4 "$steps"
    bench pytorch-fsdp2-offload "$(label "$layers")" "$2" "$3" "$peer_limit" "${peer[@]}" --layers "$layers"
}

# main_cut MOST: sets layers to the most blocks (MOST at most; LAYERS sets them) whose default run
# at 4 x 4 x $seq tokens this host holds, its plan kept; with none, a failure line and no rows.
main_cut() {
    layers=${LAYERS:-$(host_layers "$preset" "$1" --micro-batches 4 --batch 4)}
    if [ "$layers" -lt 1 ]; then
        record megatrain "$preset" 4 4 error "not one block of $preset fits this host at 4 x 4 x $seq tokens (megatrain plan)"
        rows=""
        return
    fi
    echo "$preset cut to $layers of its $1 blocks (what this host holds for the default run)"
    keep_plan "$layers" 4 4
}

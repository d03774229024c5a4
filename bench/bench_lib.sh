# shellcheck shell=bash
# Sourced by bench/run.sh and bench/multi_gpu.sh: the output files and the machine's line, the
# build, and one timed run with its JSON line. Needs out (the output folder), seq and deadline
# (seconds from the script's start after which no run starts).

# bench_start NAME: jsonl=$out/NAME (the runs' lines) and log=$out/runs.log (their output), both
# empty; machine=the GPUs, cores and host memory, printed.
bench_start() {
    jsonl=$out/$1
    log=$out/runs.log
    mkdir -p "$out"
    : >"$jsonl"
    : >"$log"
    local gpu host_gib
    gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)
    host_gib=$(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
    machine="$(nvidia-smi -L | wc -l) x $gpu, $(nproc) cores, $host_gib GiB host memory"
    echo "$machine"
}

# build_megatrain: $build/megatrain with CUDA (log in $out/build.log); a failed build ends the script.
# PREBUILT=1 takes a $build/megatrain carried to the machine as it is (a one-step run that needs
# the call's whole time: make would rebuild it, the copied sources being newer).
build_megatrain() {
    if [ "${PREBUILT:-0}" = 1 ] && [ -x "$build/megatrain" ]; then
        echo "the carried $build/megatrain, not rebuilt" | tee "$out/build.log"
        return
    fi
    # NV_ARCHS (the Makefile's variable, e.g. -gencode=arch=compute_90a,code=sm_90a): machine code for
    # the GPU at hand only, a build of a minute instead of several.
    if ! make CUDA=1 BUILD="$build" ${NV_ARCHS:+"NV_ARCHS=$NV_ARCHS"} -j"$(nproc)" "$build/megatrain" >"$out/build.log" 2>&1; then
        echo "build failed; its log ends:"
        tail -40 "$out/build.log"
        exit 1
    fi
}

record() { # record SYSTEM MODEL MICRO BATCH KEY TEXT: a run with no numbers ("error" or "skipped")
    python3 -c 'import json, sys; s, m, micro, b, seq, k, t = sys.argv[1:]; print(json.dumps({"system": s,
                "model": m, "seq": int(seq), "batch": int(b), "micro_batches": int(micro), k: t}))' \
        "$1" "$2" "$3" "$4" "$seq" "$5" "$6" >>"$jsonl"
}

# bench SYSTEM MODEL MICRO BATCH LIMIT_S COMMAND...: one run of MICRO micro-batches of BATCH
# sequences, its output in runs.log, cut at LIMIT_S (in BENCH_LIMIT_S for the run: the PyTorch peer
# stops early with the timed steps it has).
bench() {
    local system=$1 model=$2 micro=$3 batch=$4 limit=$5
    shift 5
    local left=$((deadline - SECONDS))
    if [ $left -lt 30 ]; then
        record "$system" "$model" "$micro" "$batch" skipped "the time budget (BUDGET_S=$deadline) was spent"
        return
    fi
    [ "$limit" -gt $left ] && limit=$left
    local lines start rc
    lines=$(wc -l <"$jsonl")
    start=$SECONDS
    echo "==== $system $model, $micro x $batch (limit $limit s): $*" >>"$log"
    BENCH_LIMIT_S=$limit timeout -k 10 "$limit" "$@" --micro-batches "$micro" --batch "$batch" >>"$log" 2>&1
    rc=$?
    echo "==== $system $model, $micro x $batch: exit $rc after $((SECONDS - start)) s" | tee -a "$log"
    # megatrain and the peers append their own line, an error line too; a run that was killed
    # or cut could not.
    [ "$(wc -l <"$jsonl")" -gt "$lines" ] && return
    if [ $((SECONDS - start)) -ge "$limit" ]; then
        record "$system" "$model" "$micro" "$batch" error "cut at its $limit s limit"
    elif [ $rc -eq 137 ]; then
        record "$system" "$model" "$micro" "$batch" error "killed by SIGKILL: out of host memory?"
    elif [ $rc -gt 128 ]; then
        record "$system" "$model" "$micro" "$batch" error "killed by SIG$(kill -l $((rc - 128)))"
    else
        record "$system" "$model" "$micro" "$batch" error "exit $rc: $(grep -v '^====' "$log" | tail -1 | cut -c1-900)"  # a refusal names the bytes of each class
    fi
}

# cut_config PRESET LAYERS: prints the path of PRESET's hub config.json cut to LAYERS blocks
# (bench/moe_config.py), written to $out.
cut_config() {
    local path=$out/$1-$2-layers.json
    python3 bench/moe_config.py "$1" "$2" "$path" && echo "$path"
}

# host_layers PRESET MOST PLAN_OPTIONS...: the most blocks of PRESET, at most MOST (0: not one),
# whose run with PLAN_OPTIONS (at --seq $seq) the planner fits in this host's memory; counted up
# from one block (a plan on the GPU takes a second or two), a block more needing more.
host_layers() {
    local preset=$1 most=$2 layers fit=0
    shift 2
    for layers in $(seq 1 "$most"); do
        "$build/megatrain" plan --backend cuda --config "$(cut_config "$preset" "$layers")" --seq "$seq" "$@" \
            2>/dev/null | grep -q "^fit .*host needs.*: fits" || break
        fit=$layers
    done
    echo "$fit"
}

# peer_layers PRESET MOST: the most blocks of PRESET (0: not one) whose PyTorch peer holds its state
# in this host's available memory at PEER_BYTES (20) bytes a parameter: FSDP2's CPU offload keeps
# fp32 weights, gradients and both moments there (16), and builds the model there first.
peer_layers() {
    python3 - "$1" "$2" "${PEER_BYTES:-20}" <<'PY'
import sys
sys.path.insert(0, "bench/peers")
import torch_peer
preset, most, per = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open("/proc/meminfo") as f:
    available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
fits = [n for n in range(1, most + 1) if torch_peer.total_params(torch_peer.preset_shape(preset, n)) * per <= available]
print(max(fits, default=0))
PY
}

# relabel LABEL: megatrain bench names a model given by --config "model"; its rows take LABEL.
relabel() {
    python3 - "$jsonl" "$1" <<'PY'
import json, sys
path, label = sys.argv[1:]
runs = [json.loads(line) for line in open(path) if line.strip()]
for run in runs:
    if run.get("model") == "model":
        run["model"] = label
with open(path, "w") as f:
    f.writelines(json.dumps(run) + "\n" for run in runs)
PY
}

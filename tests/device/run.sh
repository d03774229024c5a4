#!/bin/bash
# The one command for a fresh device machine (GPU, no package manager): unpacks the Debian
# packages carried in .debs/ (made here by tests/device/fetch-debs.sh) into /tmp/debs, builds
# with CUDA=1, runs the CUDA tests and the CPU tests, and prints a summary. Logs go to $OUT
# (the device tool's output folder) when it is set. Exits non-zero when anything failed.
set -u
cd "$(dirname "$0")/../.."
logs=${OUT:-/tmp/megatrain-device}
build=build-device
mkdir -p "$logs"

debs=/tmp/debs
for f in .debs/*.deb; do dpkg -x "$f" "$debs"; done
lib=$debs/usr/lib/x86_64-linux-gnu
export CPATH=$debs/usr/include:$debs/usr/include/x86_64-linux-gnu/openblas-pthread${CPATH:+:$CPATH}
export LIBRARY_PATH=$lib:$lib/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The reference tests run /usr/bin/python3; the image's PyTorch lives in another Python's
# site-packages (the python3 on PATH), so point /usr/bin/python3 at it.
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)
    [ -n "$site" ] && export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
summary=()
status=0
step() { # step NAME COMMAND...: runs it with its output in $logs/NAME.log, records the result
    local name=$1
    shift
    local start=$SECONDS
    "$@" >"$logs/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || status=1
    local synthesis
    synthesis=$(grep -aE "Synthesis:|passed, [0-9]+ failed" "$logs/$name.log" | tail -1)
    summary+=("$(printf '%-8s rc=%-3d %4ds  %s' "$name" "$rc" $((SECONDS - start)) "$synthesis")")
    if [ $rc -ne 0 ]; then
        echo "---- $name failed; its log ends:"
        tail -40 "$logs/$name.log"
    fi
}

step build make CUDA=1 BUILD=$build -j"$(nproc)" $build/cuda_tests $build/run-tests
rm -rf /tmp/mt-transformers-check
step cuda env MT_TRANSFORMERS_DIR=/tmp/mt-transformers-check $build/cuda_tests --jobs 1 --verbose
step hf python3 tests/device/check_transformers.py /tmp/mt-transformers-check
step cpu $build/run-tests --jobs 4

echo "==== summary"
printf '%s\n' "${summary[@]}"
exit $status

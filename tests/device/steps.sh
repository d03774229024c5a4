# shellcheck shell=bash
# Sourced by the device scripts (tests/device/run.sh, tests/device/multi_gpu.sh): `step NAME
# COMMAND...` runs a command with its output in $logs/NAME.log and records its result in summary;
# status turns 1 when one fails. MT_STEPS="build cuda ...": only the steps named there run.
summary=()
status=0
step() { # step NAME COMMAND...: runs it with its output in $logs/NAME.log, records the result
    local name=$1
    shift
    if [ -n "${MT_STEPS:-}" ] && [[ " $MT_STEPS " != *" $name "* ]]; then
        return
    fi
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

#!/usr/bin/env bash
# Checks that a CUDA build of megatrain carries machine code for every GPU generation the backend
# supports, in every object that has kernels, and PTX of the newest for later GPUs to JIT:
# sm_80, sm_86, sm_89 and sm_90a always; sm_100 and sm_120 where the installed nvcc knows them
# (`nvcc --list-gpu-code`); PTX of the newest of these. Lists them with cuobjdump (--list-elf,
# --list-ptx) where it is installed and with scripts/fatbin_list.py (the same listing, read from
# the ELF file) always; where both run, they must agree. Exits non-zero naming what is missing.
#   usage: scripts/check-fatbin.sh build-cuda/megatrain
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: check-fatbin.sh BINARY}
[ -f "$bin" ] || { echo "check-fatbin: $bin: no such file" >&2; exit 1; }
cuda_home=${CUDA_HOME:-/usr/local/cuda}
nvcc=${NVCC:-$cuda_home/bin/nvcc}

required=(sm_80 sm_86 sm_89 sm_90a)
known=$("$nvcc" --list-gpu-code 2>/dev/null || true)
for sm in sm_100 sm_120; do
  grep -qx "$sm" <<<"$known" && required+=("$sm")
done
newest=${required[-1]}

# "ELF file    1: megatrain.1.sm_80.cubin" -> "sm_80", one line per image, sorted.
targets() { sed -nE 's/^(ELF|PTX) file +[0-9]+: .*\.(sm_[0-9]+[af]?)\.(cubin|ptx)$/\2/p' | sort; }

elf=$(/usr/bin/python3 "$here/fatbin_list.py" --list-elf "$bin" | targets)
ptx=$(/usr/bin/python3 "$here/fatbin_list.py" --list-ptx "$bin" | targets)
cuobjdump=$(command -v cuobjdump || echo "$cuda_home/bin/cuobjdump")
if [ -x "$cuobjdump" ]; then
  [ "$elf" = "$("$cuobjdump" --list-elf "$bin" | targets)" ] && [ "$ptx" = "$("$cuobjdump" --list-ptx "$bin" | targets)" ] || {
    echo "check-fatbin: cuobjdump and scripts/fatbin_list.py list different images in $bin" >&2
    exit 1
  }
  lister="cuobjdump and fatbin_list.py"
else
  lister="fatbin_list.py (no cuobjdump here)"
fi

# Every object with kernels carries each target once: each appears as often as the commonest.
objects=$(uniq -c <<<"$elf" | awk '$1 > n { n = $1 } END { print n + 0 }')
status=0
for sm in "${required[@]}"; do
  n=$(grep -cx "$sm" <<<"$elf" || true)
  if [ "$n" -eq 0 ] || [ "$n" -ne "$objects" ]; then
    echo "check-fatbin: $bin has machine code for $sm in $n of $objects kernel objects" >&2
    status=1
  fi
done
n=$(grep -cx "$newest" <<<"$ptx" || true)
if [ "$n" -eq 0 ] || [ "$n" -ne "$objects" ]; then
  echo "check-fatbin: $bin has PTX for $newest in $n of $objects kernel objects" >&2
  status=1
fi
[ $status -eq 0 ] && echo "check-fatbin: $bin: machine code for ${required[*]} and PTX for $newest in each of $objects kernel objects ($lister)"
exit $status

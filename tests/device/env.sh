# shellcheck shell=bash
# Sourced by the device scripts (tests/device/run.sh, bench/run.sh) from the repository root on a
# fresh device machine (GPU, no package manager): unpacks the Debian packages carried in .debs/
# (made here by tests/device/fetch-debs.sh) into /tmp/debs and points the compiler, the linker
# and the loader at them.
debs=/tmp/debs
for f in .debs/*.deb; do dpkg -x "$f" "$debs"; done
lib=$debs/usr/lib/x86_64-linux-gnu
# A -dev package's link name (libfoo.so -> libfoo.so.N) dangles where its library comes from the
# image (pcre2): point it at the image's copy of that soname.
for link in "$lib"/*.so; do
    [ -L "$link" ] && [ ! -e "$link" ] || continue
    soname=$(basename "$(readlink "$link")" | sed -E 's/(\.so\.[0-9]+).*/\1/')
    found=$(ldconfig -p | awk -v n="$soname" '$1 == n && /x86-64/ { print $NF; exit }')
    [ -n "$found" ] && ln -sf "$found" "$link"
done
export CPATH=$debs/usr/include:$debs/usr/include/x86_64-linux-gnu/openblas-pthread${CPATH:+:$CPATH}
export LIBRARY_PATH=$lib:$lib/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The reference tests run /usr/bin/python3; the image's PyTorch lives in another Python's
# site-packages (the python3 on PATH), so point /usr/bin/python3 at it.
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    site=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)
    [ -n "$site" ] && export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi

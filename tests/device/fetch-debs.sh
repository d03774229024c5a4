#!/bin/sh
# Run here (Debian 12, where apt works): downloads the Debian packages that the device machine
# lacks for building and running the tests into .debs/ at the repository root (git-ignored).
# tests/device/run.sh unpacks them there. Call the device tool with carry [".debs"].
#
# Only libraries the device image does not have are fetched: libc, zlib, libffi, pcre2 and
# Kerberos come from the image, so that no older copy shadows them through LD_LIBRARY_PATH (for
# pcre2 only the headers and the link name come from here: env.sh points the link at the image's
# library).
set -eu
cd "$(dirname "$0")/../.."
mkdir -p .debs
cd .debs
apt-get download \
    libcriterion3 libcriterion-dev libnanomsg5 \
    libgit2-1.5 libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 libssh2-1 \
    libjansson-dev libjansson4 \
    libxxhash-dev libxxhash0 \
    libpcre2-dev libutf8proc-dev libutf8proc2 \
    libyaml-dev libyaml-0-2 \
    libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5
ls -1 "$PWD"

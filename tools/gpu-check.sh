#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: configure with the CUDA backend, build, run the `cuda` tests
# (every CUDA op against its CPU twin) and write bench/results/gpu-check-<UTC date>.txt with the
# device (nvidia-smi), the commit, the command and the ctest summary.
#   tools/gpu-check.sh [build-dir]        default build-gpu
#   CUDA_ARCHS=90a-real tools/gpu-check.sh   (default: 90a-real only, to halve nvcc time on Hopper)
# Exits non-zero when the build or a test fails; a results file is written either way.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
archs=${CUDA_ARCHS:-90a-real}
stamp=$(date -u +%Y-%m-%dT%H%MZ)
results=$root/bench/results/gpu-check-$stamp.txt
log=$(mktemp)
mkdir -p "$root/bench/results"

section() { printf '\n== %s\n' "$1" | tee -a "$results"; }
: > "$results"
{
  echo "# Tessera GPU check, $stamp"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "command: tools/gpu-check.sh $* (CUDA_ARCHS=$archs)"
  echo "host: $(hostname), $(nproc) cores"
} | tee -a "$results"

section "nvidia-smi"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi 2>&1 | tee -a "$results"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$results"
else
  echo "nvidia-smi not found: no NVIDIA driver on this machine" | tee -a "$results"
fi
echo "nvcc: $(/usr/local/cuda/bin/nvcc --version 2>&1 | tail -1)" | tee -a "$results"

section "configure and build"
start=$(date +%s)
if ! { cmake -S "$root" -B "$build" -G Ninja -DTESSERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" &&
       cmake --build "$build" -j "$(nproc)"; } > "$log" 2>&1; then
  tail -50 "$log" | tee -a "$results"
  echo "BUILD FAILED" | tee -a "$results"
  exit 1
fi
echo "built in $(( $(date +%s) - start )) s" | tee -a "$results"

section "ctest -L cuda"
(cd "$build" && ctest -L cuda --output-on-failure) > "$log" 2>&1
status=$?
cat "$log" >> "$results"
grep -E "tests passed|tests failed|Skipped|Failed|\*\*\*" "$log"
echo "ctest exit status: $status" | tee -a "$results"
echo "results: $results"
exit $status

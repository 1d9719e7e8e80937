#!/usr/bin/env bash
# What each CUDA kernel takes on Hopper (sm_90a), as ptxas reports it: registers, shared memory and
# spills, one line per kernel. Needs nvcc but no GPU: a kernel at its __launch_bounds__ register cap,
# or one that spills, shows here before it runs anywhere.
#   tools/kernel_resources.sh [file.cu ...]      (default: every .cu under src/)
#   SPILLS_ONLY=1 tools/kernel_resources.sh      (only the kernels that spill)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
files=("$@")
((${#files[@]})) || mapfile -t files < <(find "$root/src" -name '*.cu' | sort)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

for f in "${files[@]}"; do
  "$nvcc" -DTESSERA_WITH_CUDA -DTESSERA_WITH_CUDNN -I"$root/src" -O3 -DNDEBUG -std=c++20 \
    --generate-code=arch=compute_90a,code=sm_90a -Xptxas -v -x cu -c "$f" -o "$scratch/out.o" 2>&1 |
    awk -v file="$(basename "$f")" '
      /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2) }
      /bytes spill stores/ { spills = $5 + $9 }
      /Used [0-9]+ registers/ {
        match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART + 5, RLENGTH - 15)
        smem = 0; if (match($0, /[0-9]+ bytes smem/)) smem = substr($0, RSTART, RLENGTH - 11)
        printf "%s\t%s\t%s\t%s\t%s\n", file, regs, smem, spills, name
      }'
done | while IFS=$'\t' read -r file regs smem spills name; do
  [[ -z ${SPILLS_ONLY:-} || $spills != 0 ]] || continue
  printf '%-22s %4s regs %6s B smem %5s B spill traffic  %s\n' "$file" "$regs" "$smem" "$spills" \
    "$(c++filt "$name" | cut -c1-110)"
done

#!/usr/bin/env bash
# Here (the development machine, CUDA 13 but no GPU): builds Tessera for Hopper (sm_90a, portable
# x86-64 host code) into build-gpu/ and packs what tools/gpu-check.sh runs on a GPU machine that
# has CUDA and PyTorch but none of our Debian libraries: .gpu-bundle/bin (tessera, test_cuda) and
# .gpu-bundle/lib.tar.gz (every shared library they load that is not glibc's or the CUDA toolkit's,
# which the GPU machine brings), binaries stripped, so the whole stays well under the device tool's
# 64 MiB. The bundle is git-ignored; carry it to the device.
#   tools/gpu-bundle.sh            then, there: tools/gpu-check.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
bundle=$root/.gpu-bundle

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a-real -DTESSERA_NATIVE=OFF > /dev/null
cmake --build "$build" --parallel "$(nproc)" --target tessera test_cuda

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
binaries=("$build/tessera" "$build/tests/test_cuda")
cp "${binaries[@]}" "$bundle/bin/"
strip "$bundle"/bin/*

# glibc and the CUDA libraries are the GPU machine's own; everything else travels.
system='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libcuda|libcudart|libcublas|libnccl)'
for bin in "${binaries[@]}"; do
  ldd "$bin" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $system ]] || cp -L "$path" "$bundle/lib/$name"
done
tar -C "$bundle" -czf "$bundle/lib.tar.gz" lib && rm -r "$bundle/lib"
git -C "$root" rev-parse HEAD > "$bundle/commit"
git -C "$root" diff --quiet || echo "(with local changes)" >> "$bundle/commit"
du -sh "$bundle"

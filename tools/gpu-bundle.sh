#!/usr/bin/env bash
# Here (the development machine, CUDA 13 but no GPU): builds Tessera for Hopper (sm_90a, portable
# x86-64 host code) into build-gpu/ and packs what tools/gpu-check.sh runs on a GPU machine that
# has CUDA and PyTorch but none of our Debian libraries: .gpu-bundle/bin (tessera, test_cuda, gzipped) and
# .gpu-bundle/lib.tar.gz (every shared library they load that is not glibc's or the CUDA toolkit's,
# which the GPU machine brings), binaries stripped, so the whole stays well under the device tool's
# 64 MiB. Also .gpu-bundle/openmpi.tar.gz: Open MPI's launcher and plugins, for runs of several
# ranks there. The bundle is git-ignored; carry it to the device.
# BASELINE=<rev> also builds that commit's tessera (in a git worktree, into build-gpu-baseline/) and packs it
# gzipped as .gpu-bundle/baseline-tessera.gz, for gpu-check.sh's `ab` section: both binaries' bench train
# in one call on one card (about 5 more minutes here, and 6 MB).
#   tools/gpu-bundle.sh            then, there: tools/gpu-check.sh
#   BASELINE=e27e63b tools/gpu-bundle.sh      then, there: tools/gpu-check.sh ab
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
bundle=$root/.gpu-bundle

configure=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real
           -DTESSERA_NATIVE=OFF)
cmake -S "$root" -B "$build" "${configure[@]}" > /dev/null
cmake --build "$build" --parallel "$(nproc)" --target tessera test_cuda

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
binaries=("$build/tessera" "$build/tests/test_cuda")
cp "${binaries[@]}" "$bundle/bin/"
strip "$bundle"/bin/*

# glibc and the CUDA libraries are the GPU machine's own (cuDNN and NCCL from PyTorch's wheels, which
# tools/gpu-check.sh puts on LD_LIBRARY_PATH); everything else travels.
system='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libcuda|libcudart|libcublas|libnccl|libcudnn)'
for bin in "${binaries[@]}"; do
  ldd "$bin" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $system ]] || cp -L "$path" "$bundle/lib/$name"
done
tar -C "$bundle" -czf "$bundle/lib.tar.gz" lib && rm -r "$bundle/lib"

# Open MPI's launcher, plugins and data files (and PMIx's), for several ranks on the GPU machine:
# tools/gpu-check.sh relocates them with OPAL_*/PMIX_* variables.
ompi_files=$(dpkg -L openmpi-bin libopenmpi3 libpmix2 openmpi-common 2>/dev/null |
  grep -E '^/(usr/bin/(orterun|orted|mpirun)|usr/lib/x86_64-linux-gnu/(openmpi/lib/openmpi3|pmix2)/|usr/share/(openmpi|pmix)/|etc/openmpi/)' |
  while read -r f; do [[ -f $f ]] && echo "${f#/}"; done)
tar -C / -czhf "$bundle/openmpi.tar.gz" $ompi_files
git -C "$root" rev-parse HEAD > "$bundle/commit"
git -C "$root" diff --quiet || echo "(with local changes)" >> "$bundle/commit"

if [[ -n ${BASELINE:-} ]]; then
  base_build=$root/build-gpu-baseline
  base_commit=$(git -C "$root" rev-parse "$BASELINE^{commit}")
  # A fresh worktree gives every file a new time, which would rebuild the baseline in full (about
  # 10 minutes here): it is built only when its commit is not the one built last.
  if [[ $(cat "$base_build/built-commit" 2>/dev/null) != "$base_commit" || ! -x $base_build/tessera ]]; then
    base_src=$root/build-gpu-baseline-src  # a worktree of the baseline commit (ignored, as build*/ are)
    git -C "$root" worktree remove --force "$base_src" 2>/dev/null || rm -rf "$base_src"
    git -C "$root" worktree add --detach "$base_src" "$BASELINE" > /dev/null
    cmake -S "$base_src" -B "$base_build" "${configure[@]}" > /dev/null
    cmake --build "$base_build" --parallel "$(nproc)" --target tessera
    echo "$base_commit" > "$base_build/built-commit"
    git -C "$root" worktree remove --force "$base_src"
  fi
  strip -o "$bundle/baseline-tessera" "$base_build/tessera"
  gzip -9 "$bundle/baseline-tessera"
  git -C "$root" rev-parse --short=7 "$BASELINE" > "$bundle/baseline-commit"
fi
# The binaries travel gzipped (about a third of their size): the working tree and the bundle share
# the device tool's 64 MiB. tools/gpu-check.sh unpacks them.
gzip -9 "$bundle"/bin/tessera "$bundle"/bin/test_cuda
du -sh "$bundle"

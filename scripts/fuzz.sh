#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with Clang into build-fuzz/ and runs each for a bounded
# time: scripts/fuzz.sh [seconds per target, default 10]. A finding leaves its input as
# build-fuzz/tests/fuzz/<target>-crash-* and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_CUDA=OFF \
  -DTESSERA_FUZZ=ON -DTESSERA_FUZZ_SECONDS="$seconds" >/dev/null
targets=(fuzz_safetensors fuzz_checkpoint_state fuzz_tokenizer_json fuzz_tiktoken fuzz_gpt2_vocab fuzz_token_shard fuzz_corpus_file
         fuzz_toml_config)
cmake --build build-fuzz --parallel "$(nproc)" --target "${targets[@]}"
ctest --test-dir build-fuzz -L fuzz --output-on-failure

#!/usr/bin/env bash
# fp8 against fp32 on real text, CPU: the embedded default run's data (Debian's fortunes, its own BPE
# tokenizer) on a 4-layer, 128-wide GPT-2, 1000 steps of 16 x 64 tokens, once per --fp8 recipe (off,
# hybrid, e4m3). Prints each recipe's largest per-step loss difference from fp32 and the final
# validation losses, and draws the three curves into one SVG.
# Usage: bench/fp8_loss_curves.sh [steps=1000]   (writes bench/results/cpu-fp8-loss-<date>.{svg,txt})
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-1000}
tessera=${TESSERA:-build/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stamp=$(date -u +%Y-%m-%d)
out=bench/results/cpu-fp8-loss-$stamp
{
  echo "# bench/fp8_loss_curves.sh $steps, commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H%MZ), $(nproc) CPU cores"
  for recipe in off hybrid e4m3; do
    "$tessera" train --model gpt2-tiny --layers 4 --channels 128 --heads 4 --seq-len 64 --steps "$steps" \
      --fp8 "$recipe" --out-dir "$work/$recipe" --quiet > "$work/$recipe.log" 2>&1
    echo "$recipe: final validation loss $(grep val_loss "$work/$recipe/metrics.jsonl" | tail -1)"
  done
  for recipe in hybrid e4m3; do
    echo "$recipe against fp32: $(python3 tools/compare_loss_curves.py "$work/off/metrics.jsonl" \
      "$work/$recipe/metrics.jsonl" | tail -1)"
  done
} | tee "$out.txt"
python3 tools/plot_loss_curves.py "$out.svg" "fp32=$work/off/metrics.jsonl" "fp8 hybrid=$work/hybrid/metrics.jsonl" \
  "fp8 e4m3=$work/e4m3/metrics.jsonl" --title "GPT-2 (4 x 128) on fortunes, CPU: fp32 and fp8 loss"

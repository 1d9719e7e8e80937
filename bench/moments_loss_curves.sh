#!/usr/bin/env bash
# bf16 AdamW moments (stochastic rounding) against fp32 moments on real text, CPU
# (bench/loss_curves.sh): 1000 steps at GPT-2's beta2 0.95 and at Llama's 0.999, where an increment
# of the second moment is below half a bf16 step and round-to-nearest would lose it.
# Usage: bench/moments_loss_curves.sh [steps=1000]
#   (writes bench/results/cpu-moments-loss-beta2-{0.95,0.999}-<date>.{svg,txt})
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-1000}
for beta2 in 0.95 0.999; do
  bench/loss_curves.sh "moments-loss-beta2-$beta2" "$steps" \
    "GPT-2 (4 x 128) on fortunes, CPU: AdamW moments in fp32 and bf16, beta2 $beta2" \
    "fp32 moments=--beta2 $beta2" "bf16 moments=--beta2 $beta2 --optimizer-moments bf16"
done

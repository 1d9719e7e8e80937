#!/usr/bin/env bash
# fp8 against fp32 on real text, CPU (bench/loss_curves.sh): 1000 steps per --fp8 recipe (off,
# hybrid, e4m3), each recipe's largest per-step loss difference from fp32, the final validation
# losses, and the three curves in one SVG.
# Usage: bench/fp8_loss_curves.sh [steps=1000]   (writes bench/results/cpu-fp8-loss-<date>.{svg,txt})
set -euo pipefail
cd "$(dirname "$0")/.."
exec bench/loss_curves.sh fp8-loss "${1:-1000}" "GPT-2 (4 x 128) on fortunes, CPU: fp32 and fp8 loss" \
  "fp32=--fp8 off" "fp8 hybrid=--fp8 hybrid" "fp8 e4m3=--fp8 e4m3"

#!/usr/bin/env bash
# Loss curves of training-flag variants on real text, CPU: the embedded default run's data (Debian's
# fortunes, its own BPE tokenizer) on a 4-layer, 128-wide GPT-2, `steps` steps of 16 x 64 tokens per
# variant. Prints each variant's final validation loss and its largest per-step loss difference from
# the first (the baseline), and draws every curve into one SVG.
# Usage: bench/loss_curves.sh NAME STEPS TITLE LABEL=FLAGS [LABEL=FLAGS ...]
#   (writes bench/results/cpu-NAME-<date>.{svg,txt}; FLAGS are extra `tessera train` flags, may be empty)
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 steps=$2 title=$3
shift 3
tessera=${TESSERA:-build/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=bench/results/cpu-$name-$(date -u +%Y-%m-%d)
labels=() curves=()
for variant in "$@"; do
  labels+=("${variant%%=*}") curves+=("${variant%%=*}=$work/${#curves[@]}/metrics.jsonl")
done
{
  echo "# bench/loss_curves.sh $name $steps, commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H%MZ), $(nproc) CPU cores"
  i=0
  for variant in "$@"; do
    flags=${variant#*=}
    # shellcheck disable=SC2086  # the flags are words
    "$tessera" train --model gpt2-tiny --layers 4 --channels 128 --heads 4 --seq-len 64 --steps "$steps" \
      $flags --out-dir "$work/$i" --quiet > "$work/$i.log" 2>&1
    echo "${labels[$i]} ($flags): final validation loss $(grep val_loss "$work/$i/metrics.jsonl" | tail -1)"
    if ((i > 0)); then
      echo "${labels[$i]} against ${labels[0]}: $(python3 tools/compare_loss_curves.py "$work/0/metrics.jsonl" \
        "$work/$i/metrics.jsonl" | tail -1)"
    fi
    i=$((i + 1))
  done
} | tee "$out.txt"
python3 tools/plot_loss_curves.py "$out.svg" "${curves[@]}" --title "$title"

#!/usr/bin/env bash
# Multiple-choice evaluation speed on CPU (eval --choices): a GPT-2 124M-shaped model (a BPE
# tokenizer of 4,096 tokens trained on Debian's fortunes, one training step so that a checkpoint
# exists) scoring EXAMPLES HellaSwag-shaped examples (a context of three fortune lines, four endings of
# one line each; about 60 tokens a row), at --batch-size 8 and 32, every core. Reports wall seconds,
# examples a second and the peak resident memory, and checks that both batch sizes give the same
# accuracies.
# Usage: bench/choices_eval.sh [examples=200]   (appends to bench/results/cpu-choices-eval.jsonl)
examples=${1:-200}
source "$(dirname "$0")/bench_env.sh"
threads=$(getconf _NPROCESSORS_ONLN)
cat /usr/share/games/fortunes/{fortunes,literature,riddles} | grep -v '^%$' > "$work/corpus.txt"
"$tessera" tokenizer-train --vocab-size 4096 --in "$work/corpus.txt" --out "$work/tok.json" > /dev/null
"$tessera" tokenize --quiet --tokenizer "$work/tok.json" --in "$work/corpus.txt" --out "$work/data" > /dev/null
/usr/bin/python3 - "$work" "$examples" <<'PY'
import json, random, sys
work, count = sys.argv[1], int(sys.argv[2])
random.seed(2)
lines = [l.strip() for l in open(f"{work}/corpus.txt") if len(l.split()) > 6]
with open(f"{work}/choices.jsonl", "w") as f:
    for i in range(count):
        f.write(json.dumps({"ctx": " ".join(random.choice(lines) for _ in range(3)),
                            "endings": [random.choice(lines) for _ in range(4)], "label": i % 4}) + "\n")
PY
OMP_NUM_THREADS=$threads "$tessera" train --quiet --model gpt2-124m --tokenizer "$work/tok.json" \
  --train-data "$work/data/train_*.bin" --batch-size 1 --seq-len 128 --steps 1 --out-dir "$work/run" \
  --device cpu > /dev/null
results=$(
  for batch in 8 32; do
    /usr/bin/time -f "time %e %M" -o "$work/time$batch" env OMP_NUM_THREADS="$threads" "$tessera" eval \
      --checkpoint "$work/run" --choices "$work/choices.jsonl" --device cpu --batch-size "$batch" \
      --seq-len 1024 > "$work/out$batch"
    echo "batch$batch $(cat "$work/out$batch") | $(cat "$work/time$batch")"
  done
)
/usr/bin/python3 - <<PY
import re, sys
sys.path.insert(0, "bench")
from bench_record import append_record
runs = {}
for line in """$results""".strip().splitlines():
    name, rest = line.split(" ", 1)
    accuracies = re.search(r"acc ([0-9.]+) acc_norm ([0-9.]+) loss ([0-9.]+)", rest).groups()
    seconds, kb = re.search(r"time ([0-9.]+) ([0-9]+)", rest).groups()
    runs[name] = {"wall_s": float(seconds), "examples_per_s": $examples / float(seconds),
                  "peak_rss_mb": int(kb) / 1024, "acc": float(accuracies[0]), "acc_norm": float(accuracies[1]),
                  "loss": float(accuracies[2])}
assert len({(r["acc"], r["acc_norm"], r["loss"]) for r in runs.values()}) == 1, "the batch sizes disagree"
append_record("bench/results/cpu-choices-eval.jsonl", "TESSERA=$tessera bench/choices_eval.sh $examples", runs)
print(f"{'run':8} {'wall s':>8} {'examples/s':>11} {'peak MB':>8} {'acc_norm':>9}")
for name, r in runs.items():
    print(f"{name:8} {r['wall_s']:8.1f} {r['examples_per_s']:11.2f} {r['peak_rss_mb']:8.0f} {r['acc_norm']:9.4f}")
PY

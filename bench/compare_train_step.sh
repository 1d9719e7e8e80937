#!/usr/bin/env bash
# Tessera vs PyTorch (Debian's python3-torch, CPU, fp32) on one training step of the same model, same
# thread count and environment: by default the GPT-2 of L=4, C=256, H=4, T=256, B=8, V=8192; with
# --model PRESET (llama-mini, mixtral-mini, gpt2-mini, ...) that preset, whose full config Tessera
# prints and PyTorch builds from (--model-config-json). The two run alternately REPEATS times
# (default 3) and the medians are compared, since a shared machine is noisy.
# Prints both and the ratio; appends a JSON record to bench/results/cpu-train-step.jsonl.
# Usage: [REPEATS=3] bench/compare_train_step.sh [--model PRESET] [--threads 2] [--steps 10] [shape flags of both programs]
set -euo pipefail
cd "$(dirname "$0")/.."
args=("$@")
[[ " ${args[*]} " == *" --threads "* ]] || args+=(--threads 2)
threads=$(printf '%s\n' "${args[@]}" | grep -A1 -- '--threads' | tail -1)
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

runs=()
for _ in $(seq "${REPEATS:-3}"); do
  ours=$(build/bench/bench_train_step "${args[@]}" --json)
  runs+=("$ours")
  torch_args=("${args[@]}")
  if [[ " ${args[*]} " =~ \ --model[=\ ] ]]; then  # PyTorch builds the model Tessera just ran
    torch_args+=(--model-config-json "$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["model_config"]))' "$ours")")
  fi
  runs+=("$(/usr/bin/python3 bench/torch_train_step.py "${torch_args[@]}" --json)")
done
record=$(/usr/bin/python3 - "$*" "${runs[@]}" <<'PY'
import datetime, json, os, statistics, subprocess, sys
argv, runs = sys.argv[1], [json.loads(r) for r in sys.argv[2:]]
def median_run(impl):
    mine = sorted((r for r in runs if r["impl"] == impl), key=lambda r: r["tokens_per_s"])
    return dict(mine[len(mine) // 2], all_tokens_per_s=[round(r["tokens_per_s"], 1) for r in mine])
ours, theirs = median_run("tessera"), median_run("pytorch")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(json.dumps({
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": f"{cpu}, {subprocess.check_output(['nproc']).decode().strip()} cores",
    "command": f"bench/compare_train_step.sh {argv}".strip(),
    "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_CORETYPE") if k in os.environ},
    "load_average_after": open("/proc/loadavg").read().split()[:3],  # 1/5/15 min; ours adds about threads
    "tessera": ours, "pytorch": theirs, "ratio": ours["tokens_per_s"] / theirs["tokens_per_s"]}))
PY
)
mkdir -p bench/results
echo "$record" >> bench/results/cpu-train-step.jsonl
/usr/bin/python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(f\"{r['tessera'].get('model', 'gpt2')}, median of {len(r['tessera']['all_tokens_per_s'])}: tessera {r['tessera']['tokens_per_s']:.0f} tok/s, pytorch {r['pytorch']['tokens_per_s']:.0f} tok/s (torch {r['pytorch'].get('torch_version','?')}), ratio {r['ratio']:.2f}x\")" "$record"

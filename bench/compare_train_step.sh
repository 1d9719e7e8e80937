#!/usr/bin/env bash
# Tessera vs PyTorch (Debian's python3-torch, CPU, fp32) on one training step of the same GPT-2:
# L=4, C=256, H=4, T=256, B=8, V=8192 by default, same thread count, run back to back in one call.
# Prints both and the ratio; appends a JSON record to bench/results/cpu-train-step.jsonl.
# Usage: bench/compare_train_step.sh [--threads 2] [--steps 10] [other shape flags of both programs]
set -euo pipefail
cd "$(dirname "$0")/.."
args=("$@")
[[ " ${args[*]} " == *" --threads "* ]] || args+=(--threads 2)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(printf '%s\n' "${args[@]}" | grep -A1 -- '--threads' | tail -1)}
export OPENBLAS_NUM_THREADS=$OMP_NUM_THREADS

ours=$(build/bench/bench_train_step "${args[@]}" --json)
theirs=$(/usr/bin/python3 bench/torch_train_step.py "${args[@]}" --json)
record=$(/usr/bin/python3 - "$ours" "$theirs" "$*" <<'PY'
import json, platform, subprocess, sys, datetime
ours, theirs, argv = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(json.dumps({
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": f"{cpu}, {subprocess.check_output(['nproc']).decode().strip()} cores",
    "command": f"bench/compare_train_step.sh {argv}".strip(),
    "tessera": ours, "pytorch": theirs,
    "ratio": ours["tokens_per_s"] / theirs["tokens_per_s"]}))
PY
)
mkdir -p bench/results
echo "$record" >> bench/results/cpu-train-step.jsonl
/usr/bin/python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(f\"tessera {r['tessera']['tokens_per_s']:.0f} tok/s, pytorch {r['pytorch']['tokens_per_s']:.0f} tok/s ({r['pytorch'].get('torch_version','?')}), ratio {r['ratio']:.2f}x\")" "$record"

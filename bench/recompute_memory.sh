#!/usr/bin/env bash
# Activation recomputation on the CPU: for each model (MODELS, default "llama-mini gpt2-mini") runs
# build/bench/bench_train_step with --recompute none, selective and full, alternating the three
# REPEATS times (default 3; the shared machine is noisy, so step times are medians; memory is the
# same every run). Prints, per mode, the activation peak (the host allocator's highest live bytes
# during forward + backward minus the bytes live before the first forward: saved activations, backward
# scratch, the classifier's logits chunk and transients), the same without the logits chunk, ms/step
# and the ratios to none. Appends one JSON record per model to bench/results/cpu-recompute.jsonl.
# Usage: [REPEATS=3] [MODELS="llama-mini gpt2-mini"] bench/recompute_memory.sh [bench_train_step flags]
#        (default --batch 8 --seq-len 256 --threads 2 --steps 5 --warmup 2)
set -euo pipefail
cd "$(dirname "$0")/.."
args=(--batch 8 --seq-len 256 --threads 2 --steps 5 --warmup 2 "$@")  # later flags win (CLI11)
threads=$(printf '%s\n' "${args[@]}" | grep -A1 -- '--threads' | tail -1)
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo +)

mkdir -p bench/results
for model in ${MODELS:-llama-mini gpt2-mini}; do
  runs=()
  for _ in $(seq "${REPEATS:-3}"); do
    for mode in none selective full; do
      runs+=("$(build/bench/bench_train_step --model "$model" --recompute "$mode" "${args[@]}" --json)")
    done
  done
  /usr/bin/python3 - "$model" "$commit" "bench/recompute_memory.sh $*" "${runs[@]}" <<'PY' |
import datetime, json, os, statistics, subprocess, sys
model, commit, command, runs = sys.argv[1], sys.argv[2], sys.argv[3].strip(), [json.loads(r) for r in sys.argv[4:]]
MiB = 1 << 20
modes = {}
for mode in ("none", "selective", "full"):
    mine = sorted((r for r in runs if r["recompute"] == mode), key=lambda r: r["ms_per_step"])
    median = {k: v for k, v in mine[len(mine) // 2].items() if k != "model_config"}
    median["all_ms_per_step"] = [round(r["ms_per_step"], 1) for r in mine]
    median["blocks_activation_peak_bytes"] = median["activation_peak_bytes"] - median["classifier_logits_bytes"]
    modes[mode] = median
none = modes["none"]
for m in modes.values():
    m["activation_ratio"] = m["activation_peak_bytes"] / none["activation_peak_bytes"]
    m["blocks_activation_ratio"] = m["blocks_activation_peak_bytes"] / none["blocks_activation_peak_bytes"]
    m["time_ratio"] = m["ms_per_step"] / none["ms_per_step"]
r0 = runs[0]
print(f"{model}: B={r0['batch']} T={r0['seq_len']}, {r0['threads']} threads, {r0['parameters']} parameters, "
      f"{r0['static_bytes'] / MiB:.1f} MiB before the first forward, logits chunk "
      f"{r0['classifier_logits_bytes'] / MiB:.1f} MiB; median of {len(runs) // 3}", file=sys.stderr)
print(f"{'recompute':<10} {'act. peak MiB':>13} {'vs none':>8} {'w/o logits MiB':>15} {'vs none':>8} "
      f"{'ms/step':>9} {'vs none':>8}", file=sys.stderr)
for mode, m in modes.items():
    print(f"{mode:<10} {m['activation_peak_bytes'] / MiB:>13.1f} {m['activation_ratio']:>8.2f} "
          f"{m['blocks_activation_peak_bytes'] / MiB:>15.1f} {m['blocks_activation_ratio']:>8.2f} "
          f"{m['ms_per_step']:>9.1f} {m['time_ratio']:>8.2f}", file=sys.stderr)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(json.dumps({
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": f"{cpu}, {subprocess.check_output(['nproc']).decode().strip()} cores", "commit": commit,
    "command": f"MODELS={model} {command}",
    "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_CORETYPE") if k in os.environ},
    "load_average_after": open("/proc/loadavg").read().split()[:3],  # 1/5/15 min; ours adds about threads
    "model": model, "model_config": r0["model_config"], "modes": modes}))
PY
  cat >> bench/results/cpu-recompute.jsonl
done

#!/usr/bin/env bash
# Data-parallel step time on CPU under mpirun: the benchmark GPT-2 (L=4, C=256, H=4, T=256,
# V=8192, fp32) at dp=2 with overlap on and off, ZeRO 0/1/2 and gradients reduced in bf16 or by PowerSGD, against
# the compute-only time (one process doing one rank's share, no communication). Exposed communication = step time −
# compute-only time. Also the peak host memory per rank at dp=4 for each ZeRO stage.
# Usage: bench/dp_step.sh [steps=8]   (appends to bench/results/cpu-dp-step.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-8}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

/usr/bin/python3 - "$work/train.bin" <<'PY'
import sys, numpy as np
n = 4_000_000
header = np.zeros(256, dtype=np.int32); header[:3] = (20240520, 2, n)
tokens = np.random.default_rng(0).integers(0, 8192, n, dtype=np.uint32)
open(sys.argv[1], "wb").write(header.tobytes() + tokens.tobytes())
PY

model=(--model gpt2-124m --layers 4 --heads 4 --channels 256 --vocab-size 8192 --context 256 --seq-len 256)
run() {  # name ranks batch [flags...]
  local name=$1 ranks=$2 batch=$3; shift 3
  local launch=()
  ((ranks > 1)) && launch=(mpirun --oversubscribe --allow-run-as-root -np "$ranks")
  "${launch[@]}" build/tessera train --quiet "${model[@]}" --train-data "$work/train.bin" --batch-size "$batch" \
    --steps "$steps" --lr 1e-4 --bucket-mb "${BUCKET_MB:-4}" --out-dir "$work/$name" --dp "$ranks" "$@" > /dev/null
  echo "$name $work/$name/metrics.jsonl"
}
results=$(
  run compute_only 1 4 --micro-batch-size 4
  run dp2_overlap 2 8 --micro-batch-size 4
  run dp2_no_overlap 2 8 --micro-batch-size 4 --no-overlap
  run dp2_zero1 2 8 --micro-batch-size 4 --zero 1
  run dp2_zero2 2 8 --micro-batch-size 4 --zero 2
  run dp2_bf16_reduce 2 8 --micro-batch-size 4 --grad-reduce-dtype bf16
  run dp2_bf16_no_overlap 2 8 --micro-batch-size 4 --grad-reduce-dtype bf16 --no-overlap
  run dp2_powersgd_r4 2 8 --micro-batch-size 4 --powersgd-rank 4
  run dp4_zero0 4 8 --micro-batch-size 2 --zero 0
  run dp4_zero1 4 8 --micro-batch-size 2 --zero 1
  run dp4_zero2 4 8 --micro-batch-size 2 --zero 2
)
/usr/bin/python3 - "$steps" <<PY
import json, statistics, sys
sys.path.insert(0, "bench")
from bench_record import append_record
runs = dict(line.split() for line in """$results""".strip().splitlines())
def load(name):
    lines = [json.loads(l) for l in open(runs[name]) if '"loss"' in l]
    timed = lines[2:]  # the first two steps warm up
    return {"step_s": statistics.median(l["step_s"] for l in timed),
            "comm_wait_s": statistics.median(l["comm_wait_s"] for l in timed),
            "peak_mem_mb": max(l["peak_mem_mb"] for l in lines)}
r = {name: load(name) for name in runs}
compute = r["compute_only"]["step_s"]
for name in runs:
    r[name]["exposed_comm_s"] = r[name]["step_s"] - compute if name != "compute_only" else 0.0
append_record("bench/results/cpu-dp-step.jsonl", "bench/dp_step.sh $steps", r)
print(f"{'run':20} {'step ms':>8} {'exposed comm ms':>16} {'wait in finish ms':>18} {'peak MB':>8}")
for name, v in r.items():
    print(f"{name:20} {1e3*v['step_s']:8.1f} {1e3*v['exposed_comm_s']:16.1f} {1e3*v['comm_wait_s']:18.1f} {v['peak_mem_mb']:8.1f}")
PY

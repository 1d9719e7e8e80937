#!/usr/bin/env bash
# 3D parallelism on CPU under mpirun (issue 8): per-rank step time and peak memory of one model
# (GPT-2 shape, L=8, C=256, H=4, T=128, V=8192, fp32; global batch 16, micro-batch 1) at dp4, tp4
# (with and without sequence parallelism) and pp4 under every schedule (interleaved with 2 chunks per
# rank), each on 4 ranks; at pp2 on 2 ranks, where this 2-core machine runs every rank on a core of
# its own, the executor's measured bubble (idle share of the stages' time) against the simulator's
# for the same schedule at the measured compute times, and the peak micro-batches in flight per
# stage, measured and simulated; and tp2 with and without sequence parallelism on long sequences
# (T=1024, micro-batch 4), where activations dominate the per-rank peak memory.
# Usage: bench/pipeline_step.sh [steps=6]   (appends to bench/results/cpu-pipeline-step.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

/usr/bin/python3 tools/synthetic_shard.py "$work/train.bin" --tokens 2000000 --vocab 8192

tessera=${TESSERA:-build/tessera}
model=(--model gpt2-124m --layers 8 --heads 4 --channels 256 --vocab-size 8192 --context 1024)
run() {  # name ranks [flags...]; SHAPE="seq batch micro" overrides the default "128 16 1"
  local name=$1 ranks=$2 shape=(${SHAPE:-128 16 1}); shift 2
  mpirun --oversubscribe --allow-run-as-root -np "$ranks" "$tessera" train --quiet "${model[@]}" \
    --train-data "$work/train.bin" --seq-len "${shape[0]}" --batch-size "${shape[1]}" \
    --micro-batch-size "${shape[2]}" --steps "$steps" --lr 1e-4 --out-dir "$work/$name" "$@" > /dev/null
  echo "$name $work/$name/metrics.jsonl"
}
results=$(
  run dp4 4 --dp 4
  run tp4_sp 4 --dp 1 --tp 4
  run tp4_no_sp 4 --dp 1 --tp 4 --no-sequence-parallel
  for s in gpipe 1f1b zero-bubble; do run "pp4_$s" 4 --dp 1 --pp 4 --pipeline-schedule "$s"; done
  run pp4_interleaved_v2 4 --dp 1 --pp 4 --pipeline-schedule interleaved --virtual-stages 2
  for s in gpipe 1f1b zero-bubble; do run "pp2_$s" 2 --dp 1 --pp 2 --pipeline-schedule "$s"; done
  run pp2_interleaved_v2 2 --dp 1 --pp 2 --pipeline-schedule interleaved --virtual-stages 2
  SHAPE="1024 8 4" run tp2_sp_T1024 2 --dp 1 --tp 2
  SHAPE="1024 8 4" run tp2_no_sp_T1024 2 --dp 1 --tp 2 --no-sequence-parallel
)
/usr/bin/python3 - "$steps" <<PY
import json, statistics, sys
sys.path.insert(0, "bench")
from bench_record import append_record
runs = dict(line.split() for line in """$results""".strip().splitlines())
def load(name):
    lines = [json.loads(l) for l in open(runs[name]) if '"loss"' in l]
    timed = lines[2:]  # the first two steps warm up
    r = {"step_s": statistics.median(l["step_s"] for l in timed), "peak_mem_mb": max(l["peak_mem_mb"] for l in lines)}
    if "pipeline" in lines[-1]:
        p = [l["pipeline"] for l in timed]
        r.update(bubble=statistics.median(x["bubble"] for x in p),
                 bubble_simulated=statistics.median(x["bubble_simulated"] for x in p),
                 peak_in_flight=p[-1]["peak_in_flight"], peak_in_flight_simulated=p[-1]["peak_in_flight_simulated"],
                 stage_peak_mem_mb=[max(x["peak_mem_mb"][s] for x in p) for s in range(len(p[-1]["peak_mem_mb"]))])
    return r
r = {name: load(name) for name in runs}
append_record("bench/results/cpu-pipeline-step.jsonl", "bench/pipeline_step.sh $steps", r)
print(f"{'run':20} {'step ms':>8} {'bubble':>7} {'simulated':>9}  {'in flight (sim)':24} stage peak MB")
for name, v in r.items():
    flight = f"{v['peak_in_flight']} ({v['peak_in_flight_simulated']})" if "bubble" in v else ""
    bubble = f"{v['bubble']:7.3f} {v['bubble_simulated']:9.3f}" if "bubble" in v else f"{'':7} {'':9}"
    mem = v.get("stage_peak_mem_mb", [v["peak_mem_mb"]])
    print(f"{name:20} {1e3*v['step_s']:8.1f} {bubble}  {flight:24} {[round(m) for m in mem]}")
PY

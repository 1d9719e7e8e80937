#!/usr/bin/env bash
# Expert and context parallelism on CPU under mpirun (issue 9).
#   Expert: one MoE model (Mixtral shape, L=2, C=256, 8 experts of width 256, top-2, T=128, V=8192,
#   global batch 16, micro-batch 2) at dp4 and dp4·ep4 (two experts per rank): step time, peak
#   memory, and per step the all-to-all time and bytes each rank sent.
#   Context: one long-sequence model (GPT-2 shape, L=2, C=256, H=4, T=2048, V=8192, batch 2,
#   micro-batch 1) at cp 1, 2 and 4 on 1, 2 and 4 ranks, ring and all-to-all: per-rank peak memory, step
#   time and the exchanges' exposed wait per step (the transfer time the compute did not hide).
# This machine has 2 cores: 4-rank runs share them, so their times (and waits) include time-sharing.
# Usage: bench/expert_context_step.sh [steps=4]   (appends to bench/results/cpu-expert-context-step.jsonl)
steps=${1:-4}
source "$(dirname "$0")/bench_env.sh"
/usr/bin/python3 tools/synthetic_shard.py "$work/train.bin" --tokens 2000000 --vocab 8192
moe=(--model mixtral-mini --layers 2 --channels 256 --heads 4 --vocab-size 8192 --seq-len 128 --batch-size 16
     --micro-batch-size 2)
long=(--model gpt2-124m --layers 2 --heads 4 --channels 256 --vocab-size 8192 --context 2048 --seq-len 2048
      --batch-size 2 --micro-batch-size 1)
run() {  # name ranks [flags...]
  local name=$1 ranks=$2; shift 2
  mpirun --oversubscribe --allow-run-as-root -np "$ranks" "$tessera" train --quiet --train-data "$work/train.bin" \
    --steps "$steps" --lr 1e-4 --out-dir "$work/$name" "$@" > /dev/null
  echo "$name $work/$name/metrics.jsonl"
}
results=$(
  run moe_dp4 4 "${moe[@]}" --dp 4
  run moe_dp4_ep4 4 "${moe[@]}" --dp 4 --ep 4
  run long_cp1 1 "${long[@]}"
  run long_cp2 2 "${long[@]}" --dp 1 --cp 2
  run long_cp4 4 "${long[@]}" --dp 1 --cp 4
  run long_cp2_a2a 2 "${long[@]}" --dp 1 --cp 2 --cp-comm all-to-all
  run long_cp4_a2a 4 "${long[@]}" --dp 1 --cp 4 --cp-comm all-to-all
)
/usr/bin/python3 - "$steps" <<PY
import statistics, sys
sys.path.insert(0, "bench")
from bench_record import append_record, runs_of, step_lines
runs = runs_of("""$results""")
def load(name):
    lines, timed = step_lines(runs[name], warm_up=1)
    r = {"step_s": statistics.median(l["step_s"] for l in timed), "peak_mem_mb": max(l["peak_mem_mb"] for l in lines)}
    for key in ("ep_all_to_all_s", "ep_all_to_all_bytes", "cp_ring_wait_s", "cp_ring_bytes", "cp_all_to_all_s",
                "cp_all_to_all_bytes"):
        if key in lines[-1]: r[key] = statistics.median(l[key] for l in timed)
    if "ep_load_max_over_mean" in lines[-1]: r["ep_load_max_over_mean"] = lines[-1]["ep_load_max_over_mean"]
    return r
r = {name: load(name) for name in runs}
append_record("bench/results/cpu-expert-context-step.jsonl", "TESSERA=$tessera bench/expert_context_step.sh $steps", r)
print(f"{'run':14} {'step ms':>9} {'peak MB':>8}  per step (rank 0)")
for name, v in r.items():
    extra = ""
    if "ep_all_to_all_s" in v:
        extra = f"all-to-all {1e3*v['ep_all_to_all_s']:.1f} ms, {v['ep_all_to_all_bytes']/2**20:.2f} MiB sent"
    if "cp_ring_wait_s" in v:
        extra = f"ring wait {1e3*v['cp_ring_wait_s']:.1f} ms, {v['cp_ring_bytes']/2**20:.2f} MiB sent"
    if "cp_all_to_all_s" in v:
        extra = f"all-to-all {1e3*v['cp_all_to_all_s']:.1f} ms, {v['cp_all_to_all_bytes']/2**20:.2f} MiB sent"
    print(f"{name:14} {1e3*v['step_s']:9.1f} {v['peak_mem_mb']:8.0f}  {extra}")
PY

#!/usr/bin/env bash
# ZeRO-3 against ZeRO-2 on CPU under mpirun: step time and per-rank parameter memory of one model
# (GPT-2 shape, L=8, C=256, H=4, T=128, V=8192, fp32, tied: 8.4M parameters, 33.6 MB; global batch
# 8, micro-batch 2) at dp 2 and dp 4. From rank 0's metrics: the median step time after two warm-up
# steps, the time blocked in the reduction after backward, the fp32 parameter bytes kept between
# steps (param_mem_mb: the flat buffer, or ZeRO-3's shard) and the most held at once with the parts
# gathered around their use (peak_param_mem_mb), and the allocator's peak for the whole process.
# ZeRO-2 reduces in --bucket-mb buckets (BUCKET_MB, 4 by default); ZeRO-3 in one bucket per block.
# ZeRO-3 runs twice: resharding after forward (the default), and keeping the blocks gathered from
# their forward to their backward (--no-reshard-after-forward: half the all-gathers).
# Usage: [BUCKET_MB=4] bench/zero3_step.sh [steps=6]   (appends to bench/results/cpu-zero3-step.jsonl)
steps=${1:-6}
source "$(dirname "$0")/bench_env.sh"
/usr/bin/python3 tools/synthetic_shard.py "$work/train.bin" --tokens 1000000 --vocab 8192
model=(--model gpt2-124m --layers 8 --heads 4 --channels 256 --vocab-size 8192 --context 128 --seq-len 128)
run() {  # name ranks [flags...]
  local name=$1 ranks=$2; shift 2
  mpirun --oversubscribe --allow-run-as-root -np "$ranks" "$tessera" train --quiet "${model[@]}" \
    --train-data "$work/train.bin" --batch-size 8 --micro-batch-size 2 --steps "$steps" --lr 1e-4 \
    --bucket-mb "${BUCKET_MB:-4}" --out-dir "$work/$name" --dp "$ranks" "$@" > /dev/null
  echo "$name $work/$name/metrics.jsonl"
}
results=$(
  for dp in 2 4; do
    run "dp${dp}_zero2" "$dp" --zero 2
    run "dp${dp}_zero3" "$dp" --zero 3
    run "dp${dp}_zero3_kept" "$dp" --zero 3 --no-reshard-after-forward
  done
)
/usr/bin/python3 - <<PY
import statistics, sys
sys.path.insert(0, "bench")
from bench_record import append_record, runs_of, step_lines
def load(path):
    lines, timed = step_lines(path)
    median = lambda key: statistics.median(l[key] for l in timed)
    return {"step_s": median("step_s"), "comm_wait_s": median("comm_wait_s"),
            "param_mem_mb": lines[-1]["param_mem_mb"],
            "peak_param_mem_mb": max(l["peak_param_mem_mb"] for l in lines),
            "peak_mem_mb": max(l["peak_mem_mb"] for l in lines), "final_loss": lines[-1]["loss"]}
r = {name: load(path) for name, path in runs_of("""$results""").items()}
append_record("bench/results/cpu-zero3-step.jsonl", "TESSERA=$tessera BUCKET_MB=${BUCKET_MB:-4} bench/zero3_step.sh $steps", r)
print(f"{'run':14} {'step ms':>8} {'wait ms':>8} {'params MB':>10} {'peak params MB':>15} {'peak MB':>8} {'loss':>8}")
for name, v in r.items():
    print(f"{name:14} {1e3*v['step_s']:8.1f} {1e3*v['comm_wait_s']:8.1f} {v['param_mem_mb']:10.2f} "
          f"{v['peak_param_mem_mb']:15.2f} {v['peak_mem_mb']:8.1f} {v['final_loss']:8.4f}")
PY

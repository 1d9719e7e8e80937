#!/usr/bin/env bash
# What a rank holds in host memory over a whole run under ZeRO-3, start-up and checkpoint included:
# the peak resident set (GNU time's %M) of each of 4 ranks training GPT-2 124M (124.4M parameters,
# 498 MB in fp32) for one step of 4 x 16 tokens and saving a checkpoint, on the CPU. Runs: ZeRO-1
# (every rank holds the whole model and its gradient), ZeRO-3 from the initialisation with sharded
# checkpoint weights (the default) and with whole ones (rank 0 gathers the model to write
# model.safetensors), and ZeRO-3 fine-tuning from a Hugging Face folder (--init-from; the folder is
# the ZeRO-1 run's checkpoint, converted). Rank 0 and the largest of the others are reported.
# Usage: bench/zero3_host_memory.sh   (appends to bench/results/cpu-zero3-host-memory.jsonl)
source "$(dirname "$0")/bench_env.sh"
/usr/bin/python3 tools/synthetic_shard.py "$work/train.bin" --tokens 100000 --vocab 50257
run() {  # name [flags...]: prints "name rank0_MB max_other_MB"
  local name=$1; shift
  mpirun --oversubscribe --allow-run-as-root -np 4 \
    bash -c 'exec /usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$work/$name" "$tessera" train --quiet --train-data "$work/train.bin" --batch-size 4 --micro-batch-size 1 --seq-len 16 \
    --steps 1 --dp 4 --out-dir "$work/$name" "$@" > /dev/null
  /usr/bin/python3 - "$work" "$name" <<'PY'
import sys
work, name = sys.argv[1:]
kb = [int(open(f"{work}/{name}.rss.{r}").read().split()[-1]) for r in range(4)]
print(name, round(kb[0] / 1024), round(max(kb[1:]) / 1024))
PY
}
results=$(
  run zero1 --model gpt2-124m --zero 1
  "$tessera" convert --checkpoint "$work/zero1" --to-hf "$work/hf" > /dev/null
  run zero3_sharded --model gpt2-124m --zero 3
  run zero3_whole --model gpt2-124m --zero 3 --checkpoint-weights whole
  run zero3_init_from_hf --init-from "$work/hf" --zero 3
)
echo "$results"
/usr/bin/python3 - <<PY
import sys
sys.path.insert(0, "bench")
from bench_record import append_record
runs = {n: {"rank0_peak_rss_mb": int(a), "other_ranks_peak_rss_mb": int(b)}
        for n, a, b in (l.split() for l in """$results""".strip().splitlines())}
append_record("bench/results/cpu-zero3-host-memory.jsonl", "TESSERA=$tessera bench/zero3_host_memory.sh", runs)
PY

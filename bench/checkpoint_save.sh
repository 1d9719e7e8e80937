#!/usr/bin/env bash
# Checkpoint save and load throughput on the CPU, GPT-2 124M (fp32 weights and AdamW moments: about
# 1.5 GB a checkpoint): 4 ranks under mpirun (dp 4, ZeRO 1), every rank writing its shard of the
# moments in parallel (rank 0 also the weights), against one process writing the whole checkpoint
# alone (what rank 0 wrote when it gathered the moments, without the gather). Save: the training's
# checkpoint_stall_s of a synchronous save; load: a resumed run's checkpoint_verify_s (--resume's
# CRC-32 pass over every file) and checkpoint_load_s (the weights and the rank's moments, read by
# byte range), with the page cache dropped first where the machine allows it. Beside them, the
# disk's own sequential write speed: dd of 1 GiB with conv=fsync, in the same run.
# Usage: [TESSERA=build/tessera] [BENCH_DIR=.] bench/checkpoint_save.sh
#   (writes bench/results/cpu-checkpoint-save-<date>.txt; BENCH_DIR: where the checkpoints are written)
set -euo pipefail
cd "$(dirname "$0")/.."
tessera=${TESSERA:-build/tessera}
work=$(mktemp -d -p "${BENCH_DIR:-$PWD}" .bench-checkpoint.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
stamp=$(date -u +%Y-%m-%dT%H%MZ)
out=bench/results/cpu-checkpoint-save-$stamp.txt

/usr/bin/python3 - "$work/train.bin" <<'PY'
import sys, numpy as np
n = 1_000_000
header = np.zeros(256, dtype=np.int32); header[:3] = (20240520, 2, n)
tokens = np.random.default_rng(0).integers(0, 50257, n, dtype=np.uint32)
open(sys.argv[1], "wb").write(header.tobytes() + tokens.tobytes())
PY

drop_caches() { sync; if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo cold; else echo warm; fi; }
train() {  # ranks out-dir flags...
  local ranks=$1 dir=$2; shift 2
  local launch=()
  ((ranks > 1)) && launch=(mpirun --oversubscribe --allow-run-as-root -np "$ranks")
  "${launch[@]}" "$tessera" train --quiet --device cpu --model gpt2-124m --train-data "$work/train.bin" \
    --batch-size 4 --micro-batch-size $((4 / ranks)) --seq-len 64 --lr 1e-4 --dp "$ranks" --zero 1 \
    --checkpoint-every 1 --out-dir "$dir" "$@" > /dev/null
}
measure() {  # name ranks: a save after step 1 (its stall is on step 2's line), then a resumed run's load
  local name=$1 ranks=$2
  train "$ranks" "$work/$name" --steps 2
  local cache; cache=$(drop_caches)
  train "$ranks" "$work/$name" --steps 3 --resume
  local bytes; bytes=$(du -cb "$work/$name/ckpt-00000001"/*.safetensors | tail -1 | cut -f1)
  mv "$work/$name/metrics.jsonl" "$work/$name.jsonl"
  rm -rf "${work:?}/$name"
  echo "$name $ranks $bytes $cache $work/$name.jsonl"
}
dd_line=$(dd if=/dev/zero of="$work/dd" bs=1M count=1024 conv=fsync 2>&1 | tail -1); rm -f "$work/dd"
runs=$(measure parallel_4_ranks 4; measure one_writer 1)

/usr/bin/python3 - "$out" "$stamp" "$dd_line" <<PY
import json, subprocess, sys
out, stamp, dd_line = sys.argv[1:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = "+" if subprocess.run(["git", "diff", "--quiet", "HEAD"]).returncode else ""
lines = [f"# Checkpoint save/load throughput, GPT-2 124M on the CPU (bench/checkpoint_save.sh)",
         f"# date: {stamp}; machine: {cpu}, {subprocess.check_output(['nproc', '--all']).decode().strip()} cores, "
         f"{subprocess.check_output(['df', '-h', '--output=source,fstype', '.']).decode().split()[-2:]}",
         f"# commit: {commit}{dirty}",
         "# command: bench/checkpoint_save.sh (train --model gpt2-124m --batch-size 4 --seq-len 64 --zero 1 "
         "--checkpoint-every 1 --steps 2, then --resume --steps 3; 1 or 4 ranks)",
         f"# dd if=/dev/zero bs=1M count=1024 conv=fsync: {dd_line}",
         f"{'run':18} {'ranks':>5} {'GB':>6} {'save s':>7} {'save GB/s':>9} {'verify s':>8} {'load s':>7} {'load GB/s':>9} cache"]
for row in """$runs""".strip().splitlines():
    name, ranks, size, cache, metrics = row.split()
    steps = [json.loads(l) for l in open(metrics) if '"loss"' in l]
    save = next(l["checkpoint_stall_s"] for l in steps if l["step"] == 2)
    resumed = next(l for l in steps if l["step"] == 3)
    gb = int(size) / 1e9
    lines.append(f"{name:18} {ranks:>5} {gb:6.2f} {save:7.2f} {gb / save:9.2f} {resumed['checkpoint_verify_s']:8.2f} "
                 f"{resumed['checkpoint_load_s']:7.2f} {gb / resumed['checkpoint_load_s']:9.2f} {cache}")
text = "\n".join(lines) + "\n"
open(out, "w").write(text)
print(text, end="")
print(f"(written to {out})")
PY

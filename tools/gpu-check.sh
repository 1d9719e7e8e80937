#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, CUDA 13 and PyTorch but none of our Debian libraries: runs the
# bundle that tools/gpu-bundle.sh made on the development machine (carried as .gpu-bundle/) and
# writes one results file: the device, the commit, the command, then each section's output.
#   tools/gpu-check.sh [section...]     sections: env tests train bench (default: all four)
#   env    nvidia-smi, driver, the libraries found
#   tests  every `cuda` test (each CUDA op against its CPU twin), gtest XML beside the results
#   train  20 steps of $TRAIN_MODELS (gpt2-mini llama-mini mixtral-mini) on the GPU (bf16, fp16 with loss scaling,
#          fp32, bf16 with --fp8 hybrid, bf16 with --nondeterministic, bf16 with bf16 AdamW moments) and on the
#          CPU (fp32; fp32 with --fp8 hybrid), same seed and synthetic data: each GPU loss curve against the
#          CPU's (within 2%)
#   bench  tessera bench train (GPT-2 124M, T=1024) next to bench/torch_gpt2_cuda.py, same shapes,
#          micro-batches $BENCH_BATCHES (16), dtypes $BENCH_DTYPES (bf16 fp16 fp32); bf16 also with
#          --nondeterministic (PyTorch's attention backward is not deterministic either), and that with
#          --optimizer-moments bf16
#   attention  the attention kernels side by side: the tensor-core and cuDNN attention tests (cuDNN's own
#          error log on), then tessera bench train (GPT-2 124M, B=16, T=1024, bf16) with
#          --attention-kernel tessera, cudnn and cudnn --nondeterministic, and with 256-token documents under
#          the document mask
#   ab     this bundle's tessera bench train against the baseline commit's (tools/gpu-bundle.sh with
#          BASELINE=<rev>), alternating, three runs each, GPT-2 124M, bf16, T=1024, micro-batches $AB_BATCHES
#          (16), then PyTorch's of the shape: the summary's second table sets the two commits' medians side by side
#   tuning  tessera bench train (GPT-2 124M, B=16, T=1024, bf16) with cuBLASLt's first choice of each matmul
#          algorithm, then with the fastest of $TUNING_CANDIDATES (16) timed on each shape's first call
#   profile  one bf16 training step of GPT-2 124M (B=16, T=1024) under Nsight Compute at the GPU's own
#          clocks: time per kernel, and how much of the unprofiled step's wall time no kernel ran
#          ($PROFILE_FLAGS, e.g. --nondeterministic, go to both bench trains)
#   timeline  the same bench train under Nsight Systems, as it runs: of its median step, the time kernels,
#          copies and memsets ran and the time the GPU waited, with the longest waits and what lay around
#          them (tools/gpu_timeline.py; the trace's CSV beside the results); skipped where nsys is missing
#   moe    tessera bench train of mixtral-mini (8 experts, top 2) beside llama-mini (its dense twin), B=32,
#          T=256, bf16, 10 and 60 steps: what the experts' varying GEMM shapes cost
#   large  GPT-2 1558M at micro-batch 16 (MFU), alone and with 8 micro-batches a step (llm.c's setting),
#          deterministic and not, beside PyTorch (124M at 64, memory included: bench with BENCH_BATCHES=64)
#   llama  tessera bench train of Llama 3.2 1B (T=2048, micro-batches $LLAMA_BATCHES (4), bf16) beside
#          bench/torch_llama_cuda.py, same shapes
#   trainer  tessera train of GPT-2 124M (B=16, T=1024, bf16, synthetic tokens) on the GPU: the median
#          tokens/s a user's run gets, beside bench train's for the same shape ($TRAINER_FLAGS go to both)
#   multirank  dp2 (ZeRO 0, 1, 2, 3, and 3 keeping blocks gathered), cp2 (ring and all-to-all attention)
#          and dp2 with bf16 or PowerSGD gradient
#          compression, with two ranks on the one GPU (mpirun from the bundle's Open MPI, buffers staged
#          through host memory): the fp32 loss curves agree with one rank's (bf16 on the wire: within
#          1e-2), PowerSGD's with the same compression on the CPU (within 1e-3)
# After the sections, a markdown table of every bench train run beside PyTorch's (tools/bench_summary.py).
# Results go to $OUT (the device tool's folder) when set, else bench/results/. Exits non-zero
# when a section fails; the results file is written either way.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${TESSERA_BUNDLE:-$root/.gpu-bundle}
out=${OUT:-$root/bench/results}
stamp=$(date -u +%Y-%m-%dT%H%MZ)
results=$out/gpu-check-$stamp.txt
sections=("$@")
((${#sections[@]})) || sections=(env tests train bench)
mkdir -p "$out"
: > "$results"
status=0

say() { echo "$@" | tee -a "$results"; }
# A section's header, after the previous section's time.
section_start=
section() {
  [[ -z $section_start ]] || say "(section took $((SECONDS - section_start)) s)"
  section_start=$SECONDS
  printf '\n== %s\n' "$1" | tee -a "$results"
}
# Runs a command, its output into the results file and the terminal; remembers a failure.
record() {
  say "\$ $*"
  "$@" 2>&1 | tee -a "$results"
  local rc=${PIPESTATUS[0]}
  ((rc == 0)) || { say "exit status $rc"; status=1; }
  return "$rc"
}

for packed in "$bundle"/bin/*.gz; do  # tools/gpu-bundle.sh gzips the binaries
  [[ -e $packed && ! -x ${packed%.gz} ]] && gunzip -c "$packed" > "${packed%.gz}" && chmod +x "${packed%.gz}"
done
[[ -x $bundle/bin/tessera ]] || { echo "gpu-check: no bundle at $bundle; run tools/gpu-bundle.sh on the build machine and carry .gpu-bundle" >&2; exit 2; }

[[ -d $bundle/lib ]] || tar -C "$bundle" -xzf "$bundle/lib.tar.gz"
# Our libraries first, then the CUDA toolkit's and the ones PyTorch's wheels bring (NCCL, cuDNN).
cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
wheel_libs=$(python3 -c 'import nvidia, os; r = nvidia.__path__[0]; print(":".join(sorted(os.path.join(r, d, "lib") for d in os.listdir(r) if os.path.isdir(os.path.join(r, d, "lib")))))' 2>/dev/null)
export LD_LIBRARY_PATH=$bundle/lib:$cuda_libs$wheel_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
tessera=$bundle/bin/tessera

say "# Tessera GPU check, $stamp"
say "bundle commit: $(tr '\n' ' ' < "$bundle/commit")"
say "command: tools/gpu-check.sh ${sections[*]}"
say "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1)"

for s in "${sections[@]}"; do
  case $s in
    env)
      section "env"
      record nvidia-smi
      say "nvcc: $(nvcc --version 2>&1 | tail -1)"
      say "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>&1)"
      record ldd "$tessera"
      ;;
    tests)
      section "cuda tests"
      # A hung kernel must not take the rest of the call with it.
      record timeout "${TEST_TIMEOUT_S:-300}" "$bundle/bin/test_cuda" --gtest_output=xml:"$out/gpu-tests-$stamp.xml"
      ;;
    train)
      section "train: ${TRAIN_MODELS:-gpt2-mini llama-mini mixtral-mini}, 20 steps, GPU vs CPU"
      data=$(mktemp -d)
      python3 "$root/tools/synthetic_shard.py" "$data/train_000000.bin" --tokens 1000000 --vocab 512
      for model in ${TRAIN_MODELS:-gpt2-mini llama-mini mixtral-mini}; do
        run=(train --model "$model" --vocab-size 512 --train-data "$data/train_*.bin" --steps 20 --batch-size 8
             --seq-len 256 --lr 1e-3 --warmup 2 --quiet)
        record "$tessera" "${run[@]}" --device cpu --out-dir "$data/$model-cpu"
        for dtype in bf16 fp16 fp32 "bf16 --nondeterministic" "bf16 --optimizer-moments bf16"; do
          name=$(echo "$dtype" | tr -d ' -')
          record "$tessera" "${run[@]}" --device cuda --dtype $dtype --out-dir "$data/$model-gpu-$name"
          say "loss: $model, CPU fp32 vs GPU $dtype"
          record python3 "$root/tools/compare_loss_curves.py" "$data/$model-cpu/metrics.jsonl" \
            "$data/$model-gpu-$name/metrics.jsonl"
        done
        # fp8 (fake-quantized operands): bf16 on the GPU against the CPU reference of the same recipe
        record "$tessera" "${run[@]}" --device cpu --fp8 hybrid --out-dir "$data/$model-cpu-fp8"
        record "$tessera" "${run[@]}" --device cuda --dtype bf16 --fp8 hybrid --out-dir "$data/$model-gpu-fp8"
        say "loss: $model, CPU fp32 vs GPU bf16, both --fp8 hybrid"
        record python3 "$root/tools/compare_loss_curves.py" "$data/$model-cpu-fp8/metrics.jsonl" \
          "$data/$model-gpu-fp8/metrics.jsonl"
      done
      ;;
    bench)
      section "bench: GPT-2 124M, T=1024"
      for b in ${BENCH_BATCHES:-16}; do
        for dtype in ${BENCH_DTYPES:-bf16 fp16 fp32}; do
          record "$tessera" bench train --model gpt2-124m --micro-batch-size "$b" --seq-len 1024 --steps 20 \
            --dtype $dtype --json
          [[ $dtype != bf16 ]] || record "$tessera" bench train --model gpt2-124m --micro-batch-size "$b" \
            --seq-len 1024 --steps 20 --dtype $dtype --nondeterministic --json
          [[ $dtype != bf16 ]] || record "$tessera" bench train --model gpt2-124m --micro-batch-size "$b" \
            --seq-len 1024 --steps 20 --dtype $dtype --nondeterministic --optimizer-moments bf16 --json
          record python3 "$root/bench/torch_gpt2_cuda.py" --preset gpt2-124m --batch "$b" --dtype $dtype --json
        done
      done
      ;;
    attention)
      section "attention: Tessera's tensor-core kernels vs cuDNN's fused attention"
      CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr record "$bundle/bin/test_cuda" \
        --gtest_filter='*AttentionTc*:*Cudnn*:*AttentionKernel*'
      for kernel in tessera cudnn "cudnn --nondeterministic"; do
        record "$tessera" bench train --model gpt2-124m --micro-batch-size 16 --seq-len 1024 --steps 20 --dtype bf16 \
          --attention-kernel $kernel --json
      done
      # Packed documents (the document mask runs on Tessera's kernels whatever the choice).
      record "$tessera" bench train --model gpt2-124m --micro-batch-size 16 --seq-len 1024 --steps 20 --dtype bf16 \
        --document-length 256 --json
      ;;
    tuning)
      section "tuning: cuBLASLt's first choice vs the fastest of ${TUNING_CANDIDATES:-16} candidates, GPT-2 124M bf16 B=16"
      for n in 1 "${TUNING_CANDIDATES:-16}"; do
        record "$tessera" bench train --model gpt2-124m --micro-batch-size 16 --seq-len 1024 --steps 20 --dtype bf16 \
          --matmul-tuning "$n"
      done
      ;;
    profile)
      section "profile: one bf16 step of GPT-2 124M, B=16, T=1024, time per kernel (ncu at the GPU's own clocks)"
      ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      bench=("$tessera" bench train --model gpt2-124m --micro-batch-size 16 --seq-len 1024 ${PROFILE_FLAGS:-})
      # The step's wall time without the profiler: what the kernels' sum is set against.
      timing=$(mktemp)
      record "${bench[@]}" --steps 20 --json > "$timing"
      step_ms=$(grep '^{' "$timing" | python3 -c 'import json, sys; print(json.load(sys.stdin)["ms_per_step"])')
      # One step is about 530 launches (98 of them AdamW): skipping the warm-up step, 1,200 launches hold
      # one whole step between two embedding forwards. Clocks and caches as in a run (ncu's defaults lock
      # the base clock and flush the caches between kernels), so the sum compares with the wall time.
      record "$ncu" --csv --clock-control none --cache-control none --metrics gpu__time_duration.sum \
        --launch-skip "${PROFILE_SKIP:-600}" --launch-count "${PROFILE_COUNT:-1200}" --log-file "$out/ncu-$stamp.csv" \
        "${bench[@]}" --steps 3 --warmup 1
      record python3 "$root/tools/kernel_times.py" "$out/ncu-$stamp.csv" --step-kernel encoder_forward \
        --step-ms "${step_ms:-0}"
      ;;
    ab)
      section "ab: this commit's tessera against the baseline's, GPT-2 124M, bf16, T=1024, alternating"
      if [[ ! -f $bundle/baseline-tessera.gz ]]; then
        say "no baseline in the bundle (make it with BASELINE=<rev> tools/gpu-bundle.sh): section skipped"
      else
        baseline=$bundle/baseline-tessera
        [[ -x $baseline ]] || { gunzip -c "$baseline.gz" > "$baseline" && chmod +x "$baseline"; }
        say "baseline: $(cat "$bundle/baseline-commit")"
        for b in ${AB_BATCHES:-16}; do
          for _ in 1 2 3; do
            for binary in "$baseline" "$tessera"; do
              record "$binary" bench train --model gpt2-124m --micro-batch-size "$b" --seq-len 1024 --steps 20 --json
            done
          done
          record python3 "$root/bench/torch_gpt2_cuda.py" --preset gpt2-124m --batch "$b" --dtype bf16 --steps 20 --json
        done
      fi
      ;;
    timeline)
      section "timeline: where a bf16 step of GPT-2 124M, B=16, T=1024, waits (Nsight Systems)"
      nsys=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys 2>/dev/null | head -1)
      if [[ -z $nsys ]]; then
        say "no nsys on this machine: section skipped"
      else
        trace=$(mktemp -d)
        record "$nsys" profile --trace cuda --force-overwrite true -o "$trace/step" "$tessera" bench train \
          --model gpt2-124m --micro-batch-size 16 --seq-len 1024 --steps 10 --warmup 3 ${PROFILE_FLAGS:-}
        record "$nsys" stats --report cuda_gpu_trace --format csv --output "$out/nsys-$stamp" "$trace/step.nsys-rep"
        record python3 "$root/tools/gpu_timeline.py" "$(ls "$out/nsys-$stamp"*.csv 2>/dev/null | head -1)" \
          --step-kernel encoder_forward
        rm -rf "$trace"
      fi
      ;;
    moe)
      section "moe: mixtral-mini beside llama-mini, B=32, T=256, bf16"
      for model in llama-mini mixtral-mini; do
        for steps in 10 60; do
          record "$tessera" bench train --model $model --micro-batch-size 32 --seq-len 256 --steps $steps --json
        done
      done
      ;;
    large)
      section "bench: GPT-2 1558M at B=16 (alone, and 8 micro-batches a step as llm.c's), T=1024, bf16"
      # llm.c's 1558M figure is of 1,048,576-token steps on 8 GPUs: 8 micro-batches of 16 per GPU a step.
      # Tessera runs both ways: deterministic, and --nondeterministic as PyTorch's attention is.
      for shape in "1 10" "8 4"; do
        read -r accum steps <<< "$shape"
        run=(bench train --model gpt2-1558m --micro-batch-size 16 --grad-accum "$accum" --seq-len 1024 --steps "$steps"
             --json)
        record "$tessera" "${run[@]}"
        record "$tessera" "${run[@]}" --nondeterministic
        record python3 "$root/bench/torch_gpt2_cuda.py" --preset gpt2-1558m --batch 16 --grad-accum "$accum" \
          --dtype bf16 --steps "$steps" --json
      done
      ;;
    llama)
      section "llama: Llama 3.2 1B beside PyTorch, T=2048, micro-batches ${LLAMA_BATCHES:-4}, bf16"
      # 1.24 B parameters: fp32 weights, gradients and moments take about 18.4 GiB on each side; Tessera
      # plans 33.5 GiB at B=4 (45.3 at 8); PyTorch holds the whole (B, T, 128,256) logits besides.
      for b in ${LLAMA_BATCHES:-4}; do
        record "$tessera" bench train --model llama3.2-1b --micro-batch-size "$b" --seq-len 2048 --steps 10 --json
        record python3 "$root/bench/torch_llama_cuda.py" --preset llama3.2-1b --batch "$b" --seq-len 2048 \
          --dtype bf16 --steps 10 --json
      done
      ;;
    trainer)
      section "trainer: tessera train of GPT-2 124M on the GPU (B=16, T=1024, bf16), tokens/s beside bench train's"
      # What a user's run gets, data loading and metrics included: synthetic tokens
      # over GPT-2's vocabulary, 30 steps, the median of steps 11 on.
      data=$(mktemp -d)
      python3 "$root/tools/synthetic_shard.py" "$data/train_000000.bin" --tokens 2000000 --vocab 50257
      record "$tessera" train --model gpt2-124m --train-data "$data/train_*.bin" --steps 30 --batch-size 16 \
        --seq-len 1024 --warmup 5 --quiet --device cuda --dtype bf16 ${TRAINER_FLAGS:-} --out-dir "$data/run" &&
        record python3 -c 'import json, statistics, sys
rates = [r["tokens_per_s"] for r in map(json.loads, open(sys.argv[1])) if "tokens_per_s" in r][10:]
print(f"tessera train: median {statistics.median(rates):,.0f} tokens/s over steps 11-{10 + len(rates)}")' \
          "$data/run/metrics.jsonl"
      record "$tessera" bench train --model gpt2-124m --micro-batch-size 16 --seq-len 1024 --steps 20 ${TRAINER_FLAGS:-}
      ;;
    multirank)
      section "multirank: dp2 (zero 0/1/2/3, 3 kept gathered), cp2 (ring, all-to-all), compressed dp2 on one GPU (MPI, staged through host) vs one rank, fp32"
      ompi=$bundle/openmpi
      [[ -d $ompi ]] || { mkdir -p "$ompi" && tar -C "$ompi" -xzf "$bundle/openmpi.tar.gz"; }
      # Debian's Open MPI and PMIx, relocated from / to $ompi.
      multiarch=$ompi/usr/lib/x86_64-linux-gnu
      export OPAL_PREFIX=$ompi/usr OPAL_EXEC_PREFIX=$ompi/usr OPAL_BINDIR=$ompi/usr/bin
      export OPAL_LIBDIR=$multiarch/openmpi/lib OPAL_PKGLIBDIR=$multiarch/openmpi/lib/openmpi3
      export OPAL_DATAROOTDIR=$ompi/usr/share OPAL_DATADIR=$ompi/usr/share OPAL_PKGDATADIR=$ompi/usr/share/openmpi
      export OPAL_SYSCONFDIR=$ompi/etc/openmpi PMIX_INSTALL_PREFIX=$multiarch/pmix2
      export PMIX_MCA_mca_base_component_path=$multiarch/pmix2/lib/pmix PMIX_MCA_pcompress_base_silence_warning=1
      export OMPI_MCA_mca_base_component_path=$multiarch/openmpi/lib/openmpi3
      export LD_LIBRARY_PATH=$multiarch/openmpi/lib:$multiarch/pmix2/lib:$LD_LIBRARY_PATH
      mpirun=("$ompi/usr/bin/orterun" --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH -x OMP_NUM_THREADS=4)
      data=$(mktemp -d)
      python3 "$root/tools/synthetic_shard.py" "$data/train_000000.bin" --tokens 1000000 --vocab 512
      run=(train --model gpt2-mini --vocab-size 512 --train-data "$data/train_*.bin" --steps 10 --batch-size 8
           --seq-len 256 --lr 1e-3 --warmup 2 --quiet --dtype fp32)
      record "$tessera" "${run[@]}" --device cuda --out-dir "$data/one"
      # Exact layouts and bf16 on the wire against one rank within fp32's (bf16's) rounding; PowerSGD,
      # which changes the trajectory by design, against the same compression on the CPU.
      for layout in "--dp 2 --zero 0:1e-4:one" "--dp 2 --zero 1:1e-4:one" "--dp 2 --zero 2:1e-4:one" \
                    "--dp 2 --zero 3:1e-4:one" "--dp 2 --zero 3 --no-reshard-after-forward:1e-4:one" \
                    "--cp 2 --dp 1:1e-4:one" "--cp 2 --dp 1 --cp-comm all-to-all:1e-4:one" \
                    "--dp 2 --grad-reduce-dtype bf16:1e-2:one" \
                    "--dp 2 --powersgd-rank 4:1e-3:cpu"; do
        IFS=: read -r flags tolerance reference <<< "$layout"
        name=$(echo "$flags" | tr -d ' -')
        if [[ $reference == cpu ]]; then
          record "${mpirun[@]}" -np 2 "$tessera" "${run[@]}" $flags --device cpu --out-dir "$data/$name-cpu" ||
            continue
          reference=$name-cpu
        fi
        record "${mpirun[@]}" -np 2 "$tessera" "${run[@]}" $flags --device cuda --out-dir "$data/$name" &&
          record python3 "$root/tools/compare_loss_curves.py" "$data/$reference/metrics.jsonl" \
            "$data/$name/metrics.jsonl" --tolerance "$tolerance"
      done
      ;;
    *) say "unknown section '$s' (env tests train bench ab attention tuning profile timeline moe large llama trainer multirank)"; status=1 ;;
  esac
done
if grep -q '^{"attention_kernel' "$results"; then  # bench train ran: its runs beside PyTorch's, as a table
  section "summary: every tessera bench train run beside PyTorch's of the same shape (tools/bench_summary.py)"
  table=$(python3 "$root/tools/bench_summary.py" "$results")
  say "$table"
fi
[[ -z $section_start ]] || say "(section took $((SECONDS - section_start)) s)"
say "gpu-check exit status: $status"
echo "results: $results"
exit $status

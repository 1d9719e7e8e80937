// `tessera plan memory`: the bytes each rank of a run holds at its peak, before the run, from the
// code's own arithmetic: each pipeline stage's parameter layout (nn/decoder_layout), ZeRO's shards
// (parallel/dp/buckets), the micro-batches a schedule keeps in flight (parallel/pp's simulator) and
// what one micro-batch's activations allocate (nn/activation_memory). One RankMemory per pipeline
// stage: the tp, cp, dp and ep ranks of a stage hold the same amounts (up to ZeRO's padding: the
// plan takes dp rank 0's, which owns the largest chunks; and, under expert parallelism without a
// capacity factor, the router's favour: the plan takes an even share). A GPU plan adds a reserve
// for what is none of Tessera's allocations (the CUDA context, libraries, NCCL).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/model_config.h"
#include "nn/stage_partition.h"
#include "parallel/parallel_dims.h"
#include "train/train_config.h"

namespace tessera {

struct RankMemory {
  int stage = 0;                // the pipeline rank
  DecoderStage blocks;          // its chunks (embedding, head)
  int64_t parameters = 0;       // elements of its layout: a tp rank's slices, an ep rank's experts
  int64_t master_weights = 0;   // fp32 weights (ZeRO-3: the shard)
  int64_t compute_copy = 0;     // the 16-bit copy of the weights (bf16, fp16; ZeRO-3: per gathered part)
  int64_t gradients = 0;        // fp32 (ZeRO 0/1: the whole buffer, live through backward; ZeRO 2/3: the shard)
  int64_t gradient_shard = 0;   // ZeRO-1: the reduced shard and the collectives' buffers
  int64_t optimizer = 0;        // AdamW's two moments, fp32 or bf16 (ZeRO 1-3: their shard)
  int64_t part_buffers = 0;     // ZeRO 2/3: a part's gradient buffer, reductions; ZeRO-3: two gathered parts, a 16-bit copy
  int64_t compression = 0;      // PowerSGD: the fp32 errors of the matrices it factors, the packed rounds
  int64_t async_checkpoint = 0; // --async-checkpoint's host buffers (a CPU run's memory; none on the GPU)
  int64_t pinned_host = 0;      // a GPU run's --async-checkpoint buffers: page-locked host memory, not the
                                // device's (not in total()), which every rank of a node takes from its RAM
  int64_t activations = 0;      // saved activations of one micro-batch (the rank's largest chunk's)
  int64_t scratch = 0;          // backward scratch of one micro-batch (each micro-batch in flight has its own)
  int64_t attention_workspace = 0;  // a layer's backward on cuDNN's attention (16-bit, on the GPU): dS of
                                    // every head when deterministic, else the fp32 dq accumulator
  int64_t matmul_workspace = 0;     // cuBLASLt's (16-bit, on the GPU), held from the first matmul on
  int micro_batches_in_flight = 1;
  int64_t deferred_weight_grads = 0;  // zero-bubble: the copies of each linear layer's output gradient and
                                      // input that one micro-batch's deferred weight gradients hold
                                      // (nn/deferred_weight_grads), from its input-gradient part to its weight part
  int micro_batches_deferred = 0;     // the most micro-batches whose weight gradients wait at once (the schedule's)
  int64_t logits = 0;           // the classifier's logits chunk (on the stage holding the head)
  int64_t tp_gathers = 0;       // sequence parallelism: a layer's backward holds up to three (B,T,C)
                                // all-gathered or partial tensors at once (one micro-batch computes)
  int64_t cp_exchange = 0;      // context parallelism: a layer's attention exchange (ring: the kv blocks
                                // and their gradient accumulators in fp32; all-to-all: its tensors
                                // regrouped by heads, and one of them in transit), in its backward
  int64_t pipeline_send = 0;    // a released micro-batch's input gradient, held until its send to the
                                // previous stage completes (every pipeline stage but the first)
  int64_t reserved = 0;         // a GPU rank's memory that is none of Tessera's allocations: the CUDA
                                // context, the libraries' handles, NCCL's buffers (an estimate; --reserve-gb)
  int64_t total() const;
};

struct MemoryPlan {
  ParallelDims dims;
  int zero_stage = 0;
  DType dtype = DType::bf16;
  DType moments = DType::f32;  // AdamW's (--optimizer-moments)
  int64_t micro_batch = 1, seq_len = 1;
  std::string recompute = "none";  // --recompute, with " (first N blocks)" under --recompute-layers
  int64_t device_bytes = 0;       // what each rank may use
  std::vector<RankMemory> ranks;  // one per pipeline stage
  const RankMemory& largest() const;
  bool fits() const { return largest().total() <= device_bytes; }
};

// The checkpoint whose shape a --resume run takes: the newest of --out-dir whose state.json reads
// (train also verifies its files' checksums; a plan needs only the shape). None without --resume or
// when the folder holds no checkpoint (the run starts afresh).
std::optional<std::filesystem::path> resumed_checkpoint_shape(const TrainConfig& config);

// What a GPU rank holds beside Tessera's allocations, unless --reserve-gb says otherwise: the CUDA
// context with cuBLAS's and cuDNN's handles (about 0.5-1 GiB on an H100) and NCCL's communicator
// buffers (hundreds of MiB each, more with NVLink SHARP). An estimate, not a measurement: nvidia-smi's
// figure for a run less its metrics' peak_mem_mb is the reserve of that machine.
inline constexpr int64_t kDefaultGpuReserveBytes = int64_t(2) << 30;
// kUnsetReserve: kDefaultGpuReserveBytes on the GPU, 0 on the CPU (whose plan is the allocator's own).
inline constexpr int64_t kUnsetReserve = -1;

// Throws one line naming the flag and the fix when the layout does not divide the model (the
// checks `tessera train` makes at start-up) or a flag is out of range. `compute`: the activations'
// and compute copy's dtype; `device`: where the run trains (fp32 runs on either); `reserve_bytes`:
// each rank's RankMemory::reserved.
MemoryPlan plan_memory(const TrainConfig& config, const ModelConfig& model, DType compute, Device device,
                       int64_t device_bytes, int64_t reserve_bytes = kUnsetReserve);

// The plan of the largest micro-batch of at most `most` sequences that divides a data-parallel
// rank's share of the batch and fits (config's own micro-batch size is not used); none when no
// size fits or the layout is not one the model allows.
std::optional<MemoryPlan> plan_largest_micro_batch(const TrainConfig& config, const ModelConfig& model, DType compute,
                                                   Device device, int64_t device_bytes, int64_t most,
                                                   int64_t reserve_bytes = kUnsetReserve);

// For a plan that does not fit: single changes of the flags that would make it fit, each planned
// again ("--micro-batch-size 8 (61.2 GiB)"); empty when none does.
std::vector<std::string> memory_plan_fixes(const TrainConfig& config, const ModelConfig& model, DType compute,
                                           Device device, int64_t device_bytes, int64_t reserve_bytes = kUnsetReserve);

}  // namespace tessera

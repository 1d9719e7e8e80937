// tessera bench train: times full training steps (forward, backward, grad-norm + clip, AdamW) of a
// model preset on random tokens, and reports tokens/s, MFU, peak memory and time per phase; with a
// document length, as packed documents under the document mask (--attention-mask document).
// MFU follows llm.c: 6·N + 6·L·C·T FLOPs per token, against the bf16 dense peak of the detected GPU
// (or --peak-tflops); training reports the same figures every step (metrics.jsonl: tokens_per_s
// global, tflops_per_rank and mfu per rank). N counts the parameters as llm.c does for GPT-2: every
// one a token's forward uses, the padded vocabulary's rows, norms, biases and GPT-2's position table
// included; a MoE model's router, shared experts, dense blocks and top-k routed experts only. An
// untied input embedding is a lookup, not a matmul, and is not counted (the head is: llm.c's note,
// and Megatron's and torchtitan's count); a tied table counts once. 6·L·C·T is the causal attention's
// score and value matmuls (C: the query heads' width), half PaLM's and torchtitan's 12·L·C·T, which
// count the masked half; under latent attention 3·L·(Cqk + Cv)·T, the scores over the q/k heads' width
// and the sums over the narrower values' (not their padding). No recomputation is counted (MFU, not hardware FLOPs utilisation).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "nn/fp8_scaling.h"
#include "nn/model_config.h"
#include "nn/moe_layer.h"
#include "nn/recompute.h"
#include "ops/attention.h"
#include "ops/matmul_tuning.h"

namespace tessera {

struct TrainBenchOptions {
  ModelConfig model;
  std::string model_name;
  int64_t micro_batch = 8, seq_len = 1024, grad_accum = 1;
  int64_t steps = 20, warmup = 3;
  Device device = Device::cpu;
  DType dtype = DType::f32;  // compute dtype (bf16 on the GPU: fp32 master weights and optimizer)
  double peak_tflops = 0;  // 0 = looked up from the GPU's name (none on CPU)
  AttentionKernel attention_kernel = AttentionKernel::automatic;  // GPU attention in bf16/fp16
  Fp8Options fp8;  // fp8 linear layers (the scales move on after every step, as in training)
  int64_t document_length = 0;  // > 0: windows packed with documents this long, attention within each
  int64_t matmul_tuning = 1;     // GPU matmul candidates timed per problem (ops/matmul_tuning.h)
  bool deterministic = true;     // GPU kernels give the same bits every run (ops/deterministic_kernels.h)
  DType moments = DType::f32;    // AdamW's moments: f32, or bf16 rounded stochastically
  RecomputePolicy recompute;     // activation recomputation, as train's --recompute(-layers)
  MoeOptions moe;                // the router's losses and capacity, as train's --moe-* flags
  uint64_t seed = 1337;
};

struct TrainBenchResult {
  double tokens_per_s = 0, ms_per_step = 0, ms_min = 0, ms_max = 0;  // median step, and the spread
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;          // medians per phase
  double flops_per_token = 0, peak_flops = 0, mfu = 0;               // mfu 0 when the peak is unknown
  size_t peak_memory_bytes = 0;
  float final_loss = 0;
  std::vector<MatmulTuningRecord> matmul_tuned;  // with matmul_tuning > 1 on the GPU
  std::string attention_used;  // 16-bit on the GPU: who ran attention ("cudnn" or "tessera"); else empty
};

// Dense bf16 peak FLOP/s of a GPU from its name (H100 SXM 989e12, ...); 0 when not known.
double gpu_peak_bf16_flops(const std::string& device_name);
// The peak MFU is taken against: `peak_tflops` when given (> 0), else the GPU's on `device`, else 0.
double peak_flops_for(double peak_tflops, Device device);
// N of the 6·N: the active parameters less an untied input embedding table (see above).
int64_t flops_parameters(const ModelConfig& model);
// Training FLOPs per token of `model` at sequence length `seq_len`: 6·N + 6·L·C·T.
double model_flops_per_token(const ModelConfig& model, int64_t seq_len);

// Throws naming the flag when a size is not positive, the sequence outruns the model's context, the
// document length is negative or the matmul tuning is out of range; run_train_bench checks first too.
void check_train_bench_options(const TrainBenchOptions& options);
TrainBenchResult run_train_bench(const TrainBenchOptions& options);

// One JSON object with the options, the device and the result.
nlohmann::json train_bench_json(const TrainBenchOptions& options, const TrainBenchResult& result);

}  // namespace tessera

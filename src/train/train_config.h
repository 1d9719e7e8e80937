// Everything a training run is configured by. Each field is a `tessera train` flag and a key of the
// TOML config file with the same name (apps/tessera binds them); validate() checks the values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/fp8_scaling.h"

namespace tessera {

// The most CPU threads --threads accepts.
inline constexpr int kMaxThreads = 1024;
// The largest gradient bucket (MiB; 1 TiB) and communication timeout (seconds; about 115 days) accepted.
inline constexpr double kMaxBucketMb = 1 << 20;
inline constexpr int kMaxPowerSgdRank = 1024;  // beyond it factors are no smaller than the matrices
inline constexpr double kMaxCommTimeout = 1e7;

struct TrainConfig {
  // model
  std::string model = "gpt2-124m";  // preset name; empty on --resume: the checkpoint's shape
  std::string init_from;            // Hugging Face folder (GPT-2, Llama, Mixtral)
  // overrides of the preset's shape (0 = the preset's value)
  int64_t layers = 0, heads = 0, channels = 0, vocab_size = 0, context = 0;
  // activation recomputation
  std::string recompute = "none";  // none, selective or full
  int64_t recompute_layers = 0;    // the first N blocks; 0 = all
  // mixture of experts
  float moe_aux_coef = 0.01f;         // load-balancing loss coefficient
  float moe_z_coef = 0.0f;            // router z-loss coefficient
  float moe_capacity_factor = 0.0f;   // 0 = dropless
  float moe_bias_rate = 1e-3f;        // sigmoid routers' bias balancing step (DeepSeek-V3's gamma)
  // data
  std::string train_data;  // glob of llm.c token shards
  std::string val_data;
  std::string choices;     // multiple-choice JSON lines (HellaSwag) scored at every validation
  std::string tokenizer;   // tokenizer.json or a folder with encoder.json + vocab.bpe
  std::string data_order = "shuffled";
  // batch
  int64_t batch_size = 8;        // global batch, in sequences
  int64_t micro_batch_size = 0;  // sequences per forward pass; 0 = batch_size
  int64_t seq_len = 1024;
  // optimisation
  int64_t steps = 100;
  float lr = 6e-4f;
  float min_lr = 6e-5f;
  std::string lr_schedule = "cosine";
  int64_t warmup = 0;
  float decay_fraction = 0.2f;
  float weight_decay = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  std::string optimizer_moments = "fp32";  // AdamW's moments: fp32, or bf16 rounded stochastically
  float grad_clip = 1.0f;
  uint64_t seed = 1337;
  // hardware
  std::string device = "auto";   // auto (the GPU when usable, else the CPU), cuda or cpu
  std::string dtype = "auto";    // compute precision: auto (bf16 on the GPU, fp32 on the CPU), fp32, bf16, fp16
  std::string loss_scaling = "auto";  // auto (dynamic for fp16, off otherwise), dynamic or off
  std::string attention_kernel = "auto";  // GPU attention in bf16/fp16: auto, tessera or cudnn
  int64_t matmul_tuning = 1;  // GPU matmul algorithms timed per problem (ops/matmul_tuning.h)
  bool deterministic = true;  // GPU kernels give the same bits every run (ops/deterministic_kernels.h)
  std::string attention_mask = "causal";     // causal (the whole window), or document (within each document)
  double peak_tflops = 0;        // each rank's peak for the metrics' MFU: 0 = the GPU's bf16 dense peak (none on a CPU)
  std::string fp8 = "off";            // fp8 linear layers: off, hybrid (E4M3 forward, E5M2 gradients) or e4m3
  int64_t fp8_amax_history = 16;      // steps of amax history behind each fp8 scale
  int fp8_margin = 0;                 // fp8 scales' headroom, in powers of two
  Fp8Options fp8_options() const { return {parse_fp8_recipe(fp8), fp8_amax_history, fp8_margin}; }
  double loss_scale = 65536.0;        // the dynamic loss scale's initial value
  int64_t loss_scale_window = 1000;   // clean steps before the loss scale doubles
  // parallelism
  int dp = 0, tp = 1, pp = 1, cp = 1, ep = 1;  // dp 0 = whatever the world leaves
  std::string cp_comm = "ring";                 // how cp ranks share attention: ring, or all-to-all (of heads)
  int zero = 0;                                 // ZeRO stage: 0, 1, 2 or 3
  bool sequence_parallel = true;                // with tp > 1: norms and residuals hold 1/tp of the positions
  int virtual_stages = 1;                       // model chunks per pipeline rank (interleaved)
  std::string pipeline_schedule = "1f1b";       // gpipe, 1f1b, interleaved or zero-bubble
  std::vector<int64_t> pipeline_boundaries;     // first block of each chunk after the first; empty = balanced
  double bucket_mb = 25.0;                      // gradient bucket size
  bool overlap = true;                          // reduce buckets during backward
  // ZeRO-3: a block's gathered weights are freed after its forward and gathered again for its
  // backward (FSDP's reshard_after_forward); false keeps them from one to the other
  bool reshard_after_forward = true;
  std::string grad_reduce_dtype = "fp32";       // data-parallel gradients travel in fp32 or bf16 (compressed)
  int powersgd_rank = 0;                        // > 0: data-parallel gradients travel as rank-r factors
  double comm_timeout = 300.0;                  // seconds before a collective is declared hung
  std::string device_comm = "auto";             // GPU tensors between ranks: auto, nccl or host (through MPI)
  // bookkeeping
  int64_t eval_every = 0;  // 0 = only at the end when --val-data is given
  int64_t eval_batches = 8;
  bool eval_only = false;  // validate the (resumed) weights under this layout and stop: no step, nothing written
  int64_t checkpoint_every = 0;  // 0 = only at the end
  int64_t keep_checkpoints = 3;  // newest checkpoints kept in out_dir (0 = all)
  int64_t keep_every = 0;        // also keep every checkpoint whose step is a multiple (0 = none)
  bool async_checkpoint = false;  // write checkpoints on a background thread
  // auto (sharded under ZeRO-3), whole (rank 0 writes model.safetensors) or sharded (every rank its
  // slices of the weights, beside its moments)
  std::string checkpoint_weights = "auto";
  // bad steps
  int64_t max_bad_steps = 5;     // skipped steps in a row (non-finite or spikes) that stop the run
  double spike_zscore = 0.0;     // skip steps whose loss or grad norm is this many std above the window (0 = off)
  int64_t sample_every = 0;      // print a generated sample every N steps (needs a tokenizer)
  std::string out_dir = "runs/default";
  std::string metrics_file;      // JSON lines; default <out_dir>/metrics.jsonl
  std::string tensorboard_dir;   // also the metrics as TensorBoard scalars there (empty: none)
  int threads = 0;               // 0 = all cores
  bool resume = false;
  bool quiet = false;            // no live progress line

  // Whether checkpoints hold the weights as every rank's slices rather than whole (--checkpoint-weights).
  bool sharded_checkpoint_weights() const {
    return checkpoint_weights == "sharded" || (checkpoint_weights == "auto" && zero == 3);
  }
  // Sequences per forward pass on one rank: --micro-batch-size, or by default a data-parallel
  // rank's whole share of the global batch.
  int64_t micro_batch(int dp = 1) const { return micro_batch_size > 0 ? micro_batch_size : batch_size / dp; }
  // Throws tessera::Error naming the flag for zero/negative sizes, an indivisible batch, etc.
  void validate() const;
};

}  // namespace tessera

// Training-step benchmark: the loop of Trainer::accumulate_gradients + the update, without data
// files, timed per phase. On a GPU each phase ends with a stream synchronisation, so the phase
// times are real; the step time includes them (a few microseconds of launch gap per phase).
#include "train/train_bench.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "core/allocator.h"
#include "core/build_info.h"
#include "core/cuda/device.h"
#include "core/rng.h"
#include "nn/decoder.h"
#include "ops/deterministic_kernels.h"
#include "ops/matmul.h"
#include "optim/adamw_optimizer.h"
#include "optim/rounding_keys.h"
#include "optim/grad_clip.h"
#include "train/device_choice.h"
#include "train/loss_scaler.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kTokenBatches = 64;  // distinct micro-batches of random tokens a bench draws at most

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n == 0 ? 0.0 : n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Milliseconds since `start`, once the device has finished what was queued.
double elapsed_ms(Clock::time_point start, Device device) {
  if (device == Device::cuda) cuda_synchronize();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// (B,T) i32: windows of documents `length` tokens long, each token's document start.
Tensor packed_document_starts(int64_t B, int64_t T, int64_t length) {
  Tensor starts = Tensor::zeros({B, T}, DType::i32);
  for (int64_t i = 0; i < B * T; ++i) starts.data<int32_t>()[i] = int32_t(i % T - i % T % length);
  return starts;
}

// "none", "selective", "full", with " (first N blocks)" under --recompute-layers.
std::string recompute_text(const RecomputePolicy& p) {
  const char* mode = p.mode == Recompute::none ? "none" : p.mode == Recompute::selective ? "selective" : "full";
  return p.mode != Recompute::none && p.layers > 0 ? mode + (" (first " + std::to_string(p.layers) + " blocks)") : mode;
}

void fill_random_tokens(Tensor& tokens, int64_t vocab, Rng& rng) {
  int32_t* ids = tokens.data<int32_t>();
  for (int64_t i = 0; i < tokens.numel(); ++i) ids[i] = int32_t(rng.below(uint64_t(vocab)));
}

}  // namespace

double gpu_peak_bf16_flops(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200") || has("GH200")) return 989e12;
  if (has("H100")) return has("PCIe") ? 756e12 : has("NVL") ? 835e12 : 989e12;
  if (has("H800")) return 989e12;
  if (has("A100")) return 312e12;
  if (has("L40S")) return 362e12;
  return 0;
}

double peak_flops_for(double peak_tflops, Device device) {
  if (peak_tflops > 0) return peak_tflops * 1e12;
  return device == Device::cuda ? gpu_peak_bf16_flops(cuda_device_name()) : 0.0;
}

int64_t flops_parameters(const ModelConfig& model) {
  const int64_t lookup = model.tied_embeddings ? 0 : model.padded_vocab_size() * model.channels;
  return model.active_parameters() - lookup;
}

double model_flops_per_token(const ModelConfig& model, int64_t seq_len) {
  // Scores q·k over the q/k heads' width and the values' sum over theirs (the same but under latent
  // attention, whose value heads are narrower and whose padding is not the model's work).
  const double widths = double(model.attention_width()) + double(model.value_width());
  return 6.0 * double(flops_parameters(model)) + 3.0 * double(model.num_layers) * widths * double(seq_len);
}

void check_train_bench_options(const TrainBenchOptions& o) {
  check_matmul_tuning(o.matmul_tuning);
  TS_CHECK(o.micro_batch > 0 && o.seq_len > 0 && o.grad_accum > 0 && o.steps > 0 && o.warmup >= 0,
           "bench train: --micro-batch-size, --seq-len, --grad-accum and --steps must be positive");
  TS_CHECK(o.warmup <= std::numeric_limits<int64_t>::max() - o.steps, "bench train: --warmup ", o.warmup,
           " plus --steps ", o.steps, " is past a 64-bit count of steps; time fewer");
  TS_CHECK(o.seq_len <= o.model.max_seq_len, "bench train: --seq-len ", o.seq_len,
           " exceeds the model's context of ", o.model.max_seq_len);
  TS_CHECK(o.recompute.layers >= 0 && o.recompute.layers <= o.model.num_layers, "bench train: --recompute-layers ",
           o.recompute.layers, " must be between 0 (every block) and the model's ", o.model.num_layers, " blocks");
  TS_CHECK(o.document_length >= 0, "bench train: --document-length ", o.document_length,
           " must be 0 (one causal window) or a document's length in tokens");
}

TrainBenchResult run_train_bench(const TrainBenchOptions& o) {
  check_train_bench_options(o);
  set_attention_kernel(o.attention_kernel);
  set_matmul_tuning(int(o.matmul_tuning));  // checked above
  set_deterministic_kernels(o.deterministic);
  Decoder model(o.model);
  model.init_weights(o.seed);
  model.to(o.device, o.dtype);
  model.set_fp8(o.fp8);
  model.set_recompute(o.recompute);
  model.set_moe_options(o.moe);
  AdamWConfig adamw;
  adamw.moments = o.moments;
  adamw.seed = o.seed;
  const std::vector<OptimSegment> segments = full_segments(model.layout());
  AdamW optimizer(o.moments == DType::f32 ? segments : with_rounding_keys(segments, model.layout(), model.layout()),
                  adamw, o.device);
  // The micro-batches' tokens, drawn before any timing (as bench/torch_gpt2_cuda.py does): the host's
  // random draws are no part of a training step. At most kTokenBatches distinct ones, taken in turn:
  // a bench of very many micro-batches would otherwise fill the host's memory before its first step.
  const int64_t runs = o.warmup + o.steps;
  const int64_t pool = runs >= kTokenBatches || o.grad_accum >= kTokenBatches
                           ? kTokenBatches
                           : std::min(kTokenBatches, runs * o.grad_accum);
  std::vector<Tensor> inputs, targets;
  Rng rng(o.seed, stream_id("bench-tokens"));
  for (int64_t i = 0; i < pool; ++i) {
    inputs.push_back(Tensor::zeros({o.micro_batch, o.seq_len}, DType::i32));
    targets.push_back(Tensor::zeros({o.micro_batch, o.seq_len}, DType::i32));
    fill_random_tokens(inputs.back(), o.model.vocab_size, rng);
    fill_random_tokens(targets.back(), o.model.vocab_size, rng);
  }
  const Tensor doc_starts = o.document_length > 0 ? packed_document_starts(o.micro_batch, o.seq_len, o.document_length)
                                                  : Tensor();
  // fp16 scales the loss as training does, so its gradients do not underflow (a skipped step still counts).
  LossScaler scaler(LossScalerConfig{o.dtype == DType::f16});

  std::vector<double> step_ms, forward_ms, backward_ms, optimizer_ms;
  TrainBenchResult r;
  int64_t batch = 0;  // the next micro-batch's tokens in the pool
  for (int64_t step = 0; step < runs; ++step) {
    if (step == o.warmup) {  // peak memory of the timed steps only (the warm-up sized every buffer)
      device_allocator_reset_peak();
      host_allocator_reset_peak();
    }
    double forward = 0, backward = 0;
    const auto step_start = Clock::now();
    model.zero_grad();
    float loss = 0;
    for (int64_t micro = 0; micro < o.grad_accum; ++micro, batch = (batch + 1) % pool) {
      auto t = Clock::now();
      const float dloss = scaler.scale() / float(o.micro_batch * o.seq_len * o.grad_accum);
      // Reads the losses back: synchronised.
      loss += model.forward(inputs[batch], targets[batch], dloss, doc_starts) / float(o.grad_accum);
      forward += elapsed_ms(t, o.device);
      t = Clock::now();
      model.backward();
      backward += elapsed_ms(t, o.device);
    }
    const auto t = Clock::now();
    if (Fp8Scaling* fp8 = model.fp8()) fp8->update(fp8->take_amaxes());  // one process: its own amaxes
    const float scale = scaler.scale(), norm = global_grad_norm(model.grads());
    if (scaler.update(norm) == LossScaler::Verdict::step) {
      optimizer.step(model.params(), model.grads(), 6e-4f, clip_scale(norm / scale, 1.0f) / scale,
                     model.compute_copy());
    }
    const double update = elapsed_ms(t, o.device);
    const double total = elapsed_ms(step_start, o.device);
    r.final_loss = loss;
    if (step < o.warmup) continue;
    step_ms.push_back(total);
    forward_ms.push_back(forward);
    backward_ms.push_back(backward);
    optimizer_ms.push_back(update);
  }
  r.ms_per_step = median(step_ms);
  r.ms_min = *std::min_element(step_ms.begin(), step_ms.end());
  r.ms_max = *std::max_element(step_ms.begin(), step_ms.end());
  r.forward_ms = median(forward_ms);
  r.backward_ms = median(backward_ms);
  r.optimizer_ms = median(optimizer_ms);
  r.tokens_per_s = double(o.micro_batch * o.seq_len * o.grad_accum) / (r.ms_per_step / 1e3);
  r.flops_per_token = model_flops_per_token(o.model, o.seq_len);
  r.peak_flops = peak_flops_for(o.peak_tflops, o.device);
  if (o.device == Device::cuda && o.dtype != DType::f32)
    r.attention_used = attention_kernel_name(attention_kernel_for(o.micro_batch, o.model.num_heads, o.seq_len,
                                                                  o.model.head_size(), o.document_length > 0));
  r.mfu = r.peak_flops > 0 ? r.tokens_per_s * r.flops_per_token / r.peak_flops : 0.0;
  r.peak_memory_bytes = allocator_stats(o.device).peak_bytes;
  r.matmul_tuned = matmul_tuning_records();
  return r;
}

nlohmann::json train_bench_json(const TrainBenchOptions& o, const TrainBenchResult& r) {
  const ModelConfig& c = o.model;
  nlohmann::json j = {
      {"impl", "tessera"},
      {"commit", build_commit()},
      {"device", device_name(o.device)},
      {"device_name", o.device == Device::cuda ? cuda_device_name() : "cpu"},
      {"dtype", compute_dtype_flag(o.dtype)},
      {"attention_kernel", std::string(attention_kernel_name(o.attention_kernel))},
      {"document_length", o.document_length},
      {"fp8", fp8_recipe_name(o.fp8.recipe)},
      {"model", o.model_name},
      {"layers", c.num_layers},
      {"heads", c.num_heads},
      {"channels", c.channels},
      {"vocab", c.vocab_size},
      {"padded_vocab", c.padded_vocab_size()},
      {"seq_len", o.seq_len},
      {"batch", o.micro_batch},
      {"grad_accum", o.grad_accum},
      {"steps", o.steps},
      {"warmup", o.warmup},
      {"num_params", c.num_parameters()},
      {"flops_params", flops_parameters(c)},
      {"tokens_per_s", r.tokens_per_s},
      {"ms_per_step", r.ms_per_step},
      {"ms_per_step_min", r.ms_min},
      {"ms_per_step_max", r.ms_max},
      {"forward_ms", r.forward_ms},
      {"backward_ms", r.backward_ms},
      {"optimizer_ms", r.optimizer_ms},
      {"peak_mem_gib", double(r.peak_memory_bytes) / double(1 << 30)},
      {"flops_per_token", r.flops_per_token},
      {"final_loss", r.final_loss}};
  j["peak_tflops"] = r.peak_flops > 0 ? nlohmann::json(r.peak_flops / 1e12) : nlohmann::json(nullptr);
  j["mfu"] = r.peak_flops > 0 ? nlohmann::json(r.mfu) : nlohmann::json(nullptr);
  j["matmul_tuning"] = o.matmul_tuning;
  j["deterministic"] = o.deterministic;
  j["optimizer_moments"] = optimizer_moments_flag(o.moments);
  j["recompute"] = recompute_text(o.recompute);
  j["attention_used"] = r.attention_used.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.attention_used);
  if (!r.matmul_tuned.empty()) {
    nlohmann::json tuned = nlohmann::json::array();
    for (const MatmulTuningRecord& t : r.matmul_tuned)
      tuned.push_back({{"problem", t.problem}, {"timed", t.timed}, {"chosen", t.chosen}, {"first_us", t.first_us},
                       {"best_us", t.best_us}});
    j["matmul_tuned"] = tuned;
  }
  return j;
}

}  // namespace tessera

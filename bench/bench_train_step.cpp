// Tessera's side of the CPU training-step benchmark: one step = zero_grad + forward + fused
// cross-entropy (+ the MoE aux loss, coefficient 0.01, dropless) + backward + global grad-norm + AdamW,
// exactly what bench/torch_train_step.py times for PyTorch. Random tokens; --warmup untimed steps,
// then --steps timed ones; per-phase times and the host allocator's peak bytes. --json prints the
// full model config (model_config_to_json) so the PyTorch side can build the same model from it.
// Usage: build/bench/bench_train_step [--model PRESET] [--layers 4 --channels 256 --heads 4 --vocab 8192]
//        [--seq-len 256 --batch 8 --threads 2 --steps 10 --warmup 3 --recompute none|selective|full]
//        [--classifier-chunk-rows 0 --json]
// Without --model the model is the GPT-2 of the shape flags (their defaults above); with it, the
// preset's, each shape flag given replacing the preset's value.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/model_config_json.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/rng.h"
#include "nn/decoder.h"
#include "nn/model_presets.h"
#include "optim/adamw_optimizer.h"
#include "optim/grad_clip.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

struct BenchArgs {
  std::string model;  // a preset name; empty = GPT-2 of the shape flags
  int64_t layers = 4, channels = 256, heads = 4, seq_len = 256, batch = 8, vocab = 8192, steps = 10, warmup = 3;
  int threads = 2;
  std::string recompute = "none";
  int64_t classifier_chunk_rows = 0;  // 0 = the decoder's default (1 GiB of logits at a time)
  bool json = false;
};

// Sums over the timed steps (seconds), and byte counts of the host allocator.
struct StepStats {
  double forward_s = 0, backward_s = 0, optimizer_s = 0, total_s = 0;
  size_t static_bytes = 0;           // live before the first forward: params, grads, AdamW moments, tokens
  size_t peak_bytes = 0;             // highest live bytes during a timed step
  size_t activation_peak_bytes = 0;  // highest live bytes during a timed forward + backward, minus static
  size_t activation_live_bytes = 0;  // kept between steps by the decoder (saved activations, scratch, logits chunk)
};

ModelConfig bench_config(const BenchArgs& a, const CLI::App& app) {
  if (a.model.empty()) return ModelConfig{a.layers, a.heads, a.channels, a.vocab, a.seq_len};
  ModelConfig c = model_preset(a.model);
  if (app.count("--layers")) c.num_layers = a.layers;
  if (app.count("--channels")) c.channels = a.channels;
  if (app.count("--heads")) c.num_heads = a.heads;
  if (app.count("--vocab")) c.vocab_size = a.vocab;
  TS_CHECK(a.seq_len <= c.max_seq_len, "--seq-len ", a.seq_len, " exceeds ", a.model, "'s context of ",
           c.max_seq_len);
  c.validate();
  return c;
}

StepStats run_steps(Decoder& model, const BenchArgs& a) {
  AdamW optimizer(full_segments(model.layout()), AdamWConfig{0.9f, 0.95f, 1e-8f, 0.1f});
  const int64_t B = a.batch, T = a.seq_len, V = model.config().vocab_size;
  Tensor tokens = Tensor::zeros({B, T}, DType::i32), targets = Tensor::zeros({B, T}, DType::i32);
  Rng rng(0);
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data<int32_t>()[i] = int32_t(rng.below(uint64_t(V)));
    targets.data<int32_t>()[i] = int32_t(rng.below(uint64_t(V)));
  }
  StepStats s;
  s.static_bytes = host_allocator_stats().current_bytes;
  for (int64_t step = 0; step < a.warmup + a.steps; ++step) {
    const size_t start_bytes = host_allocator_stats().current_bytes;
    host_allocator_reset_peak();
    auto t0 = Clock::now();
    model.zero_grad();
    model.forward(tokens, targets, 1.0f / float(B * T));
    auto t1 = Clock::now();
    model.backward();
    auto t2 = Clock::now();
    const size_t forward_backward_peak = host_allocator_stats().peak_bytes;
    float norm = global_grad_norm(model.grads());
    optimizer.step(model.params(), model.grads(), 1e-4f, clip_scale(norm, 1.0f));
    auto t3 = Clock::now();
    if (step < a.warmup) continue;
    s.forward_s += std::chrono::duration<double>(t1 - t0).count();
    s.backward_s += std::chrono::duration<double>(t2 - t1).count();
    s.optimizer_s += std::chrono::duration<double>(t3 - t2).count();
    s.total_s += std::chrono::duration<double>(t3 - t0).count();
    s.peak_bytes = std::max(s.peak_bytes, host_allocator_stats().peak_bytes);
    s.activation_peak_bytes = std::max(s.activation_peak_bytes, forward_backward_peak - s.static_bytes);
    s.activation_live_bytes = start_bytes - s.static_bytes;
  }
  return s;
}

void print_result(const BenchArgs& a, const Decoder& model, const StepStats& s) {
  const double per_step = 1e3 / double(a.steps);
  const double tokens_per_s = double(a.batch * a.seq_len * a.steps) / s.total_s;
  const ModelConfig& c = model.config();
  const size_t logits_bytes = size_t(model.logits().numel()) * sizeof(float);  // the classifier's chunk
  if (a.json) {
    nlohmann::json j = {{"impl", "tessera"}, {"threads", a.threads}, {"tokens_per_s", tokens_per_s},
                        {"ms_per_step", s.total_s * per_step}, {"forward_ms", s.forward_s * per_step},
                        {"backward_ms", s.backward_s * per_step}, {"optimizer_ms", s.optimizer_s * per_step},
                        {"model", a.model.empty() ? "gpt2 (shape flags)" : a.model}, {"recompute", a.recompute},
                        {"classifier_chunk_rows", a.classifier_chunk_rows},
                        {"layers", c.num_layers}, {"channels", c.channels}, {"heads", c.num_heads},
                        {"seq_len", a.seq_len}, {"batch", a.batch}, {"vocab", c.vocab_size},
                        {"steps", a.steps}, {"warmup", a.warmup}, {"parameters", c.num_parameters()},
                        {"active_parameters", c.active_parameters()}, {"static_bytes", s.static_bytes},
                        {"peak_bytes", s.peak_bytes}, {"activation_peak_bytes", s.activation_peak_bytes},
                        {"activation_live_bytes", s.activation_live_bytes},
                        {"classifier_logits_bytes", logits_bytes}, {"model_config", model_config_to_json(c)}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("tessera %s (%s, recompute %s): %.1f tokens/s, %.1f ms/step (forward %.1f, backward %.1f, "
              "grad-norm + AdamW %.1f ms)\n",
              a.model.empty() ? "gpt2" : a.model.c_str(), model_family(c).c_str(), a.recompute.c_str(),
              tokens_per_s, s.total_s * per_step, s.forward_s * per_step, s.backward_s * per_step,
              s.optimizer_s * per_step);
  std::printf("memory: %.1f MiB before the first forward, peak %.1f MiB; forward + backward peak %.1f MiB above "
              "it (%.1f MiB kept between steps, of which the classifier's logits chunk %.1f MiB)\n",
              double(s.static_bytes) / 1048576, double(s.peak_bytes) / 1048576,
              double(s.activation_peak_bytes) / 1048576, double(s.activation_live_bytes) / 1048576,
              double(logits_bytes) / 1048576);
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs a;
  CLI::App app{"Time fp32 training steps of a Tessera decoder on CPU"};
  app.add_option("--model", a.model, "a model preset (default: GPT-2 of the shape flags)");
  app.add_option("--layers", a.layers);
  app.add_option("--channels", a.channels);
  app.add_option("--heads", a.heads);
  app.add_option("--seq-len", a.seq_len);
  app.add_option("--batch", a.batch);
  app.add_option("--vocab", a.vocab);
  app.add_option("--threads", a.threads);
  app.add_option("--steps", a.steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", a.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--recompute", a.recompute, "activation recomputation: none, selective or full");
  app.add_option("--classifier-chunk-rows", a.classifier_chunk_rows,
                 "rows of logits the fused classifier holds at once (0: the decoder's default, 1 GiB)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", a.json, "print one JSON line");
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(a.threads);
  try {
    Decoder model(bench_config(a, app));
    model.init_weights(0);
    model.set_recompute(RecomputePolicy{parse_recompute(a.recompute), 0});
    model.set_moe_options(MoeOptions{0.01f, 0.0f, 0.0f});  // aux loss 0.01, no z-loss, dropless
    model.set_classifier_chunk_rows(a.classifier_chunk_rows);
    const StepStats stats = run_steps(model, a);
    print_result(a, model, stats);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train_step: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

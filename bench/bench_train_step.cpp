// Tessera's side of the CPU training-step benchmark: one step = zero_grad + forward + fused
// cross-entropy + backward + global grad-norm + AdamW, exactly what bench/torch_train_step.py times
// for PyTorch. Random tokens; --warmup untimed steps, then --steps timed ones; per-phase times.
// Usage: build/bench/bench_train_step [--layers 4 --channels 256 --heads 4 --seq-len 256 --batch 8
//        --vocab 8192 --threads 2 --steps 10 --warmup 3 --json]
#include <omp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "nn/decoder.h"
#include "optim/adamw_optimizer.h"
#include "optim/grad_clip.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int main(int argc, char** argv) {
  int64_t layers = 4, channels = 256, heads = 4, seq_len = 256, batch = 8, vocab = 8192, steps = 10, warmup = 3;
  int threads = 2;
  bool json = false;
  CLI::App app{"Time fp32 GPT-2 training steps in Tessera on CPU"};
  app.add_option("--layers", layers);
  app.add_option("--channels", channels);
  app.add_option("--heads", heads);
  app.add_option("--seq-len", seq_len);
  app.add_option("--batch", batch);
  app.add_option("--vocab", vocab);
  app.add_option("--threads", threads);
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_flag("--json", json, "print one JSON line");
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);

  Decoder model(ModelConfig{layers, heads, channels, vocab, seq_len});
  model.init_weights(0);
  AdamW optimizer(full_segments(model.layout()), AdamWConfig{0.9f, 0.95f, 1e-8f, 0.1f});
  Tensor tokens = Tensor::zeros({batch, seq_len}, DType::i32), targets = Tensor::zeros({batch, seq_len}, DType::i32);
  Rng rng(0);
  for (int64_t i = 0; i < batch * seq_len; ++i) {
    tokens.data<int32_t>()[i] = int32_t(rng.below(uint64_t(vocab)));
    targets.data<int32_t>()[i] = int32_t(rng.below(uint64_t(vocab)));
  }

  double forward_s = 0, backward_s = 0, optimizer_s = 0, total_s = 0;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    auto t0 = Clock::now();
    model.zero_grad();
    model.forward(tokens, targets, 1.0f / float(batch * seq_len));
    auto t1 = Clock::now();
    model.backward();
    auto t2 = Clock::now();
    float norm = global_grad_norm(model.grads());
    optimizer.step(model.params(), model.grads(), 1e-4f, clip_scale(norm, 1.0f));
    if (step < warmup) continue;
    forward_s += std::chrono::duration<double>(t1 - t0).count();
    backward_s += std::chrono::duration<double>(t2 - t1).count();
    optimizer_s += seconds_since(t2);
    total_s += seconds_since(t0);
  }
  const double ms = 1e3 * total_s / double(steps);
  const double tokens_per_s = double(batch * seq_len * steps) / total_s;
  if (json) {
    nlohmann::json j = {{"impl", "tessera"}, {"threads", threads}, {"tokens_per_s", tokens_per_s}, {"ms_per_step", ms},
                        {"forward_ms", 1e3 * forward_s / double(steps)}, {"backward_ms", 1e3 * backward_s / double(steps)},
                        {"optimizer_ms", 1e3 * optimizer_s / double(steps)}, {"layers", layers}, {"channels", channels},
                        {"heads", heads}, {"seq_len", seq_len}, {"batch", batch}, {"vocab", vocab},
                        {"parameters", model.config().num_parameters()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("tessera: %.1f tokens/s, %.1f ms/step (forward %.1f, backward %.1f, grad-norm + AdamW %.1f ms)\n",
                tokens_per_s, ms, 1e3 * forward_s / double(steps), 1e3 * backward_s / double(steps),
                1e3 * optimizer_s / double(steps));
  }
  return 0;
}

// Shared set-up for training tests: a shard of random tokens and a tiny run configuration.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "checkpoint/train_checkpoint.h"
#include "nn/decoder_layout.h"
#include "core/rng.h"
#include "data/loss_mask.h"
#include "data/token_shard.h"
#include "train/train_config.h"

namespace tessera::testing {

// A version-2 shard of n tokens drawn from [0, vocab).
inline std::filesystem::path write_random_shard(const std::filesystem::path& dir, int64_t n, int64_t vocab,
                                                uint64_t seed) {
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  Rng rng(seed);
  for (uint32_t& t : tokens) t = uint32_t(rng.below(uint64_t(vocab)));
  std::filesystem::path path = dir / "train_000000.bin";
  write_token_shard(path, tokens, 2);
  return path;
}

// A loss mask for `shard` of n tokens (data/loss_mask.h) that keeps each token with a probability
// that varies from window to window of 16 tokens (0 to 1), so micro-batches and ranks see unequal
// numbers of targets.
inline void write_random_loss_mask(const std::filesystem::path& shard, int64_t n, uint64_t seed) {
  std::vector<uint8_t> trained(static_cast<size_t>(n));
  Rng rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    const double keep = double((i / 16) % 5) / 4.0;
    trained[size_t(i)] = rng.uniform() < keep;
  }
  write_loss_mask(loss_mask_path(shard), trained);
}

// gpt2-tiny on random tokens, small enough to train in milliseconds.
inline TrainConfig tiny_run(const std::filesystem::path& dir) {
  TrainConfig c;
  c.model = "gpt2-tiny";
  c.train_data = write_random_shard(dir, 4096, 256, 17).string();
  c.batch_size = 4;
  c.seq_len = 16;
  c.steps = 3;
  c.lr = 1e-2f;
  c.min_lr = 1e-3f;
  c.warmup = 1;
  c.out_dir = (dir / "run").string();
  c.quiet = true;
  c.threads = 1;
  c.device = "cpu";  // the CPU reference, also on a machine with a GPU
  return c;
}

// Every weight of a checkpoint (whole in model.safetensors, or sliced over its shard files), by name
// in the model's order, as fp32 values.
inline std::vector<std::pair<std::string, std::vector<float>>> checkpoint_tensors(
    const std::filesystem::path& checkpoint) {
  const ModelConfig config = read_checkpoint_model_config(checkpoint);
  const ParameterLayout layout = decoder_layout(config);
  const CheckpointModel opened = open_checkpoint_model(checkpoint, config, layout);
  std::vector<std::pair<std::string, std::vector<float>>> all;
  for (const ParamSpec& spec : layout.specs()) {
    std::vector<float> values(size_t(spec.numel()));
    opened.weights({spec.offset, spec.offset + spec.numel()}, values.data());
    all.emplace_back(spec.name, std::move(values));
  }
  return all;
}

// A gtest parameter name for a model preset: "llama-tiny" -> "llama_tiny".
inline std::string preset_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

inline std::vector<nlohmann::json> read_metrics(const std::filesystem::path& file) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The losses a run wrote to its metrics.jsonl, step by step.
inline std::vector<double> losses_of(const TrainConfig& c) {
  std::vector<double> losses;
  for (const nlohmann::json& line : read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl"))
    if (line.contains("loss")) losses.push_back(line["loss"].get<double>());
  return losses;
}

// A shard whose next token follows from the current one (a walk of stride 3 over 97 tokens), so that
// the loss has somewhere to fall.
inline std::string write_learnable_shard(const std::filesystem::path& dir) {
  std::vector<uint32_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(3 * i % 97);
  const std::filesystem::path path = dir / "walk.bin";
  write_token_shard(path, tokens, 2);
  return path.string();
}

}  // namespace tessera::testing

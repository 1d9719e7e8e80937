// Training loop: gradient accumulation does not change the result, resume continues exactly,
// metrics carry the documented fields, NaN stops the run keeping the last checkpoint.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "checkpoint/train_checkpoint.h"
#include "data/data_mixture.h"
#include "nn/decoder_layout.h"
#include "nn/model_presets.h"
#include "support/test_support.h"
#include "train/resume_testing.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

// Weights agree to float rounding: relative `rel`, or 1e-3 of one step's update size (lr) where
// Adam's normalisation amplifies rounding in gradients that are sums of cancelling terms. (The
// gradients themselves are compared tightly in tests/nn: Decoder.MicroBatchesSumToTheFullBatch.)
// The attention key biases are skipped: their exact gradient is zero (softmax ignores a constant
// added to every score), so what Adam makes of their rounding noise is noise too (it moved one by
// 1.06e-3 of a step when the loss-mask change reordered the loss's sums).
void expect_close(const std::vector<float>& a, const std::vector<float>& b, float rel, float lr,
                  const ParameterLayout& layout, int64_t channels) {
  ASSERT_EQ(a.size(), b.size());
  std::vector<bool> key_bias(a.size(), false);
  for (const ParamSpec& spec : layout.specs())
    if (spec.name.ends_with("attn.c_attn.bias"))
      std::fill_n(key_bias.begin() + spec.offset + channels, channels, true);
  for (size_t i = 0; i < a.size(); ++i) {
    if (key_bias[i]) continue;
    ASSERT_NEAR(a[i], b[i], rel * std::fabs(b[i]) + 1e-3f * lr) << "element " << i;
  }
}

}  // namespace

TEST(Trainer, MicroBatchSizeDoesNotChangeTheResult) {
  auto dir = testing::scratch_dir();
  std::vector<std::vector<float>> params;
  std::vector<std::vector<nlohmann::json>> metrics;
  for (int64_t micro : {4, 2, 1}) {
    TrainConfig c = testing::tiny_run(dir);
    c.micro_batch_size = micro;
    c.out_dir = (dir / ("micro" + std::to_string(micro))).string();
    Trainer trainer(c);
    trainer.run();
    params.push_back(testing::final_params(trainer));
    metrics.push_back(testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl"));
  }
  for (size_t run = 1; run < params.size(); ++run) {
    const ModelConfig gpt2_tiny = model_preset("gpt2-tiny");
    expect_close(params[run], params[0], 1e-5f, testing::tiny_run(dir).lr, decoder_layout(gpt2_tiny), gpt2_tiny.channels);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_NEAR(metrics[run][s]["loss"].get<double>(), metrics[0][s]["loss"].get<double>(), 1e-5);
      EXPECT_NEAR(metrics[run][s]["grad_norm"].get<double>(), metrics[0][s]["grad_norm"].get<double>(), 1e-5);
    }
  }
}

TEST(Trainer, MetricsLinesHaveTheDocumentedFields) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.val_data = c.train_data;
  c.eval_every = 2;
  c.steps = 4;
  Trainer(c).run();
  auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 6u);  // 4 train lines, eval after steps 2 and 4
  EXPECT_EQ(lines[0]["step"], 1);
  for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "tflops_per_rank"})
    EXPECT_TRUE(lines[0].contains(key)) << key;
  EXPECT_FALSE(lines[0].contains("mfu"));  // no peak known on a CPU without --peak-tflops
  EXPECT_NEAR(lines[0]["lr"].get<double>(), 1e-2, 1e-9);  // warmup 1: step 1 at the peak
  EXPECT_TRUE(lines[2].contains("val_loss"));
  EXPECT_EQ(lines[2]["step"], 2);
  EXPECT_NEAR(lines[0]["loss"].get<double>(), std::log(256.0), 0.1);
  std::string svg = testing::read_text(std::filesystem::path(c.out_dir) / "loss.svg");
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("<circle cx"), std::string::npos);  // the validation points
}

// Model FLOPs per second per rank, llm.c's 6·N + 6·L·C·T per token (N: the parameters a token uses),
// and MFU against --peak-tflops.
TEST(Trainer, MetricsCarryTflopsAndMfu) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.peak_tflops = 0.5;
  Trainer trainer(c);
  trainer.run();
  const auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  const ModelConfig& m = trainer.model().config();
  const double per_token = 6.0 * double(m.active_parameters()) + 6.0 * double(m.num_layers * m.channels * c.seq_len);
  const double tflops = lines[0]["tokens_per_s"].get<double>() * per_token / 1e12;
  EXPECT_NEAR(lines[0]["tflops_per_rank"].get<double>(), tflops, 1e-9 * tflops);
  EXPECT_NEAR(lines[0]["mfu"].get<double>(), tflops / 0.5, 1e-9 * tflops);
  c.peak_tflops = -1;
  EXPECT_TRUE(testing::contains(testing::error_of([&] { Trainer bad(c); }), "--peak-tflops must be a number >= 0"));
}

class EveryFamily : public ::testing::TestWithParam<std::string> {};

// Every family: the checkpoint holds all a run needs (for DeepSeek-style routers the balancing
// biases too), and MoE runs report their routing in the metrics.
TEST_P(EveryFamily, ResumeContinuesExactly) {
  auto dir = testing::scratch_dir();
  TrainConfig run = testing::tiny_run(dir);
  run.model = GetParam();
  run.steps = 4;
  const testing::StraightAndResumed r = testing::train_straight_and_resumed(run, dir, 2);
  ASSERT_FALSE(r.checkpoint.empty());
  EXPECT_EQ(r.resumed_params, r.straight_params);
  auto lines = testing::read_metrics(std::filesystem::path(r.resumed.out_dir) / "metrics.jsonl");
  auto ref_lines = testing::read_metrics(std::filesystem::path(r.straight.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(lines[s]["loss"], ref_lines[s]["loss"]) << "step " << s + 1;
  if (GetParam().starts_with("gpt2") || GetParam().starts_with("llama")) return;
  for (const char* key : {"aux_loss", "dropped_tokens", "expert_load_max_over_mean", "expert_load_max"})
    EXPECT_TRUE(lines[0].contains(key)) << key;
  EXPECT_FALSE(lines[0].contains("dropped_fraction"));  // dropless
  EXPECT_GT(lines[0]["aux_loss"].get<double>(), 0.5);  // about top_k when balanced
  EXPECT_EQ(lines[0]["expert_load_max_over_mean"].size(), GetParam() == "mixtral-tiny" ? 2u : 1u);
  for (size_t s = 0; s < 4; ++s)
    for (const char* key : {"aux_loss", "expert_load_max_over_mean"})
      EXPECT_EQ(lines[s][key], ref_lines[s][key]) << key << " at step " << s + 1;
}

// A capacity of half the even share, ceil(0.5 * 64 * 2 / 4) = 16 rows per expert of mixtral-tiny's 4
// (each micro-batch 4 sequences x 16 tokens, top-2), keeps at most half of the assignments; the
// fraction is of all 4 x 16 x 2 x 2 layers = 256 of them. The most chosen expert takes at most
// every token, E / top_k = 2 times an even share.
TEST(Trainer, MoeLinesReportTheDroppedFractionAndTheBusiestExpert) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.model = "mixtral-tiny";
  c.moe_capacity_factor = 0.5f;
  Trainer(c).run();
  const auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  for (const nlohmann::json& line : lines) {
    const double dropped = line["dropped_tokens"], fraction = line["dropped_fraction"];
    EXPECT_EQ(fraction, dropped / 256);
    EXPECT_GE(fraction, 0.5);
    double busiest = 0;
    for (double layer : line["expert_load_max_over_mean"]) busiest = std::max(busiest, layer);
    EXPECT_EQ(line["expert_load_max"].get<double>(), busiest);
    EXPECT_GE(busiest, 1.0);
    EXPECT_LE(busiest, 2.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Trainer, EveryFamily,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "mixtral-tiny", "deepseek-moe-tiny"),
                         testing::preset_test_name);

// A weighted mixture of a random source and a constant one: the run learns the constant source (a
// run on the random one alone does not), and it resumes exactly, with no loader state saved.
TEST(Trainer, DataMixtureTrainsOnEachSourceAndResumesExactly) {
  auto dir = testing::scratch_dir();
  std::filesystem::create_directories(dir / "constant");
  write_token_shard(dir / "constant" / "train_000000.bin", std::vector<uint32_t>(2048, 7), 2);
  const std::string constant = (dir / "constant" / "train_000000.bin").string();
  TrainConfig mixed = testing::tiny_run(dir);
  const std::string random = mixed.train_data;
  mixed.train_data = "0.5:" + random + ",0.5:" + constant;
  mixed.val_data = constant;
  mixed.eval_every = 4;
  mixed.steps = 4;
  const testing::StraightAndResumed r = testing::train_straight_and_resumed(mixed, dir, 2);
  ASSERT_FALSE(r.checkpoint.empty());
  EXPECT_EQ(r.resumed_params, r.straight_params);

  TrainConfig alone = r.straight;
  alone.train_data = random;
  alone.out_dir = (dir / "alone").string();
  Trainer(alone).run();
  const double mixed_val = testing::read_metrics(std::filesystem::path(r.straight.out_dir) / "metrics.jsonl")
                               .back()["val_loss"].get<double>();
  const double alone_val = testing::read_metrics(std::filesystem::path(alone.out_dir) / "metrics.jsonl")
                               .back()["val_loss"].get<double>();
  EXPECT_LT(mixed_val, alone_val - 1.0) << "the mixture never reached the constant source";
}

TEST(Trainer, NonFiniteLossStopsAndKeepsTheLastCheckpoint) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.steps = 30;
  c.lr = 1e30f;
  c.min_lr = 0;
  c.lr_schedule = "constant";
  c.warmup = 0;
  c.grad_clip = 0;
  c.checkpoint_every = 1;
  try {
    Trainer(c).run();
    FAIL() << "expected the run to stop";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("step "), std::string::npos) << message;
    EXPECT_NE(message.find("not finite"), std::string::npos) << message;
  }
  auto checkpoint = find_checkpoint(c.out_dir);
  ASSERT_TRUE(checkpoint);
  Decoder model(read_checkpoint_model_config(*checkpoint));
  CheckpointState state = load_checkpoint(*checkpoint, model);
  EXPECT_GE(state.step, 1);
  bool finite = true;
  for (int64_t i = 0; i < model.params().numel(); ++i) finite &= std::isfinite(model.params().f32()[i]);
  EXPECT_TRUE(finite);
}

TEST(Trainer, RejectsBadConfiguration) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  auto expect_error = [](TrainConfig config, const std::string& needle) {
    try {
      Trainer(config).run();
      FAIL() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  TrainConfig bad = c;
  bad.micro_batch_size = 3;
  expect_error(bad, "--micro-batch-size");
  bad = c;
  bad.seq_len = 65;  // gpt2-tiny context is 64
  expect_error(bad, "--seq-len");
  bad = c;
  bad.batch_size = 0;
  expect_error(bad, "--batch-size");
  bad = c;
  bad.steps = -1;
  expect_error(bad, "--steps");
  bad = c;
  bad.train_data = (dir / "missing_*.bin").string();
  expect_error(bad, "--train-data");
  bad = c;
  bad.lr_schedule = "step";
  expect_error(bad, "--lr-schedule");
  bad = c;
  bad.model = "gpt2-huge";
  expect_error(bad, "--model");
  bad = c;
  bad.train_data = testing::write_random_shard(dir, 4096, 300, 1).string();  // ids beyond vocab 256
  expect_error(bad, "vocab");
}

// A checkpoint's step and data position are counts: a fractional, negative or huge value in
// state.json would resume at some other point of the run, so loading refuses it.
TEST(Trainer, CheckpointWithABadStepIsRefused) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.steps = 1;
  const std::filesystem::path checkpoint = Trainer(c).run().last_checkpoint;
  const std::filesystem::path state_file = checkpoint / "state.json";
  const nlohmann::json good = nlohmann::json::parse(testing::read_text(state_file));
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"step", -3}, {"step", 1.5}, {"step", "2"}, {"next_batch", -1}, {"next_batch", 18446744073709551615ull}}) {
    nlohmann::json bad = good;
    bad[key] = value;
    testing::write_text(state_file, bad.dump());
    const std::string message = testing::error_of([&] {
      Decoder model(read_checkpoint_model_config(checkpoint));
      load_checkpoint(checkpoint, model);
    });
    EXPECT_NE(message.find("'" + key + "' must be a non-negative integer"), std::string::npos) << message;
  }
}

// Loss masks: a step's loss is the mean over the global batch's targets alone (checked against
// the initial model's token losses on batch 0) and its gradient that mean's, and any micro-batch split gives the same losses and
// gradient norms although its micro-batches hold unequal numbers of targets.
TEST(Trainer, LossMasksTrainOnTheTargetsAlone) {
  auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  testing::write_random_loss_mask(c.train_data, 4096, 5);
  std::vector<std::vector<nlohmann::json>> metrics;
  for (int64_t micro : {4, 1}) {
    c.micro_batch_size = micro;
    c.out_dir = (dir / ("micro" + std::to_string(micro))).string();
    Trainer trainer(c);
    // The untrained model's losses on batch 0: the mean over its targets, and over every token.
    const DataMixture data(c.train_data, 256, c.batch_size, c.seq_len, parse_data_order(c.data_order), c.seed, "data");
    Tensor inputs = Tensor::zeros({c.batch_size, c.seq_len}, DType::i32);
    Tensor targets = Tensor::zeros({c.batch_size, c.seq_len}, DType::i32);
    data.fill(0, 0, c.batch_size, inputs.data<int32_t>(), targets.data<int32_t>());
    const int64_t trained = data.count_trained(0, 0, c.batch_size);
    ASSERT_GT(trained, 0);
    ASSERT_LT(trained, c.batch_size * c.seq_len);
    const int64_t positions = c.batch_size * c.seq_len;
    const double over_targets = double(trainer.model().forward(inputs, targets)) * double(positions) / double(trained);
    // ... and the gradient of that mean, whose norm the first step reports.
    Decoder& model = trainer.model();
    model.zero_grad();
    model.set_target_loss_weight(float(positions) / float(trained));
    model.forward(inputs, targets, 1.0f / float(positions));
    model.backward();
    double squares = 0;
    for (int64_t i = 0; i < model.grads().numel(); ++i) squares += double(model.grads().f32()[i]) * model.grads().f32()[i];
    trainer.run();
    metrics.push_back(testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl"));
    EXPECT_NEAR(metrics.back()[0]["loss"].get<double>(), over_targets, 1e-5 * over_targets);
    EXPECT_NEAR(metrics.back()[0]["grad_norm"].get<double>(), std::sqrt(squares), 1e-5 * std::sqrt(squares));
    // Random tokens: the untrained mean is about log(256) over targets; over every position (the
    // masked ones counting 0) it would be far lower.
    EXPECT_NEAR(over_targets, std::log(256.0), 0.1);
  }
  ASSERT_EQ(metrics[1].size(), 3u);
  for (size_t s = 0; s < 3; ++s)
    for (const char* key : {"loss", "grad_norm"}) {
      const double want = metrics[0][s][key];
      EXPECT_NEAR(metrics[1][s][key].get<double>(), want, 1e-5 * want) << key << " at step " << s + 1;
    }
}

}  // namespace tessera

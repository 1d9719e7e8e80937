// `tessera plan memory` against what training really allocates: tiny GPT-2, Llama and Mixtral runs
// on the CPU (fp32), each under several recomputation modes, micro-batches, sequence lengths and
// ZeRO stages. The weights', gradients' and moments' bytes must equal the plan's exactly; the host
// allocator's peak over a training step must be within kTolerance of the plan's total plus the
// trainer's host token buffers (host memory on a GPU, so not in a plan of device memory).
#include <gtest/gtest.h>

#include "core/allocator.h"
#include "support/test_support.h"
#include "train/memory_plan.h"
#include "train/model_setup.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

// ZeRO-3's buffers are planned from the largest parts (0.3% above what gpt2-tiny holds); the rest
// agrees to a few dozen bytes.
constexpr double kTolerance = 0.005;

struct Case {
  std::string model, recompute;
  int64_t micro_batch, seq_len;
  int zero = 0;
  int powersgd_rank = 0;
};

std::string case_name(const Case& c) {
  return c.model + " recompute " + c.recompute + " B " + std::to_string(c.micro_batch) + " T " +
         std::to_string(c.seq_len) + " zero " + std::to_string(c.zero) + " powersgd " + std::to_string(c.powersgd_rank);
}

TrainConfig run_config(const Case& k, const std::filesystem::path& dir) {
  TrainConfig c = testing::tiny_run(dir);
  c.model = k.model;
  c.recompute = k.recompute;
  c.batch_size = 2 * k.micro_batch;  // two micro-batches: gradients accumulate
  c.micro_batch_size = k.micro_batch;
  c.seq_len = k.seq_len;
  c.zero = k.zero;
  c.powersgd_rank = k.powersgd_rank;
  c.steps = 2;
  return c;
}

void expect_plan_matches_training(const Case& k) {
  SCOPED_TRACE(case_name(k));
  const std::filesystem::path dir = testing::scratch_dir();
  const TrainConfig config = run_config(k, dir);
  const ModelConfig model = resolve_model_config(config, nullptr, std::nullopt);
  const MemoryPlan plan = plan_memory(config, model, DType::f32, int64_t(1) << 40);
  ASSERT_EQ(plan.ranks.size(), 1u);
  const RankMemory& planned = plan.ranks[0];

  const size_t before = host_allocator_stats().current_bytes;
  Trainer trainer(config);
  // The states, exactly: the parameters (or their ZeRO-3 shard, which the moments are laid out like)
  // and the gradients (or their ZeRO 2/3 shard), and AdamW's two moments.
  const int64_t state = trainer.optimizer().state_size() * 4;
  EXPECT_EQ(planned.optimizer, 2 * state);
  EXPECT_EQ(planned.compute_copy, 0);
  EXPECT_EQ(planned.master_weights, k.zero == 3 ? state : int64_t(trainer.model().params().bytes()));
  EXPECT_EQ(planned.gradients, k.zero >= 2 ? state : int64_t(trainer.model().grads().bytes()));
  // The peak over a step: the second step's hook runs after its backward, the first step's update done.
  host_allocator_reset_peak();
  size_t peak = 0;
  trainer.set_fault_hook([&](int64_t step, float&) {
    if (step == 2) peak = host_allocator_stats().peak_bytes - before;
  });
  trainer.run();
  ASSERT_GT(peak, 0u);
  const int64_t host_tokens = 2 * k.micro_batch * k.seq_len * int64_t(sizeof(int32_t));  // inputs and targets
  EXPECT_NEAR(double(peak) / double(planned.total() + host_tokens), 1.0, kTolerance)
      << "measured " << peak << " bytes, planned " << planned.total() << " (activations " << planned.activations
      << ", scratch " << planned.scratch << ", logits " << planned.logits << ")";
}

TEST(MemoryPlan, Gpt2TinyMatchesTheAllocatorPeak) {
  for (const char* recompute : {"none", "selective", "full"}) {
    expect_plan_matches_training({"gpt2-tiny", recompute, 4, 32});
    expect_plan_matches_training({"gpt2-tiny", recompute, 8, 64});
  }
}

TEST(MemoryPlan, LlamaTinyMatchesTheAllocatorPeak) {
  for (const char* recompute : {"none", "selective", "full"}) expect_plan_matches_training({"llama-tiny", recompute, 8, 64});
}

TEST(MemoryPlan, MixtralTinyMatchesTheAllocatorPeak) {
  for (const char* recompute : {"none", "selective", "full"})
    expect_plan_matches_training({"mixtral-tiny", recompute, 8, 64});
}

TEST(MemoryPlan, ZeroStagesMatchTheAllocatorPeak) {
  for (int zero : {1, 2, 3}) expect_plan_matches_training({"gpt2-tiny", "none", 8, 64, zero});
}

TEST(MemoryPlan, PowerSgdMatchesTheAllocatorPeak) {
  for (int zero : {0, 1}) expect_plan_matches_training({"gpt2-tiny", "none", 8, 64, zero, 2});
  expect_plan_matches_training({"llama-tiny", "none", 8, 64, 0, 1});
}

}  // namespace
}  // namespace tessera

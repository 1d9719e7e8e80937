// Pipeline stage boundaries (nn/stage_partition): block costs follow the model (6 per active
// parameter plus attention; a MoE block counts top_k experts), the balanced split covers every block
// in order with at least one per chunk and its most expensive chunk is the cheapest any split gets
// (against every split of a small model), the head's weight moves blocks off the last chunk, and
// explicit boundaries and impossible splits are refused with the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "core/error.h"
#include "nn/decoder_layout.h"
#include "nn/model_presets.h"
#include "nn/stage_partition.h"
#include "support/test_support.h"

namespace tessera {
namespace {

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

TEST(StagePartition, BlockCostsFollowTheActiveParameters) {
  const ModelConfig gpt2 = model_preset("gpt2-124m");
  const std::vector<double> costs = block_costs(gpt2, 1024);
  ASSERT_EQ(costs.size(), 12u);
  const double per_block = double(gpt2.num_parameters() - gpt2.padded_vocab_size() * 768 - 1024 * 768 - 2 * 768) / 12;
  EXPECT_DOUBLE_EQ(costs[0], 6 * per_block + 6.0 * 768 * 1024);
  EXPECT_DOUBLE_EQ(head_cost(gpt2), 6.0 * 50304 * 768);
  // A Mixtral block runs top_k of its experts: its cost drops by the idle experts' weights.
  ModelConfig moe = model_preset("mixtral-tiny");
  const double with_experts = block_costs(moe, 64)[0];
  moe.moe.top_k = moe.moe.num_experts;
  EXPECT_DOUBLE_EQ(block_costs(moe, 64)[0] - with_experts,
                   6.0 * double(moe.moe.num_experts - 2) * 3 * double(moe.moe.expert_hidden * moe.channels));
}

// Every split of L blocks into k non-empty runs, by brute force.
void every_split(int64_t L, int k, StageBoundaries& b, const std::function<void(const StageBoundaries&)>& visit) {
  if (int(b.size()) == k) {
    b.push_back(L);
    visit(b);
    b.pop_back();
    return;
  }
  for (int64_t first = b.back() + 1; first <= L - (k - int(b.size())); ++first) {
    b.push_back(first);
    every_split(L, k, b, visit);
    b.pop_back();
  }
}

TEST(StagePartition, BalancedSplitIsTheBestSplit) {
  for (const char* preset : {"gpt2-mini", "llama-mini", "mixtral-mini", "deepseek-moe-tiny"})
    for (int chunks : {1, 2, 3, 4}) {
      SCOPED_TRACE(std::string(preset) + ", " + std::to_string(chunks) + " chunks");
      ModelConfig c = model_preset(preset);
      c.num_layers = std::max<int64_t>(c.num_layers, 6);
      const StageBoundaries b = balanced_boundaries(c, 256, chunks);
      ASSERT_EQ(b.size(), size_t(chunks) + 1);
      EXPECT_EQ(b.front(), 0);
      EXPECT_EQ(b.back(), c.num_layers);
      for (size_t k = 0; k + 1 < b.size(); ++k) EXPECT_LT(b[k], b[k + 1]) << "chunk " << k << " is empty";
      double best = std::numeric_limits<double>::infinity();
      StageBoundaries start{0};
      every_split(c.num_layers, chunks, start,
                  [&](const StageBoundaries& s) { best = std::min(best, max_of(chunk_costs(c, 256, s))); });
      EXPECT_DOUBLE_EQ(max_of(chunk_costs(c, 256, b)), best);
    }
}

TEST(StagePartition, TheHeadTakesBlocksOffTheLastChunk) {
  // GPT-2 124M: the classifier (6·50304·768 per token) weighs about five blocks.
  const StageBoundaries b = balanced_boundaries(model_preset("gpt2-124m"), 1024, 4);
  EXPECT_LT(b[4] - b[3], b[1] - b[0]) << "last chunk blocks " << b[4] - b[3] << ", first " << b[1] - b[0];
}

TEST(StagePartition, ImpossibleAndExplicitSplitsAreCheckedWithTheNumbers) {
  const ModelConfig c = model_preset("gpt2-mini");  // 4 blocks
  std::string message = testing::error_of([&] { balanced_boundaries(c, 64, 5); });
  EXPECT_NE(message.find("5 chunks but the model has 4 blocks"), std::string::npos) << message;
  EXPECT_EQ(explicit_boundaries({1, 3}, 4, 3), (StageBoundaries{0, 1, 3, 4}));
  message = testing::error_of([] { explicit_boundaries({2}, 4, 3); });
  EXPECT_NE(message.find("gives 1 boundaries, but 3 chunks"), std::string::npos) << message;
  message = testing::error_of([] { explicit_boundaries({2, 2}, 4, 3); });
  EXPECT_NE(message.find("strictly increasing"), std::string::npos) << message;
  message = testing::error_of([] { explicit_boundaries({2, 4}, 4, 3); });
  EXPECT_NE(message.find("below the model's 4 blocks"), std::string::npos) << message;
}

}  // namespace
}  // namespace tessera

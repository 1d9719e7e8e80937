// A MoE step's routing figures from hand-made counts: 4 tokens, top-2 of 4 experts, two MoE layers.
// Layer 0: the router chose {4, 3, 1, 0}; a capacity of ceil(1.0 * 8 / 4) = 2 rows kept {2, 2, 1, 0}.
// Layer 1: {2, 2, 2, 2}, all kept.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/metrics_log.h"

namespace tessera {
namespace {

const std::vector<double> kRouted{4, 3, 1, 0, 2, 2, 2, 2};
const std::vector<double> kKept{2, 2, 1, 0, 2, 2, 2, 2};

TEST(MoeLoadMetrics, DropsAndTheMostChosenExpertOverAnEvenShare) {
  nlohmann::json line;
  add_moe_load_metrics(line, kRouted, kKept, 4, /*capacity=*/true, /*ep_ranks=*/1);
  EXPECT_EQ(line["dropped_tokens"], 3.0);          // 2 + 1 of layer 0
  EXPECT_EQ(line["dropped_fraction"], 3.0 / 16);   // of 2 layers x 4 tokens x top_k 2
  EXPECT_EQ(line["expert_load_max_over_mean"], nlohmann::json::array({2.0, 1.0}));  // 4 / (8 / 4), 2 / 2
  EXPECT_EQ(line["expert_load_max"], 2.0);
  EXPECT_FALSE(line.contains("ep_load_max_over_mean"));
}

TEST(MoeLoadMetrics, DroplessRunsHaveNoFractionAndEpRanksTheirKeptRows) {
  nlohmann::json line;
  add_moe_load_metrics(line, kKept, kKept, 4, /*capacity=*/false, /*ep_ranks=*/2);
  EXPECT_EQ(line["dropped_tokens"], 0.0);
  EXPECT_FALSE(line.contains("dropped_fraction"));
  EXPECT_EQ(line["expert_load_max"], 2.0 * 4 / 5);  // layer 0 kept {2, 2, 1, 0}
  // ep rank 0 holds experts 0-1: layer 0's rows {4, 1} over their mean 2.5, layer 1's {4, 4}
  EXPECT_EQ(line["ep_load_max_over_mean"], nlohmann::json::array({4.0 * 2 / 5, 1.0}));
}

TEST(MoeLoadMetrics, RefusesCountsOfAnotherShape) {
  nlohmann::json line;
  EXPECT_THROW(add_moe_load_metrics(line, kRouted, {2, 2}, 4, false, 1), Error);
  EXPECT_THROW(add_moe_load_metrics(line, {1, 2, 3}, {1, 2, 3}, 4, false, 1), Error);
}

}  // namespace
}  // namespace tessera

// Sampling one token from logits: greedy takes the largest; with a temperature the draws follow
// softmax(logits / T) restricted to the top k, renormalised; top-p keeps the fewest most likely
// tokens whose probability reaches p; ids at or above the vocabulary size are never drawn; bad
// settings name their flag.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "support/test_support.h"
#include "train/generate.h"

namespace tessera {
namespace {

// Draw frequencies of `draws` samples.
std::map<int32_t, double> frequencies(const std::vector<float>& logits, int64_t vocab, const SamplingOptions& options,
                                      int draws) {
  Rng rng(11);
  std::map<int32_t, double> counts;
  for (int i = 0; i < draws; ++i) counts[sample_token(logits.data(), vocab, options, rng)] += 1.0 / draws;
  return counts;
}

const std::vector<float> kLogits = {1.0f, 3.0f, 0.5f, 2.0f, -1.0f, 2.5f};  // ranks: 1, 5, 3, 0, 2, 4

TEST(Sampling, GreedyTakesTheLargestLogit) {
  SamplingOptions greedy;
  greedy.temperature = 0.0f;
  Rng rng(1);
  EXPECT_EQ(sample_token(kLogits.data(), 6, greedy, rng), 1);
  EXPECT_EQ(sample_token(kLogits.data(), 1, greedy, rng), 0);  // only id 0 is in the vocabulary
}

TEST(Sampling, DrawsFollowTheSoftmaxOfTheTopK) {
  SamplingOptions options;
  options.temperature = 0.7f;
  options.top_k = 3;  // ids 1, 5, 3
  const std::map<int32_t, double> seen = frequencies(kLogits, 6, options, 40000);
  double total = 0;
  for (int32_t id : {1, 5, 3}) total += std::exp(kLogits[size_t(id)] / 0.7);
  EXPECT_EQ(seen.size(), 3u);
  for (int32_t id : {1, 5, 3}) {
    const double want = std::exp(kLogits[size_t(id)] / 0.7) / total;
    EXPECT_NEAR(seen.count(id) ? seen.at(id) : 0.0, want, 0.01) << "id " << id;
  }
}

TEST(Sampling, TopPKeepsTheNucleus) {
  SamplingOptions options;
  options.top_k = 0;
  // Probabilities at T = 1: id 1 0.464, id 5 0.281, id 3 0.171, id 0 0.063, ...
  double total = 0;
  for (float l : kLogits) total += std::exp(double(l));
  const double p1 = std::exp(3.0) / total, p5 = std::exp(2.5) / total;
  options.top_p = float(p1 + p5 - 0.01);  // reached once id 5 joins id 1
  std::map<int32_t, double> seen = frequencies(kLogits, 6, options, 40000);
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_NEAR(seen[1], p1 / (p1 + p5), 0.01);
  options.top_p = 0.05f;  // less than the most likely token: it alone
  seen = frequencies(kLogits, 6, options, 1000);
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen.begin()->first, 1);
  options.top_p = 1.0f;
  EXPECT_EQ(frequencies(kLogits, 6, options, 40000).size(), 6u);
}

TEST(Sampling, NeverDrawsBeyondTheVocabulary) {
  SamplingOptions options;
  options.top_k = 0;
  const std::map<int32_t, double> seen = frequencies(kLogits, 3, options, 5000);  // ids 0-2 only
  for (const auto& [id, share] : seen) EXPECT_LT(id, 3);
}

TEST(Sampling, BadSettingsNameTheirFlag) {
  SamplingOptions bad;
  bad.top_p = 0.0f;
  EXPECT_TRUE(testing::contains(testing::error_of([&] { bad.validate(); }), "--top-p must be in (0, 1]"));
  bad.top_p = 1.5f;
  EXPECT_TRUE(testing::contains(testing::error_of([&] { bad.validate(); }), "--top-p"));
  bad = SamplingOptions{};
  bad.temperature = -1.0f;
  EXPECT_TRUE(testing::contains(testing::error_of([&] { bad.validate(); }), "--temperature"));
  bad = SamplingOptions{};
  bad.top_k = -2;
  EXPECT_TRUE(testing::contains(testing::error_of([&] { bad.validate(); }), "--top-k"));
}

}  // namespace
}  // namespace tessera

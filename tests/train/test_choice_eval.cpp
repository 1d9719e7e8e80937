// Multiple-choice scoring against full forward passes: each choice's loss is the sum, over its
// tokens, of -log softmax of the logits a forward over that one row gives (in double, over the real
// vocabulary), whatever the batching and however much of the context the window cuts; accuracy
// counts the lowest sum and the lowest mean, ties to the earlier choice.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "nn/decoder.h"
#include "support/test_support.h"
#include "train/choice_eval.h"
#include "train/random_decoder.h"

namespace tessera {
namespace {

Decoder random_model(const std::string& preset) { return testing::random_decoder(preset, 16, 9); }

// Examples of random tokens: contexts of 2 to 11 tokens, 2 to 4 choices of 1 to 5 tokens.
std::vector<ChoiceExample> random_examples(int count) {
  std::vector<ChoiceExample> examples(static_cast<size_t>(count));
  Rng rng(3);
  for (int e = 0; e < count; ++e) {
    ChoiceExample& x = examples[size_t(e)];
    x.line = e + 1;
    x.context.resize(2 + rng.below(10));
    for (int32_t& t : x.context) t = int32_t(rng.below(50));
    x.choices.resize(2 + rng.below(3));
    for (auto& choice : x.choices) {
      choice.resize(1 + rng.below(5));
      for (int32_t& t : choice) t = int32_t(rng.below(50));
    }
    x.label = int64_t(rng.below(x.choices.size()));
  }
  return examples;
}

// The choice's summed loss from one forward over its own row (context cut to the window).
double reference_loss(Decoder& model, const ChoiceExample& x, size_t choice, int64_t window) {
  std::vector<int32_t> row = x.context;
  row.insert(row.end(), x.choices[choice].begin(), x.choices[choice].end());
  const int64_t cut = std::max<int64_t>(0, int64_t(row.size()) - 1 - window);
  row.erase(row.begin(), row.begin() + cut);
  const int64_t T = int64_t(row.size()) - 1;
  Tensor tokens = Tensor::zeros({1, T}, DType::i32);
  std::copy(row.begin(), row.end() - 1, tokens.data<int32_t>());
  model.forward(tokens, Tensor());
  const int64_t V = model.config().vocab_size, Vp = model.config().padded_vocab_size();
  double loss = 0;
  for (int64_t p = T - int64_t(x.choices[choice].size()); p < T; ++p) {
    const float* logits = model.logits().f32() + p * Vp;
    double top = logits[0], sum = 0;
    for (int64_t v = 1; v < V; ++v) top = std::max<double>(top, logits[v]);
    for (int64_t v = 0; v < V; ++v) sum += std::exp(double(logits[v]) - top);
    loss += top + std::log(sum) - logits[row[size_t(p) + 1]];
  }
  return loss;
}

class ChoiceEval : public ::testing::TestWithParam<std::string> {};

TEST_P(ChoiceEval, LossesAreFullForwardPassesWhateverTheBatching) {
  Decoder model = random_model(GetParam());
  const std::vector<ChoiceExample> examples = random_examples(7);
  std::vector<int64_t> progress;
  const auto one_row = choice_losses(model, examples, 1, 16, [&](int64_t scored) { progress.push_back(scored); });
  EXPECT_EQ(progress, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));  // an example a forward
  const auto batched = choice_losses(model, examples, 8, 16);
  ASSERT_EQ(one_row.size(), examples.size());
  for (size_t e = 0; e < examples.size(); ++e) {
    ASSERT_EQ(one_row[e].size(), examples[e].choices.size());
    for (size_t c = 0; c < examples[e].choices.size(); ++c) {
      const double expected = reference_loss(model, examples[e], c, 16);
      EXPECT_GT(expected, 0.5);
      EXPECT_NEAR(one_row[e][c].sum, expected, 1e-4 * expected) << "example " << e << " choice " << c;
      EXPECT_NEAR(batched[e][c].sum, expected, 1e-4 * expected) << "example " << e << " choice " << c;
      EXPECT_EQ(one_row[e][c].tokens, int64_t(examples[e].choices[c].size()));
    }
  }
}

// A window of 6 cuts most contexts from their start; the choice itself always fits.
TEST_P(ChoiceEval, AWindowCutsTheContextFromItsStart) {
  Decoder model = random_model(GetParam());
  const std::vector<ChoiceExample> examples = random_examples(5);
  const auto losses = choice_losses(model, examples, 4, 6);
  for (size_t e = 0; e < examples.size(); ++e)
    for (size_t c = 0; c < examples[e].choices.size(); ++c) {
      const double expected = reference_loss(model, examples[e], c, 6);
      EXPECT_NEAR(losses[e][c].sum, expected, 1e-4 * expected) << "example " << e << " choice " << c;
    }
  ChoiceExample long_choice{{1, 2}, {{3}, {4, 5, 6, 7, 8}}, 0, 12};
  const std::string error = testing::error_of([&] { choice_losses(model, {&long_choice, 1}, 4, 4); });
  EXPECT_TRUE(testing::contains(error, "example on line 12: choice 1 has 5 tokens")) << error;
  EXPECT_TRUE(testing::contains(error, "tokens, more than the window of 4; give --seq-len 5 or more")) << error;
}

INSTANTIATE_TEST_SUITE_P(Families, ChoiceEval, ::testing::Values("gpt2-tiny", "llama-tiny", "mixtral-tiny"));

TEST(ChoiceAccuracy, CountsTheLowestSumAndTheLowestMean) {
  std::vector<ChoiceExample> examples(3);
  for (ChoiceExample& x : examples) x.choices = {{1}, {1, 2, 3}};
  examples[0].label = 0;  // sums 2 and 3 (means 2 and 1): right by the sum, wrong by the mean
  examples[1].label = 1;  // the same losses: wrong by the sum, right by the mean
  examples[2].label = 0;  // a tie on both: the earlier choice
  const std::vector<std::vector<ChoiceLoss>> losses = {
      {{2.0, 1}, {3.0, 3}}, {{2.0, 1}, {3.0, 3}}, {{3.0, 1}, {3.0, 1}}};
  const ChoiceAccuracy a = choice_accuracy(examples, losses);
  EXPECT_EQ(a.examples, 3);
  EXPECT_EQ(a.correct, 2);
  EXPECT_EQ(a.correct_norm, 2);
  EXPECT_DOUBLE_EQ(a.accuracy(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(a.right_loss(), (2.0 + 1.0 + 3.0) / 3.0);  // the labels' means: 2, 1 and 3
  EXPECT_DOUBLE_EQ(a.chance(), 0.5);                           // two choices each
}

}  // namespace
}  // namespace tessera

// generate() over the KV cache against full forward passes: each token it draws is the one drawn
// with the same random numbers from a full forward pass over the window it reads (the last
// max_seq_len tokens, so past the context too), in every family; it stops after its stop token or any of also_stop_at.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/rng.h"
#include "nn/decoder.h"
#include "train/generate.h"
#include "train/random_decoder.h"

namespace tessera {
namespace {

Decoder random_model(const std::string& preset) { return testing::random_decoder(preset, 8, 5); }

// The token after `context` drawn from a full forward pass over its last max_seq_len tokens.
int32_t full_forward_sample(Decoder& model, const std::vector<int32_t>& context, const SamplingOptions& options,
                            Rng& rng) {
  const int64_t T = std::min<int64_t>(int64_t(context.size()), model.config().max_seq_len);
  Tensor tokens = Tensor::zeros({1, T}, DType::i32);
  std::copy(context.end() - T, context.end(), tokens.data<int32_t>());
  model.forward(tokens, Tensor());
  const float* last = model.logits().f32() + (T - 1) * model.config().padded_vocab_size();
  return sample_token(last, model.config().vocab_size, options, rng);
}

class Generate : public ::testing::TestWithParam<std::string> {};

TEST_P(Generate, DrawsAsFullForwardPassesDoPastTheContext) {
  Decoder model = random_model(GetParam());
  const SamplingOptions options{.max_new_tokens = 14, .temperature = 1.0f, .top_k = 0};
  const std::vector<int32_t> prompt = {3, 17, 5};
  Rng rng(1);
  const std::vector<int32_t> produced = generate(model, prompt, options, rng);
  ASSERT_EQ(produced.size(), 14u);  // 3 + 14 tokens: the window slides 9 times
  EXPECT_GE(std::set<int32_t>(produced.begin(), produced.end()).size(), 5u);
  std::vector<int32_t> context = prompt;
  Rng replay(1);
  for (size_t i = 0; i < produced.size(); ++i) {
    EXPECT_EQ(produced[i], full_forward_sample(model, context, options, replay)) << "token " << i;
    context.push_back(produced[i]);
  }
}

TEST_P(Generate, StopsAfterAnyStopToken) {
  Decoder model = random_model(GetParam());
  SamplingOptions options{.max_new_tokens = 12, .temperature = 1.0f, .top_k = 0};
  Rng first(7);
  const std::vector<int32_t> all = generate(model, {1, 2}, options, first);
  ASSERT_EQ(all.size(), 12u);
  // The same draws stopped at the fifth token's id, given as the second of two extra stop tokens.
  const size_t stop_at = size_t(std::find(all.begin(), all.end(), all[4]) - all.begin());
  options.also_stop_at = {-5, all[4]};
  Rng again(7);
  const std::vector<int32_t> stopped = generate(model, {1, 2}, options, again);
  EXPECT_EQ(stopped, std::vector<int32_t>(all.begin(), all.begin() + long(stop_at) + 1));
  EXPECT_TRUE(options.stops_at(all[4]));
  EXPECT_FALSE(options.stops_at(-1));  // stop_token -1 is "never"
}

INSTANTIATE_TEST_SUITE_P(Families, Generate, ::testing::Values("gpt2-tiny", "llama-tiny", "mixtral-tiny"));

}  // namespace
}  // namespace tessera

// GPT-2 model: parameter layout and init (invariant 2), the whole model's gradient against finite
// differences, causality, and that padded vocabulary rows are never predicted.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "nn/activation_memory.h"
#include "nn/decoder.h"
#include "nn/model_presets.h"
#include "nn/nn_testing.h"

namespace tessera {
namespace {

ModelConfig small_config() { return ModelConfig{2, 2, 16, 50, 8}; }  // Vp = 128

using testing::Batch;
using testing::make_batch;

// Randomises every parameter (biases and gains too) so every gradient path is exercised.
void randomise(Decoder& model, uint64_t seed) {
  Tensor& p = model.params();
  for (int64_t i = 0; i < p.numel(); ++i) p.f32()[i] = 0.3f * normal_at(seed, 1, uint64_t(i));
  // keep padding rows of wte at zero, as the model keeps them
  const ModelConfig& c = model.config();
  for (int64_t i = c.vocab_size * c.channels; i < c.padded_vocab_size() * c.channels; ++i) p.f32()[i] = 0.0f;
}

}  // namespace

TEST(Decoder, LayoutCountsEveryParameter) {
  Decoder model(model_preset("gpt2-tiny"));
  EXPECT_EQ(model.layout().total(), model.config().num_parameters());
  EXPECT_EQ(model.layout().find("h.1.mlp.c_fc.weight").shape, (Shape{128, 32}));
  EXPECT_TRUE(model.layout().find("wte").decayed());
  EXPECT_FALSE(model.layout().find("h.0.ln_1.weight").decayed());
  EXPECT_FALSE(model.layout().find("h.0.attn.c_attn.bias").decayed());
  // GPT-2 124M: the well-known 124,439,808 parameters plus 47 padding rows of 768.
  EXPECT_EQ(model_preset("gpt2-124m").num_parameters(), 124439808 + 47 * 768);
}

TEST(Decoder, InitDependsOnSeedNameAndIndexOnly) {
  Decoder a(small_config()), b(small_config());
  a.init_weights(7);
  b.init_weights(7);
  for (int64_t i = 0; i < a.params().numel(); ++i) ASSERT_EQ(a.params().f32()[i], b.params().f32()[i]);
  const ParamSpec& fc = a.layout().find("h.1.mlp.c_fc.weight");
  std::vector<float> expected(static_cast<size_t>(fc.numel()));
  fill_normal(expected.data(), fc.numel(), 7, "h.1.mlp.c_fc.weight", 0.0f, 0.02f);
  for (int64_t i = 0; i < fc.numel(); ++i) ASSERT_EQ(a.params().f32()[fc.offset + i], expected[size_t(i)]);
  const ParamSpec& proj = a.layout().find("h.0.mlp.c_proj.weight");
  double sq = 0;
  for (int64_t i = 0; i < proj.numel(); ++i) sq += std::pow(a.params().f32()[proj.offset + i], 2);
  EXPECT_NEAR(std::sqrt(sq / double(proj.numel())), 0.02 / 2.0, 0.002);  // scaled by 1/sqrt(2L) = 1/2
  EXPECT_EQ(a.params().f32()[a.layout().find("ln_f.weight").offset], 1.0f);
  EXPECT_EQ(a.params().f32()[a.layout().find("h.0.attn.c_attn.bias").offset], 0.0f);
  const ModelConfig& c = a.config();
  EXPECT_EQ(a.params().f32()[c.vocab_size * c.channels], 0.0f);  // padding row
}

TEST(Decoder, InitialLossIsNearLogVocab) {
  Decoder model(small_config());
  model.init_weights(1);
  Batch b = make_batch(2, 8, 50, 3);
  EXPECT_NEAR(model.forward(b.tokens, b.targets), std::log(50.0), 0.1);
}

TEST(Decoder, GradientMatchesFiniteDifferences) {
  Decoder model(small_config());
  randomise(model, 11);
  const int64_t B = 2, T = 5;
  Batch b = make_batch(B, T, 50, 5);
  model.zero_grad();
  model.forward(b.tokens, b.targets, 1.0f / float(B * T));
  model.backward();
  std::vector<float> grad(model.grads().f32(), model.grads().f32() + model.grads().numel());

  float* p = model.params().f32();
  auto loss_at = [&](int64_t i, float value) {
    float saved = p[i];
    p[i] = value;
    float loss = model.forward(b.tokens, b.targets);
    p[i] = saved;
    return double(loss);
  };
  // A few elements of every parameter tensor.
  int checked = 0;
  for (const ParamSpec& spec : model.layout().specs()) {
    for (int k = 0; k < 3; ++k) {
      int64_t i = spec.offset + int64_t(uniform_at(99, stream_id(spec.name), uint64_t(k)) * float(spec.numel()));
      if (spec.name == "wte") i = spec.offset + (k * 7 % 50) * 16 + k;  // a real (not padding) row
      const float h = 1e-2f;
      double fd = (loss_at(i, p[i] + h) - loss_at(i, p[i] - h)) / (2.0 * h);
      EXPECT_NEAR(grad[size_t(i)], fd, 2e-3 + 0.03 * std::fabs(fd)) << spec.name << " element " << i - spec.offset;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * int(model.layout().specs().size()));

  // The directional derivative along a random direction over all parameters, more tightly.
  testing::expect_directional_derivative(model, grad, [&] { return double(model.forward(b.tokens, b.targets)); });
}

TEST(Decoder, GradientsAccumulateUntilZeroed) {
  Decoder model(small_config());
  model.init_weights(2);
  Batch b = make_batch(1, 4, 50, 8);
  model.zero_grad();
  model.forward(b.tokens, b.targets, 0.25f);
  model.backward();
  std::vector<float> once(model.grads().f32(), model.grads().f32() + model.grads().numel());
  model.forward(b.tokens, b.targets, 0.25f);
  model.backward();
  for (size_t i = 0; i < once.size(); i += 97) EXPECT_FLOAT_EQ(model.grads().f32()[i], 2 * once[i]);
  EXPECT_THROW(model.backward(), Error);  // the logits' gradient was consumed
}

TEST(Decoder, MicroBatchesSumToTheFullBatch) {
  Decoder model(small_config());
  randomise(model, 6);
  Batch b = make_batch(4, 6, 50, 12);
  model.zero_grad();
  model.forward(b.tokens, b.targets, 1.0f / 24);
  model.backward();
  std::vector<float> full(model.grads().f32(), model.grads().f32() + model.grads().numel());
  model.zero_grad();
  for (int64_t i = 0; i < 4; ++i) {
    model.forward(b.tokens.view(i * 6, {1, 6}), b.targets.view(i * 6, {1, 6}), 1.0f / 24);
    model.backward();
  }
  float largest = 0;
  for (float g : full) largest = std::max(largest, std::fabs(g));
  for (size_t i = 0; i < full.size(); ++i) ASSERT_NEAR(model.grads().f32()[i], full[i], 1e-6f * largest) << i;
}

// The fused classifier's chunking (here 5 rows at a time over 24, the last chunk short) changes
// only the order in which wte's gradient sums rows: the losses are equal, the gradients agree to
// rounding, and the logits of a whole batch are never allocated.
TEST(Decoder, ClassifierChunksGiveTheUnchunkedResult) {
  Batch b = make_batch(4, 6, 50, 13);
  std::vector<float> losses, grads;
  for (const int64_t chunk : {int64_t(0), int64_t(5)}) {
    Decoder model(small_config());
    randomise(model, 7);
    model.set_classifier_chunk_rows(chunk);
    model.zero_grad();
    losses.push_back(model.forward(b.tokens, b.targets, 1.0f / 24));
    EXPECT_EQ(model.logits().numel(), (chunk == 0 ? 24 : chunk) * model.config().padded_vocab_size());
    model.backward();
    if (grads.empty()) {
      grads.assign(model.grads().f32(), model.grads().f32() + model.grads().numel());
      continue;
    }
    float largest = 0;
    for (float g : grads) largest = std::max(largest, std::fabs(g));
    for (size_t i = 0; i < grads.size(); ++i) ASSERT_NEAR(model.grads().f32()[i], grads[i], 1e-6f * largest) << i;
  }
  EXPECT_EQ(losses[0], losses[1]);
}

// The default chunks: 1 GiB of logits at most, as few chunks as that allows, all of one size rounded
// up to 64 rows while that stays within the budget.
TEST(Decoder, ClassifierChunksAreEvenWithinTheBudget) {
  const int64_t Vp = 50304;  // GPT-2's padded vocabulary: 10,672 bf16 rows in 1 GiB
  EXPECT_EQ(classifier_chunk_rows(16 * 1024, Vp, DType::bf16), 8192);      // 2 chunks, not 10,672 + 5,712
  EXPECT_EQ(classifier_chunk_rows(64 * 1024, Vp, DType::bf16), 9408);      // 7 chunks, the last 9,088
  EXPECT_EQ(classifier_chunk_rows(8 * 1024, Vp, DType::bf16), 8192);       // one chunk: all the rows
  EXPECT_EQ(classifier_chunk_rows(10673, Vp, DType::bf16), 5376);          // 2 chunks (5,337 rounded up)
  EXPECT_EQ(classifier_chunk_rows(21343, Vp, DType::bf16), 10672);         // rounding would pass the budget
  EXPECT_EQ(classifier_chunk_rows(100, int64_t(1) << 31, DType::f32), 1);  // a row over the budget: one a time
  EXPECT_EQ(classifier_logits_bytes(16 * 1024, Vp, DType::bf16), 8192 * Vp * 2);
}

TEST(Decoder, OutputsAreCausal) {
  Decoder model(small_config());
  randomise(model, 4);
  Batch b = make_batch(1, 6, 50, 9);
  model.forward(b.tokens, Tensor());
  std::vector<float> before(model.logits().f32(), model.logits().f32() + model.logits().numel());
  b.tokens.data<int32_t>()[5] = (b.tokens.data<int32_t>()[5] + 1) % 50;  // change the last token
  model.forward(b.tokens, Tensor());
  const int64_t Vp = model.config().padded_vocab_size();
  for (int64_t i = 0; i < 5 * Vp; ++i) ASSERT_EQ(model.logits().f32()[i], before[size_t(i)]);
  bool last_changed = false;
  for (int64_t i = 5 * Vp; i < 6 * Vp; ++i) last_changed |= model.logits().f32()[i] != before[size_t(i)];
  EXPECT_TRUE(last_changed);
}

TEST(Decoder, PaddedVocabularyGetsNoGradient) {
  Decoder model(small_config());
  model.init_weights(3);
  Batch b = make_batch(2, 8, 50, 4);
  model.zero_grad();
  model.forward(b.tokens, b.targets, 1.0f / 16);
  model.backward();
  const ModelConfig& c = model.config();
  for (int64_t i = c.vocab_size * c.channels; i < c.padded_vocab_size() * c.channels; ++i)
    ASSERT_EQ(model.grads().f32()[i], 0.0f);
}

TEST(Decoder, RejectsBadShapes) {
  ModelConfig bad = small_config();
  bad.num_heads = 3;
  EXPECT_THROW(Decoder{bad}, Error);
  Decoder model(small_config());
  Batch b = make_batch(1, 9, 50, 1);  // T = 9 > context 8
  EXPECT_THROW(model.forward(b.tokens, b.targets), Error);
}

}  // namespace tessera

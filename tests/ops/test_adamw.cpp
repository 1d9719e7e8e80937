// AdamW: several steps against the scalar formula in double (bias correction, decoupled decay,
// grad_scale); the multi-tensor form equal, bit for bit, to one update per segment; bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/adamw.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

TEST(AdamW, StepsMatchScalarReference) {
  const int64_t n = 40000;  // large enough for the multi-threaded path
  Tensor param = testing::random_tensor({200, 200}, 111), m = Tensor::zeros({n}), v = Tensor::zeros({n});
  std::vector<double> p_ref(param.f32(), param.f32() + n), m_ref(size_t(n), 0.0), v_ref(size_t(n), 0.0);
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.beta1 = 0.8f;
  hp.beta2 = 0.9f;
  hp.eps = 1e-6f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;
  for (int64_t step = 1; step <= 5; step++) {
    Tensor grad = testing::random_tensor({n}, 120 + uint64_t(step), -2.0f, 2.0f);
    hp.step = step;
    adamw_update(param, grad, m, v, hp);
    const double bias1 = 1.0 - std::pow(double(hp.beta1), double(step));
    const double bias2 = 1.0 - std::pow(double(hp.beta2), double(step));
    for (size_t i = 0; i < size_t(n); i++) {
      const double g = double(grad.f32()[i]) * hp.grad_scale;
      m_ref[i] = hp.beta1 * m_ref[i] + (1.0 - hp.beta1) * g;
      v_ref[i] = hp.beta2 * v_ref[i] + (1.0 - hp.beta2) * g * g;
      p_ref[i] -= hp.lr * ((m_ref[i] / bias1) / (std::sqrt(v_ref[i] / bias2) + hp.eps) + hp.weight_decay * p_ref[i]);
    }
    SCOPED_TRACE(::testing::Message() << "step " << step);
    testing::expect_close(m, m_ref, 1e-6, 1e-5, "m");
    testing::expect_close(v, v_ref, 1e-6, 1e-5, "v");
    testing::expect_close(param, p_ref, 1e-6, 1e-5, "param");
  }
}

TEST(AdamW, FirstStepMovesByLearningRateAgainstTheGradientSign) {
  // At step 1 the bias-corrected update is g / (|g| + eps) ~ sign(g), whatever the scale.
  Tensor param = testing::tensor_of({3}, {1.0f, 1.0f, 1.0f}), grad = testing::tensor_of({3}, {3.0f, -1e-3f, 0.0f});
  Tensor m = Tensor::zeros({3}), v = Tensor::zeros({3});
  AdamWParams hp;
  hp.lr = 0.1f;
  hp.weight_decay = 0.5f;  // decoupled: lr * wd * param, independent of the gradient
  adamw_update(param, grad, m, v, hp);
  EXPECT_NEAR(param.f32()[0], 1.0 - 0.1 * (1.0 + 0.5), 1e-5);
  EXPECT_NEAR(param.f32()[1], 1.0 - 0.1 * (-1.0 + 0.5), 1e-4);
  EXPECT_NEAR(param.f32()[2], 1.0 - 0.1 * 0.5, 1e-6);
}

TEST(AdamW, RejectsBadArguments) {
  Tensor param = Tensor::zeros({4}), grad = Tensor::zeros({4}), m = Tensor::zeros({4}), v = Tensor::zeros({4});
  Tensor short_v = Tensor::zeros({3});
  EXPECT_THROW(adamw_update(param, grad, m, short_v, AdamWParams{}), Error);
  AdamWParams step0;
  step0.step = 0;
  EXPECT_THROW(adamw_update(param, grad, m, v, step0), Error);
  AdamWParams bad_beta;
  bad_beta.beta2 = 1.0f;
  EXPECT_THROW(adamw_update(param, grad, m, v, bad_beta), Error);
  Tensor int_grad = Tensor::zeros({4}, DType::i32);
  EXPECT_THROW(adamw_update(param, int_grad, m, v, AdamWParams{}), Error);
}

// Segments as a ZeRO shard has them: parameters at scattered offsets, state packed from 0, decay on
// some, the first two back to back (swept as one run); the elements no segment covers stay untouched.
std::vector<AdamWSegment> scattered_segments() {
  return {{10, 0, 300, true}, {310, 300, 20, true}, {400, 320, 7, false}, {600, 327, 1000, true},
          {1700, 1327, 1, false}};
}

TEST(AdamW, SegmentsEqualOneUpdatePerSegment) {
  const std::vector<AdamWSegment> segments = scattered_segments();
  ASSERT_EQ(coalesce_segments(segments).size(), segments.size() - 1);
  const int64_t state = 1328;
  Tensor param = testing::random_tensor({2000}, 7), grad = testing::random_tensor({state}, 8, -2.0f, 2.0f);
  Tensor m = testing::random_tensor({state}, 9, 0.0f, 0.1f), v = testing::random_tensor({state}, 10, 0.0f, 0.1f);
  Tensor param_ref = testing::random_tensor({2000}, 7), m_ref = testing::random_tensor({state}, 9, 0.0f, 0.1f);
  Tensor v_ref = testing::random_tensor({state}, 10, 0.0f, 0.1f);
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  hp.grad_scale = 0.25f;
  hp.step = 3;
  adamw_update_segments(param, grad, m, v, segments, hp);
  for (const AdamWSegment& s : segments) {
    Tensor p = param_ref.view(s.param_offset, {s.length}), mm = m_ref.view(s.state_offset, {s.length});
    Tensor vv = v_ref.view(s.state_offset, {s.length});
    AdamWParams one = hp;
    one.weight_decay = s.decayed ? hp.weight_decay : 0.0f;
    adamw_update(p, grad.view(s.state_offset, {s.length}), mm, vv, one);
  }
  for (int64_t i = 0; i < 2000; ++i) ASSERT_EQ(param.f32()[i], param_ref.f32()[i]) << "param " << i;
  for (int64_t i = 0; i < state; ++i) {
    ASSERT_EQ(m.f32()[i], m_ref.f32()[i]) << "m " << i;
    ASSERT_EQ(v.f32()[i], v_ref.f32()[i]) << "v " << i;
  }
  EXPECT_EQ(param.f32()[5], testing::random_tensor({2000}, 7).f32()[5]) << "outside every segment";
}

TEST(AdamW, NeighbouringSegmentsWithOneDecayCoalesce) {
  const std::vector<AdamWSegment> segments = {{0, 0, 4, false},  {4, 4, 6, false},   {10, 10, 3, true},
                                              {13, 20, 2, true}, {15, 22, 1, true},  {16, 23, 5, false},
                                              {30, 28, 2, false}};
  const std::vector<AdamWSegment> runs = coalesce_segments(segments);
  ASSERT_EQ(runs.size(), 5u);
  const AdamWSegment expected[] = {{0, 0, 10, false}, {10, 10, 3, true}, {13, 20, 3, true}, {16, 23, 5, false},
                                   {30, 28, 2, false}};
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].param_offset, expected[i].param_offset) << "run " << i;
    EXPECT_EQ(runs[i].state_offset, expected[i].state_offset) << "run " << i;
    EXPECT_EQ(runs[i].length, expected[i].length) << "run " << i;
    EXPECT_EQ(runs[i].decayed, expected[i].decayed) << "run " << i;
  }
  EXPECT_TRUE(coalesce_segments({}).empty());
}

TEST(AdamW, SegmentsOutsideTheBuffersOrACpuMirrorAreRefused) {
  Tensor param = Tensor::zeros({100}), grad = Tensor::zeros({50}), m = Tensor::zeros({50}), v = Tensor::zeros({50});
  for (const AdamWSegment& bad : {AdamWSegment{90, 0, 20, false}, AdamWSegment{0, 40, 20, false},
                                  AdamWSegment{-1, 0, 5, false}})
    EXPECT_TRUE(testing::contains(
        testing::error_of([&] { adamw_update_segments(param, grad, m, v, {bad}, AdamWParams{}); }), "lies outside"));
  Tensor mirror = Tensor::zeros({100}, DType::bf16);
  const std::string message =
      testing::error_of([&] { adamw_update_segments(param, grad, m, v, {}, AdamWParams{}, &mirror); });
  EXPECT_TRUE(testing::contains(message, "the mirror is the GPU's 16-bit compute copy")) << message;
}

}  // namespace
}  // namespace tessera

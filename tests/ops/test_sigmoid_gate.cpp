// The sigmoid row gate (Qwen2-MoE's shared_expert_gate): the forward adds each row scaled by its gate
// against a double reference; dy and dz by finite differences of out · dout; dz sums over partial ys as a
// tensor-parallel group's would; bad shapes are refused naming the argument.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_testing.h"
#include "ops/sigmoid_gate.h"

namespace tessera {
namespace {

using testing::random_tensor;

constexpr int64_t N = 7, C = 13;

TEST(SigmoidGate, AddsEachRowTimesTheSigmoidOfItsGate) {
  const Tensor y = random_tensor({N, C}, 1), z = random_tensor({N, 1}, 2, -4.0f, 4.0f);
  Tensor out = random_tensor({N, C}, 3);
  std::vector<double> want;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      want.push_back(out.f32()[n * C + c] + y.f32()[n * C + c] / (1.0 + std::exp(-double(z.f32()[n]))));
  sigmoid_gate_add(out, y, z);
  testing::expect_close(out, want, 1e-6, 1e-6, "out");
}

TEST(SigmoidGate, BackwardMatchesFiniteDifferences) {
  Tensor y = random_tensor({N, C}, 4), z = random_tensor({N, 1}, 5, -3.0f, 3.0f);
  const Tensor dout = random_tensor({N, C}, 6);
  auto loss = [&] {
    Tensor out = Tensor::zeros({N, C});
    sigmoid_gate_add(out, y, z);
    return testing::dot(out, dout);
  };
  const std::vector<double> dy_fd = testing::numeric_gradient(y, loss, 1e-2f);
  const std::vector<double> dz_fd = testing::numeric_gradient(z, loss, 1e-2f);
  Tensor dy = Tensor::zeros({N, C}), dz = Tensor::zeros({N, 1});
  testing::fill(dy, testing::kNaN);  // written, not accumulated
  testing::fill(dz, testing::kNaN);
  sigmoid_gate_backward(dy, dz, dout, y, z);
  testing::expect_close(dy, dy_fd, 1e-4, 1e-3, "dy");
  testing::expect_close(dz, dz_fd, 1e-4, 1e-3, "dz");
}

// Two ranks' partial sums of y give partial dz that add up to the whole y's.
TEST(SigmoidGate, PartialOutputsGivePartialGateGradients) {
  const Tensor y1 = random_tensor({N, C}, 7), y2 = random_tensor({N, C}, 8), z = random_tensor({N, 1}, 9);
  const Tensor dout = random_tensor({N, C}, 10);
  Tensor y = testing::copy_of(y1);
  for (int64_t i = 0; i < y.numel(); i++) y.f32()[i] += y2.f32()[i];
  Tensor dy = Tensor::zeros({N, C}), dz = Tensor::zeros({N, 1}), dz1 = Tensor::zeros({N, 1}), dz2 = Tensor::zeros({N, 1});
  sigmoid_gate_backward(dy, dz, dout, y, z);
  sigmoid_gate_backward(dy, dz1, dout, y1, z);
  sigmoid_gate_backward(dy, dz2, dout, y2, z);
  std::vector<double> sum;
  for (int64_t n = 0; n < N; n++) sum.push_back(double(dz1.f32()[n]) + dz2.f32()[n]);
  testing::expect_close(dz, sum, 1e-6, 1e-6, "dz");
}

TEST(SigmoidGate, RefusesBadShapes) {
  const Tensor y = random_tensor({N, C}, 11);
  Tensor out = Tensor::zeros({N, C}), short_z = Tensor::zeros({N - 1, 1}), flat = Tensor::zeros({N * C});
  const std::string wrong_z = testing::error_of([&] { sigmoid_gate_add(out, y, short_z); });
  EXPECT_NE(wrong_z.find("sigmoid_gate_add: z has shape"), std::string::npos) << wrong_z;
  const std::string wrong_y = testing::error_of([&] { sigmoid_gate_add(out, flat, short_z); });
  EXPECT_NE(wrong_y.find("y must be (N, C)"), std::string::npos) << wrong_y;
  Tensor dy = Tensor::zeros({N, C}), dz = Tensor::zeros({N});
  const std::string wrong_dz =
      testing::error_of([&] { sigmoid_gate_backward(dy, dz, y, y, Tensor::zeros({N, 1})); });
  EXPECT_NE(wrong_dz.find("sigmoid_gate_backward: dz has shape"), std::string::npos) << wrong_dz;
}

}  // namespace
}  // namespace tessera
